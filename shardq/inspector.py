"""Inspect and steer a queue: list jobs by state, find them, pause, run now, retry, cancel, empty.

Model: asynq's ``Inspector``.  :class:`Inspector` (sync) and :class:`AsyncInspector` (asyncio)
have the same methods and share one implementation: each operation is a *plan*, a generator
that yields batches of script calls and gets their results back, so the two differ only in how
a batch is sent (see :func:`_drive` and :meth:`AsyncInspector._drive`).

Every page costs bounded Redis work whatever the backlog:

- ``scheduled``: a k-way merge over the partitions' due sets.  Each partition returns at most
  ``limit`` jobs after the cursor (one script call, O(log^2 n): a ZCOUNT and a binary search
  among the cursor's score find the start rank), the pages are merged by (due time, job id)
  and the first ``limit`` kept; the cursor is the last (due, id) returned.
- ``ready``, ``running``, ``dead``: the same merge over each partition's stream, by entry id
  (``ready`` reads after the consumer group's last delivered id, ``running`` reads XPENDING).
- ``retrying``: failed jobs waiting for their next attempt, one HSCAN step of each partition's
  errors hash at a time, partition by partition (at most a few steps per page).

A filter by job type is applied to each page after the merge, so a filtered page may hold fewer
than ``limit`` jobs (even none) while more follow: page until ``cursor`` is None.
"""

from __future__ import annotations

import base64
import heapq
import re
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import orjson

from shardq import jobs as jobmod
from shardq import names
from shardq.errors import InvalidCursorError, JobNotFoundError
from shardq.store import envelope, fleet, inspect, keys, producer
from shardq.store.numbers import MAX_TIME_MS, Checked, shown
from shardq.store.op import Op

T = TypeVar("T")
ListState = Literal["scheduled", "ready", "running", "retrying", "dead"]
LIST_STATES: tuple[ListState, ...] = ("scheduled", "ready", "running", "retrying", "dead")
EMPTY_STATES = ("scheduled", "ready", "retrying", "dead")
MAX_LIMIT = 1000
RETRY_STEPS = 8  # HSCAN steps per retrying page
BATCH = 500  # jobs per round of a bulk action (cancel, retry, empty)
Plan = Generator[list[Op[Any]], list[Any], T]


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
    return isinstance(value, str) and (value == "" or bool(names.JOB_ID_RE.fullmatch(value)))


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
    """(state letter, attempt, body) of a stored envelope; a part that cannot be read is None
    (or {}), and named in ``bad`` when given."""
    if not raw:
        return None, None, {}
    c = Checked()
    letter, attempt_raw, body_raw = envelope.split_envelope(raw)
    attempt = c.integer("attempt", attempt_raw, None, 0, jobmod.MAX_ATTEMPT)
    try:
        body = envelope.decode_body(body_raw)
    except ValueError:
        c.bad["body"] = shown(body_raw)
        body = {}
    if bad is not None:
        bad.update(c.bad)
    return letter.decode(errors="replace"), attempt, body


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


def _ok(results: Sequence[Any]) -> list[Any]:
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return list(results)


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an integer 1..{MAX_LIMIT}, got {limit!r}")


# plans -----------------------------------------------------------------------------------------


def _list_due(
    queue: str, partitions: int, limit: int, cursor: str | None, start_ms: int, end_ms: int
) -> Plan[Page]:
    pks = keys.all_partition_keys(queue, partitions)
    score, member = _decode_cursor(cursor, "scheduled") if cursor else (start_ms, "")
    pages = _ok((yield [inspect.list_due(pk, score, member, end_ms, limit) for pk in pks]))
    # Each partition's rows are tagged in a list built now: a generator here would read the
    # partition when the merge consumes it, after the loop, and tag every job with the last one.
    merged = heapq.merge(
        *(
            [(due, job_id, pk.partition, raw) for due, job_id, raw in rows]
            for pk, (_, rows) in zip(pks, pages, strict=True)
        )
    )
    picked = [row for _, row in zip(range(limit + 1), merged, strict=False)]
    # More may follow even when the merge came out exactly full: a partition that returned a
    # whole page may hold more after it.
    more = len(picked) > limit or any(len(rows) == limit for _, rows in pages)
    picked = picked[:limit]
    jobs = [
        _summary(queue, p, job_id, "scheduled", raw, due_ms=due, last_error=None)
        for due, job_id, p, raw in picked
    ]
    last = picked[-1] if picked else None
    next_cursor = _encode_cursor("scheduled", [last[0], last[1]]) if more and last else None
    return Page(jobs, next_cursor)


