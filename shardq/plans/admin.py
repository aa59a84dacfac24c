"""The operator's operations, written once: lease owners, the spread over dispatchers, lease
revocation and drains, the dead-letter stream (list, replay, purge, count), the stats report.

Each is a plan (:mod:`shardq.plans`) over the store's calls; :mod:`shardq.admin` drives them
through the client's runner, so `shardq queue owners`, `queue stats`, `rebalance` and `dlq`
ride out a failover, and fail with the same typed errors, as ``Client.get`` does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardq import metrics
from shardq.plans import Plan, each, ok, one
from shardq.plans.listing import current_layout
from shardq.store import fleet, inspection, keys
from shardq.store.inspection import DeadLetter, PartitionSnapshot
from shardq.store.layout import Layout
from shardq.store.meta import QueueCache
from shardq.store.op import Call

# Most entries one dlq script call handles: keeps each call short.
DLQ_BATCH = 100
# Dead letters one XRANGE step reads while collecting a partition's entry ids.
DEAD_PAGE = 1000
#: How many of P partitions a member of the given live set should hold: the dispatchers' own
#: rule (shardq.dispatcher.leases.fair_share), passed in by the facade (a layer above).
FairShare = Callable[[int, list[str], str], int]


# lease owners and the spread -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OwnerRow:
    partition: int
    owner: str | None
    token: int | None
    lease_age_s: float | None
    lease_ttl_s: float | None
    next_due_in_s: float | None
    malformed: dict[str, str] = field(default_factory=dict)


def owners(cache: QueueCache, queue: str) -> Plan[list[OwnerRow]]:
    """Lease owner, token, lease age and next due time of every partition."""
    pks = (yield from current_layout(cache, queue)).every()
    rows = []
    for pk, info in zip(pks, (yield from each([fleet.lease_info(pk) for pk in pks])), strict=True):
        now = info.now_ms
        rows.append(
            OwnerRow(
                partition=pk.fleet_id,
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


def live_dispatchers(queue: str) -> Plan[tuple[list[str], list[str]]]:
    """Dispatchers whose heartbeat has not expired (on the Redis clock of the registry's
    node), and those of them asked to drain."""
    now_ms = yield from one(fleet.clock(keys.dispatchers_key(queue)))
    live, draining = ok(
        (
            yield [
                fleet.live_members(keys.dispatchers_key(queue), now_ms),
                fleet.member_set(keys.drain_key(queue)),
            ]
        )
    )
    return sorted(live), sorted(d for d in draining if d in live)


def spread(
    cache: QueueCache, queue: str, fair_share: FairShare, rows: list[OwnerRow] | None = None
) -> Plan[Spread]:
    """The spread of the queue's partitions over its live dispatchers."""
    if rows is None:
        rows = yield from owners(cache, queue)
    live, draining = yield from live_dispatchers(queue)
    active = [m for m in live if m not in draining]
    total = len(rows)
    held = Counter(r.owner for r in rows if r.owner is not None)
    target = {m: fair_share(total, active, m) for m in live}
    return Spread(
        total, live, draining, dict(held), target, sum(1 for r in rows if r.owner is None)
    )


def excess_leases(
    cache: QueueCache, queue: str, fair_share: FairShare
) -> Plan[list[tuple[int, str]]]:
    """(partition, owner) leases to revoke so no dispatcher holds more than its fair share."""
    rows = yield from owners(cache, queue)
    s = yield from spread(cache, queue, fair_share, rows)
    out: list[tuple[int, str]] = []
    for owner, count in s.held.items():
        excess = count - s.target.get(owner, 0)
        if excess > 0:
            mine = sorted((r.partition for r in rows if r.owner == owner), reverse=True)
            out.extend((p, owner) for p in mine[:excess])
    return out


def revoke(cache: QueueCache, queue: str, leases: list[tuple[int, str]]) -> Plan[int]:
    """Revoke the given (partition, owner) leases (the owner is fenced off; a peer takes
    over) and drop them from the advisory owners hash.  Returns how many were revoked."""
    pks = (yield from current_layout(cache, queue)).fleet()
    calls: list[Call[Any]] = [fleet.lease_revoke(pks[p], owner) for p, owner in leases]
    results = ok((yield calls))
    done = [p for (p, _), revoked in zip(leases, results, strict=True) if revoked is True]
    if done:
        yield from one(fleet.owners_forget(queue, done))
    return len(done)


