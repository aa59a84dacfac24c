"""The calls of a resize (shardq.admin.resize, docs/design/resize.md): sealing a partition of
the generation it empties, taking its waiting work out in batches and storing them in the new
generation, what a partition still holds, the idempotency records, the meta and the resize's
own record.  Every call touches one slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardq.connection import as_text
from shardq.store import keys, numbers
from shardq.store.codes import check
from shardq.store.meta import (
    COMING_FIELD,
    DRAINING_FIELD,
    GENERATION_FIELD,
    GENERATION_PARTITIONS_FIELD,
    RESIZED_MARKER,
)
from shardq.store.op import Command, Op, cmd, op

#: Records in one take (lua/resize-take-10.lua): each take and put stays well under a
#: millisecond of Redis time.
BATCH = 200
#: The meta's field holding the highest generation any resize of the queue has used (an
#: aborted resize's generation is never used again: its sealed control hashes stay).
LAST_GENERATION_FIELD = "generation:last"


@dataclass(frozen=True, slots=True)
class LeaseKeys:
    """The resize driver's lease (the dispatchers' lease scripts, lua/lease-*.lua)."""

    lease: str
    fence: str


def lease_keys(queue: str) -> LeaseKeys:
    return LeaseKeys(keys.resize_lease_key(queue), keys.resize_fence_key(queue))


def seal(pk: keys.PartitionKeys, to: tuple[int, int] | None) -> Op[bool]:
    """Seal a partition, its jobs going to generation ``to`` = (generation, partitions), or
    unseal it (``to`` None: an abort moves the jobs back)."""
    target = "" if to is None else f"{to[0]}:{to[1]}"
    return op("resize-seal", [pk.ctl, pk.stats], [target], lambda r: check(r)[0] == 1)


@dataclass(frozen=True, slots=True)
class Record:
    """One thing a take moved: its routing key (job id or schedule name) and the JSON the
    put stores it from."""

    key: str
    raw: bytes


@dataclass(frozen=True, slots=True)
class Taken:
    """A batch taken out of a partition (the same one again while it is not acked)."""

    batch: str | None
    records: list[Record]


def _parse_taken(reply: Any) -> Taken:
    r = check(reply)
    batch = None if r[0] in (None, False) else as_text(r[0])
    count = numbers.integer(r[1], 0, 10**6, what="count")
    flat = r[2 : 2 + 2 * count]
    records = [Record(as_text(flat[i]), _raw(flat[i + 1])) for i in range(0, len(flat), 2)]
    return Taken(batch, records)


def _raw(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def take(pk: keys.PartitionKeys, limit: int = BATCH) -> Op[Taken]:
    """Take the next batch out of a sealed partition (or the one taken and not acked)."""
    return op(
        "resize-take",
        [
            *(pk.due, pk.jobs, pk.errors, pk.lane, pk.moving, pk.dead),
            *(pk.schedules, pk.schedule_next, pk.ctl, pk.schedule_state),
        ],
        [limit, pk.tag + "#"],
        _parse_taken,
    )


def put(pk: keys.PartitionKeys, batch: str, records: list[Record]) -> Op[int]:
    """Store records of one batch in partition ``pk`` (a resend stores nothing twice); the op
    returns how many were stored now."""
    return op(
        "resize-put",
        [
            *(pk.due, pk.jobs, pk.errors, pk.inbound, pk.dead),
            *(pk.schedules, pk.schedule_next, pk.schedule_state, pk.stats),
        ],
        [batch, pk.due_hint, *(r.raw for r in records)],
        lambda r: int(check(r)[1]),
    )


def ack(pk: keys.PartitionKeys, batch: str) -> Op[bool]:
    """Drop a batch every target stored; False when it was dropped before."""
    return op("resize-ack", [pk.moving], [batch], lambda r: check(r)[0] == 1)


@dataclass(frozen=True, slots=True)
class Left:
    """What a partition a resize empties still holds."""

    due: int
    lane: int
    moving: int
    dead: int
    schedules: int
    jobs: int  # envelopes: ready and running jobs (waiting ones are in due)
    undelivered: int
    pending: int
    sealed: str
    outbox: int = 0  # workflow children's ends the partition's dispatcher has still to relay

    @property
    def waiting(self) -> int:
        """What the resize itself moves (the rest, workers drain in place)."""
        return self.due + self.lane + self.moving + self.dead + self.schedules

    @property
    def empty(self) -> bool:
        return (
            self.waiting == 0
            and self.jobs == 0
            and self.undelivered == 0
            and not self.pending
            and not self.outbox
        )


def _parse_left(reply: Any) -> Left:
    r = check(reply)
    n = [numbers.integer(v, 0, what="count") for v in r[:8]]
    outbox = numbers.integer(r[9], 0, what="count") if len(r) > 9 else 0
    return Left(n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7], as_text(r[8]), outbox)


def left(pk: keys.PartitionKeys) -> Op[Left]:
    return op(
        "resize-left",
        [pk.due, pk.lane, pk.moving, pk.dead, pk.schedules, pk.jobs, pk.ready, pk.ctl, pk.outbox],
        [],
        _parse_left,
    )


def retire(pk: keys.PartitionKeys) -> Command[int]:
    """Delete an emptied partition's keys but its control hash, which stays sealed: the
    tombstone that sends a process with an old meta on to the new generation."""
    return cmd("UNLINK", *(k for k in pk.all() if k != pk.ctl), parse=int)


# idempotency records and kept results: moved one by one (each a string of its own), copy first


def idem_pattern(queue: str, generation: int, kind: str = keys.IDEM_KIND) -> str:
    """SCAN MATCH for one generation's idempotency keys (or kept results: ``kind``
    ``result``); generation 0's tags start with a digit after ``sq:<queue>:``, a resize's
    with ``g<generation>.``."""
    head = keys.generation_prefix(queue, generation)
    first = "[0-9]" if generation == 0 else ""
    return "{" + head + first + "*}:" + kind + ":*"


def idem_read(name: str) -> Command[str | None]:
    """An idempotency record's job id, or a kept result (None: it expired meanwhile)."""
    return cmd("GET", name, parse=lambda r: None if r is None else as_text(r))


