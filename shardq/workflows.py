"""Workflows: batches of jobs with callbacks, and chains of steps (the model; no Redis).

A **batch** is N child jobs spread over every partition of a queue, with callback jobs:
``on_success`` once every child completed (or, with ``policy="ignore"``, once every child
ended), ``on_failure`` when the batch fails (``policy="fail"``: at the first child that ends
dead; ``"continue"``: once every child ended, some dead), ``on_complete`` once every child
ended, whatever became of them.  A **chain** is steps run one after another, each receiving the
previous step's return value (``job.previous``); a step that ends dead stops the chain, with
the reason kept.  A batch or chain may be a child of a batch (:class:`Batch` and :class:`Chain`
as items of ``children``): it counts as one child, completed when it succeeded.

How a child's end reaches its batch exactly once, across slots and crashes:
docs/workflows.md.  The operations: :mod:`shardq.plans.workflows`; the keys:
:class:`shardq.store.keys.BatchKeys`.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal, Union

from shardq.errors import InvalidWorkflowError
from shardq.jobs import JobRequest

Policy = Literal["fail", "continue", "ignore"]
POLICIES: tuple[str, ...] = ("fail", "continue", "ignore")
BatchState = Literal["open", "running", "succeeded", "failed", "cancelled"]
#: What each state means (the CLI and the console say it the same way).
BATCH_STATE_MEANINGS: dict[str, str] = {
    "open": "children may still be added (seal it to let it end)",
    "running": "sealed: waiting for its children to end",
    "succeeded": "every child completed (policy ignore: every child ended)",
    "failed": "a child ended dead or was cancelled (see reason)",
    "cancelled": "cancelled: no callback fires, waiting children were cancelled",
}

# At least one letter or digit: an id of dots only would be collapsed in a URL path.
BATCH_ID_RE = re.compile(r"(?=[^A-Za-z0-9]*[A-Za-z0-9])[A-Za-z0-9_.:-]{1,64}")
BATCH_ID_RULE = "use 1-64 characters of A-Z a-z 0-9 _ . : -, at least one letter or digit"
#: Children per batch created in one call (more: open a batch and add them in parts).
MAX_CHILDREN = 1_000_000
#: Children one add call reserves (lua/batch-add-2.lua's bound).
MAX_ADD = 100_000
#: Children of one batch in all (open + add): a bit each in its bitmap, whose offsets Redis
#: takes below 2^32.
MAX_TOTAL = 2**32
#: Steps of one chain (they are stored with the chain's record).
MAX_STEPS = 1000
#: Nesting: a batch inside a batch inside a batch (ids grow with depth).
MAX_DEPTH = 3
DEFAULT_RETENTION = 7 * 86400.0
MAX_RETENTION = 30 * 86400.0
CALLBACKS: tuple[str, ...] = ("success", "complete", "failure")


def new_batch_id() -> str:
    return "b" + secrets.token_hex(8)


def check_batch_id(batch_id: object) -> str:
    """A batch id a caller may choose (InvalidWorkflowError otherwise)."""
    if not isinstance(batch_id, str) or not BATCH_ID_RE.fullmatch(batch_id):
        raise InvalidWorkflowError(f"batch id {batch_id!r:.80} is invalid: {BATCH_ID_RULE}")
    return batch_id


def check_add_id(add_id: object) -> str:
    """An add id (``batches.add(..., add_id=)``): the same rule as a batch id."""
    if not isinstance(add_id, str) or not BATCH_ID_RE.fullmatch(add_id):
        raise InvalidWorkflowError(f"add id {add_id!r:.80} is invalid: {BATCH_ID_RULE}")
    return add_id


#: The id of a stored batch or chain: a caller's (or generated) id, and ``~<index>`` per level
#: of nesting (:func:`nested_id`).
STORED_ID_RE = re.compile(rf"(?:{BATCH_ID_RE.pattern})(?:~[0-9]{{1,10}}){{0,{MAX_DEPTH}}}")


def check_stored_id(batch_id: object) -> str:
    """The id of a batch or chain that may exist (a nested one's too), to read or change it."""
    if not isinstance(batch_id, str) or not STORED_ID_RE.fullmatch(batch_id):
        raise InvalidWorkflowError(
            f"batch id {batch_id!r:.80} is invalid: {BATCH_ID_RULE} (a nested batch's id "
            "adds ~<index> per level)"
        )
    return batch_id


def child_id(batch_id: str, index: int) -> str:
    """The job id of a batch's child (or a chain's step) ``index``: ``<batch id>#<index>``,
    so a resent create finds the children it already stored, and a cancel finds them all."""
    return f"{batch_id}#{index}"


def callback_id(batch_id: str, name: str) -> str:
    """The job id of a batch's callback (``success``, ``complete``, ``failure``), also its
    idempotency key: enqueued twice, it is stored once."""
    return f"{batch_id}#{name}"


def nested_id(batch_id: str, index: int) -> str:
    """The id of a batch or chain that is child ``index`` of batch ``batch_id``."""
    return f"{batch_id}~{index}"


def retention_ms(retention: timedelta | float) -> int:
    seconds = retention.total_seconds() if isinstance(retention, timedelta) else retention
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 1 <= seconds <= MAX_RETENTION
    ):
        raise InvalidWorkflowError(
            f"retention must be 1 s .. 30 days, got {retention!r:.40}: how long a batch's "
            "record is kept once it ended"
        )
    return round(seconds * 1000)


