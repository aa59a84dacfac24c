"""Every identifier rule in one place: queue names, job types, job ids, idempotency keys,
priorities, tenants, limit keys and names, schedule names; and the one vocabulary of a job's
states (:data:`JOB_STATES`), which the library, the CLI, the console and the docs all use.

Each rule is a pattern (matched with ``fullmatch``: ``$`` would let a trailing ``"\\n"``
through), the sentence that tells a user what is allowed (``*_RULE``, shared by the library's
errors and the CLI's usage errors), and a check that raises the typed error of the place the
name is given (a queue name :class:`UnknownQueueError`, a job's names
:class:`InvalidJobError`, a limit's :class:`InvalidLimitError`, a schedule's
:class:`InvalidPeriodicScheduleError`).  Names travel in key names and job bodies, so none may
hold a brace (a hash tag) or a space.  The Lua side matches the same characters where it reads
a name (lua/includes/lanes.lua: tenants).

This module imports only :mod:`shardq.errors`: every layer may use it.
"""

from __future__ import annotations

import re
from typing import Literal

from shardq.errors import (
    InvalidJobError,
    InvalidLimitError,
    InvalidPeriodicScheduleError,
    UnknownQueueError,
)

# -- job states -----------------------------------------------------------------------------

JobState = Literal["scheduled", "ready", "running", "retrying", "dead"]
#: Every state a job can be in, in the order listings show them.  A job that completed or was
#: cancelled is gone (``Client.get`` returns None): no state names it.
JOB_STATES: tuple[JobState, ...] = ("scheduled", "ready", "running", "retrying", "dead")
#: What each state means, one line each (the docs and the CLI's help say the same).
JOB_STATE_MEANINGS: dict[JobState, str] = {
    "scheduled": "waiting in the due set for its due time (it has not failed)",
    "ready": "due: in the ready stream (or a lane), waiting for a worker",
    "running": "held by a worker, its handler running",
    "retrying": "failed, waiting in the due set for its next attempt (it has a last error)",
    "dead": "in the dead-letter stream: attempts used up or a permanent error",
}
#: A listing, count or bulk action of ``scheduled`` covers the whole due set, so it takes in the
#: retrying jobs too (a listed row's state says which one it is); ``retrying`` selects only them.
#: The states whose jobs have not started, and can be cancelled or emptied in bulk.
NOT_STARTED_STATES: tuple[JobState, ...] = ("scheduled", "ready", "retrying")
#: The states a queue can be emptied of (``Inspector.empty``): a running job is a worker's.
EMPTY_STATES: tuple[JobState, ...] = ("scheduled", "ready", "retrying", "dead")
#: Old words a caller may still pass as a state (an input only: output always says the
#: current word).  ``active`` was JobInfo's word for ``running`` in 0.1.0; it is taken through
#: the next release (0.2), then refused like any unknown word.
JOB_STATE_ALIASES: dict[str, JobState] = {"active": "running"}
#: A dead-letter listing's mark for an entry whose job is no longer dead (replayed, or deleted):
#: a row of the listing, not a state of a job.
DEAD_LETTER_ONLY = "dead-letter only"


def job_state(word: object, allowed: tuple[JobState, ...] = JOB_STATES) -> JobState:
    """The state a caller named (an old word of :data:`JOB_STATE_ALIASES` is mapped, here
    only), or ValueError naming the states ``allowed``."""
    state = JOB_STATE_ALIASES.get(word, word) if isinstance(word, str) else word
    if state not in allowed:
        raise ValueError(f"state must be one of {', '.join(allowed)}, got {word!r}")
    return state  # type: ignore[return-value]


# -- queues ---------------------------------------------------------------------------------

QUEUE_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
QUEUE_NAME_RULE = "use 1-64 characters of letters, digits, '_', '.' or '-'"


def check_queue_name(queue: str) -> None:
    """UnknownQueueError unless ``queue`` is a name a queue can have."""
    if not isinstance(queue, str) or not QUEUE_NAME_RE.fullmatch(queue):
        raise UnknownQueueError(f"queue name {queue!r} is invalid: {QUEUE_NAME_RULE}")


def check_new_queue_name(queue: str) -> None:
    """As :func:`check_queue_name`, for a queue being created: also refuses a name of dots
    only ('.', '..'), which browsers and HTTP clients rewrite out of the console's URLs
    (/queues/../jobs is /jobs).  A queue made before this rule keeps working by its name."""
    check_queue_name(queue)
    if not queue.strip("."):
        raise UnknownQueueError(
            f"queue name {queue!r} is invalid: {QUEUE_NAME_RULE}, and not only dots (URLs "
            "would lose it)"
        )


# -- job types and ids ----------------------------------------------------------------------

JOB_TYPE_RE = re.compile(r"[A-Za-z0-9_.:/\-]{1,128}")
JOB_TYPE_RULE = "use 1-128 characters of letters, digits and '_.:/-'"
#: Job types already found valid (only valid strings are ever added): the enqueue fast path
#: tests membership here instead of matching the pattern for every job.
VALID_JOB_TYPES: set[str] = set()
_VALID_JOB_TYPES_CAP = 10_000


def is_job_type(job_type: object) -> bool:
    """Whether ``job_type`` is a valid job type (remembered, up to 10,000 of them)."""
    if isinstance(job_type, str) and job_type in VALID_JOB_TYPES:
        return True
    if not isinstance(job_type, str) or not JOB_TYPE_RE.fullmatch(job_type):
        return False
    if len(VALID_JOB_TYPES) < _VALID_JOB_TYPES_CAP:
        VALID_JOB_TYPES.add(job_type)
    return True


