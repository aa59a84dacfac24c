"""Typed errors.  Every error says what the caller should do about it.

Lua scripts signal failures by returning ``{code, detail...}`` with a small negative code; the
table :data:`SCRIPT_ERRORS` is the one place those codes become exceptions.
"""

from __future__ import annotations

from collections.abc import Callable


class ShardqError(Exception):
    """Base class of every error shardq raises on purpose."""


class ConfigError(ShardqError, ValueError):
    """A setting or URL is invalid."""


class InvalidJobError(ShardqError, ValueError):
    """The job as given cannot be enqueued (bad payload, type, id or option)."""


class PayloadNotSerializableError(InvalidJobError):
    """The payload contains something JSON (orjson) cannot encode."""


class PayloadTooLargeError(InvalidJobError):
    """The encoded payload is over the configured limit."""


class InvalidScheduleError(InvalidJobError):
    """The run time or delay is NaN, infinite, too far in the past or beyond the horizon."""


class UnknownQueueError(ShardqError, LookupError):
    """The queue has not been created."""


class QueueConfigConflictError(ShardqError):
    """The queue exists with a different partition count."""


class DuplicateJobError(ShardqError):
    """A job with this id already exists."""


class JobNotFoundError(ShardqError, LookupError):
    """No job with this id exists (never existed, completed, or cancelled)."""


class JobNotScheduledError(ShardqError):
    """The job is no longer waiting in the due set, so it cannot be rescheduled."""


class JobRunningError(ShardqError):
    """The job is held by a worker right now, so it cannot be cancelled."""


class FencedError(ShardqError):
    """This process's fencing token is no longer current: another owner holds the partition."""


class NotDurableError(ShardqError):
    """A durable enqueue was stored on the primary but not confirmed by enough replicas in time.

    The job exists and will run unless that primary fails before replicating it; resending
    with the same idempotency key (or job id) is safe.
    """

    def __init__(self, message: str, job_ids: list[str] | None = None) -> None:
        super().__init__(message)
        self.job_ids = job_ids or []


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


class HandlerTimeoutError(ShardqError):
    """A handler ran longer than ``WorkerSettings.handler_timeout``; the job is retried."""


class UnknownJobTypeError(PermanentError):
    """The worker has no handler registered for the job's type."""


# Script return codes.  Keep in step with the headers of lua/*.lua.
E_FENCED = -1
E_DUE_IN_PAST = -2
E_BEYOND_HORIZON = -3
E_DUPLICATE_JOB_ID = -4
E_NOT_SCHEDULED = -5
E_JOB_NOT_FOUND = -6
E_JOB_RUNNING = -7
E_QUEUE_CONFLICT = -8
E_JOB_DEAD = -9


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
        f"job {d[0]!r} is running on a worker and cannot be cancelled; make its handler "
        "check for cancellation in your own state if it must stop early"
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


SCRIPT_ERRORS: dict[int, Callable[[list[str]], ShardqError]] = {
    E_FENCED: _fenced,
    E_DUE_IN_PAST: _past,
    E_BEYOND_HORIZON: _horizon,
    E_DUPLICATE_JOB_ID: _duplicate,
    E_NOT_SCHEDULED: _not_scheduled,
    E_JOB_NOT_FOUND: _not_found,
    E_JOB_RUNNING: _running,
    E_QUEUE_CONFLICT: _queue_conflict,
    E_JOB_DEAD: _dead,
}


def error_from_reply(code: int, detail: list[str]) -> ShardqError:
    """Turn a script's negative return code and its detail fields into a typed error."""
    factory = SCRIPT_ERRORS.get(code)
    if factory is None:
        return ScriptError(f"script returned unknown code {code} {detail!r}: upgrade shardq")
    return factory(detail)
