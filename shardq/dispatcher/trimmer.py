"""Trimmer: keeps the streams of held partitions bounded (see lua/trim-6.lua).

The ready stream is trimmed up to the oldest entry still pending or undelivered (or younger
than the queue's ack retention); the dead-letter stream is cut to the queue's cap.  Fenced like
promote: only the partition's owner trims.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shardq.dispatcher.context import DispatcherContext
from shardq.dispatcher.leases import Leases
from shardq.errors import FencedError
from shardq.logs import log_event
from shardq.metrics import registry as metrics
from shardq.store import fleet, keys

log = logging.getLogger("shardq.dispatcher")

# Most acknowledged entries one trim call removes from a ready stream.  Acks leave their
# entries for this trim (no per-entry XDEL), so it must keep up with the drain rate: whole
# stream nodes (100 entries each) go at once, so even the maximum is a short call.  A
# partition trimmed to the limit is trimmed again at once.
TRIM_LIMIT = 100_000
# A partition whose trim found nothing to remove, and that promoted nothing since, skips 1, 2,
# 4, 8, 16, then 30 rounds before the next try: an idle queue costs one trim call per
# partition per ~30 s, not per trim_interval (it was ~8 s: 6-7 calls a second at P = 64, each
# the price of a promote).  A partition that promoted jobs since its last trim is trimmed at
# the next round whatever its backoff (its acks are coming).  What this process does not see
# (jobs enqueued straight into the ready stream and acked, dead letters of those) waits for
# the backed-off trim: their acknowledged entries, and dead letters past the cap, stay up to
# ~31 trim intervals (31 s) longer before they go, memory only: nothing pending or
# undelivered is ever trimmed, and a trim that removes something starts the backoff over.
# A partition that promoted nothing since this process started, and whose stream owes no job a
# run, skips the most at once after its first trim found nothing (an idle fleet's start-up
# trimmed each partition six times in its first minute).  A stream found owing a job a run
# (pending or undelivered, which this process may never have seen: a worker's read promotes
# too, an enqueue for now goes straight to the stream) when it owed none at its trim before
# starts over from one round: that job's settling leaves an entry to trim.
MAX_SKIP = 30


class Trimmer:
    def __init__(
        self,
        ctx: DispatcherContext,
        *,
        leases: Leases,
        activity: Callable[[int], int] = lambda p: 0,
    ) -> None:
        self.transport = ctx.transport
        self.activity = activity  # grows with activity in a partition (promotes, enqueue hints)
        self.seen: dict[int, int] = {}
        self.meta = ctx.meta
        self.pks = ctx.pks
        self.leases = leases
        self.skip: dict[int, int] = {}  # rounds left to skip, per partition
        self.backoff: dict[int, int] = {}  # rounds it will skip after its next idle trim
        self.owed: set[int] = set()  # partitions whose last trim found a job owed a run

    async def round(self) -> None:
        held: dict[int, str] = {}
        for p, token in self.leases.tokens.items():
            promoted = self.activity(p)
            if promoted != self.seen.get(p, 0):
                self.seen[p] = promoted
                self.skip[p] = self.backoff[p] = 0
            if self.skip.get(p, 0) > 0:
                self.skip[p] -= 1
            else:
                held[p] = token
        for _ in range(10):
            held = await self._trim(held)
            if not held:
                return

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
                self.skip[p] = self.backoff.get(p, MAX_SKIP)
                self.backoff[p] = min(MAX_SKIP, max(1, 2 * self.skip[p]))
        return again
