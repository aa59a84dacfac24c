"""Jobs as users see them: validation, the JSON body stored in Redis, and backoff policies.

The body is written once at enqueue (:func:`encode_body`) and never parsed by Lua; the store
reads it back (:mod:`shardq.store.envelope`: a model imports nothing of the store).  Short keys
and omitted defaults keep a job with a 20-byte payload well under 250 bytes of Redis memory in
all.
"""

from __future__ import annotations

import base64
import math
import random
import re
import secrets
import string
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Literal, NamedTuple

import orjson

from shardq import backoff, names
from shardq.config import MAX_TIME_MS, ProducerSettings
from shardq.errors import (
    InvalidJobError,
    InvalidScheduleError,
    JobCancelledError,
    PayloadNotSerializableError,
    PayloadTooLargeError,
    ProgressError,
    shown,
)
from shardq.names import TENANT_CHARS, VALID_JOB_TYPES, check_job_type, check_limit_key

# The identifier rules live in shardq.names; the names they had here stay importable.
Priority = names.Priority
PRIORITY_LEVELS = names.PRIORITY_LEVELS
LEVEL_PRIORITIES = names.LEVEL_PRIORITIES
TENANT_RE = names.TENANT_RE
JOB_TYPE_RE = names.JOB_TYPE_RE
JOB_ID_RE = names.JOB_ID_RE
MAX_IDEMPOTENCY_KEY = names.MAX_IDEMPOTENCY_KEY
check_queue_name = names.check_queue_name
check_job_id = names.check_job_id
check_idempotency_key = names.check_idempotency_key
check_priority = names.check_priority
check_tenant = names.check_tenant

MAX_ATTEMPTS_LIMIT = 1000
#: Most attempts an envelope's header may count (above any max_attempts a producer can set,
#: with room for deliveries reclaimed on top; a header beyond it is malformed).  The scripts'
#: bound (lua/fetch-9.lua and fail-7.lua dead-letter a job whose attempt is not 0..1e9), so
#: the inspector reads as malformed exactly what a worker would refuse.
MAX_ATTEMPT = 10**9

_FLOW_PREFIX_RE = re.compile(("@([hnl])(" + TENANT_CHARS + "{0,64})@").encode())

BackoffKind = Literal["fixed", "exponential", "jitter"]
#: Longest backoff base or cap: the fail script takes a retry delay of at most a year.
MAX_BACKOFF = 366 * 86400.0
#: Longest a job's result may be kept (``keep_result``, seconds): results are for callers
#: waiting on an outcome, not an archive; a longer record belongs in the application's store.
MAX_RESULT_RETENTION = 30 * 86400.0
#: Shortest retention: a result must outlive the round trip of the caller asking for it.
MIN_RESULT_RETENTION = 1.0

#: Latest run_at (epoch seconds): 9999-12-31, the last time a datetime or the CLI can show.
MAX_RUN_AT = MAX_TIME_MS / 1000


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry ``attempt`` (1-based count of failures so far).

    ``fixed``: always ``base``.  ``exponential``: ``base * 2**(attempt-1)``, capped at ``cap``.
    ``jitter``: a uniform random delay in [0, exponential], which spreads retries of a burst.
    """

    kind: BackoffKind = "jitter"
    base: float = 1.0
    cap: float = 3600.0

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "exponential", "jitter"):
            raise InvalidJobError(f"backoff kind {self.kind!r}: use fixed, exponential or jitter")
        for name in ("base", "cap"):
            value = getattr(self, name)
            # A comparison, not math.isfinite: it refuses nan, inf and huge ints alike.
            if isinstance(value, bool) or not isinstance(value, int | float):
                value = None
            if value is None or not 0 <= value <= MAX_BACKOFF:
                raise InvalidJobError(
                    f"backoff {name} must be 0..{MAX_BACKOFF:.0f} seconds (a retry waits at "
                    f"most a year), got {shown(getattr(self, name))}"
                )

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt``."""
        if self.kind == "fixed":
            return min(self.base, self.cap)
        exp = backoff.exponential(attempt, self.base, self.cap)
        if self.kind == "exponential":
            return exp
        return float((rng or random).uniform(0.0, exp))

    def encode(self) -> list[Any]:
        return [self.kind[0], round(self.base * 1000), round(self.cap * 1000)]


