"""One concurrency pool for a worker that serves several queues.

A worker of several queues (``Worker(redis, ["emails", "reports:3"])``, ``shardq worker run
-q emails -q reports:3``) runs one worker of each queue in the process, on one Redis client,
one hint subscription per primary and one thread pool; this module is what makes their
in-flight tables one pool of ``concurrency`` deliveries.  Each queue's table
(:class:`~shardq.worker.inflight.InFlight`) asks :meth:`SharedConcurrency.room_for` how much of
the pool it may take now:

- **weighted** (the default): a queue of weight w is guaranteed ``concurrency x w / W`` of the
  pool (W: the weights' sum; at least 1 each).  While a queue has jobs waiting to be read (a
  ready hint, or a full batch last time), what it is guaranteed and does not hold is kept for
  it; a queue with none waiting keeps one slot, and lends the rest.  So an idle or paused queue
  leaves the pool to the busy ones, and a busy queue whose handlers are slow holds at most its
  share plus what the others leave idle: it cannot starve the others (a queue that becomes busy
  gets its share back as the borrowers' handlers finish: at once for one slot, within a
  handler's run time for the rest).
- **strict**: the queues in the order given; a queue reads only while no queue before it has
  jobs waiting to be read.  The later queues run on what the earlier ones leave; a steady stream
  on the first queue can delay them (that is the order asked for).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shardq.errors import ConfigError
from shardq.names import check_queue_name

if TYPE_CHECKING:
    from shardq.worker.inflight import InFlight

#: The most queues one worker serves (each has its loops: one per primary, and a heartbeat).
MAX_QUEUES = 64
MAX_WEIGHT = 1000


@dataclass(frozen=True, slots=True)
class QueueChoice:
    """One queue a worker serves, and its weight in the shared pool."""

    name: str
    weight: int = 1

    @classmethod
    def parse(cls, spec: str | QueueChoice) -> QueueChoice:
        """``"emails"`` or ``"emails:3"`` (weight 3)."""
        if isinstance(spec, QueueChoice):
            return spec
        name, sep, weight = str(spec).rpartition(":")
        if not sep:
            name, weight = weight, "1"
        check_queue_name(name)
        if not weight.isdigit() or not 1 <= int(weight) <= MAX_WEIGHT:
            raise ConfigError(
                f"queue {spec!r}: the weight after ':' is a whole number 1-{MAX_WEIGHT}, "
                f"e.g. {name}:3"
            )
        return cls(name, int(weight))


def parse_queues(specs: Sequence[str | QueueChoice]) -> list[QueueChoice]:
    """The queues a worker serves, checked: at least one, at most MAX_QUEUES, none twice."""
    choices = [QueueChoice.parse(s) for s in specs]
    if not choices:
        raise ConfigError("name at least one queue")
    if len(choices) > MAX_QUEUES:
        raise ConfigError(f"one worker serves at most {MAX_QUEUES} queues, got {len(choices)}")
    names = [c.name for c in choices]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"queue(s) named twice: {', '.join(twice)}")
    return choices


@dataclass(eq=False, slots=True)
class _Member:
    queue: str
    weight: int
    guaranteed: int = 0
    inflight: InFlight | None = None  # the table of its worker's current run
    #: Whether the queue has jobs waiting to be read (its fetcher's known work).
    waiting: Callable[[], bool] = field(default=lambda: False)


class SharedConcurrency:
    """The pool several queues' in-flight tables share (module docstring)."""

    def __init__(self, concurrency: int, queues: Sequence[QueueChoice], *, strict: bool = False):
        if concurrency < len(queues):
            raise ConfigError(
                f"concurrency {concurrency} is less than the {len(queues)} queues served: "
                "give each at least one"
            )
        self.concurrency = concurrency
        self.strict = strict
        total = sum(q.weight for q in queues)
        # Shares rounded down, at least 1 each; what rounding leaves is lent like idle room.
        self.members = [
            _Member(q.name, q.weight, max(1, concurrency * q.weight // total)) for q in queues
        ]
        self._threads: ThreadPoolExecutor | None = None
        self._wake_pending = False

    def attach(self, queue: str, inflight: InFlight, waiting: Callable[[], bool]) -> None:
        """The table of the queue's worker (again at each start: a resize starts it over),
        and how to tell that the queue has jobs waiting to be read (its fetcher's known work)."""
        for m in self.members:
            if m.queue == queue:
                m.inflight, m.waiting = inflight, waiting
                inflight.pool = self
                return
        raise KeyError(queue)

    def shares(self) -> dict[str, int]:
        """Queue -> the deliveries it is guaranteed (weighted order)."""
        return {m.queue: m.guaranteed for m in self.members}

    @staticmethod
    def held(inflight: InFlight) -> int:
        """What a table takes of the pool: deliveries running (finished ones waiting for their
        ack take none, as in InFlight.room; nor do those queued to start, which wait for this
        table's room in the pool) plus room reserved for reads in flight."""
        waiting = min(inflight.finished, inflight.finished_room())
        return inflight.count - waiting - inflight.queued + inflight.reserved

    def room_for(self, inflight: InFlight) -> int:
        """How many more deliveries the queue of ``inflight`` may take now."""
        rooms = self._rooms()
        for m, room in zip(self.members, rooms, strict=True):
            if m.inflight is inflight:
                return room
        return 0

    def _rooms(self) -> list[int]:
        """Each member's room now (in member order), from one reading of every table: O(queues),
        where asking each table alone would be O(queues²) for :meth:`freed`."""
        held = [self.held(m.inflight) if m.inflight else 0 for m in self.members]
        free = self.concurrency - sum(held)
        if free <= 0:
            return [0] * len(self.members)
        if self.strict:
            rooms = []
            ahead = False  # a queue before this one has jobs to read: they go first
            for m in self.members:
                rooms.append(0 if ahead else free)
                ahead = ahead or m.waiting()
            return rooms
        # What each member keeps from the others: the part of its guarantee it does not hold
        # while it has jobs waiting, else one slot.  A queue whose worker has not started yet
        # keeps its slot too (else the first queue to start takes the whole pool for as long
        # as its handlers run).
        kept = [
            max(0, (m.guaranteed if m.waiting() else min(1, m.guaranteed)) - h)
            for m, h in zip(self.members, held, strict=True)
        ]
        all_kept = sum(kept)
        return [max(0, free - (all_kept - k)) for k in kept]

    def freed(self) -> None:
        """Room came free in some table: wake every queue whose reader found none.  Called for
        every delivery that finishes or is settled; the check runs once per turn of the event
        loop however many came free in it (measured: checking at each call was a fifth of a
        10-queue worker's CPU in a drain, one reading per starved table most of it)."""
        if self._wake_pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a table used outside one): check now
            self._wake()
            return
        self._wake_pending = True
        loop.call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_pending = False
        if not any(m.inflight is not None and m.inflight.starved for m in self.members):
            return
        for m, room in zip(self.members, self._rooms(), strict=True):
            inflight = m.inflight
            if (
                room > 0
                and inflight is not None
                and inflight.starved
                and inflight.on_room is not None
                and inflight.own_room() + inflight.queued > 0
            ):
                inflight.starved = False
                inflight.on_room()

    def threads(self) -> ThreadPoolExecutor:
        """The thread pool every queue's sync handlers run in (one concurrency's worth)."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="shardq-job")
        return self._threads

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None