LANE_PREFIX = f"{inspect.LANE_ENTRY_MS}-"


def _list_stream(
    state: Literal["ready", "running", "dead"],
    queue: str,
    partitions: int,
    limit: int,
    cursor: str | None,
) -> Plan[Page]:
    """A merge by (entry id, partition) over each partition's stream."""
    pks = keys.all_partition_keys(queue, partitions)
    after_id, after_p = _decode_cursor(cursor, state) if cursor else ("", -1)

    def after(p: int) -> str:
        if not after_id:
            return ""
        return after_id if p <= after_p else _prev_entry_id(after_id)

    builders: dict[str, Callable[[keys.PartitionKeys, str, int], Op[Any]]] = {
        "ready": inspect.list_ready,
        "running": inspect.list_running,
        "dead": inspect.list_dead,
    }
    build = builders[state]
    pages = _ok((yield [build(pk, after(pk.partition), limit) for pk in pks]))

    def key(entry_id: str) -> tuple[int, int]:
        ms, _, seq = entry_id.partition("-")
        return int(ms), int(seq or 0)

    rows = [(key(row[0]), p, now, row) for p, (now, rs) in enumerate(pages) for row in rs]
    rows.sort(key=lambda r: (r[0], r[1]))
    # A partition that returned a whole page may hold more, even if the merge is exactly full.
    more = len(rows) > limit or any(len(rs) == limit for _, rs in pages)
    rows = rows[:limit]
    jobs: list[JobSummary] = []
    for _, p, now, row in rows:
        if state == "ready":
            eid, job_id, due, raw, bad = row
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
                    "dead" if letter_state == "D" else "dead-letter only",
                    raw,
                    last_error=fields.get("e"),
                    dead_at_ms=dead_at,
                    entry_id=eid,
                    malformed=c.bad,
                )
            )
    last = rows[-1] if rows else None
    next_cursor = _encode_cursor(state, [last[3][0], last[1]]) if more and last else None
    return Page(jobs, next_cursor)


def _list_retrying(queue: str, partitions: int, limit: int, cursor: str | None) -> Plan[Page]:
    pks = keys.all_partition_keys(queue, partitions)
    p, scan = _decode_cursor(cursor, "retrying") if cursor else (0, "0")
    if not (isinstance(p, int) and 0 <= p < partitions and isinstance(scan, str)):
        raise InvalidCursorError("that retrying cursor does not fit this queue")
    jobs: list[JobSummary] = []
    for _ in range(RETRY_STEPS):
        (result,) = _ok((yield [inspect.list_retrying(pks[p], scan, max(1, limit - len(jobs)))]))
        _, scan, rows = result
        for job_id, due, error, raw, bad in rows:
            jobs.append(
                _summary(
                    queue, p, job_id, "retrying", raw, due_ms=due, last_error=error, malformed=bad
                )
            )
        if scan == "0":
            p, scan = p + 1, "0"
            if p == partitions:
                return Page(jobs, None)
        if len(jobs) >= limit:
            break
    return Page(jobs, _encode_cursor("retrying", [p, scan]))


def list_plan(
    queue: str,
    partitions: int,
    state: str,
    *,
    job_type: str | None,
    limit: int,
    cursor: str | None,
    start_ms: int | None,
    end_ms: int | None,
) -> Plan[Page]:
    """One page of jobs in ``state`` (see the module docstring), filtered by ``job_type``."""
    if state not in LIST_STATES:
        raise ValueError(f"state must be one of {', '.join(LIST_STATES)}, got {state!r}")
    _check_limit(limit)
    if (start_ms is not None or end_ms is not None) and state != "scheduled":
        raise ValueError("a time range applies to scheduled jobs only")
    if state == "scheduled":
        lo = -(10**15) if start_ms is None else int(start_ms)
        hi = 10**15 if end_ms is None else int(end_ms)
        page = yield from _list_due(queue, partitions, limit, cursor, lo, hi)
    elif state == "retrying":
        page = yield from _list_retrying(queue, partitions, limit, cursor)
    else:
        page = yield from _list_stream(state, queue, partitions, limit, cursor)  # type: ignore[arg-type]
    if job_type is not None:
        page = Page([j for j in page.jobs if j.type == job_type], page.cursor)
    return page


