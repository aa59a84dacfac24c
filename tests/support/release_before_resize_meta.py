"""shardq/store/meta.py as released before resizing existed (commit 0fdd44b), verbatim below this
docstring: the previous release's meta reader, which tests/integration/test_resize.py shows refusing
a resized queue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardq.connection import as_text
from shardq.errors import MalformedRecordError, UnknownQueueError
from shardq.store import keys, numbers

DEFAULT_DEAD_CAP = 100_000


@dataclass(frozen=True, slots=True)
class QueueMeta:
    queue: str
    partitions: int
    ack_retention_ms: int
    dead_cap: int
    layout: int = 0  # keys.LAYOUT_VERSION at creation (or `shardq queue upgrade`); 0: unknown

    @property
    def compact(self) -> bool:
        """Waiting jobs with a timed id are stored compactly (lua/includes/compact.lua)."""
        return self.layout >= keys.COMPACT_LAYOUT


def unknown_queue(queue: str) -> UnknownQueueError:
    return UnknownQueueError(
        f"queue {queue!r} does not exist: create it first with "
        f"`shardq queue create --queue {queue} --partitions 64` or client.create_queue({queue!r})"
    )


#: Ranges of the meta's numbers (queue_create and lua/queue-create-1.lua refuse others).
MAX_ACK_RETENTION_MS = 7 * 86_400_000
MAX_DEAD_CAP = 10**12


def parse_meta(queue: str, raw: dict[Any, Any]) -> QueueMeta:
    fields = {as_text(k): v for k, v in raw.items()}
    if "partitions" not in fields:
        raise unknown_queue(queue)  # never created
    try:
        partitions = numbers.integer(
            fields["partitions"], 1, keys.MAX_PARTITIONS, what="partitions"
        )
        ack = fields.get("ack_retention_ms", 0)
        dead_cap = fields.get("dead_cap", DEFAULT_DEAD_CAP)
        return QueueMeta(
            queue,
            partitions,
            numbers.integer(ack, 0, MAX_ACK_RETENTION_MS, what="ack_retention_ms"),
            numbers.integer(dead_cap, 1, MAX_DEAD_CAP, what="dead_cap"),
            # 0: unknown (older than the field), read as the plain layout
            numbers.integer(fields.get("layout", 0), 0, 1000, what="layout"),
        )
    except numbers.BadNumber as exc:
        # Damaged by hand (or by a buggy release): no process may guess its partitions.
        raise MalformedRecordError(
            f"queue {queue!r} has a damaged meta ({keys.queue_meta_key(queue)}): {exc}; "
            "set the field back with HSET as `shardq queue create` wrote it"
        ) from None


async def read_meta(client: Any, queue: str) -> QueueMeta:
    """The queue's settings (asyncio client); UnknownQueueError when it was never created."""
    return parse_meta(queue, await client.hgetall(keys.queue_meta_key(queue)))