DEFAULT_BACKOFF = Backoff()


_ID_POOL: deque[str] = deque()
_ID_BATCH = 512


def new_job_id() -> str:
    """A random job id: 72 bits from the OS CSPRNG, 12 URL-safe characters (short ids save
    memory per job).  Ids are drawn in batches: one urandom call per 512 ids."""
    try:
        return _ID_POOL.popleft()  # deque operations are atomic: safe across threads
    except IndexError:
        # '-' becomes '.' so an id never looks like a command-line option.
        raw = base64.urlsafe_b64encode(secrets.token_bytes(9 * _ID_BATCH))
        text = raw.replace(b"-", b".").decode()
        _ID_POOL.extend(text[i : i + 12] for i in range(12, len(text), 12))
        return text[:12]


_last_head: tuple[int, str] = (-1, "")


def timed_head(due_ms: int) -> str:
    """The first 8 characters of a timed job id: ``due_ms`` as 6 bytes, base64 ('.' for '-')."""
    global _last_head
    last_ms, last = _last_head
    if due_ms == last_ms:
        return last  # a bulk enqueue with one delay: many jobs share each ms
    head = base64.urlsafe_b64encode(due_ms.to_bytes(6, "big")).replace(b"-", b".").decode()
    _last_head = (due_ms, head)
    return head


def new_timed_job_id(due_ms: int) -> str:
    """A random job id that carries its due time: 8 characters of due ms (:func:`timed_head`),
    then 72 random bits in 12 more (as many as a plain id: the enqueue script trusts a fresh
    timed id to be unique and does not search for it).  A queue of layout 3 keeps a waiting
    job whose id encodes exactly its due time as one member of the partition's due set, with
    no jobs-hash entry (lua/includes/compact.lua): about 60 B less per waiting job."""
    return timed_head(max(0, int(due_ms))) + new_job_id()


def _allocation(size: int) -> int:
    """The bytes jemalloc (Redis's allocator) hands out for ``size``: multiples of 16 up to 128,
    then four size classes per doubling (160, 192, 224, 256, 320, ...)."""
    if size <= 8:
        return 8
    if size <= 128:
        return (size + 15) // 16 * 16
    step = 1 << ((size - 1).bit_length() - 3)
    return (size + step - 1) // step * step


def _sds(length: int) -> int:
    """The allocation of a Redis string of ``length`` bytes (header and terminator included)."""
    return _allocation(length + (3 if length < 256 else 5) + 1)


@lru_cache(maxsize=4096)
def compact_pays(body_len: int) -> bool:
    """Whether a waiting job with a body of ``body_len`` bytes costs Redis less as one compact
    due-set member ('<20-char id> <body>') than plain (a 12-character id in the due set, the
    envelope 'S0|<body>' in the jobs hash, whose entry costs a 32-byte dict entry, ~10 bytes
    of buckets and the id's string).  Nearly always; not when the 18 bytes more in the string
    cross an allocation class the plain envelope stays under (a 1,000-byte payload: 1,280
    bytes against 1,024)."""
    compact = _sds(21 + body_len)
    plain = _sds(12) + _sds(3 + body_len) + _sds(12) + 32 + 10
    return compact < plain


_B64_VALUE = {
    c: i for i, c in enumerate(string.ascii_uppercase + string.ascii_lowercase + "0123456789._")
}


def timed_id_due(job_id: str) -> int | None:
    """The due ms a timed job id encodes (as lua/includes/compact.lua reads it), or None."""
    if len(job_id) < 20:
        return None
    value = 0
    for c in job_id[:8]:
        digit = _B64_VALUE.get(c)
        if digit is None:
            return None
        value = value * 64 + digit
    return value


class Schedule(NamedTuple):
    """When a job is due, as the scripts take it: absolute ms ('at') or a delay in ms ('in').

    A named tuple, not a frozen dataclass: it is built for every job of an ``enqueue_many``
    and a tuple is several times cheaper to build."""

    mode: Literal["at", "in", "keep", "tat", "tin"]
    ms: int