def check_job_type(job_type: object) -> str:
    """``job_type`` as given, or InvalidJobError saying what is allowed."""
    if not is_job_type(job_type):
        raise InvalidJobError(f"job type {job_type!r} is invalid: {JOB_TYPE_RULE}")
    return job_type  # type: ignore[return-value]


JOB_ID_RE = re.compile(r"[\x21-\x7e]{1,128}")
JOB_ID_RULE = "use 1-128 printable ASCII characters, no spaces"


def check_job_id(job_id: str) -> None:
    """InvalidJobError unless ``job_id`` is an id a caller may give a job."""
    if not isinstance(job_id, str) or not JOB_ID_RE.fullmatch(job_id):
        raise InvalidJobError(f"job_id {job_id!r} is invalid: {JOB_ID_RULE}")


# -- idempotency keys -----------------------------------------------------------------------

MAX_IDEMPOTENCY_KEY = 256

#: Longest name a script keeps for a process (bytes): a worker's or dispatcher's member id, its
#: consumer name, a lease owner (shardq.runtime.identity).  The scripts that keep them run at
#: maxmemory: what they add must be bounded.
MAX_MEMBER_BYTES = 512


def check_idempotency_key(key: str) -> None:
    """InvalidJobError unless ``key`` is 1..256 characters of valid Unicode."""
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise InvalidJobError(
            f"idempotency_key must be a str of 1..{MAX_IDEMPOTENCY_KEY} characters, got {key!r:.80}"
        )
    try:
        key.encode()
    except UnicodeEncodeError:
        raise InvalidJobError(
            f"idempotency_key {key!r:.80} is not valid Unicode (a lone surrogate): fix its source"
        ) from None


# -- priorities and tenants -----------------------------------------------------------------

Priority = Literal["high", "default", "low"]
#: Priority level -> its letter in a stored body's lane prefix (lua/includes/lanes.lua, which
#: shares deliveries 6:3:1 between the levels of a partition with lanes on).
PRIORITY_LEVELS: dict[str, str] = {"high": "h", "default": "n", "low": "l"}
LEVEL_PRIORITIES: dict[str, Priority] = {"h": "high", "n": "default", "l": "low"}


def check_priority(priority: object) -> str:
    """The level letter of a priority name; InvalidJobError for anything else."""
    level = PRIORITY_LEVELS.get(priority) if isinstance(priority, str) else None
    if level is None:
        raise InvalidJobError(f"priority {priority!r} is unknown: use 'high', 'default' or 'low'")
    return level


TENANT_CHARS = r"[A-Za-z0-9_.:\-]"  # the Lua side matches [%w_.:%-]*
TENANT_RE = re.compile(TENANT_CHARS + "{1,64}")
TENANT_RULE = "use 1-64 characters of letters, digits and '_.:-'"


def is_tenant(tenant: object) -> bool:
    return isinstance(tenant, str) and bool(TENANT_RE.fullmatch(tenant))


def check_tenant(tenant: object) -> str:
    """``tenant`` as given, or InvalidJobError saying what is allowed."""
    if not is_tenant(tenant):
        raise InvalidJobError(f"tenant {tenant!r} is invalid: {TENANT_RULE}")
    return tenant  # type: ignore[return-value]


# -- limits ---------------------------------------------------------------------------------

# Limit keys travel in job bodies and key names: no braces (a hash tag), no spaces.
LIMIT_KEY_RE = re.compile(r"[A-Za-z0-9_.:/@\-]{1,128}")
LIMIT_KEY_RULE = (
    "use 1-128 characters of letters, digits and '_.:/@-' (e.g. a customer id or an API host)"
)


def check_limit_key(key: object) -> str:
    """A limit key as given, or InvalidLimitError saying what is allowed."""
    if not isinstance(key, str) or not LIMIT_KEY_RE.fullmatch(key):
        raise InvalidLimitError(f"limit key {key!r:.80} is invalid: {LIMIT_KEY_RULE}")
    return key


def check_limit_name(name: object) -> str:
    """A limit's name as a remove may give it: any text Redis can hold (a limit stored by hand
    under an odd name must stay removable), so only refused when it is not text, or holds lone
    surrogates (bytes that were not UTF-8 on a command line)."""
    try:
        if not isinstance(name, str):
            raise TypeError
        name.encode()
    except (TypeError, UnicodeEncodeError):
        raise InvalidLimitError(
            f"limit name {name!r:.80} is not valid text: give type:<job type>, key:<limit key> "
            "or tenant:<tenant>"
        ) from None
    return name


# -- periodic schedules ---------------------------------------------------------------------

SCHEDULE_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,100}")
SCHEDULE_NAME_RULE = "use 1-100 characters of letters, digits, '_', '.' or '-'"


def check_schedule_name(name: str) -> None:
    """InvalidPeriodicScheduleError unless ``name`` is a name a schedule can have."""
    if not isinstance(name, str) or not SCHEDULE_NAME_RE.fullmatch(name):
        raise InvalidPeriodicScheduleError(
            f"schedule name {name!r} is invalid: {SCHEDULE_NAME_RULE}"
        )


# -- operators' words -----------------------------------------------------------------------
# Here, not in shardq.admin, so the CLI can offer them as choices without loading the admin
# code (and the client and redis-py it runs on) before a command runs.

#: The roles of a deployment's Redis users (shardq.admin.acl writes their rules).
ROLES: tuple[str, ...] = ("producer", "dispatcher", "worker", "operator", "viewer", "admin")

#: What a placement plan evens out (shardq.admin.balancer, ``--by``): jobs/s over a window,
#: bytes in the slots, or load: each slot's share of both, counting equally.
By = Literal["load", "rate", "bytes"]
BY_CHOICES: tuple[By, ...] = ("load", "rate", "bytes")
