"""Periodic schedule operations (lua/schedule-*.lua): store, read and fire schedules.

The definitions, the next-tick index and the per-schedule state live in the keys of the
partition the schedule's name hashes to (:attr:`~shardq.store.keys.PartitionKeys.schedules`,
``schedule_next``, ``schedule_state``).  What a definition means, and how ticks are computed,
is :mod:`shardq.schedules`' business; these ops only carry strings and numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from shardq.connection import as_text
from shardq.schedules import FIRE_TICKS as FIRE_TICKS
from shardq.schedules import definition_sha as definition_sha
from shardq.store import keys, numbers
from shardq.store.codes import check
from shardq.store.numbers import Checked
from shardq.store.op import Op, op

PutAction = Literal["put", "pause", "resume", "remove"]

# Most schedules one fire call carries (with FIRE_TICKS, lua/schedule-fire-7.lua's Max ARGV).
FIRE_GROUPS = 200


@dataclass(frozen=True, slots=True)
class PutResult:
    created: bool
    paused: bool
    now_ms: int


def _parse_put(reply: Any) -> PutResult:
    r = check(reply)
    return PutResult(r[1] == 1, r[2] == 1, int(r[3]))


def put(
    pk: keys.PartitionKeys,
    action: PutAction,
    name: str,
    definition: str = "",
    next_ms: int = -1,
) -> Op[PutResult]:
    """Add/update (``put``, with the definition JSON), ``pause``, ``resume`` (``definition`` is
    then the sha1 of the definition ``next_ms`` was computed from) or ``remove`` a schedule."""
    return op(
        "schedule-put",
        [pk.schedules, pk.schedule_next, pk.schedule_state],
        [action, name, definition, next_ms, pk.due_hint],
        _parse_put,
    )


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """A schedule as stored: its definition JSON (None for a next tick left without one), its
    next tick (None while paused or finished) and its raw state string."""

    name: str
    definition: str | None
    next_ms: int | None
    state: str | None
    malformed: dict[str, str] = field(default_factory=dict)
    """A next tick score that is not a time (name -> raw value), read as none."""


@dataclass(frozen=True, slots=True)
class ReadResult:
    now_ms: int
    cursor: str
    head_ms: int | None
    schedules: list[StoredSchedule]


def _parse_read(reply: Any) -> ReadResult:
    r = check(reply)
    rows = []
    for i in range(3, len(r), 4):
        definition, next_ms, state = r[i + 1], r[i + 2], r[i + 3]
        c = Checked()
        rows.append(
            StoredSchedule(
                as_text(r[i]),
                as_text(definition) if definition is not None else None,
                c.time_ms("next_ms", next_ms) if next_ms is not None else None,
                as_text(state) if state is not None else None,
                c.bad,
            )
        )
    head = Checked().optional_time_ms("head_ms", r[2])
    return ReadResult(numbers.integer(r[0], 0), as_text(r[1]), head, rows)


def read(
    pk: keys.PartitionKeys, mode: Literal["get", "scan", "due"], arg: str = "", count: int = 1
) -> Op[ReadResult]:
    """``get`` one schedule by name, ``scan`` a page from an HSCAN cursor, or the ``due`` ones
    (next tick at or before the Redis clock, earliest first); with the Redis time."""
    return op(
        "schedule-read",
        [pk.schedules, pk.schedule_next, pk.schedule_state],
        [mode, arg, count],
        _parse_read,
    )


@dataclass(frozen=True, slots=True)
class Fire:
    """One schedule's part of a fire call."""

    name: str
    expected_ms: int
    sha: str
    next_ms: int  # -1: no tick left
    misfires: int
    body: bytes
    ticks: Sequence[int]


@dataclass(frozen=True, slots=True)
class FireResult:
    now_ms: int
    head_ms: int | None
    statuses: list[tuple[int, int]]  # (1 fired / 0 stale / 2 early, jobs created)


def _parse_fire(reply: Any) -> FireResult:
    r = check(reply)
    head = Checked().optional_time_ms("head_ms", r[1])
    pairs = [(numbers.integer(r[i]), numbers.integer(r[i + 1], 0)) for i in range(2, len(r), 2)]
    return FireResult(numbers.integer(r[0], 0), head, pairs)


def fire(pk: keys.PartitionKeys, token: str, fires: Sequence[Fire]) -> Op[FireResult]:
    """Enqueue the given ticks and advance each schedule's next tick (fenced by ``token``)."""
    argv: list[Any] = [token, pk.ready_hint]
    for f in fires:
        argv += [f.name, f.expected_ms, f.sha, f.next_ms, f.misfires, f.body, len(f.ticks)]
        argv += list(f.ticks)
    return op(
        "schedule-fire",
        [
            pk.schedules,
            pk.schedule_next,
            pk.schedule_state,
            pk.jobs,
            pk.ready,
            pk.lease,
            pk.stats,
        ],
        argv,
        _parse_fire,
    )