def make_schedule(
    run_at: datetime | float | None, delay: timedelta | float | None, settings: ProducerSettings
) -> Schedule:
    """Validate ``run_at``/``delay``.  A delay is applied on the Redis clock, not this one."""
    # The common case first, with the same checks (bool is not int here: type() is exact).
    if (
        run_at is None
        and type(delay) in (int, float)
        and -settings.past_tolerance <= delay <= settings.max_horizon  # type: ignore[operator]
    ):
        return Schedule("in", max(0, round(delay * 1000)))  # type: ignore[operator, arg-type]
    if run_at is not None and delay is not None:
        raise InvalidScheduleError("pass run_at or delay, not both")
    if run_at is None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if seconds is None:
            return Schedule("in", 0)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise InvalidScheduleError(f"delay must be seconds or a timedelta, got {delay!r:.40}")
        # Comparisons, not math.isfinite: they refuse nan and inf, and huge ints (10**400)
        # without an OverflowError.
        if seconds != seconds or seconds in (math.inf, -math.inf):
            raise InvalidScheduleError(f"delay must be a finite number of seconds, got {seconds}")
        if seconds < -settings.past_tolerance:
            raise InvalidScheduleError(
                f"delay {shown(seconds)} s is further in the past than past_tolerance "
                f"({settings.past_tolerance} s): use delay=0 to run now"
            )
        if seconds > settings.max_horizon:
            raise InvalidScheduleError(
                f"delay {shown(seconds)} s is beyond max_horizon "
                f"({settings.max_horizon} s): schedule closer to now or raise max_horizon"
            )
        return Schedule("in", max(0, round(seconds * 1000)))
    if isinstance(run_at, datetime):
        if run_at.tzinfo is None:
            raise InvalidScheduleError(
                "run_at is a naive datetime: pass a timezone-aware one, e.g. "
                "datetime.now(timezone.utc) + timedelta(minutes=5)"
            )
        epoch: float = run_at.timestamp()
    elif isinstance(run_at, int | float) and not isinstance(run_at, bool):
        epoch = run_at
    else:
        raise InvalidScheduleError(
            f"run_at must be a datetime or epoch seconds, got {run_at!r:.40}"
        )
    if epoch != epoch or epoch in (math.inf, -math.inf):
        raise InvalidScheduleError(f"run_at must be a finite time, got {epoch}")
    if not 0 < epoch <= MAX_RUN_AT:
        raise InvalidScheduleError(
            f"run_at {shown(epoch)} is not a time after 1970 and before the year 10000: "
            f"pass epoch seconds 0..{int(MAX_RUN_AT)} or a datetime"
        )
    return Schedule("at", round(epoch * 1000))


