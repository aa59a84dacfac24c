"""Look inside queues and act on them: :class:`Inspector` (sync) and :class:`AsyncInspector`
(asyncio), side by side.

Both are thin: a method builds the operation's plan (:mod:`shardq.plans.listing`,
:mod:`~shardq.plans.job_actions`, :mod:`~shardq.plans.queue_admin`, and for batches
:mod:`~shardq.plans.workflows`, where every decision is written once, its arguments checked as
it is built) and drives it through its client's runner (:mod:`shardq.store.retry`), so a
listing rides out a failover, and raises the same typed :mod:`shardq.errors` exception, as
``Client.get`` does.  Documentation is written once, on :class:`Inspector`;
:class:`AsyncInspector` takes it (:func:`shardq.plans.twin_of`), and tests/unit/test_parity.py
keeps the two surfaces identical.  What each page costs is in :mod:`shardq.plans.listing`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from shardq.config import MAX_LIMIT as MAX_LIMIT
from shardq.errors import InvalidCursorError, QueueInUseError
from shardq.jobs import JobInfo, JobResult
from shardq.plans import job_actions, listing, queue_admin, twin_of
from shardq.plans import producer as producer_plans
from shardq.plans import workflows as workflow_plans
from shardq.plans.job_actions import Progress
from shardq.plans.listing import EMPTY_STATES as EMPTY_STATES
from shardq.plans.listing import LIST_STATES as LIST_STATES
from shardq.plans.listing import JobSummary as JobSummary
from shardq.plans.listing import Page
from shardq.plans.queue_admin import Member, PartitionInfo
from shardq.workflows import BatchCancel, BatchInfo

if TYPE_CHECKING:
    from shardq.client import AsyncClient, Client

__all__ = [
    "EMPTY_STATES",
    "LIST_STATES",
    "MAX_LIMIT",
    "AsyncInspector",
    "Inspector",
    "InvalidCursorError",
    "JobSummary",
    "Member",
    "Page",
    "PartitionInfo",
    "QueueInUseError",
]


class Inspector:
    """Look inside queues and act on them (sync).  ``Inspector(client)``; see
    :mod:`shardq.plans.listing` for what each page costs."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def _node_of(self, key: str) -> str:
        return self.client.transport.node_name(key)

    def _routes(self) -> list[str]:
        return self.client.transport.primary_routes()

    def list_jobs(
        self,
        queue: str,
        state: str,
        *,
        job_type: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
    ) -> Page:
        """One page of jobs in ``state`` (one of :data:`shardq.names.JOB_STATES`: scheduled,
        ready, running, retrying, dead; ``scheduled`` pages the whole due set, retrying jobs
        included, each row's ``state`` saying which; the old word ``active`` is still taken for
        ``running``, for one release); pass the page's ``cursor`` back for the next.
        ``start``/``end`` bound scheduled jobs' due time."""
        plan = listing.list_jobs(
            self.client.cache, queue, state, job_type=job_type, limit=limit, cursor=cursor,
            start=start, end=end,
        )  # fmt: skip
        return self.client.run(plan, f"listing {state} jobs of {queue!r}")

    def get(self, queue: str, job_id: str) -> JobInfo | None:
        """One job by id (None: finished, cancelled or never existed)."""
        plan = producer_plans.get(self.client.cache, queue, job_id)
        return self.client.run(plan, f"reading job {job_id}")

    def result(self, queue: str, job_id: str) -> JobResult | None:
        """A completed job's kept result (enqueued with ``keep_result``), or None."""
        plan = producer_plans.result_info(self.client.cache, queue, job_id)
        return self.client.run(plan, f"reading the result of job {job_id}")

    def find(self, queue: str, idempotency_key: str) -> JobInfo | None:
        """The job enqueued with ``idempotency_key`` while the key is retained, else None."""
        plan = listing.find(self.client.cache, queue, idempotency_key)
        return self.client.run(plan, f"finding idempotency key {idempotency_key!r}")

    def partitions(self, queue: str) -> list[PartitionInfo]:
        """Every partition now: counts per state, oldest due, lag, owner, node, paused."""
        plan = queue_admin.partitions(self.client.cache, queue, self._node_of)
        return self.client.run(plan, f"reading the partitions of {queue!r}")

    def members(self, queue: str) -> list[Member]:
        """Live dispatchers and workers: partitions held, deliveries in flight, heartbeat."""
        plan = queue_admin.members(self.client.cache, queue)
        return self.client.run(plan, f"reading the members of {queue!r}")

    def pause(self, queue: str) -> int:
        """Pause every partition: nothing is promoted or delivered until :meth:`resume`; jobs
        keep their due times.  Returns how many partitions changed state."""
        plan = queue_admin.pause(self.client.cache, queue, True)
        return self.client.run(plan, f"pausing {queue!r}")

    def resume(self, queue: str) -> int:
        """Resume every partition and wake its dispatcher and workers at once."""
        plan = queue_admin.pause(self.client.cache, queue, False)
        return self.client.run(plan, f"resuming {queue!r}")

    def run_now(self, queue: str, job_id: str) -> str:
        """Make a scheduled or dead job due now; returns what it was (``scheduled``, ``dead``,
        or ``ready`` when already promoted).  JobRunningError when a worker holds it."""
        plan = job_actions.run_now(self.client.cache, queue, job_id)
        return self.client.run(plan, f"run-now of job {job_id}")

    def retry_dead(self, queue: str, job_type: str | None = None, progress: Progress = None) -> int:
        """Replay every dead job (of ``job_type``), attempts reset; returns how many."""
        plan = job_actions.retry_dead(self.client.cache, queue, job_type, progress)
        return self.client.run(plan, f"replaying dead jobs of {queue!r}")

    def cancel(
        self,
        queue: str,
        state: str = "scheduled",
        *,
        job_type: str | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        progress: Progress = None,
    ) -> int:
        """Cancel every not-started job in ``state`` matching the filter; returns how many."""
        plan = job_actions.cancel(self.client.cache, queue, state, job_type, start, end, progress)
        return self.client.run(plan, f"cancelling {state} jobs of {queue!r}")

    def empty(self, queue: str, state: str, progress: Progress = None) -> int:
        """Delete every job in ``state`` (scheduled, ready, retrying, dead), in bounded batches;
        returns how many."""
        plan = job_actions.empty(self.client.cache, queue, state, progress)
        return self.client.run(plan, f"emptying {state} jobs of {queue!r}")

    def batch(self, queue: str, batch_id: str) -> BatchInfo | None:
        """A batch or chain by id (a nested one too: ``<id>~<index>``) with its counts, state,
        callbacks and what is left to fire; None when unknown or expired after its retention."""
        plan = workflow_plans.get_batch(self.client.cache, queue, batch_id)
        return self.client.run(plan, f"reading batch {batch_id!r}")

    def batches(self, queue: str, limit: int = 50) -> list[BatchInfo]:
        """The newest ``limit`` batches and chains of the queue, newest first (read only: a
        listed id whose record expired is skipped)."""
        plan = workflow_plans.list_batches(self.client.cache, queue, limit)
        return self.client.run(plan, f"listing the batches of {queue!r}")

    def cancel_batch(self, queue: str, batch_id: str) -> BatchCancel:
        """Cancel a batch or chain: no callback fires any more, its waiting children are
        cancelled (running ones end as they will).  Safe to repeat; BatchNotFoundError for an
        unknown id."""
        plan = workflow_plans.cancel_batch(
            self.client.cache, queue, batch_id, settings=self.client.settings
        )
        return self.client.run(plan, f"cancelling batch {batch_id!r}")

    def delete_queue(self, queue: str, *, force: bool = False) -> int:
        """Delete the queue and every key of it: jobs, schedules, limits and their state,
        idempotency keys, registry entry.  Refused while workers or dispatchers are live (stop
        them first) unless ``force``.  Returns how many keys were deleted; a deletion cut short
        can be run again to finish it."""
        plan = queue_admin.delete_queue(self.client.cache, queue, force, self._routes)
        return self.client.run(plan, f"deleting queue {queue!r}")


