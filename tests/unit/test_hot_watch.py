"""The hot-partition warning (shardq.metrics.HotShardWatch) tells a partition that is hot (a key
or an id pattern takes a share of the queue) from the chance spread of sticky runs
(shardq.store.sticky: jobs due together go to one partition, up to 16)."""

from __future__ import annotations

import logging
import random

import pytest

from shardq import metrics
from shardq.store.inspection import PartitionSnapshot

P = 64
SPAN = 60.0


def snapshots(load: list[int]) -> list[PartitionSnapshot]:
    return [
        PartitionSnapshot("q", p, f"n{p % 3}", 0, 0, 0, None, 0, 0, None, 0, 0, {"enqueued": n})
        for p, n in enumerate(load)
    ]


def warned(load: list[int], caplog: pytest.LogCaptureFixture) -> set[str]:
    """The partitions warned about, by name (keys.label_of_fleet_id)."""
    watch = metrics.HotShardWatch("q", multiple=3.0)
    watch.observe(snapshots([0] * P), at=0.0)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        report = watch.observe(snapshots(load), at=SPAN)
    assert report is not None
    events = [r.msg for r in caplog.records if isinstance(r.msg, dict)]
    return {e["partition"] for e in events if e.get("event") == "partition.hot"}


def sticky_bursts(rate: float, run: int, seed: int) -> list[int]:
    """A minute of a queue fed in bursts of ``run`` jobs due together, each burst one run."""
    rng = random.Random(seed)
    load = [0] * P
    for _ in range(int(rate * SPAN / run)):
        load[rng.randrange(P)] += run
    return load


@pytest.mark.parametrize("rate", [10, 20, 50, 100])
def test_sticky_runs_read_as_chance_not_as_a_hot_partition(
    rate: int, caplog: pytest.LogCaptureFixture
) -> None:
    for seed in range(20):
        load = sticky_bursts(rate, 16, seed)
        assert warned(load, caplog) == set(), (rate, seed, max(load), sum(load) / P)


@pytest.mark.parametrize("rate", [20, 100, 1000])
def test_a_partition_taking_a_share_of_the_queue_is_warned_about(
    rate: int, caplog: pytest.LogCaptureFixture
) -> None:
    # A fifth of the jobs to partition 7 (one idempotency key, say), the rest in sticky runs.
    load = sticky_bursts(rate * 0.8, 16, 1)
    load[7] += int(rate * 0.2 * SPAN)
    assert warned(load, caplog) == {"7"}
