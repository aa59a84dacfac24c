"""The inspector's listings, written once: jobs by state, a page at a time, and the job of an
idempotency key.  The inspector's other operations are :mod:`shardq.plans.job_actions` (run
now, cancel, replay, empty) and :mod:`shardq.plans.queue_admin` (pause, the partitions and
members views, deleting a queue); its batches are :mod:`shardq.plans.workflows`'.

Model: asynq's ``Inspector``.  Each operation is a plan (:mod:`shardq.plans`) over the store's
calls; :class:`shardq.Inspector` and :class:`shardq.AsyncInspector` only drive them through
their client's runner (one retry and error-translation layer for every facade).  A plan's
arguments are checked when it is built, before anything is sent.

Every page costs bounded Redis work whatever the backlog:

- ``scheduled``: a k-way merge over the partitions' due sets (which hold the retrying jobs too:
  each row's ``state`` says ``retrying`` for a job with a last error, as ``Client.get`` does).
  Each partition returns at most ``limit`` jobs after the cursor (one script call,
  O(log^2 n): a ZCOUNT and a binary search among the cursor's score find the start rank), the
  pages are merged by (due time, job id) and the first ``limit`` kept; the cursor is the last
  (due, id) returned.
- ``ready``, ``running``, ``dead``: the same merge over each partition's stream, by entry id
  (``ready`` reads after the consumer group's last delivered id, ``running`` reads XPENDING).
- ``retrying``: failed jobs waiting for their next attempt, one HSCAN step of each partition's
  errors hash at a time, partition by partition (at most a few steps per page).
- batches: one ZRANGE of the queue's index of batches (newest first), then the record and TTL
  of each batch listed (at most ``limit``, pipelined); a batch by id: its record and TTL.

A filter by job type is applied to each page after the merge, so a filtered page may hold fewer
than ``limit`` jobs (even none) while more follow: page until ``cursor`` is None.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from shardq import jobs as jobmod
from shardq import names
from shardq.config import MAX_LIMIT
from shardq.errors import InvalidCursorError, InvalidScheduleError
from shardq.jobs import JobInfo
from shardq.plans import Plan, cursors, ok, one
from shardq.plans import producer as producer_plans
from shardq.store import envelope, inspection, keys, numbers, producer, queues
from shardq.store import progress as progress_ops
from shardq.store.layout import Layout
from shardq.store.meta import QueueCache
from shardq.store.numbers import MAX_TIME_MS, Checked, shown
from shardq.store.op import Call

# The states a listing pages (every job state), and those a queue can be emptied of: the one
# vocabulary of shardq.names, kept under these names for existing imports.
ListState = names.JobState
LIST_STATES: tuple[ListState, ...] = names.JOB_STATES
EMPTY_STATES = names.EMPTY_STATES
RETRY_STEPS = 8  # HSCAN steps per retrying page


@dataclass(frozen=True, slots=True)
class JobSummary:
    """One job as a listing shows it.  Fields that do not apply to its state are None."""

    id: str
    queue: str
    partition: int
    state: str
    type: str | None
    payload: Any
    attempt: int | None
    max_attempts: int | None
    due_ms: int | None
    last_error: str | None = None
    worker: str | None = None
    started_ms: int | None = None  # running: the Redis time of its delivery (now - idle)
    deliveries: int | None = None
    dead_at_ms: int | None = None
    entry_id: str | None = None  # ready/running/dead: its stream entry
    malformed: dict[str, str] = field(default_factory=dict)
    """Stored fields that are not what shardq writes (name -> raw value), read as unset."""
    progress: Any = None
    """running: its last reported progress (``job.progress``), if any."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing; pass ``cursor`` back for the next (None: there is no more)."""

    jobs: list[JobSummary]
    cursor: str | None


# envelopes -------------------------------------------------------------------------------------


