"""The inspector's operations, written once: list jobs by state, find them, pause, run now,
retry, cancel, empty, delete a queue; the views of partitions and members; read and cancel
batches and chains (shardq.workflows).

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

import base64
import heapq
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

import orjson

from shardq import jobs as jobmod
from shardq import names
from shardq.config import MAX_LIMIT, ProducerSettings
from shardq.errors import (
    InvalidCursorError,
    InvalidScheduleError,
    JobNotFoundError,
    QueueInUseError,
)
from shardq.jobs import JobInfo
from shardq.plans import Plan, ok, one
from shardq.plans import producer as producer_plans
from shardq.plans import workflows as workflow_plans
from shardq.store import envelope, fleet, inspect, keys, numbers, producer, queues
from shardq.store import progress as progress_ops
from shardq.store.meta import QueueCache
from shardq.store.numbers import MAX_TIME_MS, Checked, shown
from shardq.store.op import Call
from shardq.workflows import BatchCancel, BatchInfo

# The states a listing pages (every job state), and those a queue can be emptied of: the one
# vocabulary of shardq.names, kept under these names for existing imports.
ListState = names.JobState
LIST_STATES: tuple[ListState, ...] = names.JOB_STATES
EMPTY_STATES = names.EMPTY_STATES
RETRY_STEPS = 8  # HSCAN steps per retrying page
BATCH = 500  # jobs per round of a bulk action (cancel, retry, empty)
SCAN_COUNT = 1000  # keys one SCAN step looks at per primary (deleting a queue)
Progress = Callable[[int], None] | None
NodeOf = Callable[[str], str]  # the host:port of the primary serving a key


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


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition now: counts per state, oldest due, lag, owner, node, paused."""

    partition: int
    node: str
    scheduled: int
    overdue: int
    ready: int
    running: int
    dead: int
    oldest_due_ms: int | None
    lag_seconds: float
    owner: str | None
    paused: bool
    counters: dict[str, int] = field(default_factory=dict)
    lanes: bool = False
    """Lanes on (priorities and tenants): ``ready`` includes the jobs waiting in the lane."""
    malformed: dict[str, str] = field(default_factory=dict)
    """Counters and figures that were not numbers in range (name -> raw value), left out."""


@dataclass(frozen=True, slots=True)
class Member:
    """A live worker or dispatcher of a queue."""

    role: str
    id: str
    instance: str
    heartbeat_expires_ms: int
    draining: bool
    partitions: list[int]  # dispatchers: partitions whose lease it holds
    inflight: int  # workers: deliveries it holds, over every partition
    malformed: dict[str, str] = field(default_factory=dict)
    """A heartbeat score that is not a time (e.g. ``+inf``, written by hand): shown as it is;
    such a member never expires by itself (the fleet's membership scripts prune it)."""


# cursors ---------------------------------------------------------------------------------------


def _encode_cursor(state: str, position: Any) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([state, position])).decode().rstrip("=")


# A cursor this inspector hands out is ~200 characters; refuse a long one before decoding it.
MAX_CURSOR = 1024
# Stream entry ids in cursors: a Redis clock in ms (or the lanes' synthetic 9999999999999),
# far below 10**15; Redis refuses an exclusive range start at the largest id, so the bounds
# stay well inside what XRANGE/XPENDING accept.
_ENTRY_ID_RE = re.compile(r"(\d{1,16})-(\d{1,19})")
MAX_ENTRY_MS = 10**15
MAX_ENTRY_SEQ = 2**63


