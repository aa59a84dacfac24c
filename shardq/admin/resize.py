"""Driving a resize of a live queue (``shardq queue resize``, :meth:`Resizer.run`).

The steps are plans (:mod:`shardq.plans.resize`); this drives them: one driver at a time (a
lease with a fencing token, the dispatchers' lease scripts on ``{sq:<queue>}:resize:lease``),
rounds of bounded calls until the old generation is empty, then the commit.  Everything it
knows is in Redis (``{sq:<queue>}:resize`` and the partitions' 'moving' batches), so a driver
killed at any point is resumed by running it again (``--resume``): a batch it had taken out is
answered again by the next take and stored once (the target's inbound set), and an
interrupted begin or commit is finished (each of their steps is safe to repeat).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from shardq.admin.lease import LeaderLease
from shardq.client import Client
from shardq.errors import FencedError
from shardq.logs import log_event
from shardq.plans import resize as resize_plans
from shardq.plans.resize import ResizeError, State
from shardq.runtime.identity import member_id
from shardq.runtime.process import LAYOUT_CHECK
from shardq.store import keys
from shardq.store import resize as ops

log = logging.getLogger("shardq.resize")

__all__ = ["Progress", "ResizeError", "Resizer", "State"]


@dataclass(slots=True)
class Progress:
    """Where a resize stands, after each round."""

    state: State
    rounds: int = 0
    moved: int = 0  # records this driver stored in the new generation
    idempotency_moved: int = 0
    results_moved: int = 0
    waiting: int = 0  # what the old generation still holds for the resize to move
    running: int = 0  # ready and running jobs the fleet still drains in place
    longest_ms: float = 0.0  # the slowest round of calls
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


class Resizer:
    """Resize one queue with ``client`` (an admin's or operator's connection)."""

    def __init__(
        self,
        client: Client,
        queue: str,
        *,
        lease_ms: int = 15_000,
        idle_pause: float = 0.2,
        on_progress: Callable[[Progress], None] | None = None,
        stop: threading.Event | None = None,
        owner: str | None = None,
        batch: int = ops.BATCH,
        settle: float = 3 * LAYOUT_CHECK,
        fleet_wait: float = 30.0,
    ) -> None:
        """``batch``: records taken out of a partition per call (ops.BATCH keeps each call
        well under a millisecond of Redis time)."""
        self.client = client
        self.queue = queue
        self.lease_ms = lease_ms
        self.idle_pause = idle_pause
        self.on_progress = on_progress
        self.stop = stop or threading.Event()
        self.owner = owner or member_id("resize")
        #: One driver at a time: the queue's resize lease.
        self.lease = LeaderLease(
            client, ops.lease_keys(queue), self.owner, lease_ms, "the resize lease"
        )
        #: How long after the commit the old generation's keys are deleted: the fleet reads
        #: the meta every LAYOUT_CHECK and then hands its old partitions back.
        self.settle = settle
        #: How long the switch waits at most for the dispatchers to take up the new partitions.
        self.fleet_wait = fleet_wait
        self.batch = batch

    # the lease -----------------------------------------------------------------------------

    def _take_lease(self) -> None:
        grant = self.lease.acquire()
        if not grant.won:
            raise ResizeError(
                f"another process ({grant.owner}) is driving the resize of {self.queue!r}; "
                "if it was killed, its lease expires within "
                f"{self.lease_ms / 1000:.0f} s: run this again then"
            )

    def _keep_lease(self) -> None:
        if not self.lease.renew():
            raise FencedError(
                f"this driver lost the resize lease of {self.queue!r} (paused past "
                f"{self.lease_ms / 1000:.0f} s?): another driver goes on; nothing is lost"
            )

    # driving -------------------------------------------------------------------------------

    def status(self) -> State:
        return self.client.run(
            resize_plans.state(self.queue), f"reading the resize of {self.queue!r}"
        )

    def run(self, partitions: int | None = None) -> State:
        """Resize to ``partitions`` (None: resume the running resize) and return the final
        state (phase 'done', or 'aborted' for an abort carried out).  Stops early, leaving the
        resize to resume, when :attr:`stop` is set."""
        self._take_lease()
        try:
            if partitions is not None:
                plan = resize_plans.begin(self.client.cache, self.queue, partitions)
                was = self.client.run(plan, f"starting the resize of {self.queue!r}")
            else:
                was = self.status()
                if not was.running:
                    raise ResizeError(f"queue {self.queue!r} has no resize to resume")
                if was.phase == "preparing":
                    to = was.generation("to")[1]
                    plan = resize_plans.begin(self.client.cache, self.queue, to)
                    was = self.client.run(plan, f"resuming the resize of {self.queue!r}")
            if was.phase == "preparing":
                was = self._switch(was)
            log_event(
                log, "resize.moving", logging.INFO, queue=self.queue,
                source=was.raw.get("from"), target=was.raw.get("to"),
            )  # fmt: skip
            return self._move(was)
        finally:
            self.lease.release()

    def abort(self) -> State:
        """Turn the running resize around and carry it out: every job back in the old
        generation, which stays the queue's."""
        self._take_lease()
        try:
            plan = resize_plans.abort(self.client.cache, self.queue)
            was = self.client.run(plan, f"aborting the resize of {self.queue!r}")
            log_event(log, "resize.aborting", logging.WARNING, queue=self.queue)
            if was.phase == "preparing":
                was = self._switch(was)
            return self._move(was)
        finally:
            self.lease.release()

    def _switch(self, was: State) -> State:
        """Switch producers to the new generation once the fleet serves it: at least
        :attr:`settle` after the meta named it (every process reads the meta each
        LAYOUT_CHECK), and, when dispatchers serve the queue, once one holds the lease of each
        new partition (up to :attr:`fleet_wait`; a fleet slower than that still takes it up,
        its jobs only wait longer)."""
        announced = int(was.raw.get("announced_ms", "0") or 0) / 1000
        wait = announced + self.settle - time.time()
        if wait > 0:
            self.stop.wait(wait)
        deadline = time.monotonic() + self.fleet_wait
        waiting: list[int] | None = None  # all
        while not self.stop.is_set():
            self._keep_lease()
            plan = resize_plans.unserved(self.queue, was, waiting)
            waiting = self.client.run(plan, "reading the new partitions' leases")
            if not waiting or time.monotonic() >= deadline:
                if waiting:
                    log_event(
                        log, "resize.fleet_slow", logging.WARNING, queue=self.queue,
                        unserved=len(waiting), seconds=self.fleet_wait,
                    )  # fmt: skip
                break
            self.stop.wait(max(self.idle_pause, 0.5))
        if self.stop.is_set():
            return was
        self._keep_lease()
        return self.client.run(
            resize_plans.switch(self.client.cache, self.queue, was),
            "switching to the new partitions",
        )

    def _retire(self, was: State) -> State:
        """After the commit, wait until every worker and dispatcher has read the meta again
        (and stopped serving the old generation: a process still reading its ready streams
        would make them again), then delete the old generation's keys."""
        committed = int(was.raw.get("committed_ms", "0") or 0) / 1000
        wait = committed + self.settle - time.time()
        if wait > 0:
            self.stop.wait(wait)
        self._keep_lease()
        return self.client.run(
            resize_plans.retire(self.client.cache, self.queue, was), "deleting the old partitions"
        )

    def _move(self, was: State) -> State:
        if was.phase == "retiring":
            return self._retire(was)
        progress = Progress(was)
        drive = self.client.run

        routes = self.client.transport.primary_routes

        while not self.stop.is_set():
            self._keep_lease()
            # Each round asks the slot map again: after a failover a primary may have none,
            # and its puts then wait for none (per node: the others' still wait for theirs).
            replicas = min(1, self.client.transport.most_replicas())
            plan = resize_plans.move_round(self.queue, was, batch=self.batch, replicas=replicas)
            done = drive(plan, "moving jobs")
            progress.rounds += 1
            progress.moved += done.moved
            progress.longest_ms = max(progress.longest_ms, done.longest_ms)
            if done.moved or done.batches:
                self._report(progress)
                continue
            progress.idempotency_moved += drive(
                resize_plans.move_idempotency(self.queue, was, routes()),
                "moving idempotency records",
            )
            lefts = drive(resize_plans.left(self.queue, was), "reading the old partitions")
            progress.waiting = sum(lf.waiting for lf in lefts)
            progress.running = sum(lf.jobs for lf in lefts)
            self._report(progress)
            if all(lf.empty for lf in lefts):
                # Results kept by jobs that completed in the old generation, the last ones
                # included (nothing runs there now): after the commit no read looks there.
                progress.results_moved += drive(
                    resize_plans.move_idempotency(self.queue, was, routes(), keys.RESULT_KIND),
                    "moving kept results",
                )
                was = drive(resize_plans.commit(self.client.cache, self.queue, was), "committing")
                final = self._retire(was)
                log_event(
                    log, "resize.done", logging.INFO, queue=self.queue, phase=final.phase,
                    moved=progress.moved, seconds=round(progress.elapsed, 1),
                )  # fmt: skip
                return final
            if progress.waiting == 0:
                # Only ready and running jobs are left: the fleet drains them in place.
                self.stop.wait(self.idle_pause)
        return self.status()

    def _report(self, progress: Progress) -> None:
        if self.on_progress is not None:
            self.on_progress(progress)
