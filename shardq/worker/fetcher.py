"""Fetcher: reads ready jobs through the consumer group, one loop per Redis primary.

Each loop serves the partitions its primary holds.  A round sends, in one batch on that
primary's connection, the acks of finished jobs of those partitions and a fetch for each
partition that is due to be read, sharing the worker's free room among them.  A paused or
failing primary holds up only its own loop.

Which partitions are read eagerly: worker i of N (sorted live ids) is assigned the partitions
with p mod N == i and reads them on every ready hint, and without one after ``idle_poll``
doubling to ``max_idle_poll``.  Every other partition it sweeps every ``sweep_interval`` x
(N - 1), so the fleet looks at each partition about once per ``sweep_interval`` whatever N is;
a sweep that finds a full batch keeps reading, so a backlog bigger than its assigned worker's
capacity is shared out.  Those idle reads and sweeps are a safety net (a lost hint, an
overloaded peer): together they go at most ``FALLBACK_READS_PER_S`` a second per worker
(shardq/worker/readtimes.py), so with more idle partitions than that covers in their interval
each waits longer (``partitions / FALLBACK_READS_PER_S`` s at most), and an idle worker's reads
do not grow with P.  A round looks only at the partitions due (their read times are filed per
primary in heaps), not at every partition.

Every read promotes first (lua/fetch-9.lua): the partition's due jobs move to its ready
stream and are read in the same call, and the reply says when the partition's next job is
due; an assigned partition is read again then (plus the worker's share of the budget), and a
due hint (an enqueue that moved its head earlier) brings that forward.  So in steady state a
job costs one call, a read, and the dispatcher's promote is left to what no worker reads in
time (backlogs, busy or dead workers, partitions with lanes on: shardq/dispatcher/promoter.py).

Under a lateness budget (shardq/runtime/budget.py) a ready hint schedules the read the
worker's share of it later instead of at once, and a round that runs also reads every hinted
partition of its primary due within that share: one round takes what several promotes made
ready.  A full batch is read again at once whatever the budget.  Acks of finished jobs ride
with the next read of their own partition (the fetch script settles them first), or go as ack
calls of their own once the oldest has waited the settler's linger (none with no budget).

A round reserves room for the jobs it may bring.  One not answered within
:data:`ROUND_STUCK` (its primary paused, asleep, failing over: up to the socket timeout) gives
its reservation back, so a stuck primary does not hold two thirds of the concurrency away from
the healthy ones; if it answers after all, the jobs it brings beyond the concurrency wait in
:attr:`Fetcher.overflow` for handlers to finish.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from shardq.config import WorkerSettings
from shardq.metrics import registry as metrics
from shardq.runtime.budget import worker_share
from shardq.runtime.pernode import IDLE_PASS, LONG_IDLE, PerPrimary
from shardq.runtime.process import RoleContext
from shardq.runtime.supervisor import log_redirect
from shardq.runtime.waits import wait_event
from shardq.store import delivery, faults, keys, queues
from shardq.store.delivery import Batch
from shardq.worker.context import WorkerContext
from shardq.worker.executor import Executor
from shardq.worker.inflight import Delivery
from shardq.worker.readtimes import ReadTimes
from shardq.worker.settler import Settler, Taken

log = logging.getLogger("shardq.worker")

ERROR_BACKOFF = 0.25
MIN_FETCH = 32
# A partition whose last read brought few jobs (and not a full batch) is read for twice as
# many as it brought, at least this many: in steady state most partitions hold a job or two
# per read, and reading each for MIN_FETCH would reserve the round's room for one partition
# (a round per partition read: the worker's CPU per job went to rounds).
THIN_FETCH = 4
# Rounds one primary's loop keeps in flight.
PIPELINE = 2
# A round in flight this long holds no room any more (see the module docstring).
ROUND_STUCK = 0.25


@dataclass(slots=True)
class _Round:
    """One round sent to a primary and not yet taken: what it carries."""

    due: list[int]
    counts: list[int]
    acked: Taken
    ack_ops: list[Any]
    reserve: int
    hints_before: list[int]
    task: asyncio.Task[list[Any]]
    folded: list[list[Delivery]]  # per read, the acks of its partition riding with it
    late: bool = False  # not answered within ROUND_STUCK: its reservation was given back


def entry_id_of(raw: bytes) -> tuple[int, int] | None:
    """A stream entry id ``<ms>-<seq>`` as numbers (None for anything else: a hint of another
    kind, such as a resume's '1')."""
    ms, dash, seq = raw.partition(b"-")
    if not dash or not ms.isdigit() or not seq.isdigit():
        return None
    return int(ms), int(seq)


def read_loops(core: RoleContext[WorkerSettings]) -> PerPrimary:
    """The fetch loops, one per primary over the partitions this worker reads (started by
    :meth:`Fetcher.start`); made before the components that wake them."""
    pks = core.pks
    return PerPrimary(
        core.supervisor,
        core.transport,
        "fetcher",
        core.partitions,
        lambda p: pks[p].ready,
        longest_sleep(core.settings),
    )


def longest_sleep(settings: WorkerSettings) -> float:
    """The longest one pass of a fetch loop sleeps (its partitions' own read times, and acks
    waiting for a read, wake it sooner; hints, room and acks wake it at once)."""
    return max(settings.idle_poll, IDLE_PASS)


class Fetcher:
    """Per-primary fetch rounds over the partitions this worker reads."""

    def __init__(
        self,
        ctx: WorkerContext,
        *,
        settler: Settler,
        executor: Executor,
        loops: PerPrimary,
    ) -> None:
        """``loops``: the fetch loops' :func:`read_loops`, made first (the in-flight table and
        the settler wake them)."""
        self.supervisor = ctx.supervisor
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = ctx.pks
        self.partitions = ctx.partitions
        self.pinned = ctx.pinned is not None
        self.consumer = ctx.consumer
        self.settings = ctx.settings
        self.inflight = ctx.inflight
        self.settler = settler
        self.executor = executor
        self.stats = ctx.stats
        #: When each partition is read next, filed per primary (shardq/worker/readtimes.py):
        #: a round and an idle pass cost what the partitions with something to do cost, and
        #: the idle (fallback) reads stay under a fixed rate.  ``poll_at`` is its table of
        #: times, to read; every change goes through it.
        self.times = ReadTimes(
            self.partitions,
            loops.node_of,
            lambda: loops.generation,
            lambda: max(1, len(loops.nodes)),
        )
        self.poll_at = self.times.poll_at
        self.assigned: set[int] = set(self.partitions)
        #: The same, sorted (the recoverer's and the janitor's sweeps go through it in order).
        self.assigned_sorted: list[int] = sorted(self.assigned)
        self._members: tuple[str, ...] | None = None
        self.fleet_size = 1
        self.hints: dict[int, int] = {}
        #: Assigned partitions found empty that many reads in a row: their wait doubles.  A
        #: partition without an entry has shown no work since this worker started (its first
        #: read found it empty): it waits the longest at once (see idle_interval).
        self.idle_streak: dict[int, int] = {}
        #: Primaries whose loop has partitions to read but found no room, since when.
        self.waiting: dict[str, float] = {}
        #: Partitions known to have jobs to read (a ready hint, or a full batch last time), as
        #: opposed to a poll that may well find nothing: only those make a loop wait for room.
        self.known_work: set[int] = set()
        #: Jobs the last read of each partition brought, when it was not a full batch.
        self.last_read: dict[int, int] = {}
        #: Jobs each partition's due set holds that are due by its next read (its head's due
        #: time plus the share), as its last read's reply counted them (``Batch.due_soon``):
        #: the next read asks for them all at once.  Set with last_read, when known.
        self.expect: dict[int, int] = {}
        #: The newest ready entry this worker has read of each partition, as (ms, seq).
        self.read_upto: dict[int, tuple[int, int]] = {}
        #: The Redis clock (s) minus the monotonic clock, from the last reply: a due time
        #: (Redis ms) becomes a monotonic one.
        self.redis_offset: float | None = None
        #: Assigned partitions whose next read was set from their head's due time (plus the
        #: share): a round that goes takes those whose head is due by then, as it takes
        #: hinted ones, so one round promotes and reads what several heads made due.
        self.heads: set[int] = set()
        self._rotate = 0
        #: How long after a ready hint a read may wait (the worker's share of the budget).
        self.share = worker_share(ctx.settings.lateness_budget)
        #: The share in whole ms: how far past a partition's next due time its read's reply
        #: counts the jobs due (the next read finds those).
        self.horizon_ms = math.ceil(self.share * 1000)
        #: Jobs of late rounds that found the concurrency taken: started as handlers finish.
        self.overflow: deque[Delivery] = deque()
        self.nodes = loops
        self._m_fetches = metrics.WORKER_FETCH_CALLS.labels(ctx.queue)

    def start(self) -> None:
        self.nodes.start(self._loop)

    # assignment ----------------------------------------------------------------------------

    def assign(self, live: list[str]) -> None:
        """Recompute the partitions this worker reads eagerly from the live fleet (a worker
        pinned to partitions reads all of them)."""
        if self.pinned:
            return
        members = tuple(sorted(set(live) | {self.consumer}))
        if members == self._members:
            return  # every heartbeat: nothing to do while the fleet stays as it is
        self._members = members
        index, n = members.index(self.consumer), len(members)
        assigned = {p for p in self.partitions if p % n == index}
        now = time.monotonic()
        for p in assigned - self.assigned:
            self.times.set(p, 0.0, now)  # newly ours (a peer left): read it now
            self.idle_streak[p] = 0  # the peer may have been reading it busily
            self.nodes.wake(p)
        self.assigned, self.fleet_size = assigned, n
        self.assigned_sorted = sorted(assigned)

    def idle_interval(self, partition: int) -> float:
        """How long until an assigned partition just found empty is read again without a
        hint: idle_poll, doubling (up to max_idle_poll) each time in a row it was found empty
        (a hint, jobs read or its assignment starts it over).  One that has shown no work since
        this worker started waits max_idle_poll at once: the short waits are for a partition
        that was just busy, and an idle fleet's start-up used to read each partition six times
        in its first minute (1, 2, 4 ... 30 s) for nothing.  A resubscription's wake-up is one
        read, not a reason to start over.  An unassigned one is swept every sweep_interval x
        (N - 1)."""
        s = self.settings
        if partition not in self.assigned:
            return s.sweep_interval * max(1, self.fleet_size - 1)
        streak = self.idle_streak.get(partition, LONG_IDLE)
        self.idle_streak[partition] = streak + 1
        return min(max(s.max_idle_poll, s.idle_poll), s.idle_poll * 2.0 ** min(streak, LONG_IDLE))

    def hint(self, partition: int, message: bytes | None = None) -> None:
        """Jobs landed in the partition's ready stream: read it within the worker's share of
        the budget (at once without one).  A promote's hint names the last entry it added
        (``message``): one this worker has read already is no news (the hint and the read
        travel on different connections, so a read often takes the jobs before their hint
        comes), and re-reading for it would find nothing."""
        if partition not in self.assigned:
            return
        if message is not None:
            entry = entry_id_of(message)
            upto = self.read_upto.get(partition)
            if entry is not None and upto is not None and entry <= upto:
                return
            self.idle_streak[partition] = 0
        # else: the wake-up every partition gets after a (re)subscription: one read, and
        # the partition keeps its wait.
        self.hints[partition] = self.hints.get(partition, 0) + 1
        self.known_work.add(partition)
        now = time.monotonic()
        if not self.share:
            self.times.set(partition, 0.0, now)
            self.nodes.wake(partition)
            return
        at = now + self.share
        # A partition waiting only for its fallback (idle) read counts as never read: a hint
        # files it for the share now, whatever the fallback's time.
        if self.times.at(partition) > at:  # else it is read by then anyway
            self.times.set(partition, at, now)
            self.nodes.wake(partition)  # its loop may sleep past it: let it look again

    def due_hint(self, partition: int, message: bytes | None) -> None:
        """A job of the partition's due set became due sooner (an enqueue that moved its head
        earlier, a retry, a reschedule: the message is its due ms): an assigned partition is
        read then, plus the worker's share, and its read promotes it.  A resubscription (None)
        or a hint of another kind: read it within the share."""
        if partition not in self.assigned or message == b"o":  # 'o': a workflow outbox entry
            return
        due_ms = None
        if message is not None and message.isdigit() and len(message) <= 17:
            due_ms = int(message)
        now = time.monotonic()
        at = now if due_ms is None else self._monotonic(due_ms, now)
        at += self.share
        if self.times.at(partition) > at:
            if due_ms is not None:
                self.idle_streak[partition] = 0
            self.times.set(partition, at, now)
            self.heads.add(partition)
            self.nodes.wake(partition)

    def _monotonic(self, redis_ms: int, now: float) -> float:
        """When (monotonic s) the Redis clock reads ``redis_ms``; ``now`` before any reply."""
        if self.redis_offset is None:
            return now
        return max(now, redis_ms / 1000.0 - self.redis_offset)

    def wake(self, partition: int) -> None:
        """Room freed up or an ack is waiting: let the partition's loop run a round."""
        self.nodes.wake(partition)

    # the loops -----------------------------------------------------------------------------

    async def _loop(self, node: str) -> None:
        """Rounds on one primary, pipelined: up to ``PIPELINE`` rounds are in flight, so Redis
        works on the next ones while the jobs of a reply run (their acks go with a later
        round)."""
        name = self.nodes.loop_name(node)
        stop = self.supervisor.stop_event(name)
        state = self.supervisor.state(name)
        event = self.nodes.event(node)
        s = self.settings
        longest = longest_sleep(s)
        flight: deque[_Round] = deque()
        try:
            while not stop.is_set():
                state.progress()
                self._drain_overflow()
                while len(flight) < PIPELINE:
                    sent = self._send_round(node, flight)
                    if sent is None:
                        break
                    flight.append(sent)
                if not flight:
                    # Nothing to read or ack: sleep until a partition is due, a hint, or room.
                    now = time.monotonic()
                    room = self.inflight.room()
                    # The longest sleep ends on the process's grid (see idle_interval).
                    cap = self.supervisor.on_tick(now + longest)
                    wake_at = self.times.next_at(node, now)
                    if wake_at is None:
                        wake_at = cap
                    timeout = s.idle_poll if room <= 0 else max(0.0, min(wake_at, cap) - now)
                    acks_at = self.settler.acks_due_at(self.nodes.node_of, node)
                    if acks_at is not None:  # acks waiting for a read go alone by then
                        timeout = min(timeout, max(0.0, acks_at - now))
                    event.clear()
                    state.ok()
                    # Until the earliest read time (set for every partition read; hints,
                    # assignment, freed room and finished jobs wake the loop): an idle loop
                    # wakes every IDLE_PASS, not every idle_poll.
                    await wait_event(event, min(timeout, longest))
                    continue
                head = flight[0]
                if not head.task.done() and any(r.reserve for r in flight):
                    await asyncio.wait([head.task], timeout=ROUND_STUCK)
                    if not head.task.done():
                        # This primary is not answering: its rounds hold no room meanwhile.
                        for r in flight:
                            self.inflight.release(r.reserve)
                            r.reserve, r.late = 0, True
                late = head.late
                admitted = await self._finish(flight.popleft())
                if admitted and len(flight) < PIPELINE:
                    sent = self._send_round(node, flight)  # in flight while the jobs run
                    if sent is not None:
                        flight.append(sent)
                        # Let its task run up to its send before the handlers below take the
                        # loop (a task only starts when the loop gets control).
                        await asyncio.sleep(0)
                self._start(admitted, late)
                state.ok()
        finally:
            self.waiting.pop(node, None)  # a stopped loop waits for nothing
            # Rounds still in flight: cancelled; one whose reply was already in has fetched
            # jobs (pending for this worker in Redis): run them within the shutdown grace.
            for r in flight:
                r.task.cancel()
            for r in flight:
                try:
                    admitted = await self._finish(r)
                except BaseException:  # cancelled or failed: nothing was fetched
                    continue
                for d in admitted:
                    self.executor.run(d)
            while self.overflow:  # shutting down: they run within the shutdown grace
                self.inflight.queued -= 1
                self.executor.run(self.overflow.popleft())

    def _start(self, admitted: list[Delivery], late: bool) -> None:
        """Run a reply's jobs; those of a late round (it held no room) wait in the overflow
        for room."""
        if not late and not self.overflow:
            for d in admitted:
                self.executor.run(d)
            return
        self.overflow.extend(admitted)
        self.inflight.queued += len(admitted)
        self._drain_overflow()

    def _drain_overflow(self) -> None:
        """Start waiting jobs while there is room for them (InFlight.start_room): the
        concurrency less the handlers running and the reads in flight, and in a worker of
        several queues this queue's room in the pool, not the whole pool (a late round of a
        slow queue took the slot kept for the others, and its waiting jobs counted as held
        left them none: a quick queue starved for as long as the slow handlers ran)."""
        inflight = self.inflight
        if self.overflow:
            for _ in range(max(0, inflight.start_room())):
                if not self.overflow:
                    break
                inflight.queued -= 1
                self.executor.run(self.overflow.popleft())

    def _send_round(self, node: str, flight: Sequence[_Round]) -> _Round | None:
        """Send the next round of ``node`` (acks of finished jobs, fetches of due partitions
        sharing the free room), or None when there is nothing to send.  ``flight``: rounds
        of this loop not yet taken."""
        s = self.settings
        in_flight = len(flight)
        now = time.monotonic()
        free = self.inflight.room()
        times = self.times
        # A partition whose read is in flight is not read again by the round sent beside it
        # when its last read brought fewer than THIN_FETCH jobs: that read takes the job or two
        # it holds, its reply sets when to read it next, and a second read sent beside it finds
        # nothing (in steady state every round was followed by a second reading the same
        # partitions: 1.46 fetch calls per job at 2,000/s, python -m bench.profile_steady
        # --rate 2000 --budget 10).  One whose reads bring more (a backlog, a burst, a fast
        # flow) keeps its pipelined reads: the dispatcher refills its stream meanwhile.
        # A partition whose due set said how many jobs its read would find (expect) is judged
        # by that instead: its read in flight asked for more than that, so it takes them all.
        last_read, expect = self.last_read, self.expect
        reading: set[int] = set()
        for r in flight:
            for p, c in zip(r.due, r.counts, strict=True):
                e = expect.get(p)
                thin = (c > e) if e is not None else (last_read.get(p, THIN_FETCH) < THIN_FETCH)
                if thin:
                    reading.add(p)
        # The partitions due now (times: without a look at the others).
        due = [p for p in times.due(node, now) if p not in reading]
        if due and self.share:
            # A round goes out: it also takes the hinted partitions due within the share, and
            # those whose head is due by now (their read was set a share after it): both sets
            # hold partitions with work only.
            horizon, known, heads = now + self.share, self.known_work, self.heads
            node_of = self.nodes.node_of
            due += [
                p
                for p in (*known, *(heads - known))
                if now < times.at(p) <= horizon and p not in reading and node_of(p) == node
            ]
        # Freed room wakes every loop, but a loop that just took a reply sends its next round
        # at once, before a woken one runs: without a share kept back, a busy primary takes
        # every freed slot and an idle primary's new jobs wait for idle_poll (seen as 1-2 s
        # lateness on one primary while the others drained a backlog).  So a loop leaves
        # MIN_FETCH of room to each loop that has waited for room longer than it has: one with
        # no round in flight (a busy loop gets its turn when its reply comes) and jobs known
        # to wait (a hint, or a full batch last time; not a poll that may find nothing).
        since = self.waiting.get(node, now)
        ahead = sum(1 for n, t in self.waiting.items() if n != node and t < since)
        room = free - MIN_FETCH * ahead
        if room <= 0:
            self.inflight.starved = True  # woken as soon as room frees up
            if not in_flight and not self.known_work.isdisjoint(due):
                self.waiting.setdefault(node, now)
            due = []
        else:
            self.waiting.pop(node, None)
        # A round takes at most a share of the concurrency, so the next ones still find room
        # while this one's jobs wait to run: that is what keeps rounds in flight all the time.
        room = min(room, max(1, self.inflight.concurrency // (PIPELINE + 1)))
        settler = self.settler
        if not due:
            # No read goes: acks wait for one, up to the linger (then they go alone).
            acks_at = settler.acks_due_at(self.nodes.node_of, node)
            if acks_at is None or acks_at > now:
                return None
        # Share the free room among due partitions, rotating who goes first for fairness;
        # fewer, fuller reads beat many thin ones (at least MIN_FETCH per partition read), but
        # a partition known to bring few (its last read was thin) is read for what it brings,
        # or for what its due set holds due by now when its last reply counted more: a sticky
        # run (shardq/store/sticky.py) of 16 jobs is read in one call, not in reads of 4, 8
        # and the rest (0.34 fetch calls a job at 2,000 jobs/s;
        # bench/reference/2026-12-06/due-soon-ab-292b44b.txt).
        counts: list[int] = []
        if due:
            self._rotate = (self._rotate + 1) % len(due)
            due = due[self._rotate :] + due[: self._rotate]
            count = max(1, min(s.fetch_batch, max(room // len(due), MIN_FETCH), room))
            left = room
            taken: list[int] = []
            for p in due:
                last = last_read.get(p)
                if last is None:
                    want = count
                else:
                    # More than are due, so that a read taking them all is not full (read
                    # again at once); a partition expecting a job or two is read for
                    # THIN_FETCH as before (a larger reservation splits rounds).
                    soon = expect[p] + expect[p] // 2 + 1 if p in expect else 0
                    want = min(count, max(THIN_FETCH, 2 * last, soon))
                if taken and want > left:
                    break
                taken.append(p)
                counts.append(max(1, min(want, left)))
                left -= counts[-1]
                if left <= 0:
                    break
            due = taken
        # A read carries its partition's acks (the fetch settles them first: one call, not
        # two); acks of partitions not read now wait for a read up to the settler's linger,
        # then go as ack calls of their own in whatever round goes.
        folded = [settler.take_for_read(p) for p in due]
        reading_now, node_of = set(due), self.nodes.node_of
        others = [p for p in settler.acks if p not in reading_now and node_of(p) == node]
        acked, ack_ops = settler.take_acks(others, due_by=now)
        if not due and not ack_ops:
            return None
        pks, consumer = self.pks, self.consumer
        horizon = self.horizon_ms
        ops = [
            delivery.fetch(
                pks[p],
                consumer,
                c,
                [(d.entry_id, d.raw_id) for d in f],
                promote=True,
                horizon_ms=horizon,
            )
            for p, c, f in zip(due, counts, folded, strict=True)
        ]
        reserve = sum(counts)
        self.inflight.reserve(reserve)
        if ops:
            self.stats.fetches += len(ops)
            self._m_fetches.inc(len(ops))
        hints_before = [self.hints.get(p, 0) for p in due]
        task = asyncio.get_running_loop().create_task(self.transport.run_on(node, [*ack_ops, *ops]))
        return _Round(due, counts, acked, ack_ops, reserve, hints_before, task, folded)

    def _settle_folded(self, r: _Round, results: Sequence[Any] | None) -> None:
        """Settle the acks that rode with the round's reads: written when their read answered,
        back to the buffer (sent again) when it failed or the round was cancelled."""
        taken: Taken = []
        outcomes: list[Any] = []
        for i, (p, acks) in enumerate(zip(r.due, r.folded, strict=True)):
            if acks:
                taken.append((p, acks))
                outcomes.append(RuntimeError("round cancelled") if results is None else results[i])
        if taken:
            self.settler.acked(taken, outcomes)

    async def _finish(self, r: _Round) -> list[Delivery]:
        """Take a round's reply: settle its acks, admit its jobs (not run yet)."""
        try:
            results = await r.task
        except BaseException as exc:
            self.settler.acked(r.acked, [RuntimeError("round cancelled")] * len(r.ack_ops))
            self._settle_folded(r, None)
            self.inflight.release(r.reserve)
            if not isinstance(exc, asyncio.CancelledError):
                for p in r.due:  # its reads may have delivered jobs nobody here knows of
                    self.inflight.left_pending(p)
            raise
        n_acks = len(r.ack_ops)
        self.settler.acked(r.acked, results[:n_acks])
        self._settle_folded(r, results[n_acks:])
        now = time.monotonic()
        failures: list[BaseException] = []
        admitted: list[Delivery] = []
        # A slot on the move is the normal signal of a move, not a failure: logged as such
        # (topology.redirect, info), the slot map refreshed, the calls sent again later.
        redirected = 0
        for (p, _), result in zip(r.acked, results[:n_acks], strict=True):
            if isinstance(result, BaseException) and faults.is_migration(result):
                redirected += 1
                log_redirect(log, result, partition=keys.label_of_fleet_id(p), call="ack")
                self.nodes.topology_changed()
        for p, result, seen, count in zip(
            r.due, results[n_acks:], r.hints_before, r.counts, strict=True
        ):
            if isinstance(result, BaseException):
                if faults.is_migration(result):
                    redirected += 1
                    log_redirect(log, result, partition=keys.label_of_fleet_id(p), call="fetch")
                else:
                    failures.append(result)
                if not isinstance(result, ResponseError):
                    # Its reply was lost (a refusal or a redirect is a reply: nothing was
                    # read): the read may have delivered jobs this worker does not know it
                    # holds, which nobody touches; the recoverer looks once they are idle past
                    # the visibility timeout (its sweep would, much later at a large P).
                    self.inflight.left_pending(p)
                await self._failed(p, result)
                self.times.set(p, now + ERROR_BACKOFF, now)
                continue
            assert isinstance(result, Batch)
            n = len(result.jobs)
            # more: the read went past its bound of cancelled entries with more left; the jobs
            # behind them must not wait for an idle poll.
            full, hinted = n >= count or result.more, self.hints.get(p, 0) != seen
            if full:
                self.last_read.pop(p, None)  # more may wait: the next read is a full one
                self.expect.pop(p, None)
            else:
                self.last_read[p] = n
                if result.due_soon is None:
                    self.expect.pop(p, None)
                else:
                    self.expect[p] = result.due_soon
            if n:
                newest = entry_id_of(result.jobs[-1].entry_id)
                if newest is not None and newest > self.read_upto.get(p, (0, 0)):
                    self.read_upto[p] = newest
            more = full or hinted
            if more or n:
                self.idle_streak[p] = 0  # work found: the next empty read starts over
            self.redis_offset = result.now_ms / 1000.0 - now
            self.heads.discard(p)
            if full:
                self.times.set(p, now, now)
            elif hinted:  # a hint came while it was read: read again within the share
                self.times.set(p, now + self.share, now)
            else:
                # On the process's grid: the idle reads of its partitions, and its periodic
                # loops, wake it together (shardq/runtime/waits.py).
                idle_at = self.supervisor.on_tick(now + self.idle_interval(p))
                head = result.next_due_ms
                at = math.inf
                if head is not None and head != delivery.NONE_WAITS and p in self.assigned:
                    # Its next job's due time: read (and promote) it then, within the share.
                    at = self._monotonic(head, now) + self.share
                if at < idle_at:
                    self.idle_streak[p] = 0
                    self.times.set(p, at, now)
                    self.heads.add(p)
                else:
                    # Nothing known to do: the idle read, within the process's fallback
                    # rate (shardq/worker/readtimes.py), in case a hint is lost.
                    self.times.set_fallback(p, idle_at)
            if more:
                self.known_work.add(p)
            else:
                self.known_work.discard(p)
            for item in result.jobs:
                d = self.executor.admit(p, item, result.now_ms, now)
                if d is not None:
                    admitted.append(d)
        # Admitted jobs hold room in the table now: the reservation can go.
        self.inflight.release(r.reserve)
        ack_failures = [
            x
            for x in results[:n_acks]
            if isinstance(x, BaseException) and not faults.is_migration(x)
        ]
        failed = len(failures) + len(ack_failures) + redirected
        if (failures or ack_failures) and failed == len(results):
            self._start(admitted, r.late)
            raise (failures or ack_failures)[0]  # the whole primary failed: back off this loop
        return admitted

    async def _failed(self, partition: int, exc: BaseException) -> None:
        self.stats.errors += 1
        metrics.SCRIPT_ERRORS.labels(self.queue, "fetch", type(exc).__name__).inc()
        if faults.is_redirect(exc) or faults.is_transient(exc):
            self.nodes.topology_changed()
            return
        if isinstance(exc, ResponseError) and "NOGROUP" in str(exc):
            # The stream or group vanished (FLUSHALL, manual delete): recreate it.
            try:
                await self.transport.run(queues.group_create(self.pks[partition]))
            except ResponseError as again:
                if "BUSYGROUP" not in str(again):
                    log.warning(
                        "recreating group on partition %s failed: %s",
                        keys.label_of_fleet_id(partition),
                        again,
                    )
            return
        log.warning("fetch on partition %s failed: %s", keys.label_of_fleet_id(partition), exc)
