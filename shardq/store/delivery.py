"""Worker operations: fetch, ack, fail, touch (heartbeat), reclaim, retire and prune consumers.

Replies are parsed into small named tuples; the raw job id bytes travel with each delivery so
settling a job names exactly the hash field the script read (a job id is opaque to the store).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from shardq.store import keys, numbers
from shardq.store.codes import check
from shardq.store.op import Command, Op, cmd, op

# Most items one call carries (each script's ``Max ARGV`` header line: the function refuses
# more, and shardq.store.op.op refuses to build a longer call).  Callers split what they hold.
MAX_ACK = 1000  # entries per ack (lua/ack-4.lua)
MAX_TOUCH = 1000  # entries per touch (lua/touch-3.lua)
MAX_LIVE = 1000  # live workers named to reclaim (lua/reclaim-7.lua)


class Delivered(NamedTuple):
    """One job handed to this worker by fetch or reclaim."""

    entry_id: bytes
    raw_id: bytes
    due_ms: int | None
    attempt: int
    body: bytes
    deliveries: int
    reserved: bool = False
    """A rate limit deferred it to a start reserved for it: run it without asking again."""


@dataclass(frozen=True, slots=True)
class Batch:
    """What one fetch or reclaim call handed over, with the Redis clock at that moment."""

    now_ms: int
    jobs: list[Delivered]
    next_due_ms: int | None = None
    """A read that promoted first (``fetch(..., promote=True)``): the partition's earliest
    waiting job's due ms after it, :data:`NONE_WAITS` when none waits; None when not known
    (not asked, paused, lanes on, or a reclaim)."""
    due_soon: int | None = None
    """With :attr:`next_due_ms` (not :data:`NONE_WAITS`): how many waiting jobs are due by it
    plus the read's ``horizon_ms``, what the partition's next read will find; 0 when none
    waits; None when not known."""
    more: bool = False
    """A fetch that stopped after reading past its bound of entries without a job (cancelled
    after promotion, malformed: lua/fetch-9.lua) with entries left: read again at once."""


#: ``Batch.next_due_ms`` of a partition with no job waiting.
NONE_WAITS = -1


def _due(value: Any) -> int | None:
    """A ready entry's due ms; None when absent or not a time (written by hand: the job still
    runs, with no lateness measured)."""
    try:
        return numbers.time_ms(value, what="due ms")
    except numbers.BadNumber:
        return None


#: The attempt of a delivery whose envelope's attempt is not a count (the worker dead-letters
#: it as malformed rather than fail the whole batch: the other jobs of it are fine).
BAD_ATTEMPT = -1


def _attempt(value: Any) -> int:
    try:
        return numbers.integer(value, 0, what="attempt")
    except numbers.BadNumber:
        return BAD_ATTEMPT


def _parse_batch(reply: Any, reclaimed: bool) -> Batch:
    r = check(reply)
    next_due: int | None = None
    due_soon: int | None = None
    more = False
    if not reclaimed:  # a fetch's next fields: the next due time (-2: not known), due by then,
        # and whether it stopped at its bound of entries without a job
        head = numbers.integer(r[1], -2, what="next due ms")
        next_due = None if head == -2 else head
        soon = numbers.integer(r[2], -1, what="due soon")
        due_soon = None if next_due is None or soon < 0 else soon
        more = r[3] == 1
        r = [r[0], *r[4:]]
    jobs = [
        Delivered(
            r[i],
            r[i + 1],
            _due(r[i + 2]),
            _attempt(r[i + 3]),
            r[i + 4],
            numbers.integer(r[i + 5], 0, what="deliveries") if reclaimed else 1,
            not reclaimed and r[i + 5] == 1,
        )
        for i in range(1, len(r) - 5, 6)
    ]
    return Batch(numbers.integer(r[0], 0, what="now ms"), jobs, next_due, due_soon, more)


def _parse_fetch(reply: Any) -> Batch:
    return _parse_batch(reply, reclaimed=False)


def _parse_reclaim(reply: Any) -> Batch:
    return _parse_batch(reply, reclaimed=True)


def _worker_keys(pk: keys.PartitionKeys) -> list[str]:
    return [pk.ready, pk.jobs, pk.dead, pk.errors, pk.stats]


def _ack_pairs(entries: Iterable[tuple[bytes, bytes]]) -> list[Any]:
    argv: list[Any] = []
    for eid, raw_id in entries:
        argv += (eid, raw_id)
    if len(argv) > 2 * MAX_ACK:
        raise ValueError(f"at most {MAX_ACK} acks per call, got {len(argv) // 2}")
    return argv


def fetch(
    pk: keys.PartitionKeys,
    consumer: str,
    count: int,
    acks: Iterable[tuple[bytes, bytes]] = (),
    *,
    promote: bool = False,
    horizon_ms: int = 0,
) -> Op[Batch]:
    """Up to ``count`` new ready jobs of one partition, marked active, with their bodies.
    ``acks``: (entry id, job id) of this partition's jobs whose handlers succeeded, settled in
    the same call first, as :func:`ack` would (at most ``MAX_ACK``).  ``promote``: move the
    partition's due jobs to its ready stream first (up to ``count``, not with lanes on nor
    paused) and say when its next job is due (``Batch.next_due_ms``) and how many are due by
    then plus ``horizon_ms`` (``Batch.due_soon``)."""
    argv = [keys.WORKER_GROUP, consumer, count, "1" if promote else "0", horizon_ms]
    return op(
        "fetch",
        [*_worker_keys(pk), pk.lane, pk.vtime, pk.ctl, pk.due],
        [*argv, *_ack_pairs(acks)],
        _parse_fetch,
    )


def ack(pk: keys.PartitionKeys, entries: Iterable[tuple[bytes, bytes]]) -> Op[int]:
    """Settle jobs whose handlers succeeded; the op returns how many were still pending (an
    entry settled meanwhile by another worker that reclaimed it is not counted).  The stream
    entries stay until the dispatcher's trim (see lua/ack-4.lua)."""
    argv: list[Any] = [keys.WORKER_GROUP, *_ack_pairs(entries)]
    return op("ack", [pk.ready, pk.jobs, pk.errors, pk.stats], argv, lambda r: int(check(r)[0]))


