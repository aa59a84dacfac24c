"""The inspector's operations on a queue as a whole, written once: pause and resume, the views
of its partitions and members, the partitions' snapshots, deleting it.  :class:`shardq.Inspector`
and :class:`shardq.AsyncInspector` drive them (and :mod:`shardq.admin`, the snapshots)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardq.errors import QueueInUseError
from shardq.plans import Plan, ok, one
from shardq.plans.listing import current_layout
from shardq.store import fleet, inspection, keys, queues
from shardq.store.meta import QueueCache
from shardq.store.numbers import Checked
from shardq.store.op import Call

SCAN_COUNT = 1000  # keys one SCAN step looks at per primary (deleting a queue)
NodeOf = Callable[[str], str]  # the host:port of the primary serving a key


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition now: counts per state, oldest due, lag, owner, node, paused."""

    partition: int
    node: str
    scheduled: int
    overdue: int
    ready: int
    running: int
    dead: int
    oldest_due_ms: int | None
    lag_seconds: float
    owner: str | None
    paused: bool
    counters: dict[str, int] = field(default_factory=dict)
    lanes: bool = False
    """Lanes on (priorities and tenants): ``ready`` includes the jobs waiting in the lane."""
    malformed: dict[str, str] = field(default_factory=dict)
    """Counters and figures that were not numbers in range (name -> raw value), left out."""


@dataclass(frozen=True, slots=True)
class Member:
    """A live worker or dispatcher of a queue."""

    role: str
    id: str
    instance: str
    heartbeat_expires_ms: int
    draining: bool
    partitions: list[int]  # dispatchers: partitions whose lease it holds
    inflight: int  # workers: deliveries it holds, over every partition
    malformed: dict[str, str] = field(default_factory=dict)
    """A heartbeat score that is not a time (e.g. ``+inf``, written by hand): shown as it is;
    such a member never expires by itself (the fleet's membership scripts prune it)."""


def pause(cache: QueueCache, queue: str, paused: bool) -> Plan[int]:
    """Pause or resume every partition; returns how many changed state."""
    pks = (yield from current_layout(cache, queue)).every()
    return sum(ok((yield [inspection.pause(pk, paused) for pk in pks])))


def partitions(cache: QueueCache, queue: str, node_of: NodeOf) -> Plan[list[PartitionInfo]]:
    """Every partition now: counts per state, oldest due, lag, owner, node (``node_of`` names
    the primary serving a key), paused."""
    pks = (yield from current_layout(cache, queue)).every()
    n = len(pks)
    calls: list[Call[Any]] = [inspection.partition_stats(pk, node_of(pk.due)) for pk in pks]
    calls += [fleet.lease_info(pk) for pk in pks]
    results = ok((yield calls))
    snaps, leases = results[:n], results[n:]
    return [
        PartitionInfo(
            partition=pk.fleet_id,
            node=s.node,
            scheduled=s.due,
            overdue=s.overdue,
            ready=s.ready,
            running=s.pending,
            dead=s.dead,
            oldest_due_ms=s.oldest_due_ms,
            lag_seconds=s.lag_seconds,
            owner=lease.owner,
            paused=s.paused,
            lanes=s.lanes,
            counters={k: v for k, v in s.counters.items() if k not in ("paused", "lanes")},
            malformed={**s.malformed, **lease.malformed},
        )
        for pk, s, lease in zip(pks, snaps, leases, strict=True)
    ]


def snapshots(
    cache: QueueCache, queue: str, node_of: NodeOf
) -> Plan[list[inspection.PartitionSnapshot]]:
    """A snapshot of every partition (the partition-stats script), in partition order."""
    pks = (yield from current_layout(cache, queue)).every()
    return ok((yield [inspection.partition_stats(pk, node_of(pk.due)) for pk in pks]))


_ROLES = (
    ("dispatcher", keys.dispatchers_key, keys.drain_key),
    ("worker", keys.workers_key, keys.workers_drain_key),
)