def check_policy(policy: object) -> str:
    if policy not in POLICIES:
        raise InvalidWorkflowError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    return policy  # type: ignore[return-value]


@dataclass(frozen=True)
class Batch:
    """A batch as a child of another batch (or the spec ``Client.batches.create`` builds)."""

    children: list[Child]
    on_success: JobRequest | None = None
    on_complete: JobRequest | None = None
    on_failure: JobRequest | None = None
    policy: Policy = "fail"


@dataclass(frozen=True)
class Chain:
    """A chain as a child of a batch: its steps run one after another."""

    steps: list[JobRequest]
    on_success: JobRequest | None = None
    on_complete: JobRequest | None = None
    on_failure: JobRequest | None = None


Child = Union[JobRequest, Batch, Chain]  # noqa: UP007 (a runtime alias, for 3.11's isinstance)


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """A batch or chain as stored (``Client.batches.get``)."""

    batch_id: str
    queue: str
    kind: Literal["batch", "chain"]
    state: BatchState
    total: int
    completed: int
    dead: int
    cancelled: int
    policy: Policy
    created_ms: int
    sealed_ms: int | None = None
    ended_ms: int | None = None
    reason: str | None = None
    parent: str | None = None
    """``<batch id>|<index>`` of the batch it is a child of."""
    callbacks: tuple[str, ...] = ()
    """The callbacks it has (``success``, ``complete``, ``failure``)."""
    fires_pending: tuple[str, ...] = ()
    """Callbacks, steps or a parent report the relay has still to do (empty once done)."""
    retention_ms: int = 0
    ttl_ms: int | None = None
    """How long until its record expires (None: kept until it ends)."""
    fired_ms: int | None = None
    """When what its end called for was done: callbacks enqueued, parent told (None before,
    or when it called for nothing)."""
    fire_errors: tuple[str, ...] = ()
    """Fires given up, ``<fire>: <error>`` (a callback its queue refuses for good)."""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def pending(self) -> int:
        """Children not yet ended."""
        return max(0, self.total - self.completed - self.dead - self.cancelled)

    @property
    def ended(self) -> bool:
        return self.ended_ms is not None

    def as_dict(self) -> dict[str, object]:
        return {
            "batch_id": self.batch_id,
            "queue": self.queue,
            "kind": self.kind,
            "state": self.state,
            "total": self.total,
            "pending": self.pending,
            "completed": self.completed,
            "dead": self.dead,
            "cancelled": self.cancelled,
            "policy": self.policy,
            "created_ms": self.created_ms,
            "sealed_ms": self.sealed_ms,
            "ended_ms": self.ended_ms,
            "reason": self.reason,
            "parent": self.parent,
            "callbacks": list(self.callbacks),
            "fires_pending": list(self.fires_pending),
            "retention_ms": self.retention_ms,
            "ttl_ms": self.ttl_ms,
            "fired_ms": self.fired_ms,
            "fire_errors": list(self.fire_errors),
        }


@dataclass(frozen=True, slots=True)
class BatchCancel:
    """What ``Client.batches.cancel`` did: the batch's state before, and how many children it
    cancelled now (waiting ones; a running child ends as it will, and is counted then)."""

    batch_id: str
    was: str
    cancelled_children: int
    running_children: int