class Failed(NamedTuple):
    """How a failure settled: ``retry`` (back in due at ``at_ms``), ``dead``, or ``gone`` (the
    delivery was no longer this worker's: reclaimed by another, or the job was cancelled)."""

    outcome: Literal["retry", "dead", "gone"]
    at_ms: int | None


def _parse_fail(reply: Any) -> Failed:
    r = check(reply)
    if r[0] == 1:
        return Failed("retry", numbers.integer(r[1], what="retry at ms"))
    if r[0] == 2:
        return Failed("dead", numbers.integer(r[1], what="dead at ms"))
    return Failed("gone", None)


def fail(
    pk: keys.PartitionKeys,
    entry_id: bytes,
    raw_id: bytes,
    delay_ms: int,
    error: str,
    keeps_result: bool = False,
    workflow_ref: str = "",
) -> Op[Failed]:
    """Settle a failed job: back to due after ``delay_ms``, or dead when ``delay_ms`` < 0.
    ``keeps_result``: the job keeps its result, so a producer waiting for it is told when it
    ends dead (on its result channel).  ``workflow_ref``: ``<batch id>|<index>`` of a batch
    child or chain step, whose death is written into the partition's outbox with it."""
    channel = pk.result(raw_id.decode(errors="replace")) if keeps_result else ""
    return op(
        "fail",
        [pk.ready, pk.jobs, pk.due, pk.dead, pk.errors, pk.stats, pk.outbox],
        [keys.WORKER_GROUP, entry_id, raw_id, delay_ms, error, pk.due_hint, channel, workflow_ref],
        _parse_fail,
    )


class Touched(NamedTuple):
    """A heartbeat's answer: entries now held by another consumer, and the job ids of the
    deliveries still this worker's whose job a running cancel removed (lua/touch-3.lua)."""

    lost: list[bytes]
    cancelled: list[bytes]


def touch(
    pk: keys.PartitionKeys,
    consumer: str,
    held: Iterable[tuple[bytes, bytes]],
    *,
    look: bool = False,
) -> Op[Touched]:
    """Heartbeat running deliveries, (entry id, job id) each (see :class:`Touched`).  ``look``:
    a cancel's publish named one of them, so their envelopes are looked for whatever the
    partition's cancels set holds (else only while it is not empty)."""

    def parse(reply: Any) -> Touched:
        lost, cancelled = check(reply)
        return Touched(list(lost or []), list(cancelled or []))

    argv: list[Any] = [keys.WORKER_GROUP, consumer, "1" if look else "0"]
    for eid, raw_id in held:
        argv += (eid, raw_id)
    return op("touch", [pk.ready, pk.cancels, pk.jobs], argv, parse)


def reclaim(
    pk: keys.PartitionKeys,
    consumer: str,
    *,
    visibility_ms: int,
    orphan_idle_ms: int,
    live: Iterable[str],
    count: int,
    max_deliveries: int,
) -> Op[Batch]:
    """Take over deliveries whose worker is gone (not in ``live`` and idle past
    ``orphan_idle_ms``) or that are idle past the visibility timeout whoever holds them.

    A fleet of more than :data:`MAX_LIVE` workers cannot be named in one call: its deliveries
    are then taken only past the visibility timeout (always safe, only slower)."""
    live = list(live)
    if len(live) > MAX_LIVE:
        live, orphan_idle_ms = [], visibility_ms
    return op(
        "reclaim",
        [*_worker_keys(pk), pk.ctl, pk.outbox],
        [
            keys.WORKER_GROUP,
            consumer,
            visibility_ms,
            count,
            max_deliveries,
            orphan_idle_ms,
            pk.due_hint,
            *live,
        ],
        _parse_reclaim,
    )


def reclaimable(pk: keys.PartitionKeys, idle_ms: int) -> Command[bool]:
    """Whether a delivery of the partition has been idle at least ``idle_ms`` (XPENDING with
    IDLE, one entry): only such a partition can have a delivery for :func:`reclaim` to take, so
    the recoverer asks this first and sends the script only there.  A plain command, a tenth of
    the script's cost to Redis; the reply is read raw (in a batch, as the transport sends
    them), an empty list when there is none.  A stream or group that does not exist yet is an
    error reply: the caller sends the reclaim anyway, which handles both."""
    return cmd("XPENDING", pk.ready, keys.WORKER_GROUP, "IDLE", idle_ms, "-", "+", 1, parse=bool)


def retire(pk: keys.PartitionKeys, consumer: str) -> Op[bool]:
    """Remove a consumer from the group if it holds nothing; True when removed."""
    return op("retire", [pk.ready], [keys.WORKER_GROUP, consumer], lambda r: check(r)[0] == 1)


def prune_consumers(pk: keys.PartitionKeys, idle_ms: int) -> Op[int]:
    """Remove consumers that hold nothing and were idle this long; the op returns how many."""
    return op(
        "prune-consumers", [pk.ready], [keys.WORKER_GROUP, idle_ms], lambda r: int(check(r)[0])
    )
