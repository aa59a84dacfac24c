"""The deliveries this worker holds, and the room it has for more.

A delivery is in the table from the moment fetch or reclaim handed it over until it is settled
in Redis (acked, back in due, dead) or given up (left pending for another worker to reclaim).
While it is in the table the heartbeat keeps it claimed; nothing else keeps it alive, so a
delivery can never be stuck: it is settled, or it leaves the table and reclaim takes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from shardq.jobs import Job
from shardq.limits import Limit


class SharedPool(Protocol):
    """What a table shares its room with (shardq.worker.pool.SharedConcurrency: the pool of a
    worker of several queues); declared here so that the pool depends on the table, not both
    ways."""

    def room_for(self, inflight: InFlight) -> int: ...

    def freed(self) -> None: ...

    def threads(self) -> ThreadPoolExecutor: ...


@dataclass(slots=True, eq=False)
class Delivery:
    """One job this worker runs: where it came from and how its handler is doing."""

    partition: int
    entry_id: bytes
    raw_id: bytes
    job: Job
    started: float = 0.0
    task: asyncio.Task[None] | None = None
    timed_out: bool = False
    finished: bool = False  # the handler returned or raised; only the settle is left
    reserved: bool = False  # its start was reserved by a rate limit: run without asking again
    slots: list[Limit] = field(default_factory=list)  # concurrency limits it holds a slot of
    result: bytes | None = None  # its result record, when the job keeps its result
    cancelled: bool = False  # cancelled while running (lua/cancel-7.lua): it ends as cancelled


@dataclass(slots=True)
class WorkerStats:
    """Counters of this process."""

    started: int = 0
    completed: int = 0
    retried: int = 0
    dead: int = 0
    reclaimed: int = 0
    lost_deliveries: int = 0
    errors: int = 0
    settle_gone: int = 0  # a failure settle found the delivery already reclaimed elsewhere
    abandoned: int = 0  # a settle that could not be written: left pending for reclaim
    malformed: int = 0
    deferred: int = 0  # held back by a rate limit: back in due until the limit's time
    cancelled: int = 0  # cancelled while running: ended as cancelled
    #: A cancel's publish named a job this worker runs whose envelope was still there (no
    #: cancel removed it: forged, or a cancel's publish whose job was stored again): ignored.
    cancels_ignored: int = 0
    fetches: int = 0  # reads of a partition sent (fetch script calls)


#: Finished jobs waiting for their ack that take no room, at the least (InFlight.finished_room).
FINISHED_ROOM = 1000


@dataclass(slots=True)
class InFlight:
    """Partition -> entry id -> delivery, with a room count shared by the per-primary loops."""

    concurrency: int
    by_partition: dict[int, dict[bytes, Delivery]] = field(default_factory=dict)
    count: int = 0
    reserved: int = 0
    finished: int = 0  # handlers done, acks not yet written: they no longer take room
    #: Deliveries in the table not started yet: a late round's jobs waiting in the fetcher's
    #: overflow for room.  Nothing more is read while they wait (own_room), but they take no
    #: room of a shared pool (SharedConcurrency.held) and start only within start_room().
    queued: int = 0
    on_room: Callable[[], None] | None = None  # wakes readers that found no room
    starved: bool = False  # a reader found no room and waits for some
    #: The pool it shares with other queues' tables (a worker of several queues), or None.
    pool: SharedPool | None = None
    #: Told the partition of a delivery this worker may hold in Redis but no longer claims
    #: (:meth:`left_pending`): the recoverer's watch.
    on_left_pending: Callable[[int], None] | None = None

    def add(self, d: Delivery) -> None:
        table = self.by_partition.get(d.partition)
        if table is None:
            table = self.by_partition[d.partition] = {}
        if d.entry_id not in table:
            self.count += 1
        table[d.entry_id] = d

    def remove(self, partition: int, entry_id: bytes) -> Delivery | None:
        table = self.by_partition.get(partition)
        d = table.pop(entry_id, None) if table else None
        if d is not None:
            self.count -= 1
            if d.finished:
                self.finished -= 1
            self._freed()
        return d

    def left_pending(self, partition: int) -> None:
        """A delivery of ``partition`` may be pending for this worker in Redis while nobody
        here claims it (a settle given up, a read or reclaim whose reply was lost): its
        heartbeat does not touch it, so it is idle past the visibility timeout after that long,
        and the recoverer looks at that partition then (nothing else would before its sweep)."""
        if self.on_left_pending is not None:
            self.on_left_pending(partition)

    def mark_finished(self, d: Delivery) -> None:
        if not d.finished:
            d.finished = True
            self.finished += 1
            self._freed()

    def reserve(self, n: int) -> None:
        """Hold room for a read in flight, so readers of other primaries do not take it too."""
        self.reserved += n

    def release(self, n: int) -> None:
        self.reserved -= n
        self._freed()

    def _freed(self) -> None:
        if self.pool is not None:
            self.pool.freed()  # room in the pool: any queue's reader may take it
            return
        if self.starved and self.on_room is not None and self.start_room() > 0:
            self.starved = False
            self.on_room()

    def room(self) -> int:
        """How many more deliveries may be fetched now.  Finished jobs waiting for their ack
        do not count (their acks travel with a later read), up to ``finished_room()`` of them:
        acks that cannot be written stop the fetching in the end."""
        own = self.own_room()
        return own if self.pool is None else min(own, self.pool.room_for(self))

    def start_room(self) -> int:
        """How many of the queued deliveries may start now: room() with the queued ones left
        out (they wait for it), so that handlers running plus reads in flight stay within the
        concurrency, and within the pool's room for this table when it shares one."""
        own = self.own_room() + self.queued
        return own if self.pool is None else min(own, self.pool.room_for(self))

    def own_room(self) -> int:
        """room() of this table alone, leaving out the pool it may share."""
        waiting = min(self.finished, self.finished_room())
        return self.concurrency - self.count + waiting - self.reserved

    def finished_room(self) -> int:
        """How many finished jobs waiting for their ack take no room: one concurrency's worth,
        and at least FINISHED_ROOM, so that the acks a settler lets wait for a read of their
        partition (up to one concurrency's worth, shardq.worker.settler.ACK_LINGER) plus those
        on the way never eat into the room for running jobs."""
        return max(self.concurrency, FINISHED_ROOM)

    def all(self) -> list[Delivery]:
        return [d for table in self.by_partition.values() for d in table.values()]
