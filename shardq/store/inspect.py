"""Read-only views and operator actions on partitions: stats snapshots, the dead-letter stream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardq.connection import as_text
from shardq.store import keys
from shardq.store.codes import check
from shardq.store.op import Op, op


@dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    """One partition at one instant (from the partition-stats script)."""

    queue: str
    partition: int
    node: str
    now_ms: int
    due: int
    overdue: int
    oldest_due_ms: int | None
    ready: int
    pending: int
    oldest_pending_idle_ms: int | None
    dead: int
    consumers: int
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def lag_seconds(self) -> float:
        """Age of the oldest overdue job (promotion lag); 0 when nothing is overdue."""
        if not self.overdue or self.oldest_due_ms is None:
            return 0.0
        return max(0.0, (self.now_ms - self.oldest_due_ms) / 1000.0)

    @property
    def oldest_pending_seconds(self) -> float:
        return (self.oldest_pending_idle_ms or 0) / 1000.0


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return int(float(value))


def partition_stats(pk: keys.PartitionKeys, node: str) -> Op[PartitionSnapshot]:
    """A consistent snapshot of one partition (bounded: O(1) and O(log n) reads only)."""

    def parse(reply: Any) -> PartitionSnapshot:
        r = check(reply)
        raw = r[9]
        counters: dict[str, int] = {}
        for i in range(0, len(raw) - 1, 2):
            try:
                counters[as_text(raw[i])] = _int(raw[i + 1])
            except (TypeError, ValueError):
                continue  # a corrupt counter is left out, not fatal to the snapshot
        return PartitionSnapshot(
            queue=pk.queue,
            partition=pk.partition,
            node=node,
            now_ms=_int(r[0]),
            due=_int(r[1]),
            overdue=_int(r[2]),
            oldest_due_ms=None if _int(r[3]) < 0 else _int(r[3]),
            ready=_int(r[4]),
            pending=_int(r[5]),
            oldest_pending_idle_ms=None if _int(r[6]) < 0 else _int(r[6]),
            dead=_int(r[7]),
            consumers=_int(r[8]),
            counters=counters,
        )

    return op("partition-stats", [pk.due, pk.ready, pk.dead, pk.stats], [keys.WORKER_GROUP], parse)


def dlq_replay(pk: keys.PartitionKeys, entry_ids: list[str]) -> Op[tuple[int, int]]:
    """Move dead jobs back to due (due now, attempts reset); the op returns (replayed, skipped)."""

    def parse(reply: Any) -> tuple[int, int]:
        r = check(reply)
        return int(r[0]), int(r[1])

    return op(
        "dlq-replay",
        [pk.dead, pk.jobs, pk.due, pk.errors, pk.stats],
        [pk.due_hint, *entry_ids],
        parse,
    )


def dlq_purge(pk: keys.PartitionKeys, entry_ids: list[str]) -> Op[int]:
    """Delete dead letters and the dead jobs they name; the op returns how many were deleted."""
    return op("dlq-purge", [pk.dead, pk.jobs, pk.errors], entry_ids, lambda r: int(check(r)[0]))
