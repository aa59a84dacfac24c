"""Where a new job goes and under which id: a job with an id or an idempotency key goes where
that hashes; one without gets a generated id, timed (carrying its due time, for a compact
waiting job) when that pays, and steered to its sticky run's partition
(:mod:`shardq.store.sticky`) or routed by its hash.  The producer ops
(:mod:`shardq.store.producer`) place every job here."""

from __future__ import annotations

import binascii

from shardq import names
from shardq.config import ProducerSettings
from shardq.errors import InvalidJobError
from shardq.jobs.due import Schedule
from shardq.jobs.ids import compact_pays, new_job_id, new_timed_job_id
from shardq.store import keys, sticky
from shardq.store.clock import REDIS_CLOCK

# A 'tin' job's due time is its id's when that is within this of Redis now + delay (the same
# constant as TIMED_SLACK_MS in lua/includes/compact.lua).
TIMED_SLACK_MS = 250


def timed_due(schedule: Schedule, body: bytes, compact: bool) -> int | None:
    """The due ms a new job's timed id should carry, or None for a plain id: only in a queue of
    layout 3 (``compact``), for a body the compact layout stores cheaper
    (:func:`shardq.jobs.ids.compact_pays`), and for a job that waits (a delay, or a time not
    already past)."""
    if not compact or not compact_pays(len(body)):
        return None
    if schedule.mode == "in":
        return REDIS_CLOCK.now_ms() + schedule.ms if schedule.ms > 0 else None
    return schedule.ms if schedule.ms > REDIS_CLOCK.now_ms() else None


def timed_mode(schedule: Schedule) -> Schedule:
    """The schedule as sent with a timed id just generated: 'tin'/'tat', so the script may store
    the job compactly (an id passed by the caller, or resent with its id filled in, goes as
    'in'/'at' and waits in the plain layout)."""
    return Schedule("tin" if schedule.mode == "in" else "tat", schedule.ms)


def check_ids(job_id: str | None, idempotency_key: str | None) -> None:
    """InvalidJobError for a bad job id or idempotency key (before anything uses them)."""
    if idempotency_key is not None:
        names.check_idempotency_key(idempotency_key)
    if job_id is not None:
        names.check_job_id(job_id)


def route(
    partitions: int,
    job_id: str | None,
    idempotency_key: str | None,
    due_ms: int | None = None,
) -> tuple[str, int]:
    """Pick the job id and partition (a generated id is timed when ``due_ms`` is given); the
    id and key are valid (:func:`check_ids`).

    A job's partition is a hash of its id, so cancel/get/reschedule find it from the id alone.
    With an idempotency key the partition is a hash of the key, so duplicates meet in one
    script; the generated id is drawn until it hashes to that same partition (P tries on
    average, a few microseconds).
    """
    if idempotency_key is not None:
        partition = keys.partition_for(idempotency_key, partitions)
        if job_id is not None:
            if keys.partition_for(job_id, partitions) != partition:
                raise InvalidJobError(
                    "job_id and idempotency_key map to different partitions: pass only one "
                    "(a custom job_id is itself deduplicated)"
                )
            return job_id, partition
        base = new_job_id() if due_ms is None else new_timed_job_id(due_ms)
        n = 0
        while True:
            candidate = f"{base}{n:x}" if n else base
            if keys.partition_for(candidate, partitions) == partition:
                return candidate, partition
            n += 1
    if job_id is None:
        job_id = new_job_id() if due_ms is None else new_timed_job_id(due_ms)
    return job_id, keys.partition_for(job_id, partitions)


def place(
    queue: str,
    partitions: int,
    job_id: str | None,
    idempotency_key: str | None,
    schedule: Schedule,
    body: bytes,
    settings: ProducerSettings,
    compact: bool,
) -> tuple[str, int, Schedule]:
    """One job's id, partition and schedule as sent (:func:`timed_mode` for a timed id)."""
    due = timed_due(schedule, body, compact) if job_id is None else None
    if (
        job_id is None
        and idempotency_key is None
        and settings.sticky_jobs > 1
        and sticky.supports(partitions)
    ):
        job_id, partition = sticky.RUNS.place_job(
            queue, partitions, schedule, due, settings, REDIS_CLOCK.now_ms()
        )
    else:
        job_id, partition = route(partitions, job_id, idempotency_key, due)
    return job_id, partition, schedule if due is None else timed_mode(schedule)


class NewJobs:
    """:func:`place` for the many jobs without an id or a key of one bulk enqueue, with what is
    the same for all of them looked up once."""

    __slots__ = ("_compact", "_count", "_now", "_queue", "_settings", "_steered")

    def __init__(
        self, queue: str, partitions: int, settings: ProducerSettings, compact: bool
    ) -> None:
        self._queue = queue
        self._count = partitions
        self._settings = settings
        self._compact = compact
        self._steered = settings.sticky_jobs > 1 and sticky.supports(partitions)
        self._now = REDIS_CLOCK.now_ms()

    def place(self, schedule: Schedule, body: bytes) -> tuple[str, int, Schedule]:
        due = timed_due(schedule, body, True) if self._compact else None
        if self._steered:
            job_id, partition = sticky.RUNS.place_job(
                self._queue, self._count, schedule, due, self._settings, self._now
            )
        else:
            job_id = new_job_id() if due is None else new_timed_job_id(due)
            partition = binascii.crc32(job_id.encode()) % self._count  # keys.partition_for
        return job_id, partition, schedule if due is None else timed_mode(schedule)
