"""Actions on a queue's jobs, written once: run one now; cancel, replay the dead, empty a state,
each over every partition in bounded rounds (a page of :mod:`shardq.plans.listing` at a time),
each job's change its own atomic script.  :class:`shardq.Inspector` and
:class:`shardq.AsyncInspector` drive them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from shardq import jobs as jobmod
from shardq import names
from shardq.errors import JobNotFoundError
from shardq.plans import Plan, ok
from shardq.plans import producer as producer_plans
from shardq.plans.listing import check_listing, current_layout, list_page, time_ms
from shardq.store import inspection, producer
from shardq.store.layout import Layout
from shardq.store.meta import QueueCache
from shardq.store.op import Call

BATCH = 500  # jobs per round of a bulk action (cancel, retry, empty)
Progress = Callable[[int], None] | None


def run_now(cache: QueueCache, queue: str, job_id: str) -> Plan[str]:
    """Make a scheduled or dead job due now; returns what it was."""
    jobmod.check_job_id(job_id)
    return _run_now(cache, queue, job_id)


def _run_now(cache: QueueCache, queue: str, job_id: str) -> Plan[str]:
    (result,) = yield from producer_plans.at_home(cache, queue, [job_id], inspection.run_now)
    if isinstance(result, JobNotFoundError):
        raise JobNotFoundError(f"job {job_id!r} is not in queue {queue!r} (finished or never was)")
    if isinstance(result, BaseException):
        raise result
    return str(result)


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
    check_listing(state, BATCH, None, start_ms, end_ms)
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
    layout = yield from current_layout(cache, queue)
    return (yield from _cancel_all(cache, layout, state, job_type, start_ms, end_ms, progress))


def _cancel_all(
    cache: QueueCache,
    layout: Layout,
    state: str,
    job_type: str | None,
    start_ms: int | None,
    end_ms: int | None,
    progress: Progress,
) -> Plan[int]:
    done = 0
    cursor: str | None = None
    while True:
        page = yield from list_page(
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
    layout = yield from current_layout(cache, queue)
    done = 0
    cursor: str | None = None
    pks = layout.fleet()
    while True:
        page = yield from list_page(
            queue, layout.every(), "dead", job_type=job_type, limit=BATCH, cursor=cursor,
            start_ms=None, end_ms=None,
        )  # fmt: skip
        by_partition: dict[int, list[str]] = {}
        for j in page.jobs:
            if j.state == "dead" and j.entry_id:
                by_partition.setdefault(j.partition, []).append(j.entry_id)
        calls: list[Call[Any]] = [
            inspection.dlq_replay(pks[p], ids) for p, ids in by_partition.items()
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
    return _empty(cache, queue, names.job_state(state, names.EMPTY_STATES), progress)


def _empty(cache: QueueCache, queue: str, state: str, progress: Progress) -> Plan[int]:
    layout = yield from current_layout(cache, queue)
    pks = layout.fleet()
    done = 0
    if state == "scheduled":
        left = list(pks.values())
        while left:
            counts = ok((yield [inspection.empty_due(pk, 1000) for pk in left]))
            done += sum(counts)
            left = [pk for pk, count in zip(left, counts, strict=True) if count == 1000]
            if progress is not None:
                progress(done)
        return done
    if state == "dead":
        cursor: str | None = None
        while True:
            page = yield from list_page(
                queue, layout.every(), "dead", job_type=None, limit=BATCH, cursor=cursor,
                start_ms=None, end_ms=None,
            )  # fmt: skip
            by_partition: dict[int, list[str]] = {}
            for j in page.jobs:
                if j.entry_id:
                    by_partition.setdefault(j.partition, []).append(j.entry_id)
            ok((yield [inspection.dlq_purge(pks[p], ids) for p, ids in by_partition.items()]))
            done += sum(1 for j in page.jobs if j.state == "dead")
            if progress is not None:
                progress(done)
            cursor = page.cursor
            if cursor is None:
                return done
    return (yield from _cancel_all(cache, layout, state, None, None, None, progress))
