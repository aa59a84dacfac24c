"""Script return codes: the one place they become typed errors.

Scripts signal an expected failure by returning ``{code, detail...}`` with a small negative
code, before they write anything.  :class:`Code` lists them (keep it in step with the headers
of lua/*.lua); :data:`REFUSALS` says what each means (its error and message templates), and
:func:`check` turns such a reply into the matching :mod:`shardq.errors` exception, with a
message that says what to do.  The Node producer's codes are generated from this module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple

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


@dataclass(frozen=True, slots=True)
class Refusal:
    """What a code means: the error it raises and what that error says.

    Each message is a :meth:`str.format` template over the reply's detail fields as text
    (``{0}``, or ``{1!r}`` to quote a name) and the fields its ``shape`` adds.  Data, not code,
    so the Node producer formats the very same templates (clients/node/scripts/generate.py
    writes them into it)."""

    error: type[ShardqError]
    messages: tuple[str, ...]
    shape: str = ""
    """The :data:`SHAPES` entry that reads the detail first ('' for none)."""


class Shaped(NamedTuple):
    """What a shape reads from a reply's detail."""

    fields: dict[str, object]
    """More template fields."""
    message: int = 0
    """Which of the refusal's messages applies."""
    args: tuple[object, ...] = ()
    """More arguments of the error's constructor."""


#: Who may run a function the script asked Redis about (lua/includes/checks.lua may_write).
PERMITTED_ROLES = {"operator": "operator or admin", "producer": "producer, operator or admin"}


def _fenced(d: list[str]) -> Shaped:
    return Shaped({"holder": d[1] or "free"})


def _not_permitted(d: list[str]) -> Shaped:
    # d[2] is '?' unless the key named was not the one the script checks (a bug)
    return Shaped({"roles": PERMITTED_ROLES.get(d[0], d[0])}, 0 if d[2] == "?" else 1)


def _layout_moved(d: list[str]) -> Shaped:
    generation, _, partitions = d[0].partition(":")
    gen = int(generation) if generation.isdigit() else 0
    count = int(partitions) if partitions.isdigit() else 0
    return Shaped({"generation": gen, "partitions": count}, 0, (gen, count))


#: The codes whose detail is read before formatting (clients/node/src/codes.ts has the same).
SHAPES: dict[str, Callable[[list[str]], Shaped]] = {
    "fenced": _fenced,
    "not_permitted": _not_permitted,
    "layout_moved": _layout_moved,
}

