"""The engine of ``shardq dev demo``, and of the end-to-end benchmark (``python -m bench.e2e``).

A fresh queue runs end to end with dispatchers and workers in subprocesses.  Workers record
which job ids they ran and each job's lateness (handler start minus due time, both on the Redis
clock), so the parent can count lost and duplicated jobs exactly.  The benchmark adds the
machine's calibration (bench/calibration.py, in the repository only) through ``calibrate``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import dataclasses
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import orjson

from shardq.client import Client
from shardq.config import RedisSettings, WorkerSettings
from shardq.connection import SyncRedis, is_cluster
from shardq.jobs import JobRequest
from shardq.store import keys


@dataclass(frozen=True, slots=True)
class E2EConfig:
    url: str
    jobs: int = 100_000
    spread: float = 10.0
    dispatchers: int = 1
    workers: int = 1
    partitions: int = 64
    payload_bytes: int = 20
    backlog: bool = False
    timeout: float = 300.0
    username: str | None = None
    password: str | None = None
    worker_concurrency: int = 1000


def job_memory(info_memory: Mapping[str, Any]) -> int:
    """``used_memory`` of one node's ``INFO memory`` minus ``mem_replication_backlog``.

    The replication backlog is a fixed buffer per primary (``repl-backlog-size``, 1 MB by
    default) that fills once with the first megabyte written after start-up and then stays
    that size; counted per job it made the first fill of a fresh cluster read ~31 bytes/job
    higher (100,000 jobs on 3 primaries; bench/first_fill_memory.py) and a later fill 0.
    """
    return int(info_memory["used_memory"]) - int(info_memory.get("mem_replication_backlog", 0))


def primaries_used_memory(redis: SyncRedis) -> int:
    """Sum of :func:`job_memory` over the primaries (the standalone node when not a cluster)."""
    if is_cluster(redis):
        info = redis.info("memory", target_nodes="primaries")  # type: ignore[call-arg]
        return sum(job_memory(v) for v in info.values())
    return job_memory(redis.info("memory"))


def peak_rss_mb(pid: int) -> float:
    """Peak resident set size (VmHWM) of a live process, in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def queue_counters(redis: SyncRedis, queue: str, partitions: int) -> dict[str, int]:
    """Counters summed over partitions (enqueued, promoted, completed, ...), kept by scripts."""
    pipe = redis.pipeline(transaction=False)
    for pk in keys.all_partition_keys(queue, partitions):
        pipe.hgetall(pk.stats)
    totals: dict[str, int] = {}
    for stats in pipe.execute():
        for name, value in stats.items():
            key = name.decode() if isinstance(name, bytes) else str(name)
            totals[key] = totals.get(key, 0) + int(value)
    return totals


def delete_queue(redis: SyncRedis, queue: str, partitions: int) -> None:
    """Remove the keys of a benchmark queue that keys.py names (not its idempotency keys or
    limit state, which only a SCAN finds: ``Inspector.delete_queue`` removes those too)."""
    for pk in keys.all_partition_keys(queue, partitions):
        redis.delete(*pk.all())
    redis.delete(*keys.queue_keys(queue))  # (one slot: the queue's own tag)
    redis.srem(keys.QUEUES_KEY, queue)


def _env(cfg: E2EConfig) -> dict[str, str]:
    env = dict(os.environ)
    if cfg.password:
        env["SHARDQ_REDIS_PASSWORD"] = cfg.password
    if cfg.username:
        env["SHARDQ_REDIS_USERNAME"] = cfg.username
    return env


def cli_command(*args: str) -> list[str]:
    """argv that runs the shardq CLI with this interpreter, logging warnings and worse."""
    return [sys.executable, "-m", "shardq.cli", "--log-level", "WARNING", *args]


def _start_fleet(cfg: E2EConfig, queue: str, outdir: Path) -> tuple[list[Any], list[Any]]:
    dispatchers = [
        subprocess.Popen(
            cli_command(
                "dispatcher",
                "run",
                "--queue",
                queue,
                "--url",
                cfg.url,
                "--lease-time",
                "4",
                "--renew-interval",
                "1",
            ),
            env=_env(cfg),
        )
        for _ in range(cfg.dispatchers)
    ]
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "shardq.dev.demo",
                "worker",
                "--url",
                cfg.url,
                "--queue",
                queue,
                "--out",
                str(outdir / f"worker-{i}.json"),
                "--concurrency",
                str(cfg.worker_concurrency),
            ],
            env=_env(cfg),
        )
        for i in range(cfg.workers)
    ]
    return dispatchers, workers


