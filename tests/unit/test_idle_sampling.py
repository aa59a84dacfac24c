"""The sampler's still partitions, through canned snapshots (no Redis): which partitions each
round reads, and what stays exported for the others.  The Redis side is
tests/integration/test_observability.py's and test_malformed.py's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from shardq import metrics
from shardq.config import DispatcherSettings
from shardq.dispatcher.sampler import IDLE_SAMPLE_RATE, STILL_MAX_SKIP, Sampler
from shardq.store import keys
from shardq.store.inspection import PartitionSnapshot
from shardq.store.layout import Layout

NODE = "127.0.0.1:1"
PARTITIONS = 4


def snap(p: int, now_ms: int = 1_000_000, **figures: Any) -> PartitionSnapshot:
    base: dict[str, Any] = dict(
        due=0, overdue=0, oldest_due_ms=None, ready=0, pending=0, oldest_pending_idle_ms=None,
        dead=0, consumers=1, counters={"enqueued": 5, "promoted": 5},
    )  # fmt: skip
    base.update(figures)
    return PartitionSnapshot("q", p, NODE, now_ms, **base)


class Stats:
    """run_many for partition-stats: answers each partition's current figures."""

    def __init__(self, pks: dict[int, keys.PartitionKeys]) -> None:
        self.by_due = {pk.due: p for p, pk in pks.items()}
        self.figures: dict[int, dict[str, Any]] = {p: {} for p in pks}
        self.now_ms = 1_000_000
        self.asked: list[list[int]] = []
        self.during: Callable[[], None] = lambda: None  # what happens while the call is out

    def node_name(self, key: str) -> str:
        return NODE

    async def run_many(self, ops: list[Any]) -> list[Any]:
        parts = [self.by_due[op.keys[0]] for op in ops]
        self.asked.append(parts)
        self.during()
        self.now_ms += 5000
        return [snap(p, self.now_ms, **self.figures[p]) for p in parts]


def sampler(partitions: int = PARTITIONS) -> tuple[Sampler, Stats]:
    pks = dict(Layout("q", partitions).fleet())
    stats = Stats(pks)
    callbacks: list[Callable[[int], None]] = []
    leases = SimpleNamespace(tokens=dict.fromkeys(pks, "1"), when_acquired=callbacks.append)
    ctx = SimpleNamespace(transport=stats, queue="q", pks=pks, settings=DispatcherSettings())
    s = Sampler(ctx, leases=leases)  # type: ignore[arg-type]
    for p in pks:  # every lease won at start-up
        for callback in callbacks:
            callback(p)
    return s, stats


def net_rounds(partitions: int) -> tuple[int, int]:
    """The least and most rounds a still partition skips (metrics_interval 5 s)."""
    period = max(STILL_MAX_SKIP + 1, partitions / IDLE_SAMPLE_RATE / 5.0)
    return int(period / 2), int(1.5 * period) + 1


def rounds(s: Sampler, stats: Stats, n: int) -> list[list[int]]:
    stats.asked.clear()
    for _ in range(n):
        before = len(stats.asked)
        asyncio.run(s.round())
        if len(stats.asked) == before:  # (a round with nothing to read sends nothing)
            stats.asked.append([])
    return list(stats.asked)


def test_a_still_partition_is_left_to_the_safety_net_and_its_figures_stay_exported() -> None:
    s, stats = sampler()
    stats.figures[1] = {"due": 3, "oldest_due_ms": 10**12}  # far-off jobs: still too
    stats.figures[2] = {"pending": 1, "oldest_pending_idle_ms": 5}  # ages by itself: never
    stats.figures[3] = {"due": 1, "oldest_due_ms": 1_020_000}  # comes due soon: never
    asked = rounds(s, stats, 2)  # every partition read twice: two alike make it still
    assert asked == [[0, 1, 2, 3], [0, 1, 2, 3]]
    least, most = net_rounds(PARTITIONS)
    asked = rounds(s, stats, most + 1)
    assert all(sorted(parts)[-2:] == [2, 3] for parts in asked)
    for p in (0, 1):
        at = [i for i, parts in enumerate(asked) if p in parts]
        assert len(at) >= 1 and least - 1 <= at[0] <= most, (p, at)
    exported = {p for (q, p) in metrics.PARTITIONS.snapshots if q == "q"}
    assert exported == {0, 1, 2, 3}  # the skipped ones keep their last figures
    metrics.PARTITIONS.forget("q")


def test_still_partitions_cost_a_bounded_rate_whatever_the_partitions_held() -> None:
    """At 4,096 still partitions the sampler reads about IDLE_SAMPLE_RATE a second (a round
    every metrics_interval), not 4,096 every six rounds; each is read again in time."""
    s, stats = sampler(4096)
    rounds(s, stats, 2)  # read twice: still
    _, most = net_rounds(4096)
    asked = rounds(s, stats, most + 1)
    assert {p for parts in asked for p in parts} == set(range(4096))
    busiest = max(len(parts) for parts in asked)
    assert busiest <= 2 * IDLE_SAMPLE_RATE * 5.0 * 4, busiest  # (before: 4,096 every 6th)
    assert len(metrics.PARTITIONS.snapshots) >= 4096
    metrics.PARTITIONS.forget("q")


def test_a_hint_a_promote_or_a_changed_snapshot_ends_the_skipping() -> None:
    s, stats = sampler()
    rounds(s, stats, 2)  # all still now
    assert rounds(s, stats, 1) == [[]]
    s.touch(0)  # a hint on partition 0's due channel
    s.touch(1)  # partition 1 moved jobs (the promoter tells it)
    assert sorted(rounds(s, stats, 1)[0]) == [0, 1]
    # A job enqueued and run unseen: the next snapshot of partition 0 (the safety net's)
    # differs from the one before, so it is read again at the round after it.
    stats.figures[0] = {"counters": {"enqueued": 6, "promoted": 5, "completed": 1}}
    least, most = net_rounds(PARTITIONS)
    asked = rounds(s, stats, most + 2)
    first = next(i for i, parts in enumerate(asked) if 0 in parts)
    assert first <= most and 0 in asked[first + 1]
    # alike twice again: still (read again only by the safety net)
    assert 0 not in [p for parts in rounds(s, stats, least - 1)[1:] for p in parts]
    metrics.PARTITIONS.forget("q")


def test_a_hint_while_the_snapshot_is_on_the_way_keeps_the_partition_read() -> None:
    """The reply may have been read before what the hint announces happened: it must not make
    the partition still."""
    s, stats = sampler()
    rounds(s, stats, 1)
    stats.during = lambda: s.touch(2)
    assert rounds(s, stats, 1) == [[0, 1, 2, 3]]  # alike, but 2 was touched meanwhile
    stats.during = lambda: None
    assert rounds(s, stats, 1) == [[2]]
    assert rounds(s, stats, 1) == [[]]
    metrics.PARTITIONS.forget("q")
