"""Read-only views and operator actions on partitions: stats snapshots, the dead-letter stream."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from shardq.connection import as_text
from shardq.jobs import MAX_ATTEMPT
from shardq.store import keys
from shardq.store.codes import check
from shardq.store.numbers import BadNumber, Checked, integer, real
from shardq.store.op import Command, Op, cmd, op


@dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    """One partition at one instant (from the partition-stats script); ``partition`` is its
    fleet id (:func:`keys.fleet_id`: the number leases and the owners hash know it by; its name
    is :func:`keys.label_of_fleet_id`)."""

    queue: str
    partition: int
    node: str
    now_ms: int
    due: int
    overdue: int
    oldest_due_ms: int | None
    ready: int
    pending: int
    oldest_pending_idle_ms: int | None
    dead: int
    consumers: int
    counters: dict[str, int] = field(default_factory=dict)
    malformed: dict[str, str] = field(default_factory=dict)
    """Figures and counters that were not numbers in range (name -> raw value): left out of
    ``counters`` (figures read as 0 or None) and shown as they are."""

    @property
    def lag_seconds(self) -> float:
        """Age of the oldest overdue job (promotion lag); 0 when nothing is overdue."""
        if not self.overdue or self.oldest_due_ms is None:
            return 0.0
        return max(0.0, (self.now_ms - self.oldest_due_ms) / 1000.0)

    @property
    def paused(self) -> bool:
        """Paused by an operator (``shardq queue pause``): nothing promoted or delivered."""
        return self.counters.get("paused", 0) == 1

    @property
    def lanes(self) -> bool:
        """Lanes on (priorities and tenants, ``shardq queue lanes``): due jobs wait in the lane."""
        return self.counters.get("lanes", 0) == 1

    @property
    def oldest_pending_seconds(self) -> float:
        return (self.oldest_pending_idle_ms or 0) / 1000.0


def _int(value: Any) -> int:
    """A count or time the scripts computed (never a stored string)."""
    return integer(value)


def _parse_snapshot(pk: keys.PartitionKeys, node: str, reply: Any) -> PartitionSnapshot:
    r = check(reply)
    c = Checked()
    raw = r[9] if isinstance(r[9], list) else []
    counters: dict[str, int] = {}
    for i in range(0, len(raw) - 1, 2):
        name = as_text(raw[i])
        value = c.integer("counter " + name, raw[i + 1], None, 0)
        if value is not None:
            counters[name] = value
    idle = None if r[6] == -1 else c.integer("oldest_pending_idle_ms", r[6], None, 0)
    return PartitionSnapshot(
        queue=pk.queue,
        partition=pk.fleet_id,
        node=node,
        now_ms=c.integer("now_ms", r[0], 0, 0),
        due=c.count("due", r[1]),
        overdue=c.count("overdue", r[2]),
        oldest_due_ms=c.optional_time_ms("oldest_due_ms", r[3]),
        ready=c.count("ready", r[4]),
        pending=c.count("pending", r[5]),
        oldest_pending_idle_ms=idle,
        dead=c.count("dead", r[7]),
        consumers=c.count("consumers", r[8]),
        counters=counters,
        malformed=c.bad,
    )


def partition_stats(pk: keys.PartitionKeys, node: str) -> Op[PartitionSnapshot]:
    """A consistent snapshot of one partition (bounded: O(1) and O(log n) reads only)."""
    return op(
        "partition-stats",
        [pk.due, pk.ready, pk.dead, pk.stats, pk.lane, pk.ctl],
        [keys.WORKER_GROUP],
        lambda reply: _parse_snapshot(pk, node, reply),
    )


# The dead-letter stream, read with plain commands (the operator's `shardq dlq`) ------------


@dataclass(frozen=True, slots=True)
class DeadLetter:
    partition: int  # fleet id (keys.fleet_id)
    entry_id: str
    job_id: str | None
    attempt: int | None
    error: str
    at_ms: int | None
    raw: str | None
    malformed: dict[str, str] = field(default_factory=dict)
    """Fields that are not numbers in range (name -> raw value), read as None."""


def _dead_letter(partition: int, entry: Any) -> DeadLetter:
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


def _dead_letters(pk: keys.PartitionKeys) -> Any:
    return lambda reply: [_dead_letter(pk.fleet_id, e) for e in reply or []]


def dead_newest(pk: keys.PartitionKeys, count: int) -> Command[list[DeadLetter]]:
    """The partition's newest ``count`` dead letters, newest first."""
    return cmd("XREVRANGE", pk.dead, "+", "-", "COUNT", count, parse=_dead_letters(pk))


def dead_after(pk: keys.PartitionKeys, start: str, count: int) -> Command[list[DeadLetter]]:
    """Up to ``count`` dead letters from entry id ``start`` (inclusive; ``-``: the oldest)."""
    return cmd("XRANGE", pk.dead, start, "+", "COUNT", count, parse=_dead_letters(pk))