def request_drain(queue: str, dispatcher: str) -> Plan[None]:
    yield from one(fleet.request_drain(queue, dispatcher))


def cancel_drain(queue: str, dispatcher: str) -> Plan[None]:
    yield from one(fleet.cancel_drain(queue, dispatcher))


# stats ---------------------------------------------------------------------------------------


def stats_report(
    queue: str, first: list[PartitionSnapshot], snaps: list[PartitionSnapshot], window: float
) -> dict[str, Any]:
    """Per queue, node and partition: backlog, overdue, lag, pending, dead, rates, hot spots,
    from two snapshots of every partition ``window`` seconds apart (rates: enqueued +
    promoted per second)."""
    watch = metrics.RateWindow(window_seconds=window)
    # Both samples are added now, after the window: say when each was taken, or the rates
    # are counted over the microseconds between the two calls.
    watch.add(first, at=0.0)
    watch.add(snaps, at=window)
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
        "partitions": len(snaps),
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


# dead letters --------------------------------------------------------------------------------


def dead_letters(
    cache: QueueCache, queue: str, limit: int, partition: int | None
) -> Plan[list[DeadLetter]]:
    """Newest dead letters first, at most ``limit`` per partition read (of every partition, or
    of ``partition``, a fleet id)."""
    pks = (yield from current_layout(cache, queue)).fleet()
    if partition is not None and partition not in pks:
        raise ValueError(
            f"queue {queue!r} has no partition {keys.label_of_fleet_id(partition)} (a fleet id: "
            "keys.fleet_id(generation, p))"
        )
    wanted = [partition] if partition is not None else list(pks)
    pages = yield from each([inspection.dead_newest(pks[p], limit) for p in wanted])
    out = [d for page in pages for d in page]
    out.sort(key=lambda d: d.at_ms or 0, reverse=True)
    return out[:limit]


def _dead_ids(pk: keys.PartitionKeys, job_ids: set[str] | None) -> Plan[list[str]]:
    """Entry ids of a partition's dead stream (all, or those naming the given jobs)."""
    ids: list[str] = []
    start = "-"
    while True:
        batch = yield from one(inspection.dead_after(pk, start, DEAD_PAGE))
        if not batch:
            return ids
        ids += [d.entry_id for d in batch if job_ids is None or d.job_id in job_ids]
        ms, _, seq = batch[-1].entry_id.partition("-")
        start = f"{ms}-{int(seq or 0) + 1}"


def _by_partition(
    layout: Layout, job_ids: list[str] | None
) -> dict[keys.PartitionKeys, set[str] | None]:
    """The partitions to read and the jobs wanted in each (None: all): every live one, or
    each job's homes (while a resize runs, a dead letter is in either generation)."""
    if job_ids is None:
        return dict.fromkeys(layout.every())
    grouped: dict[keys.PartitionKeys, set[str] | None] = {}
    for job_id in job_ids:
        for pk in layout.homes(job_id):
            group = grouped.setdefault(pk, set())
            assert group is not None
            group.add(job_id)
    return grouped


def replay(cache: QueueCache, queue: str, job_ids: list[str] | None) -> Plan[tuple[int, int]]:
    """Move dead jobs back to the due set (due now, attempts reset): all, or the given jobs'.
    Returns (moved, skipped)."""
    layout = yield from current_layout(cache, queue)
    moved = skipped = 0
    for pk, wanted in _by_partition(layout, job_ids).items():
        ids = yield from _dead_ids(pk, wanted)
        for start in range(0, len(ids), DLQ_BATCH):
            done, left = yield from one(inspection.dlq_replay(pk, ids[start : start + DLQ_BATCH]))
            moved += done
            skipped += left
    return moved, skipped


def purge(cache: QueueCache, queue: str, job_ids: list[str] | None) -> Plan[int]:
    """Delete dead letters (all, or those of the given jobs) and their dead jobs."""
    layout = yield from current_layout(cache, queue)
    deleted = 0
    for pk, wanted in _by_partition(layout, job_ids).items():
        ids = yield from _dead_ids(pk, wanted)
        for start in range(0, len(ids), DLQ_BATCH):
            deleted += yield from one(inspection.dlq_purge(pk, ids[start : start + DLQ_BATCH]))
    return deleted


def dead_count(cache: QueueCache, queue: str) -> Plan[int]:
    pks = (yield from current_layout(cache, queue)).every()
    return sum((yield from each([inspection.dead_length(pk) for pk in pks])))