def _envelope(
    raw: bytes | None, bad: dict[str, str] | None = None
) -> tuple[str | None, int | None, dict[str, Any]]:
    """(state letter, attempt, body) of a stored envelope (:mod:`shardq.store.envelope`); a part
    that cannot be read is None (or {}), and named in ``bad`` when given."""
    if not raw:
        return None, None, {}
    env = envelope.read(raw)
    if bad is not None:
        bad.update(env.malformed)
    return env.state.decode(errors="replace"), env.attempt, env.body


def _summary(
    queue: str, partition: int, job_id: str, state: str, raw: bytes | None, **extra: Any
) -> JobSummary:
    bad: dict[str, str] = dict(extra.pop("malformed", None) or {})
    _, attempt, body = _envelope(raw, bad)
    options = envelope.stored_options(body, bad)
    due = extra.pop("due_ms", None)
    if due is not None and not 0 <= due <= MAX_TIME_MS:
        # (a due-set score of +-inf, listed at the cursors' bound: see inspection.SCORE_BOUND)
        bad["due_ms"] = shown(due)
        due = None
    return JobSummary(
        id=job_id,
        queue=queue,
        partition=partition,
        state=state,
        type=body.get("t"),
        payload=body.get("p"),
        attempt=attempt,
        max_attempts=options.max_attempts,
        due_ms=due,
        malformed=bad,
        **extra,
    )


def check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an integer 1..{MAX_LIMIT}, got {limit!r}")


# listings -------------------------------------------------------------------------------------


def _due_state(error: str | None) -> names.JobState:
    """A due-set job's state: retrying once it has a last error (as Client.get reads it)."""
    return "scheduled" if error is None else "retrying"


def _list_due(
    queue: str,
    pks: list[keys.PartitionKeys],
    limit: int,
    cursor: str | None,
    start_ms: int,
    end_ms: int,
) -> Plan[Page]:
    score, member = cursors.decode(cursor, "scheduled") if cursor else (start_ms, "")
    pages = ok((yield [inspection.list_due(pk, score, member, end_ms, limit) for pk in pks]))
    # Each partition's rows are tagged in a list built now: a generator here would read the
    # partition when the merge consumes it, after the loop, and tag every job with the last one.
    merged = heapq.merge(
        *(
            [(due, job_id, pk.fleet_id, raw, error) for due, job_id, raw, error in rows]
            for pk, (_, rows) in zip(pks, pages, strict=True)
        )
    )
    picked = [row for _, row in zip(range(limit + 1), merged, strict=False)]
    # More may follow even when the merge came out exactly full: a partition that returned a
    # whole page may hold more after it.
    more = len(picked) > limit or any(len(rows) == limit for _, rows in pages)
    picked = picked[:limit]
    # The due set holds retrying jobs too: each row says which it is (as Client.get does).
    jobs = [
        _summary(queue, p, job_id, _due_state(error), raw, due_ms=due, last_error=error)
        for due, job_id, p, raw, error in picked
    ]
    last = picked[-1] if picked else None
    next_cursor = cursors.encode("scheduled", [last[0], last[1]]) if more and last else None
    return Page(jobs, next_cursor)


LANE_PREFIX = f"{inspection.LANE_ENTRY_MS}-"