def dead_length(pk: keys.PartitionKeys) -> Command[int]:
    return cmd("XLEN", pk.dead, parse=int)


def backlog_counts(pk: keys.PartitionKeys) -> list[Command[int]]:
    """ZCARD of the due set, XLEN of the ready and dead streams: what a slot move serialises
    (shardq.admin.slots), one command per key so a key already moved answers alone (ASK)."""
    return [
        cmd("ZCARD", pk.due, parse=int),
        cmd("XLEN", pk.ready, parse=int),
        cmd("XLEN", pk.dead, parse=int),
    ]


def memory_usage(key: str) -> Command[int]:
    """MEMORY USAGE of one key, any key of a slot (0 when it is gone): what moving the slot
    carries, for the placement planner (shardq.admin.slots.slot_usage)."""
    return cmd("MEMORY", "USAGE", key, route=key, parse=lambda r: int(r or 0))


def dlq_replay(pk: keys.PartitionKeys, entry_ids: list[str]) -> Op[tuple[int, int]]:
    """Move dead jobs back to due (due now, attempts reset); the op returns (replayed, skipped)."""

    def parse(reply: Any) -> tuple[int, int]:
        r = check(reply)
        return int(r[0]), int(r[1])

    return op(
        "dlq-replay",
        [pk.dead, pk.jobs, pk.due, pk.errors, pk.stats, pk.ctl],
        [pk.due_hint, *entry_ids],
        parse,
    )


def dlq_purge(pk: keys.PartitionKeys, entry_ids: list[str]) -> Op[int]:
    """Delete dead letters and the dead jobs they name; the op returns how many were deleted."""
    return op(
        "dlq-purge", [pk.dead, pk.jobs, pk.errors, pk.ctl], entry_ids, lambda r: int(check(r)[0])
    )


# Listing and control (shardq.inspector) -------------------------------------------------------


#: Listing cursors send a page's last score back, and the list scripts take -1e18..1e18: a
#: score beyond (+-inf, written by hand) is listed as this bound, so paging goes on past it;
#: the job's due time then shows as malformed (inspector._summary).
SCORE_BOUND = 10**18


def _score(raw: Any) -> int:
    """A due-set score as an int, for ordering and cursors (see :data:`SCORE_BOUND`)."""
    try:
        return math.floor(real(raw, -SCORE_BOUND, SCORE_BOUND, what="score"))
    except BadNumber:
        return -SCORE_BOUND if as_text(raw).lstrip().startswith("-") else SCORE_BOUND


DueRow = tuple[int, str, bytes | None, str | None]


def list_due(
    pk: keys.PartitionKeys, after_score: int, after_member: str, upto_ms: int, count: int
) -> Op[tuple[int, list[DueRow]]]:
    """(now ms, [(due ms, job id, envelope, last error)]) of the due set's jobs after (score,
    member): scheduled ones, and retrying ones (those with a last error)."""

    def parse(reply: Any) -> tuple[int, list[DueRow]]:
        r = check(reply)
        rows = [
            (
                _score(r[i]),
                as_text(r[i + 1]),
                r[i + 2] or None,
                as_text(r[i + 3]) if r[i + 3] else None,
            )
            for i in range(1, len(r) - 3, 4)
        ]
        return _int(r[0]), rows

    return op(
        "list-due", [pk.due, pk.jobs, pk.errors], [after_score, after_member, upto_ms, count], parse
    )


#: The ms part of the synthetic entry ids list-ready gives jobs waiting in a lane.
LANE_ENTRY_MS = 9999999999999

#: The fields of a listed row that were not numbers in range (name -> raw value shown).
Malformed = dict[str, str]
ReadyRow = tuple[str, str | None, int | None, bytes | None, Malformed]


def list_ready(pk: keys.PartitionKeys, after_id: str, count: int) -> Op[tuple[int, list[ReadyRow]]]:
    """(now ms, [(entry id, job id, due ms, envelope, malformed)]) of ready entries not yet
    delivered, then of the jobs in the lane (entry ids from :data:`LANE_ENTRY_MS` on)."""

    def parse(reply: Any) -> tuple[int, list[ReadyRow]]:
        r = check(reply)
        rows: list[ReadyRow] = []
        for i in range(1, len(r) - 3, 4):
            c = Checked()
            due = r[i + 2]
            rows.append(
                (
                    as_text(r[i]),
                    as_text(r[i + 1]) if r[i + 1] else None,
                    c.time_ms("due_ms", due) if due not in (None, b"", False) else None,
                    r[i + 3] or None,
                    c.bad,
                )
            )
        return _int(r[0]), rows

    return op(
        "list-ready", [pk.ready, pk.jobs, pk.lane], [keys.WORKER_GROUP, after_id, count], parse
    )


RunningRow = tuple[str, str | None, str, int, int, bytes | None]


