"""Typed errors.  Every error says what the caller should do about it.

Lua scripts signal failures by returning ``{code, detail...}`` with a small negative code; the
table :data:`SCRIPT_ERRORS` is the one place those codes become exceptions.
"""

from __future__ import annotations

import math
from typing import Any

_SHOWN = 40  # characters of a bad value an error message shows


class ShardqError(Exception):
    """Base class of every error shardq raises on purpose."""


class ConfigError(ShardqError, ValueError):
    """A setting or URL is invalid."""


class MisconfiguredRedisError(ConfigError):
    """A Redis primary runs with a setting that would lose jobs silently (an evicting
    maxmemory-policy; appendonly off when durability was required)."""


class InvalidJobError(ShardqError, ValueError):
    """The job as given cannot be enqueued (bad payload, type, id or option)."""


class InvalidLimitError(ShardqError, ValueError):
    """A rate limit as given cannot be kept (a zero or negative rate, a bad period or name)."""


class PayloadNotSerializableError(InvalidJobError):
    """The payload contains something JSON (orjson) cannot encode."""


class PayloadTooLargeError(InvalidJobError):
    """The encoded payload is over the configured limit."""


class InvalidScheduleError(InvalidJobError):
    """The run time or delay is NaN, infinite, too far in the past or beyond the horizon."""


class InvalidPeriodicScheduleError(InvalidJobError):
    """A periodic schedule (shardq.schedules) was refused before anything was written: a bad
    cron expression or name, an unknown time zone, an interval below the minimum, ..."""


class ScheduleNotFoundError(ShardqError, LookupError):
    """No periodic schedule of that name on the queue."""


class InvalidCursorError(ShardqError, ValueError):
    """A page cursor that the inspector did not hand out (altered, truncated, for another state
    or another queue): pass the previous page's cursor unchanged, or none for the first page."""


class UnknownQueueError(ShardqError, LookupError):
    """The queue has not been created."""


class LanesOffError(ShardqError):
    """A job with a priority or tenant was sent to a queue whose lanes are off."""


class QueueConfigConflictError(ShardqError):
    """The queue exists with a different partition count."""


class QueueInUseError(ShardqError):
    """A queue still has live workers or dispatchers (deleting it would strand them)."""


class DuplicateJobError(ShardqError):
    """A job with this id already exists."""


class JobNotFoundError(ShardqError, LookupError):
    """No job with this id exists (never existed, completed, or cancelled)."""


class IdempotencyKeyInUseError(InvalidJobError):
    """A debounce named an idempotency key that no debounce of this job type and tenant
    created (keys are queue-global): nothing was written; give the burst a key of its own."""


class BatchNotFoundError(ShardqError, LookupError):
    """No batch or chain with this id exists in the queue (never created, or its record
    expired after its retention)."""


class BatchClosedError(ShardqError):
    """The batch no longer takes children (it was sealed, it ended, or it was cancelled)."""


class InvalidWorkflowError(InvalidJobError):
    """A batch or chain that cannot be built as given (the message says why)."""


class JobNotScheduledError(ShardqError):
    """The job is no longer waiting in the due set, so it cannot be rescheduled."""


class JobRunningError(ShardqError):
    """The job is held by a worker right now, so it cannot be cancelled."""


class ProgressError(ShardqError, ValueError):
    """A progress value a handler reported cannot be kept: not JSON, or over
    MAX_PROGRESS_BYTES (4 KiB): report a small summary, e.g. ``{"done": 40, "of": 100}``."""


class ResultError(ShardqError):
    """A job's result cannot be given (the subclasses say why); ``job_id`` names the job."""

    def __init__(self, message: str, job_id: str = "") -> None:
        super().__init__(message)
        self.job_id = job_id


class ResultNotFoundError(ResultError, LookupError):
    """No job and no kept result with this id: it never existed, it completed without keeping
    its result (``keep_result``), it was cancelled, or its result expired after the retention."""


class ResultNotKeptError(ResultError):
    """The job exists but was enqueued without ``keep_result``: it will keep no result to wait
    for."""


class JobFailedError(ResultError):
    """The job ended dead (attempts used up, or a permanent error); ``error`` is its last
    error."""

    def __init__(self, message: str, job_id: str = "", error: str | None = None) -> None:
        super().__init__(message, job_id)
        self.error = error


class ResultNotStoredError(ResultError):
    """The job completed, but its handler's return value could not be kept: ``reason`` says
    why (ResultTooLargeError, ResultNotSerializableError)."""

    def __init__(self, message: str, job_id: str = "", reason: str = "") -> None:
        super().__init__(message, job_id)
        self.reason = reason


class ResultTimeoutError(ResultError, TimeoutError):
    """The job has not ended within the ``timeout`` the caller gave; it may still."""


class FencedError(ShardqError):
    """This process's fencing token is no longer current: another owner holds the partition."""


class NotDurableError(ShardqError):
    """A durable enqueue was stored on the primary but not confirmed by enough replicas in time.

    The job exists and will run unless that primary fails before replicating it; resending
    with the same idempotency key (or job id) is safe.  ``job_ids`` are the jobs not confirmed;
    from ``enqueue_many``, ``results`` has every request's :class:`~shardq.EnqueueResult` (all
    were stored), so the ids it generated are not lost with the error.
    """

    def __init__(
        self, message: str, job_ids: list[str] | None = None, results: list[object] | None = None
    ) -> None:
        super().__init__(message)
        self.job_ids = job_ids or []
        self.results = results or []


