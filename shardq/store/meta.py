"""A queue's settings as stored at creation (``{sq:<queue>}:meta``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardq.connection import as_text
from shardq.errors import UnknownQueueError
from shardq.store import keys

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


def _int(raw: Any, default: int) -> int:
    try:
        return int(as_text(raw))
    except (TypeError, ValueError):
        return default


def parse_meta(queue: str, raw: dict[Any, Any]) -> QueueMeta:
    fields = {as_text(k): v for k, v in raw.items()}
    partitions = _int(fields.get("partitions"), 0)
    if not 1 <= partitions <= keys.MAX_PARTITIONS:
        raise unknown_queue(queue)  # never created, or its meta was damaged by hand
    return QueueMeta(
        queue,
        partitions,
        max(0, _int(fields.get("ack_retention_ms"), 0)),
        max(1, _int(fields.get("dead_cap"), DEFAULT_DEAD_CAP)),
        max(0, _int(fields.get("layout"), 0)),
    )


async def read_meta(client: Any, queue: str) -> QueueMeta:
    """The queue's settings (asyncio client); UnknownQueueError when it was never created."""
    return parse_meta(queue, await client.hgetall(keys.queue_meta_key(queue)))


def read_meta_sync(client: Any, queue: str) -> QueueMeta:
    return parse_meta(queue, client.hgetall(keys.queue_meta_key(queue)))