def list_running(
    pk: keys.PartitionKeys, after_id: str, count: int
) -> Op[tuple[int, list[RunningRow]]]:
    """(now ms, [(entry id, job id, worker, idle ms, deliveries, envelope)]) of deliveries
    (idle time and delivery count come from XPENDING: Redis' own numbers)."""

    def parse(reply: Any) -> tuple[int, list[RunningRow]]:
        r = check(reply)
        rows: list[RunningRow] = []
        for i in range(1, len(r) - 5, 6):
            rows.append(
                (
                    as_text(r[i]),
                    as_text(r[i + 1]) if r[i + 1] else None,
                    as_text(r[i + 2]),
                    integer(r[i + 3], 0, what="idle ms"),
                    integer(r[i + 4], 0, what="deliveries"),
                    r[i + 5] or None,
                )
            )
        return _int(r[0]), rows

    return op("list-running", [pk.ready, pk.jobs], [keys.WORKER_GROUP, after_id, count], parse)


def list_dead(
    pk: keys.PartitionKeys, after_id: str, count: int
) -> Op[tuple[int, list[tuple[str, dict[str, str], bytes | None]]]]:
    """(now ms, [(entry id, letter fields, envelope)]) of dead letters after ``after_id``."""

    def parse(reply: Any) -> tuple[int, list[tuple[str, dict[str, str], bytes | None]]]:
        r = check(reply)
        rows = []
        for i in range(1, len(r) - 2, 3):
            f = r[i + 1] or []
            fields = {as_text(f[j]): as_text(f[j + 1]) for j in range(0, len(f) - 1, 2)}
            rows.append((as_text(r[i]), fields, r[i + 2] or None))
        return _int(r[0]), rows

    return op("list-dead", [pk.dead, pk.jobs], [after_id, count], parse)


RetryRow = tuple[str, int | None, str, bytes, Malformed]


def list_retrying(
    pk: keys.PartitionKeys, cursor: str, count: int
) -> Op[tuple[int, str, list[RetryRow]]]:
    """(now ms, next HSCAN cursor, [(job id, due ms, last error, envelope, malformed)])."""

    def parse(reply: Any) -> tuple[int, str, list[RetryRow]]:
        r = check(reply)
        raw = r[2] or []
        rows: list[RetryRow] = []
        for i in range(0, len(raw) - 3, 4):
            c = Checked()
            due = c.time_ms("due_ms", raw[i + 1])
            rows.append((as_text(raw[i]), due, as_text(raw[i + 2]), raw[i + 3], c.bad))
        return _int(r[0]), as_text(r[1]), rows

    return op("list-retrying", [pk.errors, pk.jobs, pk.due], [cursor, count], parse)


def pause(pk: keys.PartitionKeys, paused: bool) -> Op[bool]:
    """Pause or resume one partition; the op returns whether its state changed."""
    return op(
        "pause",
        [pk.ctl, pk.stats],
        ["1" if paused else "0", pk.due_hint, pk.ready_hint],
        lambda r: check(r)[0] == 1,
    )


def lanes(pk: keys.PartitionKeys, on: bool) -> Op[bool]:
    """Turn one partition's lanes on or off; the op returns whether its state changed."""
    return op(
        "lanes", [pk.ctl, pk.stats, pk.lane], ["1" if on else "0"], lambda r: check(r)[0] == 1
    )


def control_init(pk: keys.PartitionKeys) -> Op[bool]:
    """Start using the partition's control hash for its flags (moving those a queue of layout
    < 4 kept in its stats hash); the op returns whether it did now (False: it already did)."""
    return op("control-init", [pk.ctl, pk.stats], [], lambda r: check(r)[0] == 1)


def run_now(pk: keys.PartitionKeys, job_id: str) -> Op[str]:
    """Make a scheduled or dead job due now; the op returns what it was ('scheduled', 'dead',
    or 'ready' when it was already promoted)."""
    return op(
        "run-now",
        [pk.jobs, pk.due, pk.errors, pk.stats, pk.ctl, pk.moving],
        [job_id, pk.due_hint],
        lambda r: as_text(check(r)[1]),
    )


def empty_due(pk: keys.PartitionKeys, count: int) -> Op[int]:
    """Delete up to ``count`` scheduled jobs, earliest first; the op returns how many."""
    return op(
        "empty-due", [pk.due, pk.jobs, pk.errors, pk.ctl], [count], lambda r: int(check(r)[0])
    )


def inflight(pk: keys.PartitionKeys) -> Op[dict[str, int]]:
    """Deliveries each worker holds in this partition."""

    def parse(reply: Any) -> dict[str, int]:
        r = check(reply)
        return {as_text(r[i]): integer(r[i + 1], 0) for i in range(0, len(r) - 1, 2)}

    return op("inflight", [pk.ready], [keys.WORKER_GROUP], parse)
