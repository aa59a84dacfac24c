"""Redis cost per job, stage by stage, each stage run alone against the cluster.

The bench process itself makes the script calls a producer, a dispatcher and a worker make
(enqueue-batch / enqueue, promote, fetch, ack), so the delta of ``cmdstat_fcall`` between
two marks is exactly that stage's script time: nothing else runs meanwhile, and lease,
membership, heartbeat and metrics calls of a real dispatcher or worker are left out (see
:mod:`bench.rates` for what the real processes cost in all).
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import Sampler, delete_queue, fresh_queue, wait_until
from shardq import JobRequest
from shardq.client import Client
from shardq.store import delivery, fleet, keys

OWNER = "bench:stages"
LEASE_MS = 600_000


def _per_job(d: dict[str, Any], jobs: int) -> dict[str, Any]:
    jobs = max(1, jobs)
    calls = max(1, d["script_calls"])
    return {
        "jobs": jobs,
        "script_calls": d["script_calls"],
        "script_usec_per_job": round(d["script_usec"] / jobs, 2),
        "script_usec_per_call": round(d["script_usec"] / calls, 1),
        "cpu_usec_per_job": round(d["cpu_usec"] / jobs, 2),
        "memory_bytes_per_job": round(d["memory"] / jobs, 1),
        "seconds": round(d["seconds"], 3),
        "jobs_per_s": round(jobs / max(d["seconds"], 1e-9), 1),
    }


def _client_cpu(since: float, jobs: int) -> float:
    """CPU this (producer) process spent per job since ``since`` (time.process_time())."""
    return round((time.process_time() - since) * 1e6 / max(1, jobs), 2)


def _ok(results: list[Any]) -> list[Any]:
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def acquire_leases(client: Client, pks: list[keys.PartitionKeys]) -> list[str]:
    grants = _ok(
        client.transport.run_many([fleet.lease_acquire(pk, OWNER, LEASE_MS) for pk in pks])
    )
    tokens = []
    for grant in grants:
        if not grant.won:
            raise RuntimeError(f"lease not granted: {grant!r}")
        tokens.append(grant.token)
    return tokens


def promote_all(
    client: Client, pks: list[keys.PartitionKeys], tokens: list[str], k: int, expect: int
) -> tuple[int, int]:
    """Promote with K per call over every partition until ``expect`` moved; (moved, calls)."""
    moved = calls = 0
    active = list(range(len(pks)))
    while active and moved < expect:
        batch = [fleet.promote(pks[i], tokens[i], k, LEASE_MS) for i in active]
        results = _ok(client.transport.run_many(batch))
        calls += len(batch)
        nxt = []
        for i, result in zip(active, results, strict=True):
            moved += result.moved
            if result.moved >= k:
                nxt.append(i)
        active = nxt
    return moved, calls


def fetch_all(
    client: Client, pks: list[keys.PartitionKeys], count: int, expect: int
) -> dict[int, list[tuple[bytes, bytes]]]:
    got: dict[int, list[tuple[bytes, bytes]]] = {i: [] for i in range(len(pks))}
    total = 0
    active = list(range(len(pks)))
    while active and total < expect:
        batch = [delivery.fetch(pks[i], OWNER, count) for i in active]
        nxt = []
        for i, result in zip(active, _ok(client.transport.run_many(batch)), strict=True):
            got[i].extend((j.entry_id, j.raw_id) for j in result.jobs)
            total += len(result.jobs)
            if len(result.jobs) >= count:
                nxt.append(i)
        active = nxt
    return got


def ack_all(
    client: Client,
    pks: list[keys.PartitionKeys],
    got: dict[int, list[tuple[bytes, bytes]]],
    per_call: int,
) -> int:
    calls = []
    for i, entries in got.items():
        for start in range(0, len(entries), per_call):
            calls.append(delivery.ack(pks[i], entries[start : start + per_call]))
    settled = 0
    for start in range(0, len(calls), 256):
        settled += sum(_ok(client.transport.run_many(calls[start : start + 256])))
    return settled


def stage_costs(
    url: str,
    jobs: int = 100_000,
    single_jobs: int = 3_000,
    partitions: int = 64,
    k: int = 100,
    fetch_count: int = 100,
    payload_bytes: int = 20,
    lanes: bool = False,
    layout: int | None = None,
) -> dict[str, Any]:
    """Enqueue (bulk and single), promote, fetch and ack of ``jobs`` jobs, one stage at a time
    (with ``lanes``: on a queue with lanes on, promote filling the lanes, fetch emptying them;
    with ``layout`` 2: as a queue created before compact waiting jobs)."""
    client = Client(url)
    queue = fresh_queue(client, "bench-stage", partitions)
    if layout is not None:
        client.redis.hset(keys.queue_meta_key(queue), "layout", layout)
        client.forget(queue)
    if lanes:
        client.set_lanes(queue, True)
    pks = keys.all_partition_keys(queue, partitions)
    payload = "x" * payload_bytes
    s = Sampler(client)
    out: dict[str, Any] = {
        "jobs": jobs,
        "partitions": partitions,
        "k": k,
        "payload_bytes": payload_bytes,
        "lanes": lanes,
        "compact": client.compact(queue),
    }
    try:
        s.calibrate(1.0)
        lead = 3.0 + jobs / 40_000
        due_at = time.time() + lead
        s.mark()
        cpu = time.process_time()
        for start in range(0, jobs, 10_000):
            n = min(10_000, jobs - start)
            client.enqueue_many(
                queue, [JobRequest("bench", payload, run_at=due_at) for _ in range(n)]
            )
        out["enqueue_bulk"] = _per_job(s.delta(), jobs)
        out["enqueue_bulk"]["producer_cpu_usec_per_job"] = _client_cpu(cpu, jobs)
        cpu = time.process_time()
        for _ in range(single_jobs):
            client.enqueue(queue, "bench", payload, run_at=due_at)
        out["enqueue_single"] = _per_job(s.delta(), single_jobs)
        out["enqueue_single"]["producer_cpu_usec_per_job"] = _client_cpu(cpu, single_jobs)
        total = jobs + single_jobs
        tokens = acquire_leases(client, pks)
        time.sleep(max(0.0, due_at + 0.2 - time.time()))
        s.mark()
        moved, _ = promote_all(client, pks, tokens, k, total)
        out["promote"] = _per_job(s.delta(), moved)
        got = fetch_all(client, pks, fetch_count, total)
        fetched = sum(len(v) for v in got.values())
        out["fetch"] = _per_job(s.delta(), fetched)
        settled = ack_all(client, pks, got, fetch_count)
        out["ack"] = _per_job(s.delta(), settled)
        # Redis memory per job in each state, from the running sum of the deltas
        held = 0.0
        state_bytes: dict[str, float] = {}
        for stage, state in (
            ("enqueue_bulk", None),
            ("enqueue_single", "due"),
            ("promote", "ready"),
            ("fetch", "running"),
            ("ack", "left after ack"),
        ):
            held += out[stage]["memory_bytes_per_job"] * out[stage]["jobs"]
            if state:
                state_bytes[state] = round(held / total, 1)
        out["memory_bytes_per_job"] = state_bytes
        per_job = [
            out[st]["script_usec_per_job"] for st in ("enqueue_bulk", "promote", "fetch", "ack")
        ]
        cpu = [out[st]["cpu_usec_per_job"] for st in ("enqueue_bulk", "promote", "fetch", "ack")]
        out["total_script_usec_per_job"] = round(sum(per_job), 2)
        out["total_cpu_usec_per_job"] = round(sum(cpu), 2)
        out["complete"] = moved == total and fetched == total and settled == total
        return out
    finally:
        delete_queue(client.redis, queue, partitions)
        client.close()


def promote_k(url: str, jobs: int, ks: list[int], partitions: int = 64) -> list[dict[str, Any]]:
    """Promote script cost per job and per call (= how long one call blocks the shard) for
    several K, each on its own freshly filled queue."""
    rows = []
    for k in ks:
        client = Client(url)
        queue = fresh_queue(client, f"bench-k{k}", partitions)
        pks = keys.all_partition_keys(queue, partitions)
        try:
            due_at = time.time() + 2.0 + jobs / 40_000
            for start in range(0, jobs, 10_000):
                n = min(10_000, jobs - start)
                client.enqueue_many(
                    queue, [JobRequest("bench", "x" * 20, run_at=due_at) for _ in range(n)]
                )
            tokens = acquire_leases(client, pks)
            wait_until(lambda due=due_at: time.time() > due + 0.2, 60)
            s = Sampler(client)
            s.calibrate(0.5)
            moved, _calls = promote_all(client, pks, tokens, k, jobs)
            d = s.delta()
            rows.append(
                {
                    "k": k,
                    "jobs": moved,
                    "calls": d["script_calls"],
                    "script_usec_per_job": round(d["script_usec"] / max(1, moved), 2),
                    "script_usec_per_call": round(d["script_usec"] / max(1, d["script_calls"]), 1),
                    "cpu_usec_per_job": round(d["cpu_usec"] / max(1, moved), 2),
                    "jobs_per_s_bench_client": round(moved / max(1e-9, d["seconds"]), 1),
                }
            )
        finally:
            delete_queue(client.redis, queue, partitions)
            client.close()
    return rows