def encode_body(
    job_type: str,
    payload: Any,
    *,
    max_attempts: int | None,
    backoff: Backoff | None,
    idempotency_key: str | None,
    headers: dict[str, str] | None,
    settings: ProducerSettings,
    limit_key: str | None = None,
    priority: str | None = None,
    tenant: str | None = None,
    keep_result: timedelta | float | None = None,
    timeout: timedelta | float | None = None,
    deadline: datetime | timedelta | float | None = None,
    workflow: dict[str, Any] | None = None,
) -> bytes:
    """Validate a job and build its stored JSON body.  Raises before anything is written.

    ``workflow``: the options a workflow gives its children (``g``: [batch id, index, carry],
    ``pr``: a chain step's previous result), set by shardq.plans.workflows only.

    The body is ``[type, payload]`` or ``[type, payload, {options}]`` with only the options that
    differ from the defaults, so a small job stays small in Redis.  A job with a priority
    other than the default or a tenant has a ``@<level><tenant>@`` prefix before the JSON: the
    lane scripts read it there without parsing JSON (see :func:`flow_prefix`).
    """
    if priority is not None or tenant is not None:
        prefix = flow_prefix(priority, tenant)
        rest = encode_body(
            job_type,
            payload,
            max_attempts=max_attempts,
            backoff=backoff,
            idempotency_key=idempotency_key,
            headers=headers,
            settings=settings,
            limit_key=limit_key,
            keep_result=keep_result,
            timeout=timeout,
            deadline=deadline,
            workflow=workflow,
        )
        return prefix + rest
    if (
        max_attempts is None
        and backoff is None
        and idempotency_key is None
        and headers is None
        and limit_key is None
        and keep_result is None
        and timeout is None
        and deadline is None
        and workflow is None
        and type(job_type) is str
        and job_type in VALID_JOB_TYPES  # only valid type strings are ever added
    ):
        # The common case (no options) without the option checks; same encoding and limits.
        try:
            data = orjson.dumps([job_type, payload])
        except (TypeError, orjson.JSONEncodeError):
            data = b""  # the full path below reports it
        if data and len(data) <= settings.max_payload_bytes and b"null" not in data:
            return data
    check_job_type(job_type)
    body: dict[str, Any] = {}
    if max_attempts is not None:
        if (
            isinstance(max_attempts, bool)
            or not isinstance(max_attempts, int)
            or not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
        ):
            raise InvalidJobError(
                f"max_attempts must be an integer 1..{MAX_ATTEMPTS_LIMIT}, got {max_attempts!r}"
            )
        body["m"] = max_attempts
    if backoff is not None:
        if not isinstance(backoff, Backoff):
            raise InvalidJobError("backoff must be a shardq.Backoff")
        body["b"] = backoff.encode()
    if idempotency_key is not None:
        body["k"] = idempotency_key
    if headers is not None:
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise InvalidJobError(
                f"headers must be a dict of str to str (e.g. W3C traceparent), got {headers!r:.80}"
            )
        if headers:
            body["h"] = headers
    if limit_key is not None:
        try:
            body["l"] = check_limit_key(limit_key)
        except ValueError as exc:
            raise InvalidJobError(str(exc)) from None
    if keep_result is not None:
        body["r"] = result_retention_ms(keep_result)
    if timeout is not None:
        body["o"] = attempt_timeout_ms(timeout)
    if deadline is not None:
        body.update(deadline_option(deadline))
    if workflow:
        body.update(workflow)
    try:
        data = orjson.dumps([job_type, payload, body] if body else [job_type, payload])
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise PayloadNotSerializableError(
            f"payload of {job_type!r} cannot be encoded as JSON ({exc}): pass dicts, lists, str "
            "(valid Unicode), int (64-bit), float, bool or None (convert datetimes, sets, "
            "big integers and objects first)"
        ) from None
    if b"null" in data and _has_non_finite(payload):
        # orjson writes NaN and infinity as null: the handler would get None, silently.
        raise PayloadNotSerializableError(
            f"payload of {job_type!r} holds NaN or infinity, which JSON cannot carry: send "
            "None or a string instead"
        )
    if len(data) > settings.max_payload_bytes:
        raise PayloadTooLargeError(
            f"job {job_type!r} encodes to {len(data)} bytes, over max_payload_bytes "
            f"({settings.max_payload_bytes}): store large data elsewhere and pass a reference, "
            "or raise the limit"
        )
    return data


def result_retention_ms(keep_result: timedelta | float) -> int:
    """A ``keep_result`` retention (seconds or a timedelta) as the ms a body carries;
    InvalidJobError outside MIN_RESULT_RETENTION..MAX_RESULT_RETENTION."""
    seconds = keep_result.total_seconds() if isinstance(keep_result, timedelta) else keep_result
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not MIN_RESULT_RETENTION <= seconds <= MAX_RESULT_RETENTION
    ):
        raise InvalidJobError(
            f"keep_result must be {MIN_RESULT_RETENTION:.0f}..{MAX_RESULT_RETENTION:.0f} seconds "
            f"(how long the result is kept after the job completes; at most 30 days), got "
            f"{shown(keep_result)}"
        )
    return round(seconds * 1000)


#: Largest progress value (its JSON) a handler may report.
MAX_PROGRESS_BYTES = 4096
#: Room for the ``<ms>|`` a stored progress or result record starts with: readers refuse a
#: stored record longer than its value's bound plus this (lua/get-6.lua, result-6).
STAMP_BYTES = 32