class ScriptError(ShardqError):
    """A script returned a code shardq does not know (a bug, or a version mismatch)."""


class HandlerError(ShardqError):
    """Base for errors a job handler raises to steer retries."""


class RetryAfter(HandlerError):
    """Raise from a handler to retry after ``delay`` seconds instead of the backoff policy."""

    def __init__(self, delay: float, message: str = "") -> None:
        super().__init__(message or f"retry requested after {delay} s")
        self.delay = delay


class PermanentError(HandlerError):
    """Raise from a handler for a failure that retrying cannot fix: the job goes dead at once."""


class JobCancelledError(PermanentError):
    """Raised by ``job.check_cancelled()`` in a handler whose job was cancelled while running;
    the job ends as cancelled, never retried."""


class DeadlineExceededError(PermanentError):
    """A job came to start after its ``deadline``: dead-lettered with this reason, never run."""


class HandlerTimeoutError(ShardqError):
    """A handler ran longer than ``WorkerSettings.handler_timeout``; the job is retried."""


class UnknownJobTypeError(ShardqError):
    """The worker has no handler registered for the job's type.  The job is retried by its
    backoff, so a worker that has the handler (a newer release, mid rolling deploy) can take
    it, and goes dead naming the type once its attempts are used up; with
    ``WorkerSettings.dead_letter_unknown_types`` it goes dead at its first delivery."""


class RedisUnavailableError(ShardqError):
    """Redis did not answer (a node down, a failover or slot move that outlasted the retry
    window).  ``written`` says whether the call may have taken effect: ``False`` means it surely
    did not; ``None`` means unknown (sent, no reply), so resend only what is safe to repeat."""

    def __init__(self, message: str, written: bool | None = None) -> None:
        super().__init__(message)
        self.written = written


class RedisFullError(ShardqError):
    """Redis refused a write because it reached ``maxmemory`` (policy ``noeviction``).  Nothing
    was written.  Free memory (drain or purge queues, raise ``maxmemory``) and retry."""


class BulkEnqueueError(ShardqError):
    """Some jobs of an ``enqueue_many`` call could not be stored.

    ``results`` has one entry per request: its :class:`~shardq.EnqueueResult` when the job is
    stored, else None.  ``failed`` maps each request index that is not known to be stored to the
    error it met.  ``retry_requests`` are those requests with their generated job ids filled in:
    enqueue them again and a job that was in fact stored is recognised, not duplicated.
    """

    def __init__(
        self,
        message: str,
        results: list[object | None],
        failed: dict[int, BaseException],
        retry_requests: list[object],
    ) -> None:
        super().__init__(message)
        self.results = results
        self.failed = failed
        self.retry_requests = retry_requests

    @property
    def stored(self) -> list[str]:
        """Job ids known to be stored."""
        return [r.job_id for r in self.results if r is not None]  # type: ignore[attr-defined]


class FunctionsNotLoadedError(ShardqError):
    """shardq's Redis Functions library is not loaded on a node and this user may not load it:
    run ``shardq functions load`` as an admin user."""


class CorruptKeyError(ShardqError):
    """A key shardq uses holds another type than shardq writes there: something else wrote it.
    The script refused before writing anything."""


class MalformedRecordError(ShardqError, ValueError):
    """A record read from Redis is not what shardq writes there (a body that is not JSON, a
    number that is not one), written by hand or by a buggy release: it cannot be shown."""


class ScriptArgumentError(ShardqError, ValueError):
    """A script refused an argument out of its bounds (a bug, or a shardq version mismatch)."""


class LayoutMovedError(ShardqError):
    """The partition asked belongs to a generation a resize empties (or emptied): the job is
    not there, or a new job may not go there.  ``generation`` and ``partitions`` name where
    the queue's jobs go now; the clients follow it themselves (like a cluster's MOVED), so
    this reaches a caller only from a tool that asks one partition."""

    def __init__(self, message: str, generation: int = 0, partitions: int = 0) -> None:
        super().__init__(message)
        self.generation = generation
        self.partitions = partitions


class JobMovingError(ShardqError):
    """A resize is moving the job between partitions right now: ask again in a moment (the
    clients do, for a few seconds).  If it lasts, no resize is running to finish the move:
    `shardq queue resize --queue Q --resume` does."""


class NotPermittedError(ShardqError, PermissionError):
    """The Redis user may not do this: the function is another role's (pause, lanes, empty,
    purge, replay and run now are the operator's and admin's), or the server's ACL refused a
    command or key (the same on Redis and Valkey, whose refusals read differently)."""


def shown(raw: Any) -> str:
    """A raw value as a message shows it: text quoted (bytes that are not UTF-8 escaped), a
    number as it is, a huge int by its size (str() of one over 4,300 digits even fails); cut
    short.  (Here, below every layer, so a model's errors and the store's readers show a bad
    value alike; :mod:`shardq.store.numbers` offers it too.)"""
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        if isinstance(raw, int) and raw.bit_length() > 128:
            return f"{'-' if raw < 0 else ''}~1e{int(raw.bit_length() * math.log10(2))}"
        return repr(raw)
    if isinstance(raw, bytes | bytearray):
        text = bytes(raw).decode("utf-8", errors="backslashreplace")
    else:
        text = str(raw)
    if len(text) > _SHOWN:
        text = text[:_SHOWN] + "..."
    return repr(text)