def each_page(
    queue: str, partitions: int, state: str, job_type: str | None, **kw: Any
) -> Plan[list[JobSummary]]:
    """Every job in ``state`` (all pages, BATCH per page); for the bulk actions."""
    out: list[JobSummary] = []
    cursor: str | None = None
    while True:
        page = yield from list_plan(
            queue, partitions, state, job_type=job_type, limit=BATCH, cursor=cursor,
            start_ms=kw.get("start_ms"), end_ms=kw.get("end_ms"),
        )  # fmt: skip
        out.extend(page.jobs)
        cursor = page.cursor
        if cursor is None:
            return out


def cancel_plan(
    queue: str,
    partitions: int,
    state: str,
    job_type: str | None,
    start_ms: int | None,
    end_ms: int | None,
    progress: Callable[[int], None] | None,
) -> Plan[int]:
    """Cancel every not-started job in ``state`` (scheduled, ready or retrying) matching the
    filter, a page at a time; each cancel is its own atomic script.  Returns how many."""
    if state not in ("scheduled", "ready", "retrying"):
        raise ValueError("only scheduled, ready or retrying jobs can be cancelled")
    done = 0
    cursor: str | None = None
    while True:
        page = yield from list_plan(
            queue, partitions, state, job_type=job_type, limit=BATCH, cursor=cursor,
            start_ms=start_ms, end_ms=end_ms,
        )  # fmt: skip
        ids = [j.id for j in page.jobs if j.id]
        results = yield [producer.cancel(queue, partitions, i) for i in ids]
        # A job that started or finished meanwhile is not an error of the sweep.
        done += sum(1 for r in results if r is True)
        if progress is not None:
            progress(done)
        cursor = page.cursor
        if cursor is None:
            return done


def retry_dead_plan(
    queue: str, partitions: int, job_type: str | None, progress: Callable[[int], None] | None
) -> Plan[int]:
    """Replay every dead job (of ``job_type``), a page at a time; returns how many."""
    done = 0
    cursor: str | None = None
    pks = keys.all_partition_keys(queue, partitions)
    while True:
        page = yield from list_plan(
            queue, partitions, "dead", job_type=job_type, limit=BATCH, cursor=cursor,
            start_ms=None, end_ms=None,
        )  # fmt: skip
        by_partition: dict[int, list[str]] = {}
        for j in page.jobs:
            if j.state == "dead" and j.entry_id:
                by_partition.setdefault(j.partition, []).append(j.entry_id)
        ops = [inspect.dlq_replay(pks[p], ids) for p, ids in by_partition.items()]
        done += int(sum(replayed for replayed, _ in _ok((yield ops))))
        if progress is not None:
            progress(done)
        cursor = page.cursor
        if cursor is None:
            return done


def empty_plan(
    queue: str, partitions: int, state: str, progress: Callable[[int], None] | None
) -> Plan[int]:
    """Delete every job in ``state``, in bounded batches; returns how many."""
    if state not in EMPTY_STATES:
        raise ValueError(f"state must be one of {', '.join(EMPTY_STATES)}, got {state!r}")
    pks = keys.all_partition_keys(queue, partitions)
    done = 0
    if state == "scheduled":
        left = list(pks)
        while left:
            counts = _ok((yield [inspect.empty_due(pk, 1000) for pk in left]))
            done += sum(counts)
            left = [pk for pk, n in zip(left, counts, strict=True) if n == 1000]
            if progress is not None:
                progress(done)
        return done
    if state == "dead":
        cursor: str | None = None
        while True:
            page = yield from list_plan(
                queue, partitions, "dead", job_type=None, limit=BATCH, cursor=cursor,
                start_ms=None, end_ms=None,
            )  # fmt: skip
            by_partition: dict[int, list[str]] = {}
            for j in page.jobs:
                if j.entry_id:
                    by_partition.setdefault(j.partition, []).append(j.entry_id)
            ops = [inspect.dlq_purge(pks[p], ids) for p, ids in by_partition.items()]
            _ok((yield ops))
            done += sum(1 for j in page.jobs if j.state == "dead")
            if progress is not None:
                progress(done)
            cursor = page.cursor
            if cursor is None:
                return done
    return (yield from cancel_plan(queue, partitions, state, None, None, None, progress))


def pause_plan(queue: str, partitions: int, paused: bool) -> Plan[int]:
    """Pause or resume every partition; returns how many changed state."""
    pks = keys.all_partition_keys(queue, partitions)
    return sum(_ok((yield [inspect.pause(pk, paused) for pk in pks])))


def control_plan(queue: str, partitions: int) -> Plan[int]:
    """Start using every partition's control hash (lua/control-init-2.lua); returns how many
    partitions started now."""
    pks = keys.all_partition_keys(queue, partitions)
    return sum(_ok((yield [inspect.control_init(pk) for pk in pks])))


