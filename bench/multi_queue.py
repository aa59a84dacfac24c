"""One worker serving Q queues beside Q workers of one queue each: the drain rate, the workers'
CPU per job and memory, the Redis connections they hold and what they cost when idle.

    python -m bench.multi_queue [--url redis://127.0.0.1:7300] [--queues 10] [--partitions 8]
        [--jobs 5000] [--concurrency 200] [--idle 5] [--rounds 3] [--json]

Each round runs both modes, alternating which goes first, on Q fresh queues of P partitions:
one plain ``shardq dispatcher run`` per queue (the same in both modes), then either one
``shardq worker run -q q1 ... -q qQ --concurrency C`` (``one``) or Q ``shardq worker run -q qi
--concurrency C/Q`` (``separate``, the remainder of C/Q spread over the first workers): the
same concurrency in all.  Both modes are measured the same way:

- before any process starts, Redis's own CPU rate (serverCron, replication) over 1 s on the
  primaries: every Redis CPU figure below is net of it and of nothing else, so the dispatchers'
  and the workers' calls are all in it;
- the processes are up when every queue's partitions are leased by its dispatcher, every queue
  has a live worker and the workers' connections have stopped changing;
- ``--jobs`` jobs per queue of the inline no-op handler are then enqueued due 3 s ahead (plus
  1 s per 20,000 jobs in all, so the enqueue ends before the window opens);
- the drain window runs from 0.25 s before the due time to the last completion over all
  queues: drain jobs/s from the due time; Redis CPU and FCALLs per job over the primaries
  (dispatchers included, and this script's reads of the completion counters every 20 ms); the
  workers' CPU (utime + stime) per job summed over their processes; their RSS and their USS
  (private memory: the shared library pages a sum of RSS counts once per process left out)
  summed at the end of the window.  A worker or dispatcher that exits fails the run;
- 1 s after the drain, over ``--idle`` seconds with no job due (the idle back-offs still
  growing, the same in both modes): the workers' CPU, and Redis CPU and FCALLs/s over the
  primaries (dispatchers included);
- the Redis connections the workers hold: the worker processes' established TCP connections to
  any cluster node (replicas included), counted once stable, when the workers are up before the
  jobs (``redis_connections_started``) and after the idle window (``redis_connections``: what
  their pools kept after the drain).  Counted per process, so neither the dispatchers' nor this
  script's connections are in it.

Each round starts with the calibration line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

import psutil

from bench.common import (
    Sampler,
    calibrate,
    calibration_line,
    cpu_seconds,
    enqueue_due_at,
    fresh_queue,
    rss_mb,
    wait_until,
)
from shardq.client import Client
from shardq.connection import is_cluster
from shardq.dev.demo import cli_command, delete_queue, queue_counters
from shardq.inspector import Inspector

HANDLERS = "shardq.dev.handlers:handlers"


def node_addresses(client: Client) -> set[tuple[str, int]]:
    """(host, port) of every node, replicas included."""
    redis = client.redis
    if is_cluster(redis):
        return {(n.host, int(n.port)) for n in redis.get_nodes()}  # type: ignore[union-attr]
    kw = redis.connection_pool.connection_kwargs
    return {(str(kw.get("host")), int(kw.get("port", 6379)))}


def held_connections(procs: list[subprocess.Popen[bytes]], nodes: set[tuple[str, int]]) -> int:
    """Established TCP connections from these processes to any of the nodes."""
    total = 0
    for p in procs:
        try:
            proc = psutil.Process(p.pid)
            conns = proc.net_connections("tcp") if hasattr(proc, "net_connections") else None
            if conns is None:
                conns = proc.connections("tcp")  # psutil < 6
        except psutil.Error:
            continue
        total += sum(
            1
            for c in conns
            if c.status == psutil.CONN_ESTABLISHED and c.raddr and tuple(c.raddr) in nodes
        )
    return total


def settled(read: Callable[[], int], timeout: float = 30.0, every: float = 0.25) -> int:
    """``read()`` once it has returned the same value 4 times in a row (1 s at the default)."""
    deadline = time.monotonic() + timeout
    last, same = read(), 1
    while same < 4 and time.monotonic() < deadline:
        time.sleep(every)
        now = read()
        same = same + 1 if now == last else 1
        last = now
    return last


def fleet_up(ins: Inspector, names: list[str], partitions: int, role: str) -> bool:
    """Every queue has a live member of ``role``; dispatchers: holding every partition's lease."""
    for q in names:
        members = [m for m in ins.members(q) if m.role == role]
        if not members:
            return False
        if role == "dispatcher" and sum(len(m.partitions) for m in members) < partitions:
            return False
    return True


def check_alive(procs: list[subprocess.Popen[bytes]]) -> None:
    """A process that exited reads 0 CPU and 0 RSS: fail rather than report that."""
    gone = [(p.args, p.returncode) for p in procs if p.poll() is not None]
    if gone:
        raise RuntimeError(f"exited during the run: {gone}")