def idem_ttl(name: str) -> Command[int]:
    """An idempotency record's remaining ms (negative: gone, or no expiry)."""
    return cmd("PTTL", name, parse=int)


def idem_copy(name: str, job_id: str, ttl_ms: int) -> Command[bool]:
    """Write the record in the new generation unless one is there (a producer's, newer)."""
    return cmd("SET", name, job_id, "PX", max(ttl_ms, 1), "NX", parse=lambda r: r is not None)


def idem_key_of(name: str, kind: str = keys.IDEM_KIND) -> str | None:
    """The idempotency key of an idempotency record's key name (the job id of a kept
    result's: ``kind`` ``result``)."""
    marker = "}:" + kind + ":"
    at = name.find(marker)
    return None if at == -1 else name[at + len(marker) :]


# the meta and the resize's own record -------------------------------------------------------


def announce_meta(queue: str, new: tuple[int, int]) -> Command[int]:
    """Name the generation the resize switches to next: every worker and dispatcher serves it
    from its next read of the meta on, before any producer routes there."""
    return cmd("HSET", keys.queue_meta_key(queue), COMING_FIELD, f"{new[0]}:{new[1]}", parse=int)


def begin_meta(queue: str, new: tuple[int, int], old: tuple[int, int]) -> Command[int]:
    """Switch the meta to the new generation with the old one draining (the count goes out of
    ``partitions`` for good: releases before resizing refuse the queue, see
    :data:`shardq.store.meta.RESIZED_MARKER`).  The fleet served both already (the old one
    active, the new one coming), so the switch changes no process's partitions."""
    return cmd(
        "HSET",
        keys.queue_meta_key(queue),
        *(GENERATION_FIELD, new[0], GENERATION_PARTITIONS_FIELD, new[1]),
        *(DRAINING_FIELD, f"{old[0]}:{old[1]}", "partitions", RESIZED_MARKER),
        *(LAST_GENERATION_FIELD, max(new[0], old[0]), COMING_FIELD, ""),
        parse=int,
    )


def end_meta(queue: str) -> Command[int]:
    """The old generation is empty: nothing drains any more (the field emptied, not deleted:
    no role may delete a meta field, which could take a queue's partition count away)."""
    return cmd("HSET", keys.queue_meta_key(queue), DRAINING_FIELD, "", parse=int)


def meta_field(queue: str, field: str) -> Command[str | None]:
    return cmd(
        "HGET",
        keys.queue_meta_key(queue),
        field,
        parse=lambda r: None if r is None else as_text(r),
    )


def state_read(queue: str) -> Command[dict[str, str]]:
    return cmd(
        "HGETALL",
        keys.resize_key(queue),
        parse=lambda r: {as_text(k): as_text(v) for k, v in (r or {}).items()},
    )


def state_write(queue: str, fields: dict[str, str | int]) -> Command[int]:
    flat = [x for kv in fields.items() for x in kv]
    return cmd("HSET", keys.resize_key(queue), *flat, parse=int)


def state_add(queue: str, field: str, n: int) -> Command[int]:
    return cmd("HINCRBY", keys.resize_key(queue), field, n, parse=int)


def owners_forget(queue: str, fleet_ids: list[int]) -> Command[int]:
    return cmd("HDEL", keys.owners_key(queue), *(str(p) for p in fleet_ids), parse=int)