def lanes_plan(queue: str, partitions: int, on: bool) -> Plan[int]:
    """Turn lanes on or off in every partition; returns how many changed state."""
    pks = keys.all_partition_keys(queue, partitions)
    return sum(_ok((yield [inspect.lanes(pk, on) for pk in pks])))


def partitions_plan(
    queue: str, partitions: int, node_of: Callable[[str], str]
) -> Plan[list[PartitionInfo]]:
    pks = keys.all_partition_keys(queue, partitions)
    ops: list[Op[Any]] = [inspect.partition_stats(pk, node_of(pk.due)) for pk in pks]
    ops += [fleet.lease_info(pk) for pk in pks]
    results = _ok((yield ops))
    snaps, leases = results[:partitions], results[partitions:]
    return [
        PartitionInfo(
            partition=s.partition,
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
        for s, lease in zip(snaps, leases, strict=True)
    ]


def members_plan(
    queue: str, partitions: int, now_ms: int, raw: dict[str, Any]
) -> Plan[list[Member]]:
    """Live members from the registry reads in ``raw`` (see the inspectors' ``members``)."""
    pks = keys.all_partition_keys(queue, partitions)
    leases = _ok((yield [fleet.lease_info(pk) for pk in pks]))
    inflight = _ok((yield [inspect.inflight(pk) for pk in pks]))
    held: dict[str, list[int]] = {}
    for pk, lease in zip(pks, leases, strict=True):
        if lease.owner:
            held.setdefault(lease.owner, []).append(pk.partition)
    pending: dict[str, int] = {}
    for per_partition in inflight:
        for consumer, n in per_partition.items():
            pending[consumer] = pending.get(consumer, 0) + n
    out: list[Member] = []
    for role in ("dispatcher", "worker"):
        draining = set(raw[f"{role}_drain"])
        for member_id, score in raw[role]:
            c = Checked()
            expires = c.time_ms("heartbeat_expires_ms", score, None)
            if expires is not None and expires < now_ms:
                continue
            if expires is None and isinstance(score, float) and score < now_ms:
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


def run_now_plan(queue: str, partitions: int, job_id: str) -> Plan[str]:
    names.check_job_id(job_id)
    pk = keys.partition_keys(queue, keys.partition_for(job_id, partitions), partitions)
    (result,) = yield [inspect.run_now(pk, job_id)]
    if isinstance(result, JobNotFoundError):
        raise JobNotFoundError(f"job {job_id!r} is not in queue {queue!r} (finished or never was)")
    if isinstance(result, BaseException):
        raise result
    return str(result)


# drivers ---------------------------------------------------------------------------------------


def drive(plan: Plan[T], run: Callable[[list[Op[Any]]], list[Any]]) -> T:
    """Run a plan synchronously: each batch it yields goes to ``run``."""
    try:
        ops = next(plan)
        while True:
            ops = plan.send(run(ops) if ops else [])
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def drive_async(plan: Plan[T], run: Callable[[list[Op[Any]]], Awaitable[list[Any]]]) -> T:
    """Run a plan on asyncio: each batch it yields goes to ``run``."""
    try:
        ops = next(plan)
        while True:
            ops = plan.send(await run(ops) if ops else [])
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def registry_keys(queue: str) -> dict[str, str]:
    return {
        "dispatcher": keys.dispatchers_key(queue),
        "worker": keys.workers_key(queue),
        "dispatcher_drain": keys.drain_key(queue),
        "worker_drain": keys.workers_drain_key(queue),
    }


def partition_key_names(queue: str, partitions: int) -> Iterable[list[str]]:
    """Every key of every partition (for deleting a queue), a partition at a time."""
    for pk in keys.all_partition_keys(queue, partitions):
        yield [
            *(pk.due, pk.jobs, pk.ready, pk.dead, pk.errors, pk.stats, pk.lease, pk.fence),
            *(pk.lane, pk.vtime, pk.ctl),
        ]


def queue_key_names(queue: str) -> list[str]:
    return [
        keys.queue_meta_key(queue),
        keys.dispatchers_key(queue),
        keys.workers_key(queue),
        keys.workers_drain_key(queue),
        keys.drain_key(queue),
        keys.owners_key(queue),
        # (each limit's state key expires once its reservations are past)
        keys.limits_key(queue),
    ]


__all__ = [
    "AsyncInspector",
    "Inspector",
    "InvalidCursorError",
    "JobSummary",
    "Member",
    "Page",
    "PartitionInfo",
]

from shardq.inspector_clients import AsyncInspector, Inspector  # noqa: E402