def start(url: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cli_command(*args, "--url", url))


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_mode(
    url: str, mode: str, queues: int, partitions: int, jobs: int, concurrency: int, idle: float
) -> dict[str, Any]:
    client = Client(url)
    ins = Inspector(client)
    names = [fresh_queue(client, f"bench-mq{i}", partitions) for i in range(queues)]
    nodes = node_addresses(client)
    dispatchers: list[subprocess.Popen[bytes]] = []
    workers: list[subprocess.Popen[bytes]] = []
    sampler = Sampler(client)
    try:
        # Redis's own rate, none of the processes running: the windows below are net of it.
        sampler.calibrate(1.0)
        dispatchers.extend(start(url, "dispatcher", "run", "--queue", q) for q in names)
        if not wait_until(lambda: fleet_up(ins, names, partitions, "dispatcher"), 60, 0.25):
            raise RuntimeError("the dispatchers did not lease every partition within 60 s")
        if mode == "one":
            flags = [a for q in names for a in ("-q", q)]
            workers.append(
                start(url, "worker", "run", "--handlers", HANDLERS,
                      "--concurrency", str(concurrency), *flags)
            )  # fmt: skip
        else:
            per, extra = divmod(concurrency, queues)
            workers.extend(
                start(url, "worker", "run", "--handlers", HANDLERS,
                      "--concurrency", str(per + (i < extra)), "-q", q)
                for i, q in enumerate(names)
            )  # fmt: skip
        if not wait_until(lambda: fleet_up(ins, names, partitions, "worker"), 60, 0.25):
            raise RuntimeError("a queue had no live worker after 60 s")
        held_started = settled(lambda: held_connections(workers, nodes))
        total = jobs * queues
        due = time.time() + 3.0 + total / 20_000
        for q in names:
            enqueue_due_at(client, q, jobs, due, "x" * 20)
        if time.time() > due - 0.5:
            raise RuntimeError("the enqueue ended less than 0.5 s before the due time")

        def completed() -> int:
            counters = (queue_counters(client.redis, q, partitions) for q in names)
            return sum(c.get("completed", 0) for c in counters)

        wait_until(lambda: time.time() >= due - 0.25, 30, 0.01)
        sampler.mark()
        cpu0 = sum(cpu_seconds(p.pid) for p in workers)
        drained = wait_until(lambda: completed() >= total, 180, 0.02)
        seconds = time.time() - due
        cpu1 = sum(cpu_seconds(p.pid) for p in workers)
        busy = sampler.delta()
        check_alive(workers + dispatchers)
        rss = sum(rss_mb(p.pid) for p in workers)
        uss = sum(psutil.Process(p.pid).memory_full_info().uss for p in workers) / 2**20
        # Idle: every queue empty, nothing due.
        time.sleep(1.0)
        sampler.mark()
        t0, idle0 = time.monotonic(), sum(cpu_seconds(p.pid) for p in workers)
        time.sleep(idle)
        t1, idle1 = time.monotonic(), sum(cpu_seconds(p.pid) for p in workers)
        redis_idle = sampler.delta()
        idle_s = max(redis_idle["seconds"], 1e-3)
        held = settled(lambda: held_connections(workers, nodes))
        check_alive(workers + dispatchers)
        return {
            "mode": mode,
            "processes": len(workers),
            "completed": completed(),
            "drained": drained,
            "drain_jobs_per_s": round(total / max(seconds, 1e-3)),
            "worker_cpu_us_per_job": round((cpu1 - cpu0) * 1e6 / total, 1),
            "redis_cpu_us_per_job": round(busy["cpu_usec"] / total, 1),
            "fcalls_per_job": round(busy["script_calls"] / total, 3),
            "worker_rss_mb": round(rss, 1),
            "worker_uss_mb": round(uss, 1),
            "redis_connections_started": held_started,
            "redis_connections": held,
            "worker_idle_cpu_pct": round((idle1 - idle0) * 100 / (t1 - t0), 2),
            "redis_idle_cpu_pct": round(redis_idle["cpu_usec"] / 1e4 / idle_s, 2),
            "redis_idle_calls_per_s": round(redis_idle["script_calls"] / idle_s, 1),
        }
    finally:
        stop(workers + dispatchers)
        for q in names:
            delete_queue(client.redis, q, partitions)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7300")
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs per queue")
    parser.add_argument("--concurrency", type=int, default=200, help="over all queues")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds measured idle")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.concurrency < args.queues:
        parser.error("--concurrency must be at least --queues (one slot per queue)")
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        print(f"round {r + 1}: calibration: {calibration_line(calibrate(args.url))}", flush=True)
        order = ("one", "separate") if r % 2 == 0 else ("separate", "one")
        for mode in order:
            row = run_mode(
                args.url, mode, args.queues, args.partitions, args.jobs, args.concurrency,
                args.idle,
            )  # fmt: skip
            row["round"] = r + 1
            rows.append(row)
            print("  " + json.dumps(row), flush=True)
    keys = [k for k in rows[0] if k not in ("mode", "round", "drained", "completed")]
    for key in keys:
        for mode in ("one", "separate"):
            vals = [row[key] for row in rows if row["mode"] == mode]
            print(f"{key} {mode}: {min(vals)}-{max(vals)}")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