REFUSALS: dict[Code, Refusal] = {
    Code.FENCED: Refusal(
        FencedError,
        (
            "fencing token {0} is stale (lease now {holder}): another dispatcher owns this "
            "partition; stop draining it",
        ),
        "fenced",
    ),
    Code.DUE_IN_PAST: Refusal(
        InvalidScheduleError,
        (
            "run time {0} ms is more than {2} ms before the Redis clock ({1} ms): pass a time "
            "in the future, use delay=0 to run now, or raise past_tolerance",
        ),
    ),
    Code.BEYOND_HORIZON: Refusal(
        InvalidScheduleError,
        (
            "run time {0} ms is more than {2} ms after the Redis clock ({1} ms): schedule "
            "closer to now or raise max_horizon",
        ),
    ),
    Code.DUPLICATE_JOB_ID: Refusal(
        DuplicateJobError,
        (
            "job {0!r} already exists: pick another job_id, or pass idempotency_key to get the "
            "existing job back instead of an error",
        ),
    ),
    Code.NOT_SCHEDULED: Refusal(
        JobNotScheduledError,
        (
            "job {0!r} is already due and handed to the ready stream: cancel it (if it has not "
            "started) and enqueue it again",
        ),
    ),
    Code.JOB_NOT_FOUND: Refusal(
        JobNotFoundError,
        ("job {0!r} not found: it completed, was cancelled, or never existed",),
    ),
    Code.JOB_RUNNING: Refusal(
        JobRunningError,
        (
            "job {0!r} is running on a worker: cancel(..., running=True) (`shardq job cancel "
            "--running`) stops it there and ends it as cancelled",
        ),
    ),
    Code.QUEUE_CONFLICT: Refusal(
        QueueConfigConflictError,
        (
            "queue exists with {0} partitions, not {1}: use the existing count (partitions "
            "cannot change in place)",
        ),
    ),
    Code.JOB_DEAD: Refusal(
        JobNotScheduledError,
        ("job {0!r} is in the dead-letter stream: replay it with `shardq dlq replay` instead",),
    ),
    Code.WRONG_TYPE: Refusal(
        CorruptKeyError,
        (
            "key {0} holds {1} where shardq keeps {2}: something other than shardq wrote it. "
            "Nothing was written. Inspect it (TYPE, DUMP), then restore or delete that key",
        ),
    ),
    Code.BAD_ARGUMENT: Refusal(
        ScriptArgumentError,
        (
            "argument {0} = {1!r} is outside {2}..{3}: a bug or a version mismatch between "
            "shardq and its Redis functions (run `shardq functions load` after upgrading)",
        ),
    ),
    Code.SCHEDULE_NOT_FOUND: Refusal(
        ScheduleNotFoundError,
        ("no periodic schedule {0!r} on this queue: see `shardq schedule list`",),
    ),
    Code.SCHEDULE_CHANGED: Refusal(
        ScriptError,
        ("periodic schedule {0!r} was updated while this call ran: run it again",),
    ),
    Code.NOT_PERMITTED: Refusal(
        NotPermittedError,
        (
            "only the {roles} Redis user may do this (this user may not write {1}). Nothing "
            "was written. Run it as the shardq-{0} user (docs/deploy.md, `shardq acl print`)",
            "{1} is {2}: a bug, or a version mismatch between shardq and its Redis functions. "
            "Nothing was written",
        ),
        "not_permitted",
    ),
    Code.TOO_MANY_ARGUMENTS: Refusal(
        ScriptArgumentError,
        (
            "the call carries {1} {0} where the function takes at most {2}: refused before "
            "anything ran (a bug, or a version mismatch: run `shardq functions load` after "
            "upgrading)",
        ),
    ),
    Code.LAYOUT_MOVED: Refusal(
        LayoutMovedError,
        (
            "a resize moves this partition's jobs to generation {generation} ({partitions} "
            "partitions): ask there (the clients follow this themselves; a tool pointed at "
            "one partition should read the queue's meta again)",
        ),
        "layout_moved",
    ),
    Code.JOB_MOVING: Refusal(
        JobMovingError,
        (
            "job {0!r} is being moved by a resize: ask again in a moment; if this lasts, "
            "finish the resize with `shardq queue resize --queue Q --resume`",
        ),
    ),
    Code.BATCH_NOT_FOUND: Refusal(
        BatchNotFoundError,
        (
            "no batch {0!r} in this queue: it was never created, or it ended and its record "
            "expired after its retention (`shardq batch list` shows the queue's batches)",
        ),
    ),
    Code.BATCH_CLOSED: Refusal(
        BatchClosedError,
        (
            "batch {0!r} is {1}: it takes no more children (open a new batch, or add children "
            "before sealing it)",
        ),
    ),
    Code.KEY_IN_USE: Refusal(
        IdempotencyKeyInUseError,
        (
            "the idempotency key belongs to job {0!r}, which no debounce of this job type and "
            "tenant enqueued: nothing was written. Idempotency keys are queue-global; give "
            "this burst a key of its own (e.g. '<job type>:<tenant>:<your key>')",
        ),
    ),
}

_UNSHAPED = Shaped({})


def error_for(code: int, detail: list[Any]) -> ShardqError:
    """The typed error for a script's negative return code and its detail fields."""
    try:
        refusal = REFUSALS[Code(code)]
    except ValueError:
        return ScriptError(f"script returned unknown code {code} {detail!r}: upgrade shardq")
    texts = [_text(d) for d in detail]
    texts += ["?"] * (4 - len(texts))  # a short reply still makes an error
    shaped = SHAPES[refusal.shape](texts) if refusal.shape else _UNSHAPED
    message = refusal.messages[shaped.message].format(*texts, **shaped.fields)
    return refusal.error(message, *shaped.args)


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
