"""Operator views and actions: lease owners, rebalancing, queue stats, the dead-letter stream.

Everything here is read-only unless its name says otherwise; the CLI asks for ``--yes``
before any action that changes state.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from shardq import metrics
from shardq.client import Client
from shardq.connection import as_text
from shardq.dispatcher.leases import fair_share
from shardq.jobs import MAX_ATTEMPT
from shardq.store import fleet, inspect, keys, transport
from shardq.store.numbers import Checked

# Most entries one dlq script call handles: keeps each call short.
DLQ_BATCH = 100


@dataclass(frozen=True, slots=True)
class OwnerRow:
    partition: int
    owner: str | None
    token: int | None
    lease_age_s: float | None
    lease_ttl_s: float | None
    next_due_in_s: float | None
    malformed: dict[str, str] = field(default_factory=dict)


def owners(client: Client, queue: str) -> list[OwnerRow]:
    """Lease owner, token, lease age and next due time of every partition."""
    total = client.partitions(queue)
    pks = keys.all_partition_keys(queue, total)
    rows = []
    for pk, info in zip(
        pks, transport.run_many(client.redis, [fleet.lease_info(pk) for pk in pks]), strict=True
    ):
        if isinstance(info, BaseException):
            raise info
        now = info.now_ms
        rows.append(
            OwnerRow(
                partition=pk.partition,
                owner=info.owner,
                token=info.token,
                lease_age_s=(now - info.granted_ms) / 1000
                if info.owner and info.granted_ms is not None
                else None,
                lease_ttl_s=info.ttl_ms / 1000 if info.ttl_ms is not None else None,
                next_due_in_s=(info.next_due_ms - now) / 1000
                if info.next_due_ms is not None
                else None,
                malformed=info.malformed,
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class Spread:
    """How partitions are spread over live dispatchers, against each one's fair share."""

    partitions: int
    live: list[str]
    draining: list[str]
    held: dict[str, int]
    target: dict[str, int]
    unowned: int

    @property
    def even(self) -> bool:
        return self.unowned == 0 and all(self.held.get(m, 0) == t for m, t in self.target.items())


def live_dispatchers(client: Client, queue: str) -> tuple[list[str], list[str]]:
    """Dispatchers whose heartbeat has not expired, and those asked to drain."""
    now_s, now_us = client.redis.time()  # type: ignore[misc]
    now_ms = int(now_s) * 1000 + int(now_us) // 1000
    live = [
        as_text(m) for m in client.redis.zrangebyscore(keys.dispatchers_key(queue), now_ms, "+inf")
    ]
    draining = [as_text(m) for m in client.redis.smembers(keys.drain_key(queue))]
    return sorted(live), sorted(d for d in draining if d in live)


def spread(client: Client, queue: str, rows: list[OwnerRow] | None = None) -> Spread:
    rows = rows if rows is not None else owners(client, queue)
    live, draining = live_dispatchers(client, queue)
    active = [m for m in live if m not in draining]
    total = len(rows)
    held = Counter(r.owner for r in rows if r.owner is not None)
    target = {m: fair_share(total, active, m) for m in live}
    return Spread(
        total, live, draining, dict(held), target, sum(1 for r in rows if r.owner is None)
    )


def even_plan(client: Client, queue: str) -> list[tuple[int, str]]:
    """(partition, owner) leases to revoke so no dispatcher holds more than its fair share."""
    rows = owners(client, queue)
    s = spread(client, queue, rows)
    plan: list[tuple[int, str]] = []
    for owner, count in s.held.items():
        excess = count - s.target.get(owner, 0)
        if excess > 0:
            mine = sorted((r.partition for r in rows if r.owner == owner), reverse=True)
            plan.extend((p, owner) for p in mine[:excess])
    return plan


def revoke(client: Client, queue: str, plan: list[tuple[int, str]]) -> int:
    """Revoke the planned leases (the owner is fenced off; a peer takes over).  Returns count."""
    total = client.partitions(queue)
    ops = [fleet.lease_revoke(keys.partition_keys(queue, p, total), owner) for p, owner in plan]
    results = transport.run_many(client.redis, ops)
    done = [p for (p, _), r in zip(plan, results, strict=True) if r is True]
    if done:
        client.redis.hdel(keys.owners_key(queue), *[str(p) for p in done])
    return len(done)