@twin_of(Inspector)
class AsyncInspector:
    """:class:`Inspector` for asyncio: the same methods, awaited.  ``AsyncInspector(client)``
    with an :class:`~shardq.AsyncClient`."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    def _node_of(self, key: str) -> str:
        return self.client.transport.node_name(key)

    def _routes(self) -> list[str]:
        return self.client.transport.primary_routes()

    async def list_jobs(
        self,
        queue: str,
        state: str,
        *,
        job_type: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
    ) -> Page:
        plan = listing.list_jobs(
            self.client.cache, queue, state, job_type=job_type, limit=limit, cursor=cursor,
            start=start, end=end,
        )  # fmt: skip
        return await self.client.run(plan, f"listing {state} jobs of {queue!r}")

    async def get(self, queue: str, job_id: str) -> JobInfo | None:
        plan = producer_plans.get(self.client.cache, queue, job_id)
        return await self.client.run(plan, f"reading job {job_id}")

    async def result(self, queue: str, job_id: str) -> JobResult | None:
        plan = producer_plans.result_info(self.client.cache, queue, job_id)
        return await self.client.run(plan, f"reading the result of job {job_id}")

    async def find(self, queue: str, idempotency_key: str) -> JobInfo | None:
        plan = listing.find(self.client.cache, queue, idempotency_key)
        return await self.client.run(plan, f"finding idempotency key {idempotency_key!r}")

    async def partitions(self, queue: str) -> list[PartitionInfo]:
        plan = queue_admin.partitions(self.client.cache, queue, self._node_of)
        return await self.client.run(plan, f"reading the partitions of {queue!r}")

    async def members(self, queue: str) -> list[Member]:
        plan = queue_admin.members(self.client.cache, queue)
        return await self.client.run(plan, f"reading the members of {queue!r}")

    async def pause(self, queue: str) -> int:
        plan = queue_admin.pause(self.client.cache, queue, True)
        return await self.client.run(plan, f"pausing {queue!r}")

    async def resume(self, queue: str) -> int:
        plan = queue_admin.pause(self.client.cache, queue, False)
        return await self.client.run(plan, f"resuming {queue!r}")

    async def run_now(self, queue: str, job_id: str) -> str:
        plan = job_actions.run_now(self.client.cache, queue, job_id)
        return await self.client.run(plan, f"run-now of job {job_id}")

    async def retry_dead(
        self, queue: str, job_type: str | None = None, progress: Progress = None
    ) -> int:
        plan = job_actions.retry_dead(self.client.cache, queue, job_type, progress)
        return await self.client.run(plan, f"replaying dead jobs of {queue!r}")

    async def cancel(
        self,
        queue: str,
        state: str = "scheduled",
        *,
        job_type: str | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        progress: Progress = None,
    ) -> int:
        plan = job_actions.cancel(self.client.cache, queue, state, job_type, start, end, progress)
        return await self.client.run(plan, f"cancelling {state} jobs of {queue!r}")

    async def empty(self, queue: str, state: str, progress: Progress = None) -> int:
        plan = job_actions.empty(self.client.cache, queue, state, progress)
        return await self.client.run(plan, f"emptying {state} jobs of {queue!r}")

    async def batch(self, queue: str, batch_id: str) -> BatchInfo | None:
        plan = workflow_plans.get_batch(self.client.cache, queue, batch_id)
        return await self.client.run(plan, f"reading batch {batch_id!r}")

    async def batches(self, queue: str, limit: int = 50) -> list[BatchInfo]:
        plan = workflow_plans.list_batches(self.client.cache, queue, limit)
        return await self.client.run(plan, f"listing the batches of {queue!r}")

    async def cancel_batch(self, queue: str, batch_id: str) -> BatchCancel:
        plan = workflow_plans.cancel_batch(
            self.client.cache, queue, batch_id, settings=self.client.settings
        )
        return await self.client.run(plan, f"cancelling batch {batch_id!r}")

    async def delete_queue(self, queue: str, *, force: bool = False) -> int:
        plan = queue_admin.delete_queue(self.client.cache, queue, force, self._routes)
        return await self.client.run(plan, f"deleting queue {queue!r}")