def _is_int(value: Any, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _entry_id(value: Any) -> bool:
    match = _ENTRY_ID_RE.fullmatch(value) if isinstance(value, str) else None
    return match is not None and int(match[1]) <= MAX_ENTRY_MS and int(match[2]) <= MAX_ENTRY_SEQ


def _job_id_or_empty(value: Any) -> bool:
    return isinstance(value, str) and (value == "" or bool(jobmod.JOB_ID_RE.fullmatch(value)))


def _scan_cursor(value: Any) -> bool:
    return isinstance(value, str) and value.isascii() and value.isdigit() and int(value) < 2**64


def _pair(check_a: Callable[[Any], bool], check_b: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def check(position: Any) -> bool:
        return (
            isinstance(position, list)
            and len(position) == 2
            and check_a(position[0])
            and check_b(position[1])
        )

    return check


# What each state's cursor position must be (what _list_due, _list_stream and _list_retrying
# encode): anything else is refused here, before a script sees it.
_stream_position = _pair(_entry_id, lambda p: _is_int(p, 0, keys.MAX_PARTITIONS))
_POSITIONS: dict[str, Callable[[Any], bool]] = {
    # (due ms, job id): list-due takes scores within +-1e18
    "scheduled": _pair(lambda d: _is_int(d, -(10**18), 10**18), _job_id_or_empty),
    "ready": _stream_position,
    "running": _stream_position,
    "dead": _stream_position,
    # (partition, HSCAN cursor); the partition is checked against the queue by _list_retrying
    "retrying": _pair(lambda p: _is_int(p, 0, keys.MAX_PARTITIONS), _scan_cursor),
}


def _decode_cursor(cursor: str, state: str) -> Any:
    """The position a cursor of ``state`` holds, checked: :class:`InvalidCursorError` for any
    cursor this inspector could not have handed out (the console answers 400, the CLI one
    line), so nothing malformed reaches a script or the merge."""
    invalid = InvalidCursorError(
        f"cursor {str(cursor)[:40]!r} is not one this inspector handed out: pass the cursor of "
        "the previous page unchanged, or none for the first page"
    )
    if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR:
        raise invalid
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        decoded = orjson.loads(raw)
    except (ValueError, TypeError):  # binascii.Error and orjson.JSONDecodeError are ValueErrors
        raise invalid from None
    if not (isinstance(decoded, list) and len(decoded) == 2 and isinstance(decoded[0], str)):
        raise invalid
    kind, position = decoded
    if kind != state:
        if kind in _POSITIONS:
            raise InvalidCursorError(f"that cursor pages {kind!r} jobs, not {state!r}")
        raise invalid
    if not _POSITIONS[state](position):
        raise invalid
    return position


def _prev_entry_id(entry_id: str) -> str:
    """The stream id just before ``entry_id`` (pages read after an id, exclusive)."""
    ms, _, seq = entry_id.partition("-")
    if int(seq or 0) > 0:
        return f"{ms}-{int(seq) - 1}"
    return f"{int(ms) - 1}-18446744073709551615" if int(ms) > 0 else "0-0"


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
        # (a due-set score of +-inf, listed at the cursors' bound: see inspect.SCORE_BOUND)
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


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an integer 1..{MAX_LIMIT}, got {limit!r}")


# plans -----------------------------------------------------------------------------------------


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
    score, member = _decode_cursor(cursor, "scheduled") if cursor else (start_ms, "")
    pages = ok((yield [inspect.list_due(pk, score, member, end_ms, limit) for pk in pks]))
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
    next_cursor = _encode_cursor("scheduled", [last[0], last[1]]) if more and last else None
    return Page(jobs, next_cursor)


LANE_PREFIX = f"{inspect.LANE_ENTRY_MS}-"


def _list_stream(
    state: Literal["ready", "running", "dead"],
    queue: str,
    pks: list[keys.PartitionKeys],
    limit: int,
    cursor: str | None,
) -> Plan[Page]:
    """A merge by (entry id, partition) over each partition's stream (a partition by its
    place in ``pks``: every live generation's, :meth:`shardq.store.keys.Layout.every`)."""
    after_id, after_p = _decode_cursor(cursor, state) if cursor else ("", -1)

    def after(p: int) -> str:
        if not after_id:
            return ""
        return after_id if p <= after_p else _prev_entry_id(after_id)

    builders: dict[str, Callable[[keys.PartitionKeys, str, int], Call[Any]]] = {
        "ready": inspect.list_ready,
        "running": inspect.list_running,
        "dead": inspect.list_dead,
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
    next_cursor = _encode_cursor(state, [last[3][0], last[1]]) if more and last else None
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
    p, scan = _decode_cursor(cursor, "retrying") if cursor else (0, "0")
    if not (isinstance(p, int) and 0 <= p < partitions and isinstance(scan, str)):
        raise InvalidCursorError("that retrying cursor does not fit this queue")
    jobs: list[JobSummary] = []
    for _ in range(RETRY_STEPS):
        (result,) = ok((yield [inspect.list_retrying(pks[p], scan, max(1, limit - len(jobs)))]))
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
    return Page(jobs, _encode_cursor("retrying", [p, scan]))


def _list(
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


def _check_list(
    state: str, limit: int, cursor: str | None, start_ms: int | None, end_ms: int | None
) -> None:
    names.job_state(state)
    _check_limit(limit)
    if (start_ms is not None or end_ms is not None) and state != "scheduled":
        raise ValueError("a time range applies to scheduled jobs only")
    if cursor is not None:
        _decode_cursor(cursor, state)


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


def _layout(cache: QueueCache, queue: str) -> Plan[keys.Layout]:
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
    _check_list(state, limit, cursor, start_ms, end_ms)
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
    layout = yield from _layout(cache, queue)
    page = yield from _list(
        queue, layout.every(), state, job_type=job_type, limit=limit, cursor=cursor,
        start_ms=start_ms, end_ms=end_ms,
    )  # fmt: skip
    return page


def find(cache: QueueCache, queue: str, idempotency_key: str) -> Plan[JobInfo | None]:
    """The job enqueued with ``idempotency_key`` while the key is retained, else None."""
    jobmod.check_idempotency_key(idempotency_key)
    return _find(cache, queue, idempotency_key)


def _find(cache: QueueCache, queue: str, idempotency_key: str) -> Plan[JobInfo | None]:
    layout = yield from _layout(cache, queue)
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


def cancel(
    cache: QueueCache,
    queue: str,
    state: str,
    job_type: str | None,
    start: datetime | float | None,
    end: datetime | float | None,
    progress: Progress,
) -> Plan[int]:
    """Cancel every job in ``state`` (scheduled, ready, retrying, or running: their workers
    are told to stop them) matching the filter, a page at a time; each cancel is its own atomic
    script.  Returns how many."""
    state = names.job_state(state)
    if state not in (*names.NOT_STARTED_STATES, "running"):
        raise ValueError("only scheduled, ready, retrying or running jobs can be cancelled")
    start_ms, end_ms = time_ms(start), time_ms(end)
    _check_list(state, BATCH, None, start_ms, end_ms)
    return _cancel(cache, queue, state, job_type, start_ms, end_ms, progress)


def _cancel(
    cache: QueueCache,
    queue: str,
    state: str,
    job_type: str | None,
    start_ms: int | None,
    end_ms: int | None,
    progress: Progress,
) -> Plan[int]:
    layout = yield from _layout(cache, queue)
    return (yield from _cancel_all(cache, layout, state, job_type, start_ms, end_ms, progress))


def _cancel_all(
    cache: QueueCache,
    layout: keys.Layout,
    state: str,
    job_type: str | None,
    start_ms: int | None,
    end_ms: int | None,
    progress: Progress,
) -> Plan[int]:
    done = 0
    cursor: str | None = None
    while True:
        page = yield from _list(
            layout.queue, layout.every(), state, job_type=job_type, limit=BATCH, cursor=cursor,
            start_ms=start_ms, end_ms=end_ms,
        )  # fmt: skip
        ids = [j.id for j in page.jobs if j.id]
        make = producer.cancel_running if state == "running" else producer.cancel
        results = yield from producer_plans.at_home(cache, layout.queue, ids, make)
        # A job that started or finished meanwhile is not an error of the sweep.
        done += sum(1 for r in results if r is True)
        if progress is not None:
            progress(done)
        cursor = page.cursor
        if cursor is None:
            return done


def retry_dead(
    cache: QueueCache, queue: str, job_type: str | None, progress: Progress
) -> Plan[int]:
    """Replay every dead job (of ``job_type``), a page at a time; returns how many."""
    layout = yield from _layout(cache, queue)
    done = 0
    cursor: str | None = None
    pks = layout.fleet()
    while True:
        page = yield from _list(
            queue, layout.every(), "dead", job_type=job_type, limit=BATCH, cursor=cursor,
            start_ms=None, end_ms=None,
        )  # fmt: skip
        by_partition: dict[int, list[str]] = {}
        for j in page.jobs:
            if j.state == "dead" and j.entry_id:
                by_partition.setdefault(j.partition, []).append(j.entry_id)
        calls: list[Call[Any]] = [
            inspect.dlq_replay(pks[p], ids) for p, ids in by_partition.items()
        ]
        done += int(sum(replayed for replayed, _ in ok((yield calls))))
        if progress is not None:
            progress(done)
        cursor = page.cursor
        if cursor is None:
            return done


def empty(cache: QueueCache, queue: str, state: str, progress: Progress) -> Plan[int]:
    """Delete every job in ``state`` (scheduled, ready, retrying, dead), in bounded batches;
    returns how many."""
    return _empty(cache, queue, names.job_state(state, EMPTY_STATES), progress)


def _empty(cache: QueueCache, queue: str, state: str, progress: Progress) -> Plan[int]:
    layout = yield from _layout(cache, queue)
    pks = layout.fleet()
    done = 0
    if state == "scheduled":
        left = list(pks.values())
        while left:
            counts = ok((yield [inspect.empty_due(pk, 1000) for pk in left]))
            done += sum(counts)
            left = [pk for pk, count in zip(left, counts, strict=True) if count == 1000]
            if progress is not None:
                progress(done)
        return done
    if state == "dead":
        cursor: str | None = None
        while True:
            page = yield from _list(
                queue, layout.every(), "dead", job_type=None, limit=BATCH, cursor=cursor,
                start_ms=None, end_ms=None,
            )  # fmt: skip
            by_partition: dict[int, list[str]] = {}
            for j in page.jobs:
                if j.entry_id:
                    by_partition.setdefault(j.partition, []).append(j.entry_id)
            ok((yield [inspect.dlq_purge(pks[p], ids) for p, ids in by_partition.items()]))
            done += sum(1 for j in page.jobs if j.state == "dead")
            if progress is not None:
                progress(done)
            cursor = page.cursor
            if cursor is None:
                return done
    return (yield from _cancel_all(cache, layout, state, None, None, None, progress))


def pause(cache: QueueCache, queue: str, paused: bool) -> Plan[int]:
    """Pause or resume every partition; returns how many changed state."""
    pks = (yield from _layout(cache, queue)).every()
    return sum(ok((yield [inspect.pause(pk, paused) for pk in pks])))


def partitions(cache: QueueCache, queue: str, node_of: NodeOf) -> Plan[list[PartitionInfo]]:
    """Every partition now: counts per state, oldest due, lag, owner, node (``node_of`` names
    the primary serving a key), paused."""
    pks = (yield from _layout(cache, queue)).every()
    n = len(pks)
    calls: list[Call[Any]] = [inspect.partition_stats(pk, node_of(pk.due)) for pk in pks]
    calls += [fleet.lease_info(pk) for pk in pks]
    results = ok((yield calls))
    snaps, leases = results[:n], results[n:]
    return [
        PartitionInfo(
            partition=pk.fleet_id,
            node=s.node,
            scheduled=s.due,
            overdue=s.overdue,
            ready=s.ready,
            running=s.pending,
            dead=s.dead,
            oldest_due_ms=s.oldest_due_ms,
            lag_seconds=s.lag_seconds,
            owner=lease.owner,
            paused=s.paused,
            lanes=s.lanes,
            counters={k: v for k, v in s.counters.items() if k not in ("paused", "lanes")},
            malformed={**s.malformed, **lease.malformed},
        )
        for pk, s, lease in zip(pks, snaps, leases, strict=True)
    ]


def snapshots(
    cache: QueueCache, queue: str, node_of: NodeOf
) -> Plan[list[inspect.PartitionSnapshot]]:
    """A snapshot of every partition (the partition-stats script), in partition order."""
    pks = (yield from _layout(cache, queue)).every()
    return ok((yield [inspect.partition_stats(pk, node_of(pk.due)) for pk in pks]))


_ROLES = (
    ("dispatcher", keys.dispatchers_key, keys.drain_key),
    ("worker", keys.workers_key, keys.workers_drain_key),
)


def members(cache: QueueCache, queue: str) -> Plan[list[Member]]:
    """Live dispatchers and workers (heartbeat not expired on the Redis clock): partitions
    held, deliveries in flight, heartbeat."""
    pks = (yield from _layout(cache, queue)).every()
    # The registries and the clock their scores are written in: one node (the queue's slot).
    reads: list[Call[Any]] = [fleet.clock(keys.dispatchers_key(queue))]
    for _, members_key, drain_key in _ROLES:
        reads += [fleet.member_scores(members_key(queue)), fleet.member_set(drain_key(queue))]
    now_ms, *registries = ok((yield reads))
    leases = ok((yield [fleet.lease_info(pk) for pk in pks]))
    inflight = ok((yield [inspect.inflight(pk) for pk in pks]))
    held: dict[str, list[int]] = {}
    for pk, lease in zip(pks, leases, strict=True):
        if lease.owner:
            held.setdefault(lease.owner, []).append(pk.fleet_id)
    pending: dict[str, int] = {}
    for per_partition in inflight:
        for consumer, count in per_partition.items():
            pending[consumer] = pending.get(consumer, 0) + count
    out: list[Member] = []
    for i, (role, _, _) in enumerate(_ROLES):
        scores, draining = registries[2 * i], registries[2 * i + 1]
        for member_id, score in scores:
            c = Checked()
            expires = c.time_ms("heartbeat_expires_ms", score, None)
            if expires is not None and expires < now_ms:
                continue
            if expires is None and score < now_ms:
                continue  # (-inf: long expired)
            out.append(
                Member(
                    role=role,
                    id=member_id,
                    instance=member_id.partition(":")[2].rpartition("#")[0] or member_id,
                    heartbeat_expires_ms=expires if expires is not None else 0,
                    malformed=c.bad,
                    draining=member_id in draining,
                    partitions=held.get(member_id, []) if role == "dispatcher" else [],
                    inflight=pending.get(member_id, 0) if role == "worker" else 0,
                )
            )
    return out


def run_now(cache: QueueCache, queue: str, job_id: str) -> Plan[str]:
    """Make a scheduled or dead job due now; returns what it was."""
    jobmod.check_job_id(job_id)
    return _run_now(cache, queue, job_id)


def _run_now(cache: QueueCache, queue: str, job_id: str) -> Plan[str]:
    (result,) = yield from producer_plans.at_home(cache, queue, [job_id], inspect.run_now)
    if isinstance(result, JobNotFoundError):
        raise JobNotFoundError(f"job {job_id!r} is not in queue {queue!r} (finished or never was)")
    if isinstance(result, BaseException):
        raise result
    return str(result)


# batches and chains (shardq.workflows) ------------------------------------------------------
# The workflows' own plans (shardq.plans.workflows) check the id and the queue, and read only.


def batch(cache: QueueCache, queue: str, batch_id: str) -> Plan[BatchInfo | None]:
    """A batch or chain with its counts, or None (never created, or expired after its
    retention).  UnknownQueueError for a queue that does not exist."""
    return workflow_plans.get_batch(cache, queue, batch_id)


def batches(cache: QueueCache, queue: str, limit: int) -> Plan[list[BatchInfo]]:
    """The newest ``limit`` batches and chains of the queue, newest first (nested ones too)."""
    return workflow_plans.list_batches(cache, queue, limit)


def cancel_batch(
    cache: QueueCache, queue: str, batch_id: str, settings: ProducerSettings
) -> Plan[BatchCancel]:
    """Cancel a batch or chain (shardq.plans.workflows.cancel_batch): no callback fires any
    more, its waiting children are cancelled; BatchNotFoundError for an unknown id."""
    return workflow_plans.cancel_batch(cache, queue, batch_id, settings=settings)


# deleting a queue ----------------------------------------------------------------------------


def delete_queue(
    cache: QueueCache, queue: str, force: bool, routes: Callable[[], list[str]]
) -> Plan[int]:
    """Delete the queue and every key of it (:mod:`shardq.store.keys` names them all); returns
    how many keys were deleted.  ``routes`` gives a route key per primary (SCAN).

    The order leaves nothing runnable half-deleted, and a deletion cut short (a failover that
    outlasts the retries) can be run again to finish it:

    1. refused while workers or dispatchers are live (unless ``force``);
    2. every partition paused: nothing is promoted or delivered while the keys go;
    3. each partition's keys in one UNLINK (atomic: a partition is there, paused, or gone);
    4. what only SCAN finds, on every primary: the partitions' idempotency keys (else a queue
       created again under the name would answer an old key with a job that is gone) and the
       limits' state (a limit removed earlier keeps its state until it expires);
    5. the queue's own keys, then its registry entry, then its meta last: while the meta is
       there the partition count is known, so running the deletion again finishes it.
    """
    return _delete_queue(cache, queue, force, routes)


def _delete_queue(
    cache: QueueCache, queue: str, force: bool, routes: Callable[[], list[str]]
) -> Plan[int]:
    layout = yield from _layout(cache, queue)
    live = yield from members(cache, queue)
    if live and not force:
        raise QueueInUseError(
            f"queue {queue!r} has {len(live)} live workers/dispatchers: stop them first (or force)"
        )
    yield from pause(cache, queue, True)
    pks = layout.every()
    deleted: int = sum(ok((yield [queues.unlink(pk.all()) for pk in pks])))
    deleted += yield from _delete_tagged(queue, routes())
    meta, *own = keys.queue_keys(queue)
    deleted += yield from one(queues.unlink(own))
    yield from one(queues.unregister(queue))
    deleted += yield from one(queues.unlink([meta]))
    cache.forget(queue)
    return deleted


def _delete_tagged(queue: str, routes: list[str]) -> Plan[int]:
    """SCAN every primary for keys with the queue's partition or limit tags and UNLINK them,
    one call per slot; returns how many were deleted."""
    pattern = keys.queue_tags_pattern(queue)
    cursors = dict.fromkeys(routes, "0")
    deleted = 0
    while cursors:
        steps = ok((yield [queues.scan(r, c, pattern, SCAN_COUNT) for r, c in cursors.items()]))
        by_slot: dict[int, list[str]] = {}
        following: dict[str, str] = {}
        for route, (cursor, found) in zip(cursors, steps, strict=True):
            for name in found:
                if keys.tag_of_queue(queue, name):
                    by_slot.setdefault(keys.slot_of(name), []).append(name)
            if cursor != "0":
                following[route] = cursor
        if by_slot:
            deleted += sum(ok((yield [queues.unlink(names) for names in by_slot.values()])))
        cursors = following
    return deleted