def request_drain(client: Client, queue: str, dispatcher: str) -> None:
    """Ask a live dispatcher to hand back every partition (it stays up, holding none)."""
    client.redis.sadd(keys.drain_key(queue), dispatcher)


def cancel_drain(client: Client, queue: str, dispatcher: str) -> None:
    client.redis.srem(keys.drain_key(queue), dispatcher)


# stats -----------------------------------------------------------------------------------------


def queue_stats(client: Client, queue: str, window: float = 1.0) -> dict[str, Any]:
    """Per queue, node and partition: backlog, overdue, lag, pending, dead, rates, hot spots.

    Rates come from two snapshots ``window`` seconds apart (enqueued + promoted per second).
    """
    total = client.partitions(queue)
    pks = keys.all_partition_keys(queue, total)
    first = metrics.snapshot_sync(client.redis, pks)
    watch = metrics.RateWindow(window_seconds=window)
    watch.add(first)
    time.sleep(window)
    snaps = metrics.snapshot_sync(client.redis, pks)
    watch.add(snaps)
    report = watch.report()
    rates = report.partition_rates if report else {}
    parts = []
    nodes: dict[str, dict[str, Any]] = {}
    for s in snaps:
        row = {
            "partition": s.partition,
            "node": s.node,
            "due": s.due,
            "overdue": s.overdue,
            "lag_s": round(s.lag_seconds, 3),
            "ready": s.ready,
            "pending": s.pending,
            "oldest_pending_s": round(s.oldest_pending_seconds, 3),
            "dead": s.dead,
            "rate_per_s": round(rates.get(s.partition, 0.0), 1),
            "counters": s.counters,
            "malformed": s.malformed,
        }
        parts.append(row)
        node = nodes.setdefault(
            s.node,
            {
                "node": s.node,
                "partitions": 0,
                "due": 0,
                "overdue": 0,
                "pending": 0,
                "dead": 0,
                "rate_per_s": 0.0,
            },
        )
        node["partitions"] += 1
        for k in ("due", "overdue", "pending", "dead"):
            node[k] += row[k]
        node["rate_per_s"] = round(node["rate_per_s"] + row["rate_per_s"], 1)
    counters: Counter[str] = Counter()
    for s in snaps:
        counters.update(s.counters)
    counters.pop("lanes", None)  # a flag, not a counter: reported as lanes_partitions
    summary = {
        "queue": queue,
        "partitions": total,
        "due": sum(s.due for s in snaps),
        "overdue": sum(s.overdue for s in snaps),
        "max_lag_s": round(max((s.lag_seconds for s in snaps), default=0.0), 3),
        "ready": sum(s.ready for s in snaps),
        "pending": sum(s.pending for s in snaps),
        "dead": sum(s.dead for s in snaps),
        "lanes_partitions": sum(s.lanes for s in snaps),
        "rate_per_s": round(sum(rates.values()), 1),
        "hot_partition_ratio": round(report.hot_partition_ratio, 2) if report else 0.0,
        "hot_node_ratio": round(report.hot_node_ratio, 2) if report else 0.0,
        "hottest": [
            {"partition": p, "rate_per_s": round(r, 1)}
            for p, r in (report.hottest(5) if report else [])
        ],
        "counters": dict(counters),
        "malformed_partitions": sum(1 for s in snaps if s.malformed),
    }
    return {
        "queue": summary,
        "nodes": sorted(nodes.values(), key=lambda n: n["node"]),
        "partitions": parts,
    }


# dead letters ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeadLetter:
    partition: int
    entry_id: str
    job_id: str | None
    attempt: int | None
    error: str
    at_ms: int | None
    raw: str | None
    malformed: dict[str, str] = field(default_factory=dict)
    """Fields that are not numbers in range (name -> raw value), read as None."""


