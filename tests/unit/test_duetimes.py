"""DueTimes: the due partitions of a primary, earliest first, without scanning them all."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from shardq.runtime.duetimes import DueTimes


def test_take_hands_out_due_partitions_earliest_first_within_the_limit() -> None:
    d = DueTimes(lambda p: "a" if p < 10 else "b", range(20))
    for p in range(20):
        d.set(p, float(20 - p))  # partition 19 is due first
    assert d.earliest("a") == 11.0 and d.earliest("b") == 1.0
    assert d.take("a", 13.0, 10) == [9, 8, 7]
    assert d.take("a", 13.0, 10) == []  # taken ones wait until their time is set again
    assert d.get(9) == 11.0  # ... keeping their past time meanwhile
    assert d.take("b", 100.0, 2) == [19, 18]
    d.put_back([18])
    assert d.take("b", 100.0, 1) == [18]
    d.set(9, 0.5)
    assert d.take("a", 1.0, 5) == [9]


def test_a_time_set_again_replaces_the_old_one() -> None:
    d = DueTimes(lambda p: "n", [1, 2])
    d.set(1, 5.0)
    d.set(1, 50.0)  # later: the entry at 5.0 is stale
    d.set(2, 10.0)
    assert d.take("n", 20.0, 10) == [2]
    assert d.earliest("n") == 50.0
    d.discard(1)
    assert d.earliest("n") is None and 1 not in d and len(d) == 1


def test_partitions_moved_to_another_primary_are_handed_out_there() -> None:
    where = {p: "a" for p in range(6)}
    d = DueTimes(where.__getitem__, range(6))
    where[2] = where[4] = "b"  # a slot move, seen before the owner rebuilt
    assert sorted(d.take("a", 1.0, 10)) == [0, 1, 3, 5]
    assert sorted(d.take("b", 1.0, 10)) == [2, 4]


def test_rebuild_returns_taken_partitions() -> None:
    d = DueTimes(lambda p: "n", range(3))
    assert d.take("n", 0.0, 10) == [0, 1, 2]
    d.rebuild()  # a loop failed before setting their times: due again
    assert d.take("n", 0.0, 10) == [0, 1, 2]


def test_stale_entries_stay_bounded() -> None:
    d = DueTimes(lambda p: "n", range(10))
    for i in range(100_000):
        d.set(i % 10, float(i))
    assert sum(len(h) for h in d._heaps.values()) <= 2 * 10 + 1024 + 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 50)), max_size=200), st.randoms())
def test_take_agrees_with_a_scan(sets: list[tuple[int, int]], rnd: random.Random) -> None:
    """Whatever the history of sets, discards and takes, take() hands out exactly what a scan
    over the times would (due by now, not taken since their last set), earliest first."""
    nodes = {p: rnd.choice("ab") for p in range(31)}
    d = DueTimes(nodes.__getitem__)
    times: dict[int, float] = {}
    out: set[int] = set()  # taken and not set since
    for p, t in sets:
        action = rnd.random()
        if action < 0.1:
            d.discard(p)
            times.pop(p, None)
            out.discard(p)
        elif action < 0.3:
            node, now = rnd.choice("ab"), float(rnd.randint(0, 50))
            want = sorted(
                (at, q)
                for q, at in times.items()
                if nodes[q] == node and at <= now and q not in out
            )
            got = d.take(node, now, 1000)
            assert got == [q for _, q in want]
            out.update(got)
        else:
            d.set(p, float(t))
            times[p] = float(t)
            out.discard(p)
