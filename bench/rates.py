"""What the real processes achieve: promote rate per primary, lateness at steady due rates, and
dispatcher/worker memory against the backlog size."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import e2e
from bench.common import (
    Fleet,
    Sampler,
    delete_queue,
    enqueue_due_at,
    fresh_queue,
    partition_nodes,
    queue_counters,
    wait_until,
)
from shardq import JobRequest
from shardq.client import Client
from shardq.dev.demo import E2EConfig
from shardq.store import keys


def _per_partition(client: Client, queue: str, partitions: int, field: str) -> list[int]:
    pipe = client.redis.pipeline(transaction=False)
    for pk in keys.all_partition_keys(queue, partitions):
        pipe.hget(pk.stats, field)
    return [int(v or 0) for v in pipe.execute()]


def _cpu_per_job(a: dict[str, float], b: dict[str, float], name: str, jobs: int) -> float:
    return round((b[name] - a[name]) * 1e6 / max(1, jobs), 2)


def promote_rate(url: str, jobs: int = 200_000, partitions: int = 64) -> dict[str, Any]:
    """One ``shardq dispatcher run`` process promotes an overdue backlog of ``jobs`` (no worker):
    jobs/s in all and per primary, and the Redis cost per job of everything it sends (promote
    plus lease, membership, trim and metrics calls)."""
    client = Client(url)
    queue = fresh_queue(client, "bench-promote", partitions)
    fleet = Fleet(url, queue)
    try:
        due_at = time.time() + 3.0 + jobs / 40_000
        enqueue_due_at(client, queue, jobs, due_at, "x" * 20)
        fleet.dispatcher()
        time.sleep(max(0.0, due_at - time.time() - 0.3))
        s = Sampler(client)
        idle_rss = fleet.rss()
        time.sleep(max(0.0, due_at - time.time()))
        cpu0 = fleet.cpu()
        t0 = time.monotonic()
        ok = wait_until(
            lambda: queue_counters(client.redis, queue, partitions).get("promoted", 0) >= jobs,
            120,
            0.02,
        )
        wall = time.monotonic() - t0
        cpu1 = fleet.cpu()
        d = s.delta()
        by_node: Counter[str] = Counter()
        for node, n in zip(
            partition_nodes(client, queue, partitions),
            _per_partition(client, queue, partitions, "promoted"),
            strict=True,
        ):
            by_node[node] += n
        return {
            "jobs": jobs,
            "complete": ok,
            "seconds": round(wall, 2),
            "jobs_per_s": round(jobs / wall, 1),
            "primaries": len(by_node),
            "jobs_per_s_per_primary": {n: round(c / wall, 1) for n, c in sorted(by_node.items())},
            "busiest_primary_over_mean": round(
                max(by_node.values()) / (sum(by_node.values()) / len(by_node)), 3
            ),
            "script_usec_per_job_incl_leases": round(d["script_usec"] / jobs, 2),
            "cpu_usec_per_job_incl_leases": round(d["cpu_usec"] / jobs, 2),
            "dispatcher_rss_mb": {
                "idle": idle_rss.get("dispatcher"),
                "peak": fleet.peak_rss()["dispatcher"],
            },
            "dispatcher_cpu_usec_per_job": _cpu_per_job(cpu0, cpu1, "dispatcher", jobs),
            "dispatcher_cpu_share": round((cpu1["dispatcher"] - cpu0["dispatcher"]) / wall, 2),
        }
    finally:
        fleet.stop()
        delete_queue(client.redis, queue, partitions)
        client.close()


# Bytes of free machine memory a backlog needs: the jobs on the primaries and again on the
# replicas (~220 B each), the enqueuing process's ids and buffers, and as much again as headroom.
_BYTES_PER_BACKLOG_JOB = 1_200


def memory_allows(jobs: int) -> str | None:
    """Why a backlog of ``jobs`` would not fit this machine's available memory, or None."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None  # not Linux: try it
    needed = jobs * _BYTES_PER_BACKLOG_JOB
    if needed > available:
        return f"needs ~{needed / 2**30:.1f} GiB free, {available / 2**30:.1f} GiB available"
    return None