#: Longest per-job timeout (as WorkerSettings.handler_timeout's bound).
MAX_JOB_TIMEOUT = 30 * 86400.0


def _seconds(value: timedelta | float, what: str, lo: float, hi: float, hint: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not lo <= seconds <= hi:
        raise InvalidJobError(
            f"{what} must be {lo:g}..{hi:.0f} seconds ({hint}), got {shown(value)}"
        )
    return float(seconds)


def attempt_timeout_ms(timeout: timedelta | float) -> int:
    """A job's ``timeout`` (seconds or a timedelta) as the ms its body carries (option ``o``)."""
    hint = "how long one attempt may run before it fails and is retried"
    return max(1, round(_seconds(timeout, "timeout", 0.001, MAX_JOB_TIMEOUT, hint) * 1000))


def deadline_option(deadline: datetime | timedelta | float) -> dict[str, int]:
    """A job's ``deadline`` as its body carries it: an absolute time (a timezone-aware datetime
    or epoch seconds) as ``{"d": epoch ms}``, a timedelta (how late after its due time it may
    still start) as ``{"w": ms}``."""
    if isinstance(deadline, timedelta):
        hint = "how late after its due time the job may still start"
        return {"w": round(_seconds(deadline, "deadline", 0, MAX_BACKOFF, hint) * 1000)}
    if isinstance(deadline, datetime):
        if deadline.tzinfo is None:
            raise InvalidJobError(
                "deadline is a naive datetime: pass a timezone-aware one, or a timedelta (how "
                "late after its due time the job may still start)"
            )
        epoch: Any = deadline.timestamp()
    else:
        epoch = deadline
    if isinstance(epoch, bool) or not isinstance(epoch, int | float) or not 0 < epoch <= MAX_RUN_AT:
        raise InvalidJobError(
            f"deadline must be a datetime, epoch seconds 0..{int(MAX_RUN_AT)}, or a timedelta "
            f"(how late after its due time the job may still start), got {shown(deadline)}"
        )
    return {"d": round(epoch * 1000)}


def flow_prefix(priority: str | None, tenant: str | None) -> bytes:
    """The body prefix that carries a job's priority and tenant (empty for neither)."""
    level = check_priority(priority) if priority is not None else "n"
    name = check_tenant(tenant) if tenant is not None else ""
    if level == "n" and not name:
        return b""
    return b"@" + level.encode() + name.encode() + b"@"


def split_flow(raw: bytes) -> tuple[Priority, str | None, bytes]:
    """A stored body's priority, tenant and JSON part."""
    if raw[:1] != b"@":
        return "default", None, raw
    m = _FLOW_PREFIX_RE.match(raw)
    if m is None:
        raise ValueError("job body has a malformed priority/tenant prefix")
    return LEVEL_PRIORITIES[m[1].decode()], (m[2].decode() or None), raw[m.end() :]


def _has_non_finite(value: Any) -> bool:
    """Whether a (JSON-encodable, so at most 255 deep) value holds a NaN or infinite float."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_non_finite(v) for v in value)
    return False


@dataclass(slots=True)
class Job:
    """A job as a handler receives it."""

    id: str
    queue: str
    partition: int
    """The partition's fleet id: its number (``keys.fleet_id``, ``generation * 16384 + p`` after
    a resize); every surface shows its name, ``shardq.format.partition``."""
    type: str
    payload: Any
    attempt: int
    """1 on the first run; higher when retried or taken over from a dead worker."""
    max_attempts: int
    due_ms: int | None
    idempotency_key: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    deliveries: int = 1
    """Deliveries of this ready entry; above 1 means a worker died or overran its timeout."""
    backoff: Backoff | None = None
    fetched_redis_ms: int = 0
    fetched_monotonic: float = 0.0
    limit_key: str | None = None
    """The key its producer set for rate limits (shardq.limits), if any."""
    priority: Priority = "default"
    tenant: str | None = None
    keep_result: float | None = None
    """Seconds its result is kept once it completes (the producer's ``keep_result``), or None:
    the handler's return value is dropped."""
    timeout: float | None = None
    """Seconds one attempt may run (the producer's ``timeout``), or None: the worker's."""
    deadline_ms: int | None = None
    """Epoch ms after which it must not start (an absolute ``deadline``), or None."""
    start_within: float | None = None
    """Seconds after its due time it may still start (a relative ``deadline``), or None."""
    reporter: Callable[[Job, Any], None] | None = field(default=None, repr=False, compare=False)
    """Where :meth:`progress` goes (set by the worker that runs the job)."""
    cancelled: bool = False
    """True once the job was cancelled while running (``Client.cancel(..., running=True)``):
    a sync handler should stop (:meth:`check_cancelled`); an async one's task is cancelled."""
    batch_id: str | None = None
    """The batch or chain this job is a child or step of (``Client.batch``, ``Client.chain``),
    or None."""
    batch_index: int | None = None
    """Its index in that batch (a chain step's number, from 0)."""
    previous: Any = None
    """A chain step's previous step's return value (None for the first step and for jobs of
    no chain)."""
    carries_value: bool = field(default=False, repr=False)
    """Its return value travels with its end to the batch (a chain step's)."""

    def check_cancelled(self) -> None:
        """Raise JobCancelledError if the job was cancelled while running: call it between
        steps of a long sync handler.  The job then ends as cancelled (never retried)."""
        if self.cancelled:
            raise JobCancelledError(f"job {self.id} of {self.queue} was cancelled while running")

    def progress(self, value: Any) -> None:
        """Report the job's progress (any JSON value up to MAX_PROGRESS_BYTES, e.g. ``{"done":
        40, "of": 100}``): readable by id while it runs (``Client.get``, ``shardq job get``,
        the running listing, the console).  Callable from sync and async handlers alike; it
        never blocks and never raises for Redis: the worker writes the latest value at most
        once a second per job.  ProgressError for a value that is not JSON or too large."""
        if self.reporter is None:
            raise ProgressError(
                f"job {self.id}: progress is reported by the worker running the job (this Job "
                "was not handed to a handler by a worker)"
            )
        self.reporter(self, value)

    def past_deadline(self, redis_now_ms: float) -> str | None:
        """Why the job must not start now (its deadline passed), or None."""
        if self.deadline_ms is not None and redis_now_ms > self.deadline_ms:
            return f"its deadline passed {(redis_now_ms - self.deadline_ms) / 1000:.3f} s ago"
        if (
            self.start_within is not None
            and self.due_ms is not None
            and redis_now_ms - self.due_ms > self.start_within * 1000
        ):
            late = (redis_now_ms - self.due_ms) / 1000
            return (
                f"it is {late:.3f} s past its due time, later than its deadline allows "
                f"({self.start_within:g} s)"
            )
        return None

    def redis_now_ms(self, monotonic_now: float) -> float:
        """The Redis clock now, extrapolated from when this job was fetched."""
        return self.fetched_redis_ms + (monotonic_now - self.fetched_monotonic) * 1000.0


#: A job's state, as :attr:`JobInfo.state` says it: one vocabulary for the library, the CLI and
#: the console, defined (with what each word means) in :mod:`shardq.names`.
JobState = names.JobState


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One job to enqueue, as given to :meth:`Client.enqueue_many` (the same options as
    :meth:`Client.enqueue`)."""

    job_type: str
    payload: Any = None
    run_at: datetime | float | None = None
    delay: timedelta | float | None = None
    job_id: str | None = None
    idempotency_key: str | None = None
    max_attempts: int | None = None
    backoff: Backoff | None = None
    headers: dict[str, str] | None = None
    limit_key: str | None = None
    priority: Priority | None = None
    tenant: str | None = None
    keep_result: timedelta | float | None = None
    timeout: timedelta | float | None = None
    deadline: datetime | timedelta | float | None = None
    unique_until: Literal["done", "debounce"] | None = None
    """``"done"``: the idempotency key holds only until its job is done; ``"debounce"`` (what
    ``debounce=`` sets): a repeat replaces the waiting job's payload and due time."""
    workflow: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    """Set by shardq's batches and chains on their children, steps and callbacks
    (shardq.plans.workflows): the body options that tie the job to its batch.  Not for
    callers: ``Client.batch``/``Client.chain`` build them."""


def debounced(request: JobRequest, debounce: timedelta | float | None) -> JobRequest:
    """``request`` debounced by ``debounce`` seconds (``Client.enqueue(debounce=)``): due that
    long from now, its idempotency key in debounce mode; InvalidJobError for a combination
    that cannot mean anything."""
    if debounce is None:
        return request
    if request.run_at is not None or request.delay is not None:
        raise InvalidJobError("debounce sets the due time: pass debounce or run_at/delay, not both")
    if request.unique_until is not None:
        raise InvalidJobError("pass debounce or unique_until, not both")
    if request.idempotency_key is None:
        raise InvalidJobError(
            "debounce works on the idempotency key (the burst's name): pass idempotency_key too"
        )
    seconds = debounce.total_seconds() if isinstance(debounce, timedelta) else debounce
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 <= seconds <= 86400
    ):
        raise InvalidJobError(f"debounce must be 0..86400 seconds, got {shown(debounce)}")
    return replace(request, delay=float(seconds), unique_until="debounce")


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What enqueue did: the job id, whether it was created (False: the idempotency key was
    already used, nothing written), its due time on the Redis clock, and its partition.

    A job id sent again with the same job is a resend: ``created`` is True, the job is stored
    once and ``due_ms`` is None; with another job under that id, enqueue raises
    DuplicateJobError."""

    job_id: str
    created: bool
    due_ms: int | None
    partition: int
    """The partition's fleet id: its number (``keys.fleet_id``, ``generation * 16384 + p`` after
    a resize); every surface shows its name, ``shardq.format.partition``."""


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A snapshot of one job, from :meth:`Client.get`.  ``state`` is one of
    :data:`shardq.names.JOB_STATES` (what each means: :data:`shardq.names.JOB_STATE_MEANINGS`)."""

    id: str
    queue: str
    partition: int
    """The partition's fleet id: its number (``keys.fleet_id``, ``generation * 16384 + p`` after
    a resize); every surface shows its name, ``shardq.format.partition``."""
    state: JobState
    type: str
    payload: Any
    attempt: int
    max_attempts: int | None
    due_ms: int | None
    last_error: str | None
    idempotency_key: str | None
    limit_key: str | None = None
    priority: Priority = "default"
    tenant: str | None = None
    keep_result: float | None = None
    """Seconds its result will be kept once it completes, or None (it keeps none)."""
    timeout: float | None = None
    """Seconds one attempt may run, or None (the worker's handler_timeout)."""
    deadline_ms: int | None = None
    """Epoch ms after which it is dead-lettered rather than started, or None."""
    start_within: float | None = None
    """Seconds after its due time it may still start (else dead-lettered), or None."""
    progress: Any = None
    """Its last reported progress (``job.progress``) while it runs, else None."""
    progress_ms: int | None = None
    """When that progress was reported (Redis ms)."""
    malformed: dict[str, str] = field(default_factory=dict)
    """Stored fields that are not what a producer writes (name -> raw value), read as unset:
    e.g. ``{"due_ms": "'inf'"}``, ``{"m": "1e+300"}`` (written by hand or by a buggy release)."""


@dataclass(frozen=True, slots=True)
class JobResult:
    """A completed job's kept result (a job enqueued with ``keep_result``), from
    :meth:`Client.result_info`.  ``stored`` False: the job completed but its handler's return
    value could not be kept (``error`` says why: over ``max_result_bytes``, or not JSON)."""

    id: str
    queue: str
    partition: int
    """The partition's fleet id: its number (``keys.fleet_id``, ``generation * 16384 + p`` after
    a resize); every surface shows its name, ``shardq.format.partition``."""
    type: str
    attempt: int | None
    """The attempt that completed it (1 unless it was retried)."""
    finished_ms: int | None
    """When it completed, on the Redis clock (ms)."""
    value: Any
    stored: bool = True
    error: str | None = None
