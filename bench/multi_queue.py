"""One worker serving Q queues beside Q workers of one queue each: the drain rate, the workers'
CPU per job and memory, the Redis connections they hold and what they cost when idle.

    python -m bench.multi_queue [--url redis://127.0.0.1:7300] [--queues 10] [--partitions 8]
        [--jobs 5000] [--concurrency 200] [--rounds 3] [--json]

Each round runs both modes, alternating which goes first, on Q fresh queues of P partitions:
one plain ``shardq dispatcher run`` per queue (the same in both modes), then either one
``shardq worker run -q q1 ... -q qQ --concurrency C`` (``one``) or Q ``shardq worker run -q qi
--concurrency C/Q`` (``separate``): the same concurrency in all.  ``--jobs`` jobs per queue of
the inline no-op handler are enqueued due 3 s ahead.  Measured: drain jobs/s from the due time
to the last completion over all queues; Redis CPU and FCALLs per job over the primaries (the
dispatchers' included, the same in both modes); the workers' CPU (utime + stime) per job and
their RSS summed over processes; the Redis connections they hold (``connected_clients`` over
every node, with the workers up minus with only the dispatchers up); and, once drained, the
workers' CPU and the Redis CPU over ``--idle`` seconds with no job due.  Each round starts with
the calibration line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from typing import Any

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
from shardq.devtools.bench import cli_command, delete_queue, queue_counters

HANDLERS = "shardq.devtools.handlers:handlers"


def connected_clients(client: Client) -> int:
    """Client connections over every node, replicas included (a worker may read from one)."""
    redis = client.redis
    if is_cluster(redis):
        nodes = [redis.get_redis_connection(n) for n in redis.get_nodes()]  # type: ignore[union-attr]
    else:
        nodes = [redis]
    return sum(int(n.info("clients")["connected_clients"]) for n in nodes)


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
    names = [fresh_queue(client, f"bench-mq{i}", partitions) for i in range(queues)]
    dispatchers = [start(url, "dispatcher", "run", "--queue", q) for q in names]
    workers: list[subprocess.Popen[bytes]] = []
    sampler = Sampler(client)
    try:
        time.sleep(2.0)
        before = connected_clients(client)
        if mode == "one":
            flags = [a for q in names for a in ("-q", q)]
            workers.append(
                start(url, "worker", "run", "--handlers", HANDLERS,
                      "--concurrency", str(concurrency), *flags)
            )  # fmt: skip
        else:
            per = max(1, concurrency // queues)
            workers.extend(
                start(url, "worker", "run", "--handlers", HANDLERS,
                      "--concurrency", str(per), "-q", q)
                for q in names
            )  # fmt: skip
        time.sleep(3.0)  # started and serving
        held = connected_clients(client) - before
        due = time.time() + 3.0
        for q in names:
            enqueue_due_at(client, q, jobs, due, "x" * 20)
        total = jobs * queues

        def completed() -> int:
            counters = (queue_counters(client.redis, q, partitions) for q in names)
            return sum(c.get("completed", 0) for c in counters)

        wait_until(lambda: time.time() >= due - 1.0, 10)
        sampler.calibrate(0.8)
        cpu0 = sum(cpu_seconds(p.pid) for p in workers)
        drained = wait_until(lambda: completed() >= total, 180, 0.02)
        seconds = time.time() - due
        cpu1 = sum(cpu_seconds(p.pid) for p in workers)
        busy = sampler.delta()
        rss = sum(rss_mb(p.pid) for p in workers)
        # Idle: every queue empty, nothing due.
        time.sleep(1.0)
        sampler.mark()
        idle0 = sum(cpu_seconds(p.pid) for p in workers)
        time.sleep(idle)
        idle1 = sum(cpu_seconds(p.pid) for p in workers)
        redis_idle = sampler.delta()
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
            "redis_connections": held,
            "worker_idle_cpu_pct": round((idle1 - idle0) * 100 / idle, 2),
            # Over the dispatchers' idle rate measured before the due time (Sampler.calibrate).
            "redis_idle_cpu_pct_over_dispatchers": round(
                redis_idle["cpu_usec"] / 1e4 / redis_idle["seconds"], 2
            ),
            "redis_idle_calls_per_s": round(redis_idle["script_calls"] / redis_idle["seconds"], 1),
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
