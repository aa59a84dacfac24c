"""Jobs as users see them: a job as its handler receives it (:class:`Job`), one to enqueue
(:class:`JobRequest`, whose options are declared in :mod:`shardq.jobs.options`), what enqueue
did (:class:`EnqueueResult`), a job's snapshot (:class:`JobInfo`) and its kept result
(:class:`JobResult`).  No Redis: the store reads and writes them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from shardq import names
from shardq.errors import InvalidJobError, JobCancelledError, ProgressError, shown
from shardq.jobs.options import OPTIONS, Backoff, Fact, reference
from shardq.names import Priority

#: Most attempts an envelope's header may count (above any max_attempts a producer can set,
#: with room for deliveries reclaimed on top; a header beyond it is malformed).  The scripts'
#: bound (lua/fetch-9.lua and fail-7.lua dead-letter a job whose attempt is not 0..1e9), so
#: the inspector reads as malformed exactly what a worker would refuse.
MAX_ATTEMPT = 10**9
#: Largest progress value (its JSON) a handler may report.
MAX_PROGRESS_BYTES = 4096
#: Room for the ``<ms>|`` a stored progress or result record starts with: readers refuse a
#: stored record longer than its value's bound plus this (lua/get-6.lua, result-6).
STAMP_BYTES = 32


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
    job_type: str
    payload: Any = None
    # The options, each declared (and documented: see the docstring) in shardq.jobs.options,
    # with JobOptions' types; tests/unit/test_job_options.py keeps the three in step.
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
    workflow: dict[str, Any] | None = field(default=None, repr=False, compare=False)


JobRequest.__doc__ = f"""One job to enqueue, as given to :meth:`Client.enqueue_many` (the same
options as :meth:`Client.enqueue`): ``JobRequest(job_type, payload, **options)``.

``job_type`` (str)
    The job's type: its handler's name on the workers.
``payload`` (Any)
    Any JSON value (default None), handed to the handler as ``job.payload``.
{reference(OPTIONS)}
"""


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

    def option_facts(self) -> list[tuple[Fact, Any]]:
        """The facts a job view shows of its options (each declared with its option,
        :mod:`shardq.jobs.options`) with their values: those that differ from the default."""
        return [
            (fact, value)
            for option in OPTIONS
            for fact in option.facts
            if (value := getattr(self, fact.field)) != _INFO_DEFAULTS[fact.field]
        ]


_INFO_DEFAULTS: dict[str, Any] = {
    f.name: None if f.default is MISSING else f.default for f in fields(JobInfo)
}


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
