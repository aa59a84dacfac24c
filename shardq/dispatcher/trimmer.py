"""Trimmer: keeps the streams of held partitions bounded (see lua/trim-6.lua).

The ready stream is trimmed up to the oldest entry still pending or undelivered (or younger
than the queue's ack retention); the dead-letter stream is cut to the queue's cap.  Fenced like
promote: only the partition's owner trims.
"""

from __future__ import annotations

import logging
import time

from shardq.dispatcher.context import DispatcherContext
from shardq.dispatcher.leases import Leases
from shardq.errors import FencedError
from shardq.logs import log_event
from shardq.metrics import registry as metrics
from shardq.runtime.duetimes import DueTimes
from shardq.runtime.pacing import SafetyNet
from shardq.store import fleet, keys

log = logging.getLogger("shardq.dispatcher")

# Most acknowledged entries one trim call removes from a ready stream.  Acks leave their
# entries for this trim (no per-entry XDEL), so it must keep up with the drain rate: whole
# stream nodes (100 entries each) go at once, so even the maximum is a short call.  A
# partition trimmed to the limit is trimmed again at once.
TRIM_LIMIT = 100_000
# A partition whose trim found nothing to remove, and that had no activity since, skips 1, 2,
# 4, 8, 16 rounds before the next try, then is left to the safety net: trimmed again after
# max(MAX_SKIP + 1 rounds, held / IDLE_TRIM_RATE seconds) (at most 1.5x that), so an idle
# dispatcher's trims stay at about IDLE_TRIM_RATE a second whatever the partitions it holds
# (one per partition per ~31 s at P = 64, as before; at P = 1024 one per ~512 s instead of
# one per ~31 s).  Activity (jobs promoted here, an enqueue hint: Trimmer.touch) trims the
# partition at the next round whatever its backoff (its acks are coming).  What this process
# does not see (jobs enqueued straight into the ready stream and acked, dead letters of those)
# waits for the backed-off trim: their acknowledged entries, and dead letters past the cap,
# stay up to that long before they go, memory only: nothing pending or undelivered is ever
# trimmed, and a trim that removes something starts the backoff over.  A partition that had no
# activity since this process started, and whose stream owes no job a run, is left to the
# safety net at once after its first trim found nothing.  A stream found owing a job a run
# (pending or undelivered, which this process may never have seen: a worker's read promotes
# too, an enqueue for now goes straight to the stream) when it owed none at its trim before
# starts over from one round: that job's settling leaves an entry to trim.
#
# Which partitions a round trims comes from a heap of their next rounds (DueTimes): a round
# costs the process the partitions it trims, not every partition held.
MAX_SKIP = 30
#: Most trims a second of partitions with no activity (see above).
IDLE_TRIM_RATE = 2.0
#: Most partitions one round trims (the rest are due at the next round).
ROUND_LIMIT = 2048
ONE_HEAP = ""


class Trimmer:
    def __init__(self, ctx: DispatcherContext, *, leases: Leases) -> None:
        """It trims the partitions ``leases`` holds: each won at once, then as its trims and
        :meth:`touch` (activity) say."""
        self.transport = ctx.transport
        self.meta = ctx.meta
        self.pks = ctx.pks
        self.leases = leases
        self.interval = ctx.settings.trim_interval
        #: Rounds are counted, and each partition's next round kept in a heap.
        self.rounds = 0
        self.next_round = DueTimes(lambda p: ONE_HEAP)
        self.backoff: dict[int, int] = {}  # rounds it will skip after its next idle trim
        self.owed: set[int] = set()  # partitions whose last trim found a job owed a run
        self.net = SafetyNet(
            IDLE_TRIM_RATE,
            (MAX_SKIP + 1) * self.interval,
            lambda: max(len(leases.tokens), leases.target),
        )
        leases.when_acquired(self.acquired)

    def acquired(self, partition: int) -> None:
        """A lease was won: trim it at the next round (its backoff stays as it was)."""
        self.next_round.set(partition, self.rounds)

    def touch(self, partition: int) -> None:
        """Activity in ``partition`` (jobs promoted here, an enqueue hint): trim it at the next
        round, and start its backoff over."""
        if partition in self.leases.tokens:
            self.backoff[partition] = 0
            self.next_round.set(partition, self.rounds)

    def _forget(self, partition: int) -> None:
        self.next_round.discard(partition)
        self.backoff.pop(partition, None)
        self.owed.discard(partition)

    async def round(self) -> None:
        tokens = self.leases.tokens
        held: dict[int, str] = {}
        for p in self.next_round.take(ONE_HEAP, self.rounds, ROUND_LIMIT):
            token = tokens.get(p)
            if token is None:
                self._forget(p)  # released or lost since it was set
            else:
                held[p] = token
        self.rounds += 1
        for p in held:  # (a failed call leaves it due at the next round)
            self.next_round.set(p, self.rounds)
        for _ in range(10):
            held = await self._trim(held)
            if not held:
                return

    def _idle(self, p: int) -> None:
        """The trim found nothing to remove: skip the backoff's rounds, or leave it to the
        safety net once the backoff reaches MAX_SKIP."""
        skip = self.backoff.get(p, MAX_SKIP)
        self.backoff[p] = min(MAX_SKIP, max(1, 2 * skip))
        if skip < MAX_SKIP:
            self.next_round.set(p, self.rounds + skip)
            return
        ahead = self.net.rounds_ahead(p, time.monotonic(), self.interval)
        self.next_round.set(p, self.rounds - 1 + ahead)

    async def _trim(self, held: dict[int, str]) -> dict[int, str]:
        """Trim these partitions once; returns those trimmed to the limit (more to go)."""
        ops = [
            fleet.trim(
                self.pks[p], token, self.meta.ack_retention_ms, self.meta.dead_cap, TRIM_LIMIT
            )
            for p, token in held.items()
        ]
        results = await self.transport.run_many(ops)
        again: dict[int, str] = {}
        for p, result in zip(held, results, strict=True):
            if isinstance(result, FencedError):
                self.leases.fenced(p, "trim rejected", held[p])
            elif isinstance(result, BaseException):
                metrics.SCRIPT_ERRORS.labels(self.meta.queue, "trim", type(result).__name__).inc()
            elif result.dead_dropped > 0:
                log_event(
                    log,
                    "dead.dropped",
                    queue=self.meta.queue,
                    partition=keys.label_of_fleet_id(p),
                    dropped=result.dead_dropped,
                    cap=self.meta.dead_cap,
                )
            if isinstance(result, BaseException):
                continue
            if result.ready_trimmed >= TRIM_LIMIT:
                again[p] = held[p]
            news = result.owed and p not in self.owed  # jobs came that this process missed
            if result.owed:
                self.owed.add(p)
            else:
                self.owed.discard(p)
            if result.ready_trimmed or result.dead_dropped:
                self.backoff[p] = 0
            else:
                if news:
                    self.backoff[p] = 0
                self._idle(p)
        return again