def members(cache: QueueCache, queue: str) -> Plan[list[Member]]:
    """Live dispatchers and workers (heartbeat not expired on the Redis clock): partitions
    held, deliveries in flight, heartbeat."""
    pks = (yield from current_layout(cache, queue)).every()
    # The registries and the clock their scores are written in: one node (the queue's slot).
    reads: list[Call[Any]] = [fleet.clock(keys.dispatchers_key(queue))]
    for _, members_key, drain_key in _ROLES:
        reads += [fleet.member_scores(members_key(queue)), fleet.member_set(drain_key(queue))]
    now_ms, *registries = ok((yield reads))
    leases = ok((yield [fleet.lease_info(pk) for pk in pks]))
    inflight = ok((yield [inspection.inflight(pk) for pk in pks]))
    held: dict[str, list[int]] = {}
    for pk, lease in zip(pks, leases, strict=True):
        if lease.owner:
            held.setdefault(lease.owner, []).append(pk.fleet_id)
    pending: dict[str, int] = {}
    for per_partition in inflight:
        for consumer, count in per_partition.items():
            pending[consumer] = pending.get(consumer, 0) + count
    out: list[Member] = []
    for i, (role, _, _) in enumerate(_ROLES):
        scores, draining = registries[2 * i], registries[2 * i + 1]
        for member_id, score in scores:
            c = Checked()
            expires = c.time_ms("heartbeat_expires_ms", score, None)
            if expires is not None and expires < now_ms:
                continue
            if expires is None and score < now_ms:
                continue  # (-inf: long expired)
            out.append(
                Member(
                    role=role,
                    id=member_id,
                    instance=member_id.partition(":")[2].rpartition("#")[0] or member_id,
                    heartbeat_expires_ms=expires if expires is not None else 0,
                    malformed=c.bad,
                    draining=member_id in draining,
                    partitions=held.get(member_id, []) if role == "dispatcher" else [],
                    inflight=pending.get(member_id, 0) if role == "worker" else 0,
                )
            )
    return out


# deleting a queue ----------------------------------------------------------------------------


def delete_queue(
    cache: QueueCache, queue: str, force: bool, routes: Callable[[], list[str]]
) -> Plan[int]:
    """Delete the queue and every key of it (:mod:`shardq.store.keys` names them all); returns
    how many keys were deleted.  ``routes`` gives a route key per primary (SCAN).

    The order leaves nothing runnable half-deleted, and a deletion cut short (a failover that
    outlasts the retries) can be run again to finish it:

    1. refused while workers or dispatchers are live (unless ``force``);
    2. every partition paused: nothing is promoted or delivered while the keys go;
    3. each partition's keys in one UNLINK (atomic: a partition is there, paused, or gone);
    4. what only SCAN finds, on every primary: the partitions' idempotency keys (else a queue
       created again under the name would answer an old key with a job that is gone) and the
       limits' state (a limit removed earlier keeps its state until it expires);
    5. the queue's own keys, then its registry entry, then its meta last: while the meta is
       there the partition count is known, so running the deletion again finishes it.
    """
    return _delete_queue(cache, queue, force, routes)


def _delete_queue(
    cache: QueueCache, queue: str, force: bool, routes: Callable[[], list[str]]
) -> Plan[int]:
    layout = yield from current_layout(cache, queue)
    live = yield from members(cache, queue)
    if live and not force:
        raise QueueInUseError(
            f"queue {queue!r} has {len(live)} live workers/dispatchers: stop them first (or force)"
        )
    yield from pause(cache, queue, True)
    pks = layout.every()
    deleted: int = sum(ok((yield [queues.unlink(pk.all()) for pk in pks])))
    deleted += yield from _delete_tagged(queue, routes())
    meta, *own = keys.queue_keys(queue)
    deleted += yield from one(queues.unlink(own))
    yield from one(queues.unregister(queue))
    deleted += yield from one(queues.unlink([meta]))
    cache.forget(queue)
    return deleted


def _delete_tagged(queue: str, routes: list[str]) -> Plan[int]:
    """SCAN every primary for keys with the queue's partition or limit tags and UNLINK them,
    one call per slot; returns how many were deleted."""
    pattern = keys.queue_tags_pattern(queue)
    cursors = dict.fromkeys(routes, "0")
    deleted = 0
    while cursors:
        steps = ok((yield [queues.scan(r, c, pattern, SCAN_COUNT) for r, c in cursors.items()]))
        by_slot: dict[int, list[str]] = {}
        following: dict[str, str] = {}
        for route, (cursor, found) in zip(cursors, steps, strict=True):
            for name in found:
                if keys.tag_of_queue(queue, name):
                    by_slot.setdefault(keys.slot_of(name), []).append(name)
            if cursor != "0":
                following[route] = cursor
        if by_slot:
            deleted += sum(ok((yield [queues.unlink(names) for names in by_slot.values()])))
        cursors = following
    return deleted