def _list_stream(
    state: Literal["ready", "running", "dead"],
    queue: str,
    pks: list[keys.PartitionKeys],
    limit: int,
    cursor: str | None,
) -> Plan[Page]:
    """A merge by (entry id, partition) over each partition's stream (a partition by its
    place in ``pks``: every live generation's, :meth:`shardq.store.layout.Layout.every`)."""
    after_id, after_p = cursors.decode(cursor, state) if cursor else ("", -1)

    def after(p: int) -> str:
        if not after_id:
            return ""
        return after_id if p <= after_p else cursors.prev_entry_id(after_id)

    builders: dict[str, Callable[[keys.PartitionKeys, str, int], Call[Any]]] = {
        "ready": inspection.list_ready,
        "running": inspection.list_running,
        "dead": inspection.list_dead,
    }
    build = builders[state]
    pages = ok((yield [build(pk, after(i), limit) for i, pk in enumerate(pks)]))

    def key(entry_id: str) -> tuple[int, int]:
        ms, _, seq = entry_id.partition("-")
        return int(ms), int(seq or 0)

    rows = [(key(row[0]), p, now, row) for p, (now, rs) in enumerate(pages) for row in rs]
    rows.sort(key=lambda r: (r[0], r[1]))
    # A partition that returned a whole page may hold more, even if the merge is exactly full.
    more = len(rows) > limit or any(len(rs) == limit for _, rs in pages)
    rows = rows[:limit]
    jobs: list[JobSummary] = []
    for _, at, now, row in rows:
        p = pks[at].fleet_id
        if state == "ready":
            eid, job_id, due, raw, bad = row
            if job_id and raw is None:
                # Cancelled after promotion (its job is gone): the entry waits for a worker's
                # read to drop it, and pages on like any other, unlisted.
                continue
            # A job in a lane (lanes on) has no stream entry yet: its id is only a cursor.
            entry = None if eid.startswith(LANE_PREFIX) else eid
            jobs.append(
                _summary(
                    queue, p, job_id or "", "ready", raw, due_ms=due, entry_id=entry, malformed=bad
                )
            )
        elif state == "running":
            eid, job_id, worker, idle, deliveries, raw = row
            jobs.append(
                _summary(
                    queue,
                    p,
                    job_id or "",
                    "running",
                    raw,
                    worker=worker,
                    started_ms=now - idle,
                    deliveries=deliveries,
                    entry_id=eid,
                )
            )
        else:
            eid, fields, raw = row
            letter_state, _, _ = _envelope(raw)
            c = Checked()
            dead_at = c.time_ms("dead_at_ms", fields["t"]) if fields.get("t") else None
            jobs.append(
                _summary(
                    queue,
                    p,
                    fields.get("j", ""),
                    "dead" if letter_state == "D" else names.DEAD_LETTER_ONLY,
                    raw,
                    last_error=fields.get("e"),
                    dead_at_ms=dead_at,
                    entry_id=eid,
                    malformed=c.bad,
                )
            )
    if state == "running" and jobs:
        jobs = yield from _with_progress(jobs, [pks[at] for _, at, _, _ in rows])
    last = rows[-1] if rows else None
    next_cursor = cursors.encode(state, [last[3][0], last[1]]) if more and last else None
    return Page(jobs, next_cursor)


def _with_progress(
    jobs: list[JobSummary], homes: list[keys.PartitionKeys]
) -> Plan[list[JobSummary]]:
    """Running jobs with their last reported progress (one GET each, in one batch)."""
    raws = ok((yield [progress_ops.read(pk, j.id) for j, pk in zip(jobs, homes, strict=True)]))
    out: list[JobSummary] = []
    for j, raw in zip(jobs, raws, strict=True):
        shown_progress = progress_ops.parse(raw) if raw is not None else None
        out.append(j if shown_progress is None else replace(j, progress=shown_progress.value))
    return out


def _list_retrying(
    queue: str, pks: list[keys.PartitionKeys], limit: int, cursor: str | None
) -> Plan[Page]:
    partitions = len(pks)
    p, scan = cursors.decode(cursor, "retrying") if cursor else (0, "0")
    if not (isinstance(p, int) and 0 <= p < partitions and isinstance(scan, str)):
        raise InvalidCursorError("that retrying cursor does not fit this queue")
    jobs: list[JobSummary] = []
    for _ in range(RETRY_STEPS):
        (result,) = ok((yield [inspection.list_retrying(pks[p], scan, max(1, limit - len(jobs)))]))
        _, scan, rows = result
        for job_id, due, error, raw, bad in rows:
            jobs.append(
                _summary(
                    queue,
                    pks[p].fleet_id,
                    job_id,
                    "retrying",
                    raw,
                    due_ms=due,
                    last_error=error,
                    malformed=bad,
                )
            )
        if scan == "0":
            p, scan = p + 1, "0"
            if p == partitions:
                return Page(jobs, None)
        if len(jobs) >= limit:
            break
    return Page(jobs, cursors.encode("retrying", [p, scan]))


