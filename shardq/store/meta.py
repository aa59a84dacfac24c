"""A queue's settings as stored at creation (``{sq:<queue>}:meta``), and what a producer caches
of them (:class:`QueueCache`)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from shardq.connection import as_text
from shardq.errors import MalformedRecordError, UnknownQueueError
from shardq.store import keys, numbers
from shardq.store.layout import Layout

DEFAULT_DEAD_CAP = 100_000


#: What a resized queue's meta holds in ``partitions``, where releases before resizing read
#: the count: not a number, so they refuse the queue (MalformedRecordError) instead of
#: writing into generation 0's keys, and their ``queue create`` finds it taken and writes
#: nothing.  The count is then in ``generation:partitions``.
RESIZED_MARKER = "resized: needs shardq >= 0.2"
#: The meta's fields of a resized queue (lua/resize-*.lua, shardq.admin.resize).
GENERATION_FIELD = "generation"
GENERATION_PARTITIONS_FIELD = "generation:partitions"
#: '<generation>:<partitions>' of the generation a running resize empties.
DRAINING_FIELD = "draining"
#: '<generation>:<partitions>' of the generation a resize has made and switches to next: the
#: fleet serves it from then on (producers still route to the active one).  '' when none.
COMING_FIELD = "next"


@dataclass(frozen=True, slots=True)
class QueueMeta:
    queue: str
    partitions: int  # the active generation's count
    ack_retention_ms: int
    dead_cap: int
    layout: int = 0  # keys.LAYOUT_VERSION at creation (or `shardq queue upgrade`); 0: unknown
    generation: int = 0  # 0 until the queue is first resized
    draining: tuple[int, int] | None = None  # (generation, partitions) a running resize empties
    coming: tuple[int, int] | None = None  # (generation, partitions) a resize switches to next

    @property
    def compact(self) -> bool:
        """Waiting jobs with a timed id are stored compactly (lua/includes/compact.lua)."""
        return self.layout >= keys.COMPACT_LAYOUT

    @property
    def key_layout(self) -> Layout:
        """Where the queue's partitions live (the active generation, the draining one, the
        coming one)."""
        return Layout(self.queue, self.partitions, self.generation, self.draining, self.coming)


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
        generation, draining = 0, None
        count = fields["partitions"]
        if GENERATION_FIELD in fields:
            generation = numbers.integer(fields[GENERATION_FIELD], 0, 10**9, what="generation")
            count = fields.get(GENERATION_PARTITIONS_FIELD)
            draining = parse_draining(fields.get(DRAINING_FIELD), generation)
        partitions = numbers.integer(count, 1, keys.MAX_PARTITIONS, what="partitions")
        # Also before the first resize's switch (generation 0, a numeric 'partitions').
        coming = parse_draining(fields.get(COMING_FIELD), generation, COMING_FIELD)
        ack = fields.get("ack_retention_ms", 0)
        dead_cap = fields.get("dead_cap", DEFAULT_DEAD_CAP)
        return QueueMeta(
            queue,
            partitions,
            numbers.integer(ack, 0, MAX_ACK_RETENTION_MS, what="ack_retention_ms"),
            numbers.integer(dead_cap, 1, MAX_DEAD_CAP, what="dead_cap"),
            # 0: unknown (older than the field), read as the plain layout
            numbers.integer(fields.get("layout", 0), 0, 1000, what="layout"),
            generation,
            draining,
            coming,
        )
    except numbers.BadNumber as exc:
        # Damaged by hand (or by a buggy release): no process may guess its partitions.
        raise MalformedRecordError(
            f"queue {queue!r} has a damaged meta ({keys.queue_meta_key(queue)}): {exc}; "
            "set the field back with HSET as `shardq queue create` wrote it"
        ) from None


def parse_draining(raw: Any, generation: int, name: str = DRAINING_FIELD) -> tuple[int, int] | None:
    """``(generation, partitions)`` from the meta's '<generation>:<partitions>' (absent: None);
    another generation than the active one (older, or newer while an abort drains it)."""
    if raw is None or as_text(raw) == "":
        return None  # none (or emptied by the commit of the last resize)
    old, sep, count = as_text(raw).partition(":")
    if not sep:
        raise numbers.BadNumber(name, raw, "'<generation>:<partitions>'")
    old_generation = numbers.integer(old, 0, 10**9, what=f"{name} generation")
    if old_generation == generation:
        raise numbers.BadNumber(f"{name} generation", old, f"another than {generation}")
    return old_generation, numbers.integer(count, 1, keys.MAX_PARTITIONS, what="partitions")


async def read_meta(client: Any, queue: str) -> QueueMeta:
    """The queue's settings (asyncio client); UnknownQueueError when it was never created."""
    return parse_meta(queue, await client.hgetall(keys.queue_meta_key(queue)))


# How long a producer trusts "lanes on" once read: turning lanes off reaches it this soon.
LANES_RECHECK = 10.0


@dataclass(slots=True)
class QueueFacts:
    """What a producer caches about one queue: its meta, and when lanes were last read as on
    (monotonic)."""

    meta: QueueMeta
    lanes_seen: float = -math.inf

    @property
    def compact(self) -> bool:
        return self.meta.compact


class QueueCache:
    """The sync and asyncio clients' cache of :class:`QueueFacts`, one per queue."""

    def __init__(self) -> None:
        self._facts: dict[str, QueueFacts] = {}

    def get(self, queue: str) -> QueueFacts | None:
        return self._facts.get(queue)

    def store(self, queue: str, raw: dict[Any, Any]) -> QueueMeta:
        """Cache the queue's meta from HGETALL of it (a few fields every role may read);
        UnknownQueueError when the queue does not exist."""
        return self.keep(parse_meta(queue, raw))

    def keep(self, meta: QueueMeta) -> QueueMeta:
        """Cache a queue's meta just read."""
        self._facts[meta.queue] = QueueFacts(meta)
        return meta

    def forget(self, queue: str) -> None:
        self._facts.pop(queue, None)

    def compact(self, queue: str) -> bool:
        facts = self._facts.get(queue)
        return facts is not None and facts.compact

    def lanes_trusted(self, queue: str) -> bool:
        """Lanes were read as on less than LANES_RECHECK seconds ago."""
        facts = self._facts.get(queue)
        return facts is not None and time.monotonic() - facts.lanes_seen < LANES_RECHECK

    def saw_lanes(self, queue: str, on: bool) -> None:
        facts = self._facts.get(queue)
        if facts is not None:
            facts.lanes_seen = time.monotonic() if on else -math.inf
