"""Trimmer: keeps the streams of held partitions bounded (see lua/trim-6.lua).

The ready stream is trimmed up to the oldest entry still pending or undelivered (or younger
than the queue's ack retention); the dead-letter stream is cut to the queue's cap.  Fenced like
promote: only the partition's owner trims.
"""

from __future__ import annotations

import logging

from shardq import metrics
from shardq.dispatcher.leases import Leases
from shardq.errors import FencedError
from shardq.logs import log_event
from shardq.store import fleet, keys
from shardq.store.meta import QueueMeta
from shardq.store.transport import AsyncTransport

log = logging.getLogger("shardq.dispatcher")

# Most acknowledged entries one trim call removes from a ready stream.  Acks leave their
# entries for this trim (no per-entry XDEL), so it must keep up with the drain rate: whole
# stream nodes (100 entries each) go at once, so even the maximum is a short call.  A
# partition trimmed to the limit is trimmed again at once.
TRIM_LIMIT = 100_000


class Trimmer:
    def __init__(
        self,
        transport: AsyncTransport,
        meta: QueueMeta,
        pks: list[keys.PartitionKeys],
        leases: Leases,
    ) -> None:
        self.transport = transport
        self.meta = meta
        self.pks = pks
        self.leases = leases

    async def round(self) -> None:
        held = dict(self.leases.tokens)
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
                    partition=p,
                    dropped=result.dead_dropped,
                    cap=self.meta.dead_cap,
                )
            if not isinstance(result, BaseException) and result.ready_trimmed >= TRIM_LIMIT:
                again[p] = held[p]
        return again
