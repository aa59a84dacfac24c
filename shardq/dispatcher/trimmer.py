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

# Most entries one trim call removes from a stream: keeps the call short.
TRIM_LIMIT = 1000


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
        ops = [
            fleet.trim(
                self.pks[p], token, self.meta.ack_retention_ms, self.meta.dead_cap, TRIM_LIMIT
            )
            for p, token in held.items()
        ]
        results = await self.transport.run_many(ops)
        for p, result in zip(held, results, strict=True):
            if isinstance(result, FencedError):
                self.leases.fenced(p, "trim rejected")
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