def _parse_dead(partition: int, entry: Any) -> DeadLetter:
    """One dead-letter entry; fields written by hand (a bad attempt count, bytes that are not
    UTF-8) are shown as they are or left out, never fatal to a listing."""
    eid, fields = entry
    f = (
        {as_text(k): as_text(v) for k, v in fields.items()}
        if isinstance(fields, dict)
        else {as_text(fields[i]): as_text(fields[i + 1]) for i in range(0, len(fields) - 1, 2)}
    )
    c = Checked()
    return DeadLetter(
        partition=partition,
        entry_id=as_text(eid),
        job_id=f.get("j"),
        attempt=c.integer("attempt", f["a"], None, 0, MAX_ATTEMPT) if "a" in f else None,
        error=f.get("e", ""),
        at_ms=c.time_ms("at_ms", f["t"]) if "t" in f else None,
        raw=f.get("raw"),
        malformed=c.bad,
    )


def dead_letters(
    client: Client, queue: str, limit: int = 50, partition: int | None = None
) -> list[DeadLetter]:
    """Newest dead letters first, at most ``limit`` per partition read."""
    total = client.partitions(queue)
    wanted = [partition] if partition is not None else list(range(total))
    pipe = client.redis.pipeline(transaction=False)
    for p in wanted:
        pipe.xrevrange(keys.partition_keys(queue, p, total).dead, count=limit)
    out: list[DeadLetter] = []
    for p, entries in zip(wanted, pipe.execute(), strict=True):
        out.extend(_parse_dead(p, e) for e in entries)
    out.sort(key=lambda d: d.at_ms or 0, reverse=True)
    return out[:limit]


def _dead_ids(client: Client, pk: keys.PartitionKeys, job_ids: set[str] | None) -> list[str]:
    """Entry ids of a partition's dead stream (all, or those naming the given jobs)."""
    ids: list[str] = []
    start = "-"
    while True:
        batch = client.redis.xrange(pk.dead, min=start, count=1000)
        if not batch:
            return ids
        for entry in batch:
            d = _parse_dead(pk.partition, entry)
            if job_ids is None or d.job_id in job_ids:
                ids.append(d.entry_id)
        last = as_text(batch[-1][0])
        ms, seq = last.split("-")
        start = f"{ms}-{int(seq) + 1}"


def _by_partition(
    client: Client, queue: str, job_ids: list[str] | None
) -> dict[int, set[str] | None]:
    total = client.partitions(queue)
    if job_ids is None:
        return dict.fromkeys(range(total))
    grouped: dict[int, set[str] | None] = {}
    for job_id in job_ids:
        group = grouped.setdefault(keys.partition_for(job_id, total), set())
        assert group is not None
        group.add(job_id)
    return grouped


def replay(client: Client, queue: str, job_ids: list[str] | None = None) -> tuple[int, int]:
    """Move dead jobs back to the due set (due now, attempts reset).  Returns (moved, skipped)."""
    total = client.partitions(queue)
    moved = skipped = 0
    for p, wanted in _by_partition(client, queue, job_ids).items():
        pk = keys.partition_keys(queue, p, total)
        ids = _dead_ids(client, pk, wanted)
        for start in range(0, len(ids), DLQ_BATCH):
            done, left = transport.run(
                client.redis, inspect.dlq_replay(pk, ids[start : start + DLQ_BATCH])
            )
            moved += done
            skipped += left
    return moved, skipped


def purge(client: Client, queue: str, job_ids: list[str] | None = None) -> int:
    """Delete dead letters (all, or those of the given jobs) and their dead jobs."""
    total = client.partitions(queue)
    deleted = 0
    for p, wanted in _by_partition(client, queue, job_ids).items():
        pk = keys.partition_keys(queue, p, total)
        ids = _dead_ids(client, pk, wanted)
        for start in range(0, len(ids), DLQ_BATCH):
            deleted += transport.run(
                client.redis, inspect.dlq_purge(pk, ids[start : start + DLQ_BATCH])
            )
    return deleted


def dead_count(client: Client, queue: str) -> int:
    total = client.partitions(queue)
    pipe = client.redis.pipeline(transaction=False)
    for pk in keys.all_partition_keys(queue, total):
        pipe.xlen(pk.dead)
    return sum(int(n) for n in pipe.execute())