def list_page(
    queue: str,
    pks: list[keys.PartitionKeys],
    state: str,
    *,
    job_type: str | None,
    limit: int,
    cursor: str | None,
    start_ms: int | None,
    end_ms: int | None,
) -> Plan[Page]:
    """One page of jobs in ``state`` (see the module docstring), filtered by ``job_type``."""
    if state == "scheduled":
        lo = -(10**15) if start_ms is None else int(start_ms)
        hi = 10**15 if end_ms is None else int(end_ms)
        page = yield from _list_due(queue, pks, limit, cursor, lo, hi)
    elif state == "retrying":
        page = yield from _list_retrying(queue, pks, limit, cursor)
    else:
        page = yield from _list_stream(state, queue, pks, limit, cursor)  # type: ignore[arg-type]
    if job_type is not None:
        page = Page([j for j in page.jobs if j.type == job_type], page.cursor)
    return page


def check_listing(
    state: str, limit: int, cursor: str | None, start_ms: int | None, end_ms: int | None
) -> None:
    names.job_state(state)
    check_limit(limit)
    if (start_ms is not None or end_ms is not None) and state != "scheduled":
        raise ValueError("a time range applies to scheduled jobs only")
    if cursor is not None:
        cursors.decode(cursor, state)


def time_ms(when: datetime | float | None) -> int | None:
    """Epoch ms of a datetime (timezone-aware) or epoch seconds; None stays None."""
    if when is None:
        return None
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise InvalidScheduleError("pass a timezone-aware datetime (e.g. datetime.now(UTC))")
        return round(when.timestamp() * 1000)
    try:
        return round(numbers.real(when, 0, numbers.MAX_TIME_MS / 1000, what="a time") * 1000)
    except numbers.BadNumber as exc:
        raise InvalidScheduleError(f"{exc}: pass a datetime or epoch seconds") from None


def current_layout(cache: QueueCache, queue: str) -> Plan[Layout]:
    """The queue's layout read now (a resize may have begun or ended since it was cached)."""
    return (yield from producer_plans.read_meta(cache, queue)).key_layout


# the operations (what Inspector and AsyncInspector drive) ------------------------------------


def list_jobs(
    cache: QueueCache,
    queue: str,
    state: str,
    *,
    job_type: str | None,
    limit: int,
    cursor: str | None,
    start: datetime | float | None,
    end: datetime | float | None,
) -> Plan[Page]:
    """One page of jobs in ``state``; ``start``/``end`` bound scheduled jobs' due time."""
    state = names.job_state(state)
    start_ms, end_ms = time_ms(start), time_ms(end)
    check_listing(state, limit, cursor, start_ms, end_ms)
    return _list_jobs(cache, queue, state, job_type, limit, cursor, start_ms, end_ms)


def _list_jobs(
    cache: QueueCache,
    queue: str,
    state: str,
    job_type: str | None,
    limit: int,
    cursor: str | None,
    start_ms: int | None,
    end_ms: int | None,
) -> Plan[Page]:
    layout = yield from current_layout(cache, queue)
    page = yield from list_page(
        queue, layout.every(), state, job_type=job_type, limit=limit, cursor=cursor,
        start_ms=start_ms, end_ms=end_ms,
    )  # fmt: skip
    return page


def find(cache: QueueCache, queue: str, idempotency_key: str) -> Plan[JobInfo | None]:
    """The job enqueued with ``idempotency_key`` while the key is retained, else None."""
    jobmod.check_idempotency_key(idempotency_key)
    return _find(cache, queue, idempotency_key)


def _find(cache: QueueCache, queue: str, idempotency_key: str) -> Plan[JobInfo | None]:
    layout = yield from current_layout(cache, queue)
    # Oldest generation first: a resize copies a key's record to the new one before it
    # deletes it from the old, so a record not in the old one is in the new one by then.
    job_id = None
    for pk in layout.homes(idempotency_key):
        job_id = yield from one(queues.idempotent_job(pk, idempotency_key))
        if job_id is not None:
            break
    if job_id is None:
        return None
    return (yield from producer_plans.one_at_home(cache, queue, job_id, producer.get))
