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


def _int(raw: Any, default: int) -> int:
    try:
        return int(as_text(raw))
    except (TypeError, ValueError):
        return default


def parse_meta(queue: str, raw: dict[Any, Any]) -> QueueMeta:
    fields = {as_text(k): v for k, v in raw.items()}
    partitions = _int(fields.get("partitions"), 0)
    if not 1 <= partitions <= keys.MAX_PARTITIONS:
        raise UnknownQueueError(
            f"queue {queue!r} does not exist (or its meta is damaged): create it with "
            f"`shardq queue create {queue}`"
        )
    return QueueMeta(
        queue,
        partitions,
        max(0, _int(fields.get("ack_retention_ms"), 0)),
        max(1, _int(fields.get("dead_cap"), DEFAULT_DEAD_CAP)),
    )


async def read_meta(client: Any, queue: str) -> QueueMeta:
    """The queue's settings (asyncio client); UnknownQueueError when it was never created."""
    return parse_meta(queue, await client.hgetall(keys.queue_meta_key(queue)))


def read_meta_sync(client: Any, queue: str) -> QueueMeta:
    return parse_meta(queue, client.hgetall(keys.queue_meta_key(queue)))
