"""Script return codes: the one place they become typed errors.

Scripts signal an expected failure by returning ``{code, detail...}`` with a small negative
code, before they write anything.  :class:`Code` lists them (keep it in step with the headers
of lua/*.lua); :func:`check` turns such a reply into the matching :mod:`shardq.errors` exception,
with a message that says what to do.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Any

from shardq.errors import (
    BatchClosedError,
    BatchNotFoundError,
    CorruptKeyError,
    DuplicateJobError,
    FencedError,
    IdempotencyKeyInUseError,
    InvalidScheduleError,
    JobMovingError,
    JobNotFoundError,
    JobNotScheduledError,
    JobRunningError,
    LayoutMovedError,
    NotPermittedError,
    QueueConfigConflictError,
    ScheduleNotFoundError,
    ScriptArgumentError,
    ScriptError,
    ShardqError,
)


class Code(IntEnum):
    """Negative return codes of the scripts."""

    FENCED = -1
    DUE_IN_PAST = -2
    BEYOND_HORIZON = -3
    DUPLICATE_JOB_ID = -4
    NOT_SCHEDULED = -5
    JOB_NOT_FOUND = -6
    JOB_RUNNING = -7
    QUEUE_CONFLICT = -8
    JOB_DEAD = -9
    WRONG_TYPE = -10
    BAD_ARGUMENT = -11
    SCHEDULE_NOT_FOUND = -12
    SCHEDULE_CHANGED = -13
    NOT_PERMITTED = -14
    TOO_MANY_ARGUMENTS = -15
    LAYOUT_MOVED = -16
    JOB_MOVING = -17
    BATCH_NOT_FOUND = -18
    BATCH_CLOSED = -19
    KEY_IN_USE = -20


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _fenced(d: list[str]) -> ShardqError:
    return FencedError(
        f"fencing token {d[0]} is stale (lease now {d[1] or 'free'}): "
        "another dispatcher owns this partition; stop draining it"
    )


def _past(d: list[str]) -> ShardqError:
    return InvalidScheduleError(
        f"run time {d[0]} ms is more than {d[2]} ms before the Redis clock ({d[1]} ms): "
        "pass a time in the future, use delay=0 to run now, or raise past_tolerance"
    )


def _horizon(d: list[str]) -> ShardqError:
    return InvalidScheduleError(
        f"run time {d[0]} ms is more than {d[2]} ms after the Redis clock ({d[1]} ms): "
        "schedule closer to now or raise max_horizon"
    )


def _duplicate(d: list[str]) -> ShardqError:
    return DuplicateJobError(
        f"job {d[0]!r} already exists: pick another job_id, or pass idempotency_key to get "
        "the existing job back instead of an error"
    )


def _not_scheduled(d: list[str]) -> ShardqError:
    return JobNotScheduledError(
        f"job {d[0]!r} is already due and handed to the ready stream: cancel it (if it has not "
        "started) and enqueue it again"
    )


def _not_found(d: list[str]) -> ShardqError:
    return JobNotFoundError(
        f"job {d[0]!r} not found: it completed, was cancelled, or never existed"
    )


def _running(d: list[str]) -> ShardqError:
    return JobRunningError(
        f"job {d[0]!r} is running on a worker: cancel(..., running=True) (`shardq job cancel "
        "--running`) stops it there and ends it as cancelled"
    )


def _queue_conflict(d: list[str]) -> ShardqError:
    return QueueConfigConflictError(
        f"queue exists with {d[0]} partitions, not {d[1]}: use the existing count "
        "(partitions cannot change in place)"
    )


def _dead(d: list[str]) -> ShardqError:
    return JobNotScheduledError(
        f"job {d[0]!r} is in the dead-letter stream: replay it with `shardq dlq replay` instead"
    )


def _wrong_type(d: list[str]) -> ShardqError:
    return CorruptKeyError(
        f"key {d[0]} holds {d[1]} where shardq keeps {d[2]}: something other than shardq wrote "
        "it. Nothing was written. Inspect it (TYPE, DUMP), then restore or delete that key"
    )


def _bad_argument(d: list[str]) -> ShardqError:
    return ScriptArgumentError(
        f"argument {d[0]} = {d[1]!r} is outside {d[2]}..{d[3]}: a bug or a version mismatch "
        "between shardq and its Redis functions (run `shardq functions load` after upgrading)"
    )


def _schedule_not_found(d: list[str]) -> ShardqError:
    return ScheduleNotFoundError(
        f"no periodic schedule {d[0]!r} on this queue: see `shardq schedule list`"
    )


def _schedule_changed(d: list[str]) -> ShardqError:
    return ScriptError(f"periodic schedule {d[0]!r} was updated while this call ran: run it again")


# Who may run a function the script asked Redis about (lua/includes/checks.lua may_write).
_ROLES = {"operator": "operator or admin", "producer": "producer, operator or admin"}


def _not_permitted(d: list[str]) -> ShardqError:
    roles = _ROLES.get(d[0], d[0])
    if d[2] != "?":  # the key named was not the one the script checks (a bug)
        return NotPermittedError(
            f"{d[1]} is {d[2]}: a bug, or a version mismatch between shardq and its Redis "
            "functions. Nothing was written"
        )
    return NotPermittedError(
        f"only the {roles} Redis user may do this (this user may not write {d[1]}). Nothing "
        f"was written. Run it as the shardq-{d[0]} user (docs/deploy.md, `shardq acl print`)"
    )


def _too_many(d: list[str]) -> ShardqError:
    return ScriptArgumentError(
        f"the call carries {d[1]} {d[0]} where the function takes at most {d[2]}: refused before "
        "anything ran (a bug, or a version mismatch: run `shardq functions load` after upgrading)"
    )


def _layout_moved(d: list[str]) -> ShardqError:
    generation, _, partitions = d[0].partition(":")
    gen = int(generation) if generation.isdigit() else 0
    count = int(partitions) if partitions.isdigit() else 0
    return LayoutMovedError(
        f"a resize moves this partition's jobs to generation {gen} ({count} partitions): "
        "ask there (the clients follow this themselves; a tool pointed at one partition "
        "should read the queue's meta again)",
        gen,
        count,
    )


def _moving(d: list[str]) -> ShardqError:
    return JobMovingError(
        f"job {d[0]!r} is being moved by a resize: ask again in a moment; if this lasts, "
        "finish the resize with `shardq queue resize --queue Q --resume`"
    )


def _batch_not_found(d: list[str]) -> ShardqError:
    return BatchNotFoundError(
        f"no batch {d[0]!r} in this queue: it was never created, or it ended and its record "
        "expired after its retention (`shardq batch list` shows the queue's batches)"
    )


def _batch_closed(d: list[str]) -> ShardqError:
    return BatchClosedError(
        f"batch {d[0]!r} is {d[1]}: it takes no more children (open a new batch, or add "
        "children before sealing it)"
    )


def _key_in_use(d: list[str]) -> ShardqError:
    return IdempotencyKeyInUseError(
        f"the idempotency key belongs to job {d[0]!r}, which no debounce of this job type and "
        "tenant enqueued: nothing was written. Idempotency keys are queue-global; give this "
        "burst a key of its own (e.g. '<job type>:<tenant>:<your key>')"
    )


_ERRORS: dict[Code, Callable[[list[str]], ShardqError]] = {
    Code.FENCED: _fenced,
    Code.DUE_IN_PAST: _past,
    Code.BEYOND_HORIZON: _horizon,
    Code.DUPLICATE_JOB_ID: _duplicate,
    Code.NOT_SCHEDULED: _not_scheduled,
    Code.JOB_NOT_FOUND: _not_found,
    Code.JOB_RUNNING: _running,
    Code.QUEUE_CONFLICT: _queue_conflict,
    Code.JOB_DEAD: _dead,
    Code.WRONG_TYPE: _wrong_type,
    Code.BAD_ARGUMENT: _bad_argument,
    Code.SCHEDULE_NOT_FOUND: _schedule_not_found,
    Code.SCHEDULE_CHANGED: _schedule_changed,
    Code.NOT_PERMITTED: _not_permitted,
    Code.TOO_MANY_ARGUMENTS: _too_many,
    Code.LAYOUT_MOVED: _layout_moved,
    Code.JOB_MOVING: _moving,
    Code.BATCH_NOT_FOUND: _batch_not_found,
    Code.BATCH_CLOSED: _batch_closed,
    Code.KEY_IN_USE: _key_in_use,
}


def error_for(code: int, detail: list[Any]) -> ShardqError:
    """The typed error for a script's negative return code and its detail fields."""
    try:
        factory = _ERRORS[Code(code)]
    except ValueError:
        return ScriptError(f"script returned unknown code {code} {detail!r}: upgrade shardq")
    texts = [_text(d) for d in detail]
    return factory(texts + ["?"] * (4 - len(texts)))  # a short reply still makes an error


def is_code(reply: Any, code: Code) -> bool:
    """Whether ``reply`` is the script's ``{code, ...}`` answer."""
    return isinstance(reply, list) and bool(reply) and reply[0] == code


def check(reply: Any) -> list[Any]:
    """Raise the typed error for a negative script code (or a raised reply); else the reply as a
    list."""
    if isinstance(reply, BaseException):
        raise reply
    if isinstance(reply, list):
        if reply and isinstance(reply[0], int) and reply[0] < 0:
            raise error_for(reply[0], reply[1:])
        return reply
    return [reply]
