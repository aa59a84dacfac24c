"""Shared pieces of the benchmark suite: Redis counters per primary, processes, percentiles."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.calibration import (  # re-exported for the benches (__all__)
    calibrate,
    calibration_line,
    cpu_loop_rate,
    redis_benchmark,
)
from shardq import JobRequest
from shardq.client import Client
from shardq.connection import is_cluster
from shardq.dev.demo import cli_command, delete_queue, job_memory, percentile, queue_counters
from shardq.store import keys

REPO = Path(__file__).resolve().parents[1]

__all__ = [
    "REPO",
    "Fleet",
    "NodeSample",
    "Sampler",
    "calibrate",
    "calibration_line",
    "cpu_loop_rate",
    "cpu_seconds",
    "delete_queue",
    "enqueue_due_at",
    "fresh_queue",
    "pct",
    "peak_rss_mb",
    "primaries",
    "queue_counters",
    "redis_benchmark",
    "rss_mb",
    "stop_processes",
    "wait_until",
]


def primaries(client: Client) -> dict[str, Any]:
    """Plain clients of every primary by 'host:port' (the node itself when standalone)."""
    redis = client.redis
    if is_cluster(redis):
        return {
            n.name: redis.get_redis_connection(n)  # type: ignore[union-attr]
            for n in redis.get_primaries()  # type: ignore[union-attr]
        }
    kw = redis.connection_pool.connection_kwargs  # type: ignore[union-attr]
    return {f"{kw.get('host')}:{kw.get('port')}": redis}


@dataclass(frozen=True, slots=True)
class NodeSample:
    """Counters of one primary at one instant."""

    at: float
    script_calls: int  # FCALL + FCALL_RO calls
    script_usec: int  # their Redis time (includes the commands they run)
    cpu_s: float  # used_cpu_user + used_cpu_sys of the whole redis-server process
    used_memory: int  # minus the replication backlog: see job_memory


def _sample(node: Any) -> NodeSample:
    stats = node.info("commandstats")
    cpu = node.info("cpu")
    mem = node.info("memory")
    calls = usec = 0
    for name in ("cmdstat_fcall", "cmdstat_fcall_ro"):
        s = stats.get(name)
        if s:
            calls += int(s["calls"])
            usec += int(s["usec"])
    return NodeSample(
        time.monotonic(),
        calls,
        usec,
        float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
        job_memory(mem),
    )


class Sampler:
    """Deltas of script time, process CPU and memory over the primaries between two marks.

    ``INFO commandstats`` is per command, not per script: a stage is measured in isolation
    (nothing else runs against the cluster meanwhile) and charged the FCALL delta.
    Process CPU is charged net of the idle rate measured by :meth:`calibrate` (serverCron,
    replication pings).
    """

    def __init__(self, client: Client) -> None:
        self.nodes = primaries(client)
        self.idle_cpu_per_s = 0.0
        self.last = self.snap()

    def snap(self) -> dict[str, NodeSample]:
        return {name: _sample(node) for name, node in self.nodes.items()}

    def calibrate(self, seconds: float = 1.0) -> None:
        a = self.snap()
        time.sleep(seconds)
        b = self.snap()
        elapsed = max(1e-6, next(iter(b.values())).at - next(iter(a.values())).at)
        self.idle_cpu_per_s = sum(b[n].cpu_s - a[n].cpu_s for n in b) / elapsed
        self.last = b

    def mark(self) -> None:
        self.last = self.snap()

    def delta(self, remark: bool = True) -> dict[str, Any]:
        """Totals since the last mark, over all primaries, and per node."""
        now = self.snap()
        before = self.last
        if remark:
            self.last = now
        elapsed = next(iter(now.values())).at - next(iter(before.values())).at
        per_node = {
            n: {
                "script_calls": now[n].script_calls - before[n].script_calls,
                "script_usec": now[n].script_usec - before[n].script_usec,
                "cpu_usec": (now[n].cpu_s - before[n].cpu_s) * 1e6,
                "memory": now[n].used_memory - before[n].used_memory,
            }
            for n in now
        }
        cpu = sum(v["cpu_usec"] for v in per_node.values())
        return {
            "seconds": elapsed,
            "script_calls": sum(v["script_calls"] for v in per_node.values()),
            "script_usec": sum(v["script_usec"] for v in per_node.values()),
            "cpu_usec": max(0.0, cpu - self.idle_cpu_per_s * elapsed * 1e6),
            "memory": sum(v["memory"] for v in per_node.values()),
            "per_node": per_node,
        }


def used_memory(client: Client) -> int:
    return sum(job_memory(n.info("memory")) for n in primaries(client).values())


def fresh_queue(client: Client, prefix: str, partitions: int) -> str:
    queue = f"{prefix}-{int(time.time())}-{secrets.token_hex(3)}"
    client.create_queue(queue, partitions)
    return queue


def enqueue_due_at(
    client: Client, queue: str, n: int, due_at: float, payload: str, chunk: int = 10_000
) -> list[str]:
    """Bulk-enqueue n jobs all due at ``due_at`` (epoch seconds); returns their ids."""
    ids: list[str] = []
    for start in range(0, n, chunk):
        reqs = [JobRequest("bench", payload, run_at=due_at) for _ in range(min(chunk, n - start))]
        ids.extend(r.job_id for r in client.enqueue_many(queue, reqs))
    return ids


def wait_until(cond: Callable[[], bool], timeout: float, every: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every)
    return cond()


def _status_kb(pid: int, field: str) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmRSS")


def peak_rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmHWM")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a live process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(percentile(sorted(values), q), 2)


class Fleet:
    """``shardq dispatcher run`` / ``shardq worker run`` subprocesses (plain, not instrumented:
    their memory is shardq's own)."""

    def __init__(self, url: str, queue: str) -> None:
        self.url = url
        self.queue = queue
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _start(self, name: str, args: list[str]) -> None:
        cmd = cli_command(*args, "--queue", self.queue, "--url", self.url)
        self.procs[name] = subprocess.Popen(cmd)

    def dispatcher(self, name: str = "dispatcher", batch: int = 100) -> None:
        self._start(
            name,
            [
                "dispatcher",
                "run",
                "--batch",
                str(batch),
                "--lease-time",
                "4",
                "--renew-interval",
                "1",
            ],
        )

    def worker(self, name: str = "worker", concurrency: int = 1000) -> None:
        self._start(
            name,
            [
                "worker",
                "run",
                "--handlers",
                "shardq.dev.handlers:handlers",
                "--concurrency",
                str(concurrency),
            ],
        )

    def peak_rss(self) -> dict[str, float]:
        return {name: round(peak_rss_mb(p.pid), 1) for name, p in self.procs.items()}

    def rss(self) -> dict[str, float]:
        return {name: round(rss_mb(p.pid), 1) for name, p in self.procs.items()}

    def cpu(self) -> dict[str, float]:
        """CPU seconds each process has used so far."""
        return {name: cpu_seconds(p.pid) for name, p in self.procs.items()}

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs.values())

    def stop(self, timeout: float = 30.0) -> None:
        stop_processes(self.procs.values(), timeout)
        self.procs.clear()


def stop_processes(procs: Iterable[subprocess.Popen[bytes]], timeout: float = 30.0) -> None:
    """SIGTERM each of ``procs`` (by its own pid), wait up to ``timeout`` for all, kill what is
    left."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def partition_nodes(client: Client, queue: str, partitions: int) -> list[str]:
    """The primary ('host:port') holding each partition (the one node when standalone)."""
    redis = client.redis
    if not is_cluster(redis):
        return [next(iter(primaries(client)))] * partitions
    nm = redis.nodes_manager  # type: ignore[union-attr]
    return [
        nm.get_node_from_slot(keys.slot_of(pk.due)).name
        for pk in keys.all_partition_keys(queue, partitions)
    ]
