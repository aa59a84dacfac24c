"""The move suggestion of `shardq rebalance nodes` (pure arithmetic on queue_stats rows; the
moves themselves run against a real cluster in test_chaos.py)."""

from __future__ import annotations

from typing import Any

from shardq.admin import slots

NODES = ["a:1", "b:2", "c:3"]


def stats(rates: dict[int, tuple[str, float]]) -> dict[str, Any]:
    return {
        "partitions": [
            {"partition": p, "node": node, "rate_per_s": rate} for p, (node, rate) in rates.items()
        ]
    }


def test_two_hot_partitions_on_one_node_split_to_the_coldest() -> None:
    data = stats({0: ("a:1", 500.0), 1: ("a:1", 400.0), 2: ("b:2", 100.0), 3: ("c:3", 10.0)})
    loads = slots.node_loads(data, NODES)
    assert [n.rate_per_s for n in loads] == [900.0, 100.0, 10.0]
    assert abs(sum(n.share for n in loads) - 1.0) < 0.01
    tip = slots.suggest(data, loads)
    assert tip is not None
    # moving 0 leaves a at 400 and c at 510; moving 1 leaves a at 500 and c at 410: 1 is better
    assert (tip.partition, tip.source, tip.target) == (1, "a:1", "c:3")
    assert (tip.busiest_before, tip.busiest_after) == (900.0, 500.0)


def test_a_lone_hot_partition_is_not_moved_around() -> None:
    data = stats({0: ("a:1", 900.0), 1: ("b:2", 10.0), 2: ("c:3", 10.0)})
    assert slots.suggest(data, slots.node_loads(data, NODES)) is None


def test_no_load_no_suggestion_and_empty_primaries_are_listed() -> None:
    data = stats({0: ("a:1", 0.0), 1: ("a:1", 0.0)})
    loads = slots.node_loads(data, NODES)
    assert [(n.node, n.partitions) for n in loads] == [("a:1", [0, 1]), ("b:2", []), ("c:3", [])]
    assert slots.suggest(data, loads) is None


def test_stats_rates_are_counted_over_the_window() -> None:
    """queue_stats adds both snapshots after the window: the rate is over the window, not
    over the microseconds between the two additions (it read millions of jobs/s)."""
    from shardq.plans.admin import stats_report
    from shardq.store.inspection import PartitionSnapshot

    def snap(p: int, enqueued: int) -> PartitionSnapshot:
        return PartitionSnapshot(
            "q", p, NODES[p], 0, 0, 0, None, 0, 0, None, 0, 0, {"enqueued": enqueued}
        )

    report = stats_report("q", [snap(0, 10), snap(1, 0)], [snap(0, 110), snap(1, 50)], 2.0)
    assert [r["rate_per_s"] for r in report["partitions"]] == [50.0, 25.0]
    assert report["queue"]["rate_per_s"] == 75.0