def stop_processes(procs: list[Any], timeout: float = 30.0) -> None:
    """SIGTERM each live process, wait for all, SIGKILL what outlives the timeout."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


Calibrate = Callable[[str, str | None, str | None], dict[str, Any]]
"""(url, username, password) -> the machine's figures, taken before the run's load."""


def run_e2e(
    cfg: E2EConfig, progress: TextIO | None = None, calibrate: Calibrate | None = None
) -> dict[str, Any]:
    """Run the queue end to end and return its figures (see the keys of the returned dict);
    with ``calibrate``, its figures under ``"calibration"``."""
    settings = RedisSettings.from_url(cfg.url)
    # Credentials reach the child processes in their environment, never on their command line.
    cfg = dataclasses.replace(
        cfg,
        url=settings.url + ("?cluster=true" if settings.cluster else ""),
        username=cfg.username or settings.username,
        password=cfg.password or settings.password,
    )
    settings = dataclasses.replace(settings, username=cfg.username, password=cfg.password)
    client = Client(settings)
    # before any load of ours
    calibration = calibrate(cfg.url, cfg.username, cfg.password) if calibrate else None
    queue = f"bench-{int(time.time())}-{secrets.token_hex(3)}"
    client.create_queue(queue, cfg.partitions)
    payload = "x" * cfg.payload_bytes
    outdir = Path(tempfile.mkdtemp(prefix="shardq-bench-"))
    dispatchers: list[Any] = []
    workers: list[Any] = []

    def say(line: str) -> None:
        if progress is not None:
            progress.write(line + "\n")
            progress.flush()

    try:
        mem_before = primaries_used_memory(client.redis)
        if not cfg.backlog:
            dispatchers, workers = _start_fleet(cfg, queue, outdir)
            time.sleep(1.5)  # let them connect and take their leases
        # Due times are spread over the next cfg.spread seconds after a lead long enough for the
        # enqueue itself to finish first.  --backlog makes them all due at the end of the lead
        # and starts the fleet only once they are overdue, so the dispatcher promotes the whole
        # backlog (jobs enqueued already overdue would skip the due set).
        lead = 1.0 + cfg.jobs / 25_000
        start = time.time()
        if cfg.backlog:
            due_at = [start + lead] * cfg.jobs
        else:
            step = cfg.spread / max(cfg.jobs, 1)
            due_at = [start + lead + i * step for i in range(cfg.jobs)]
        t0 = time.perf_counter()
        ids: list[str] = []
        chunk = 10_000
        for i in range(0, cfg.jobs, chunk):
            requests = [JobRequest("bench", payload, run_at=t) for t in due_at[i : i + chunk]]
            ids.extend(r.job_id for r in client.enqueue_many(queue, requests))
        enqueue_s = time.perf_counter() - t0
        # Client and replication buffers of the burst drain within moments: take the lower of
        # two readings, before the first job comes due.
        mem_after = primaries_used_memory(client.redis)
        time.sleep(0.3)
        mem_after = min(mem_after, primaries_used_memory(client.redis))
        enqueue_done = time.time()
        say(
            f"scheduled {len(ids)} jobs in {enqueue_s:.2f} s "
            f"({len(ids) / enqueue_s:,.0f} jobs/s) on queue {queue}"
        )
        if not cfg.backlog and enqueue_done > start + lead:
            say("warning: enqueue outlasted the lead time; the first jobs were already due")
        if cfg.backlog:
            time.sleep(max(0.0, start + lead + 0.2 - time.time()))
            dispatchers, workers = _start_fleet(cfg, queue, outdir)

        peak = {p.pid: 0.0 for p in dispatchers + workers}
        deadline = time.monotonic() + cfg.timeout
        last_report = 0.0
        done = 0
        while time.monotonic() < deadline:
            counters = queue_counters(client.redis, queue, cfg.partitions)
            done = counters.get("completed", 0)
            for proc in dispatchers + workers:
                peak[proc.pid] = max(peak[proc.pid], peak_rss_mb(proc.pid))
            if time.monotonic() - last_report >= 1.0:
                last_report = time.monotonic()
                due_so_far = bisect.bisect_right(due_at, time.time())
                say(
                    f"  t={time.time() - start:5.1f}s  due {due_so_far:>9,}  "
                    f"promoted {counters.get('promoted', 0):>9,}  completed {done:>9,} "
                    f"/ {cfg.jobs:,}"
                )
            if done >= cfg.jobs or any(p.poll() is not None for p in dispatchers + workers):
                break
            time.sleep(0.2)
        for proc in dispatchers + workers:
            peak[proc.pid] = max(peak[proc.pid], peak_rss_mb(proc.pid))
        stop_processes(workers + dispatchers)

        ran: dict[str, int] = {}
        lateness: list[float] = []
        first_start = float("inf")
        last_finish = 0.0
        for path in sorted(outdir.glob("worker-*.json")):
            record = orjson.loads(path.read_bytes())
            for job_id in record["ids"]:
                ran[job_id] = ran.get(job_id, 0) + 1
            lateness.extend(record["lateness_ms"])
            if record["ids"]:
                first_start = min(first_start, record["first_start"])
                last_finish = max(last_finish, record["last_finish"])
        lateness.sort()
        expected = set(ids)
        completed = sum(1 for j in expected if j in ran)
        duplicates = sum(n - 1 for n in ran.values() if n > 1)
        drain_window = max(last_finish - first_start, 1e-9)
        return {
            **({"calibration": calibration} if calibration is not None else {}),
            "queue": queue,
            "jobs": cfg.jobs,
            "completed": completed,
            "lost": cfg.jobs - completed,
            "duplicates": duplicates,
            "mode": "backlog" if cfg.backlog else "spread",
            "spread_s": 0.0 if cfg.backlog else cfg.spread,
            "partitions": cfg.partitions,
            "dispatchers": cfg.dispatchers,
            "workers": cfg.workers,
            "enqueue_jobs_per_s": round(len(ids) / enqueue_s, 1),
            "drain_jobs_per_s": round(completed / drain_window, 1),
            "lateness_ms": {
                "p50": round(percentile(lateness, 0.50), 2),
                "p99": round(percentile(lateness, 0.99), 2),
                "max": round(lateness[-1], 2) if lateness else None,
            },
            "dispatcher_peak_rss_mb": round(max((peak[p.pid] for p in dispatchers), default=0), 1),
            "worker_peak_rss_mb": round(max((peak[p.pid] for p in workers), default=0), 1),
            "redis_bytes_per_job": round((mem_after - mem_before) / max(cfg.jobs, 1), 1),
            "payload_bytes": cfg.payload_bytes,
        }
    finally:
        stop_processes(workers + dispatchers)
        shutil.rmtree(outdir, ignore_errors=True)
        try:
            delete_queue(client.redis, queue, cfg.partitions)
        finally:
            client.close()


def format_summary(r: dict[str, Any], calibration: str | None = None) -> str:
    """A human summary of :func:`run_e2e`'s result; ``calibration``: the machine's figures as
    one line, shown under the title."""
    lat = r["lateness_ms"]
    return "\n".join(
        [
            "",
            "== shardq end-to-end summary ==",
            *([f"calibration      {calibration}"] if calibration is not None else []),
            f"scheduled        {r['jobs']:>12,}   ({r['mode']}, {r['partitions']} partitions, "
            f"{r['dispatchers']} dispatcher(s), {r['workers']} worker(s))",
            f"completed        {r['completed']:>12,}",
            f"lost             {r['lost']:>12,}",
            f"ran twice        {r['duplicates']:>12,}",
            f"lateness p50     {lat['p50']:>12} ms",
            f"lateness p99     {lat['p99']:>12} ms",
            f"lateness max     {lat['max']:>12} ms",
            f"enqueue rate     {r['enqueue_jobs_per_s']:>12,.0f} jobs/s",
            f"drain rate       {r['drain_jobs_per_s']:>12,.0f} jobs/s",
            f"redis memory     {r['redis_bytes_per_job']:>12} bytes/job "
            f"({r['payload_bytes']}-byte payload, replication backlog left out)",
            f"peak RSS         dispatcher {r['dispatcher_peak_rss_mb']} MiB, "
            f"worker {r['worker_peak_rss_mb']} MiB",
        ]
    )


# subprocess entry: python -m shardq.dev.demo worker ... -----------------------------------


async def _bench_worker(url: str, queue: str, out: Path, concurrency: int) -> None:
    from shardq.connection import connect_async
    from shardq.worker import Worker

    settings = RedisSettings.from_env()
    settings = RedisSettings.from_url(url, username=settings.username, password=settings.password)
    redis = await connect_async(settings)
    ids: list[str] = []
    lateness: list[float] = []
    first_start = [0.0]
    last_finish = [0.0]
    worker = Worker(redis, queue, settings=WorkerSettings(concurrency=concurrency, fetch_batch=200))

    def handle(job: Any) -> None:
        mono = time.monotonic()
        if not ids:
            first_start[0] = time.time()
        if job.due_ms is not None:
            lateness.append(job.redis_now_ms(mono) - job.due_ms)
        ids.append(job.id)
        last_finish[0] = time.time()

    worker.register("bench", handle, inline=True)  # only bookkeeping: no thread, no task
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    try:
        await worker.run()
    finally:
        await redis.aclose()
        out.write_bytes(
            orjson.dumps(
                {
                    "ids": ids,
                    "lateness_ms": lateness,
                    "first_start": first_start[0],
                    "last_finish": last_finish[0],
                }
            )
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shardq.dev.demo")
    sub = parser.add_subparsers(dest="role", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--url", required=True)
    w.add_argument("--queue", required=True)
    w.add_argument("--out", required=True, type=Path)
    w.add_argument("--concurrency", type=int, default=1000)
    args = parser.parse_args(argv)
    asyncio.run(_bench_worker(args.url, args.queue, args.out, args.concurrency))


if __name__ == "__main__":
    main()
