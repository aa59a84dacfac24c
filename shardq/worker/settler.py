"""Settler: writes each finished delivery's outcome to Redis, and counts it only once written.

Successes are acknowledged in batches per partition: the next read of the partition carries
them (the fetch script settles them before it reads: :meth:`Settler.take_for_read`), and those
whose partition is not read within ``ACK_LINGER`` go as ack calls of their own with the next
round trip to the primary (:meth:`Settler.take_acks`); an ack that fails stays buffered and is
sent again.  A failure is settled by the fail script (back to due
after the backoff, or dead) as its own task, resent through faults for ``settle_window``
seconds; if it still cannot be written (Redis down that long, or the script refuses it), the
delivery is given up: it leaves the in-flight table, so the heartbeat stops claiming it and
another worker reclaims it after the visibility timeout.  Nothing is counted or logged as
retried or dead before the script said so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import traceback
from collections.abc import Callable, Container, Iterable
from typing import Any

from shardq import backoff
from shardq.errors import JobCancelledError, PermanentError, RetryAfter, UnknownJobTypeError
from shardq.jobs import DEFAULT_BACKOFF, Backoff
from shardq.logs import log_event
from shardq.metrics import registry as metrics
from shardq.runtime.budget import worker_share
from shardq.store import delivery, faults, keys, numbers, results
from shardq.store.op import Op
from shardq.worker.context import WorkerContext
from shardq.worker.inflight import Delivery

log = logging.getLogger("shardq.worker")

Taken = list[tuple[int, list[Delivery]]]

#: How long a finished job's ack waits for a read of its own partition to ride with, when the
#: lateness budget is not 0.  An ack that rides costs Redis a few commands inside the fetch
#: instead of a call of its own (lua/ack-4.lua: ~22 µs a call at 2,000 jobs/s, one call per job
#: or so), and the worker one op less.  The wait makes no job late: a finished job holds no
#: room; meanwhile it still shows as running (a cancel says so), and a worker that dies in it
#: leaves the job to run again after reclaim, as any delivery not yet acknowledged.  At 30 jobs/s
#: per partition (2,000 jobs/s on 64) the next read comes within 100 ms for ~95 % of acks.
#: Acks waiting are bounded too (:attr:`Settler.ack_bound`): past one concurrency's worth, and
#: at most half of what the in-flight table lets finished jobs hold without taking room
#: (InFlight.finished_room), they all go at once.  In steady state far fewer wait (each waits
#: for its partition's next read: at 2,000 jobs/s on 64 partitions ~30-40 ms on average); in
#: a burst the bound is reached within milliseconds and acks go with every round, as before
#: (a bound of 500 at concurrency 100 left 50,000-job bursts a little later still: p99
#: 0.92-1.73 s against 0.74-0.95 s without the linger and 0.84-1.36 s with this bound, in
#: alternating runs: bench/reference/2026-12-03/burst-ab-dee0cf8.txt).  Without the bound (and with
#: finished jobs free only up to one concurrency's worth) a
#: busy worker whose rounds read few partitions let acks pile up for the linger, lost room for
#: them, read fewer partitions still, and fell behind (5,000 jobs/s on this box, concurrency
#: 100: p50 lateness 3.5-5.4 s).
ACK_LINGER = 0.1

# Longest delay a handler may ask for with RetryAfter (the producer's horizon is a year).
MAX_RETRY_DELAY = 366 * 24 * 3600.0


def describe(exc: BaseException, limit: int) -> str:
    """``Type: message`` plus the last frames, cut to ``limit`` bytes; never raises (an
    exception whose ``__str__`` fails is described by its type)."""
    try:
        message = str(exc)
    except Exception:
        message = "<unprintable exception>"
    text = f"{type(exc).__name__}: {message}"
    if not isinstance(exc, PermanentError | RetryAfter | UnknownJobTypeError):
        with contextlib.suppress(Exception):
            text += "\n" + "".join(traceback.format_tb(exc.__traceback__)[-3:])
    return text.encode(errors="replace")[:limit].decode(errors="ignore")


def retry_delay_ms(
    exc: BaseException,
    attempt: int,
    max_attempts: int,
    backoff: Backoff | None,
    *,
    permanent: bool = False,
) -> int:
    """-1 to dead-letter now; else how long until the next attempt.  ``permanent``: the
    worker's settings make this failure final whatever its type.

    A RetryAfter delay that is not a finite number of seconds in [0, a year] falls back to the
    job's backoff (and the error text says so), rather than breaking the settle.
    """
    if permanent or isinstance(exc, PermanentError) or attempt >= max_attempts:
        return -1
    if isinstance(exc, RetryAfter):
        try:
            return round(numbers.real(exc.delay, 0, MAX_RETRY_DELAY) * 1000)
        except numbers.BadNumber:
            pass  # nan, inf, 10**400, '5', -1: the backoff decides
    return backoff_ms(attempt, backoff)


def backoff_ms(attempt: int, backoff: Backoff | None) -> int:
    """The job's backoff after ``attempt``, in ms, within the fail script's bounds."""
    try:
        delay = (backoff or DEFAULT_BACKOFF).delay(attempt)
    except Exception:
        delay = DEFAULT_BACKOFF.delay(attempt)
    # The fail script takes at most a year (a backoff's base and cap are checked to stay
    # within it; the clamp keeps a settle from ever being refused).
    return round(min(max(delay, 0.0), MAX_RETRY_DELAY) * 1000)


def workflow_ref(d: Delivery) -> str:
    """``<batch id>|<index>`` of a batch child or chain step (its end is reported), else ''."""
    job = d.job
    return "" if job.batch_index is None else f"{job.batch_id}|{job.batch_index}"


def _completion(d: Delivery) -> results.Completion:
    """A delivery that keeps its result or belongs to a workflow, as the complete script
    takes it."""
    assert d.result is not None
    job = d.job
    retention = 0 if job.keep_result is None else round(job.keep_result * 1000)
    record = d.result if job.keep_result is not None or job.carries_value else b""
    carried = d.result if job.carries_value else b""
    return results.Completion(d.entry_id, d.raw_id, retention, record, workflow_ref(d), carried)


def _complete_chunks(kept: list[Delivery]) -> list[list[Delivery]]:
    """Result-keeping deliveries in complete calls of at most MAX_COMPLETE jobs and (but for a
    single larger one) MAX_COMPLETE_BYTES of records."""
    chunks: list[list[Delivery]] = []
    size = 0
    for d in kept:
        n = len(d.result or b"")
        full = len(chunks[-1]) >= results.MAX_COMPLETE if chunks else True
        if full or size + n > results.MAX_COMPLETE_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(d)
        size += n
    return chunks


class Settler:
    """Acks in batches, failures one by one with resends; counts what was written."""

    def __init__(self, ctx: WorkerContext, *, wake: Callable[[int], None]) -> None:
        """``wake(partition)``: let the partition's fetch loop run a round (an ack is waiting
        to go with it, or a settled failure freed room)."""
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = ctx.pks
        self.inflight = ctx.inflight
        self.settings = ctx.settings
        self.stats = ctx.stats
        self.wake = wake
        #: How long a finished job's ack may wait for a round that fetches (the worker's share
        #: of the lateness budget; 0: a round goes at once).
        self.share = worker_share(ctx.settings.lateness_budget)
        #: How long an ack may wait for a read of its partition (0 with no budget: at once).
        self.linger = max(ACK_LINGER, self.share) if self.share > 0 else 0.0
        #: Unwritten acks at which the linger ends for all of them (see ACK_LINGER).
        self.ack_bound = max(1, min(ctx.inflight.concurrency, ctx.inflight.finished_room() // 2))
        self.acks: dict[int, list[Delivery]] = {}
        #: When each partition's oldest buffered ack was buffered (monotonic seconds).
        self.ack_since: dict[int, float] = {}
        self.pending_acks = 0
        self.tasks: set[asyncio.Task[None]] = set()
        # The registered handler types (the worker's live dict): label values come only from
        # these, every other type counts as "other".
        self.job_types: Container[str] = ctx.handlers

    def _count(self, job_type: str, outcome: str, n: int = 1) -> None:
        label = metrics.job_type_label(job_type, self.job_types)
        metrics.WORKER_JOBS.inc((self.queue, label, outcome), n)

    # successes -----------------------------------------------------------------------------

    def succeeded(self, d: Delivery) -> None:
        """The handler returned: buffer the ack for the partition's next round trip (a job
        cancelled while it ran settles as cancelled instead).  A job
        that keeps its result, or a chain step, does not linger: a producer or the chain's
        next step waits for it, so its partition's acks go with the next round (as a complete
        call)."""
        if d.cancelled:
            self.failed(d, JobCancelledError(f"job {d.job.id} was cancelled while running"))
            return
        self.inflight.mark_finished(d)
        batch = self.acks.get(d.partition)
        if batch is None:
            batch = self.acks[d.partition] = []
        # A producer may be waiting for a kept result: it goes now, and so does a chain
        # step's end, which the next step waits for (a 10-step chain would otherwise spend
        # ten lingers between its steps).  A batch child's end (d.result b"") waits like an
        # ack, so its complete call carries its partition's other children too.
        urgent = d.result is not None and (
            getattr(d.job, "keep_result", None) is not None
            or getattr(d.job, "carries_value", False)
        )
        if urgent:
            self.ack_since[d.partition] = 0.0
        elif not batch:
            self.ack_since[d.partition] = time.monotonic()
        batch.append(d)
        self.pending_acks += 1
        if len(batch) == 1 or self.pending_acks == self.ack_bound or urgent:
            self.wake(d.partition)

    def take_for_read(self, partition: int) -> list[Delivery]:
        """The partition's finished jobs (at most ``delivery.MAX_ACK``), taken off the buffer
        to ride with a read of it; :meth:`acked` settles them with the read's reply."""
        batch = self.acks.get(partition)
        if not batch:
            return []
        if any(d.result is not None for d in batch):
            # Jobs keeping a result settle through the complete script (take_acks), now.
            plain = [d for d in batch if d.result is None]
            part, rest = plain[: delivery.MAX_ACK], plain[delivery.MAX_ACK :]
            self.acks[partition] = rest + [d for d in batch if d.result is not None]
            return part
        part, rest = batch[: delivery.MAX_ACK], batch[delivery.MAX_ACK :]
        if rest:
            self.acks[partition] = rest
        else:
            del self.acks[partition]
            self.ack_since.pop(partition, None)
        return part

    def take_acks(
        self, partitions: Iterable[int], due_by: float | None = None
    ) -> tuple[Taken, list[Op[int]]]:
        """The ack ops for the given partitions' finished jobs, taken off the buffer (jobs that
        finish while they are on the way start a new batch); :meth:`acked` puts back what
        failed.  ``due_by``: only the partitions whose oldest ack has waited the linger by
        then (the others wait on for a read of their own partition)."""
        taken: Taken = []
        ops: list[Op[int]] = []
        if self.pending_acks >= self.ack_bound:
            due_by = None  # too many waiting: every ack goes now
        since, linger = self.ack_since, self.linger
        for p in partitions:
            if due_by is not None and since.get(p, 0.0) + linger > due_by:
                continue
            batch = self.acks.pop(p, None)
            self.ack_since.pop(p, None)
            if not batch:
                continue
            kept = [d for d in batch if d.result is not None]
            if kept:
                batch = [d for d in batch if d.result is None]
                for part in _complete_chunks(kept):
                    taken.append((p, part))
                    ops.append(results.complete(self.pks[p], [_completion(d) for d in part]))
            for lo in range(0, len(batch), delivery.MAX_ACK):
                part = batch[lo : lo + delivery.MAX_ACK]
                taken.append((p, part))
                ops.append(delivery.ack(self.pks[p], [(d.entry_id, d.raw_id) for d in part]))
        return taken, ops

    def acked(self, taken: Taken, results: list[Any]) -> None:
        """Record an ack round: written acks settle their deliveries; failed ones go back to
        the buffer, to be sent again with the next round."""
        for (p, batch), result in zip(taken, results, strict=True):
            if isinstance(result, BaseException):
                metrics.SCRIPT_ERRORS.labels(self.queue, "ack", type(result).__name__).inc()
                self.acks[p] = batch + self.acks.get(p, [])
                self.ack_since[p] = 0.0  # sent once already: due with the next round
                continue
            self.pending_acks -= len(batch)
            for d in batch:
                self.inflight.remove(p, d.entry_id)
            self.stats.completed += len(batch)
            for d in batch:
                self._count(d.job.type, "completed")

    def acks_due_at(self, node_of: Callable[[int], str], node: str) -> float | None:
        """When the oldest buffered ack of ``node``'s partitions must go (it was buffered the
        linger ago: acks wait for a read of their partition, up to that), or None when it has
        none.  An ack's delay makes no job late: finished jobs hold no room while it waits."""
        oldest = min((t for p, t in self.ack_since.items() if node_of(p) == node), default=None)
        if oldest is None:
            return None
        return oldest if self.pending_acks >= self.ack_bound else oldest + self.linger

    def partitions_with_acks(self) -> list[int]:
        return [p for p, batch in self.acks.items() if batch]

    async def flush(self, partitions: list[int] | None = None) -> None:
        """Send buffered acks now (shutdown; a primary with nothing to fetch)."""
        wanted = self.partitions_with_acks() if partitions is None else partitions
        taken, ops = self.take_acks(wanted)
        if ops:
            self.acked(taken, await self.transport.run_many(ops))

    # failures ------------------------------------------------------------------------------

    def failed(self, d: Delivery, exc: BaseException) -> None:
        """The handler raised (or was stopped): settle it in its own task."""
        self.inflight.mark_finished(d)
        task = asyncio.get_running_loop().create_task(self._settle_failure(d, exc))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _settle_failure(self, d: Delivery, exc: BaseException) -> None:
        job = d.job
        if d.cancelled:
            # Stopped because a touch read that a cancel removed its envelope: the settle finds
            # none and only lets go of the delivery.  Should the id have been stored again
            # meanwhile, that job was not the one cancelled: it is retried, never dead.
            delay_ms = backoff_ms(job.attempt, job.backoff)
        else:
            permanent = (
                isinstance(exc, UnknownJobTypeError) and self.settings.dead_letter_unknown_types
            )
            delay_ms = retry_delay_ms(
                exc, job.attempt, job.max_attempts, job.backoff, permanent=permanent
            )
        text = describe(exc, self.settings.max_error_bytes)
        op = delivery.fail(
            self.pks[d.partition],
            d.entry_id,
            d.raw_id,
            delay_ms,
            text,
            keeps_result=job.keep_result is not None,
            workflow_ref=workflow_ref(d),
        )
        deadline = time.monotonic() + self.settings.settle_window
        attempt = 0
        while True:
            try:
                result = await self.transport.run(op)
                break
            except Exception as err:
                attempt += 1
                metrics.SCRIPT_ERRORS.labels(self.queue, "fail", type(err).__name__).inc()
                if not faults.is_transient(err) or time.monotonic() >= deadline:
                    self._abandon(d, err)
                    return
                if faults.is_redirect(err):
                    await self.transport.refresh()
                await asyncio.sleep(backoff.delay(attempt, random.Random()))
        self.inflight.remove(d.partition, d.entry_id)
        fields: dict[str, Any] = {
            "job_id": job.id,
            "queue": self.queue,
            "partition": keys.label_of_fleet_id(d.partition),
            "attempt": job.attempt,
            "max_attempts": job.max_attempts,
            "error_type": type(exc).__name__,
            "error": text.split("\n", 1)[0][:200],
            "trace_id": job.headers.get("traceparent") if isinstance(job.headers, dict) else None,
        }
        if d.cancelled and result.outcome == "gone":
            # Cancelled while it ran: the cancel removed its job (and counted it); the settle
            # only let go of the delivery.
            self.stats.cancelled += 1
            self._count(job.type, "cancelled")
            log_event(log, "job.cancelled", logging.INFO, **fields)
            return
        if result.outcome == "gone":
            # Reclaimed by another worker (this one was paused) or cancelled: its outcome is
            # theirs to settle, not ours to count.
            self.stats.settle_gone += 1
            self._count(job.type, "gone")
            log_event(log, "job.settle_gone", logging.WARNING, **fields)
            return
        dead = result.outcome == "dead"
        if dead:
            self.stats.dead += 1
        else:
            self.stats.retried += 1
        self._count(job.type, "dead" if dead else "retried")
        log_event(
            log,
            "job.dead" if dead else "job.retry",
            retry_in_ms=None if dead else delay_ms,
            **fields,
        )
        self.wake(d.partition)

    def _abandon(self, d: Delivery, err: BaseException) -> None:
        """The outcome could not be written: leave the delivery pending for reclaim."""
        self.inflight.remove(d.partition, d.entry_id)
        self.inflight.left_pending(d.partition)
        self.stats.abandoned += 1
        self._count(d.job.type, "abandoned")
        log_event(
            log,
            "job.settle_failed",
            logging.ERROR,
            job_id=d.job.id,
            queue=self.queue,
            partition=keys.label_of_fleet_id(d.partition),
            attempt=d.job.attempt,
            error=f"{type(err).__name__}: {err}"[:300],
            hint="left pending: another worker reclaims it after the visibility timeout",
        )

    def abandon_acks(self) -> int:
        """Shutdown with acks still unwritten: the jobs ran, but they stay pending and will run
        again after reclaim (at least once).  Returns how many."""
        n = 0
        for p, batch in self.acks.items():
            for d in batch:
                self.inflight.remove(p, d.entry_id)
                self._count(d.job.type, "abandoned")
                n += 1
        self.acks.clear()
        self.ack_since.clear()
        self.pending_acks = 0
        return n