def backlog_memory(url: str, jobs: int, partitions: int = 64) -> dict[str, Any]:
    """A plain dispatcher and worker (``shardq worker run``, no-op handler, concurrency 1000)
    drain ``jobs`` jobs all due at one instant; their RSS before and at peak, the drain rate,
    and the Redis memory per job."""
    client = Client(url)
    queue = fresh_queue(client, "bench-rss", partitions)
    fleet = Fleet(url, queue)
    s = Sampler(client)
    try:
        due_at = time.time() + 3.0 + jobs / 50_000
        s.mark()
        t0 = time.monotonic()
        enqueue_due_at(client, queue, jobs, due_at, "x" * 20)
        enqueue_s = time.monotonic() - t0
        mem = s.delta()["memory"]
        fleet.dispatcher()
        fleet.worker()
        time.sleep(max(0.0, due_at - time.time() - 0.3))
        idle = fleet.rss()
        time.sleep(max(0.0, due_at - time.time()))
        cpu0 = fleet.cpu()
        t0 = time.monotonic()
        ok = wait_until(
            lambda: (
                fleet.alive()
                and queue_counters(client.redis, queue, partitions).get("completed", 0) >= jobs
            ),
            max(60.0, jobs / 5_000),
            0.1,
        )
        wall = time.monotonic() - t0
        cpu1 = fleet.cpu()
        peak = fleet.peak_rss()
        return {
            "backlog": jobs,
            "complete": ok,
            "enqueue_jobs_per_s": round(jobs / enqueue_s, 1),
            "drain_seconds": round(wall, 2),
            "drain_jobs_per_s": round(jobs / wall, 1),
            "redis_bytes_per_job": round(mem / jobs, 1),
            "dispatcher_rss_mb": {"before_due": idle.get("dispatcher"), "peak": peak["dispatcher"]},
            "worker_rss_mb": {"before_due": idle.get("worker"), "peak": peak["worker"]},
            "dispatcher_cpu_usec_per_job": _cpu_per_job(cpu0, cpu1, "dispatcher", jobs),
            "worker_cpu_usec_per_job": _cpu_per_job(cpu0, cpu1, "worker", jobs),
        }
    finally:
        fleet.stop()
        delete_queue(client.redis, queue, partitions)
        client.close()


def steady_lateness(url: str, rate: int, spread: float, partitions: int = 64) -> dict[str, Any]:
    """``bench.e2e.run``: rate x spread jobs enqueued ahead, coming due at ``rate``
    jobs/s, one dispatcher and one worker process."""
    r = e2e.run(E2EConfig(url=url, jobs=int(rate * spread), spread=spread, partitions=partitions))
    return {
        "rate": rate,
        "jobs": r["jobs"],
        "lost": r["lost"],
        "duplicates": r["duplicates"],
        "lateness_ms": r["lateness_ms"],
        "dispatcher_peak_rss_mb": r["dispatcher_peak_rss_mb"],
        "worker_peak_rss_mb": r["worker_peak_rss_mb"],
    }


def drain(url: str, jobs: int, partitions: int = 64) -> dict[str, Any]:
    """``bench.e2e.run``, ``backlog=True``: an overdue backlog drained end to end."""
    r = e2e.run(E2EConfig(url=url, jobs=jobs, backlog=True, partitions=partitions))
    keep = (
        "jobs",
        "lost",
        "duplicates",
        "enqueue_jobs_per_s",
        "drain_jobs_per_s",
        "lateness_ms",
        "redis_bytes_per_job",
    )
    return {k: r[k] for k in keep}


def steady_cost(url: str, rate: int, spread: float, partitions: int = 64) -> dict[str, Any]:
    """Jobs coming due at a steady ``rate`` through a plain dispatcher and worker: what each job
    costs Redis (script time, process CPU, script calls) and the two processes (CPU) in steady
    state, where each call carries only the jobs that came due since the last one."""
    client = Client(url)
    queue = fresh_queue(client, "bench-steady", partitions)
    fleet = Fleet(url, queue)
    jobs = int(rate * spread)
    try:
        lead = 3.0 + jobs / 40_000
        start = time.time() + lead
        step = spread / jobs
        for i in range(0, jobs, 10_000):
            n = min(10_000, jobs - i)
            client.enqueue_many(
                queue,
                [JobRequest("bench", "x" * 20, run_at=start + (i + j) * step) for j in range(n)],
            )
        fleet.dispatcher()
        fleet.worker()
        s = Sampler(client)
        s.calibrate(min(1.0, max(0.2, start - time.time() - 1.0)))
        time.sleep(max(0.0, start - time.time()))
        s.mark()
        cpu0 = fleet.cpu()
        ok = wait_until(
            lambda: queue_counters(client.redis, queue, partitions).get("completed", 0) >= jobs,
            spread + 60,
            0.1,
        )
        d = s.delta()
        cpu1 = fleet.cpu()
        return {
            "rate": rate,
            "partitions": partitions,
            "jobs_per_s_per_partition": round(rate / partitions, 1),
            "jobs": jobs,
            "complete": ok,
            "script_usec_per_job": round(d["script_usec"] / jobs, 2),
            "cpu_usec_per_job": round(d["cpu_usec"] / jobs, 2),
            "script_calls_per_job": round(d["script_calls"] / jobs, 3),
            "dispatcher_cpu_usec_per_job": _cpu_per_job(cpu0, cpu1, "dispatcher", jobs),
            "worker_cpu_usec_per_job": _cpu_per_job(cpu0, cpu1, "worker", jobs),
        }
    finally:
        fleet.stop()
        delete_queue(client.redis, queue, partitions)
        client.close()
