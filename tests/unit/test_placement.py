"""The placement planner of `shardq rebalance plan` (shardq.admin.placement): pure
arithmetic, checked against brute force on small cases; the moves themselves run on a real
cluster in tests/fleet/test_rebalance_plan.py."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardq.admin import placement
from shardq.admin.placement import Unit

NODES = ["a:1", "b:2", "c:3"]


def units_on(node: str, loads: list[float], sizes: list[int] | None = None) -> list[Unit]:
    sizes = sizes or [100] * len(loads)
    return [Unit(i, node, load, sizes[i], (("q", i),)) for i, load in enumerate(loads)]


def within(loads: dict[str, float], tolerance: float) -> bool:
    mean = sum(loads.values()) / len(loads)
    return all(abs(v - mean) <= tolerance * mean + 1e-6 * max(1.0, mean) for v in loads.values())


def brute_force(units: list[Unit], nodes: list[str], tolerance: float) -> int | None:
    """Fewest bytes of any placement within tolerance, over every assignment; None if none."""
    best: int | None = None
    for choice in itertools.product(nodes, repeat=len(units)):
        loads = {n: 0.0 for n in nodes}
        for u, n in zip(units, choice, strict=True):
            loads[n] += u.load
        if within(loads, tolerance):
            cost = sum(u.bytes for u, n in zip(units, choice, strict=True) if n != u.node)
            best = cost if best is None else min(best, cost)
    return best


def apply(units: list[Unit], p: placement.Placement) -> dict[str, float]:
    """The loads the moves produce, recomputed from the moves alone."""
    where = {u.slot: u.node for u in units}
    for m in p.moves:
        assert where[m.slot] == m.source, "a move starts where the slot is"
        where[m.slot] = m.target
    return placement.loads_of(units, where, p.before)


def test_all_partitions_on_one_primary_spread_evenly_moving_the_smallest() -> None:
    units = units_on("a:1", [10.0] * 12, [100 + i for i in range(12)])
    p = placement.place(units, NODES, 0.1)
    assert p.ratio_before == pytest.approx(3.0)
    assert p.within_tolerance and p.ratio_after == pytest.approx(1.0)
    assert len(p.moves) == 8 and all(m.source == "a:1" for m in p.moves)
    # the 4 that stay are the 4 largest: the fewest bytes move
    assert {m.slot for m in p.moves} == set(range(8))
    assert p.bytes_moved == sum(100 + i for i in range(8))
    assert p.optimal
    assert apply(units, p) == p.after


def test_a_new_empty_primary_is_filled_up_to_the_band() -> None:
    units = [Unit(i, NODES[i % 3], 10.0, 50, (("q", i),)) for i in range(24)]
    p = placement.place(units, [*NODES, "d:4"], 0.1)
    assert p.least_before == 0.0
    assert p.within_tolerance
    assert {m.target for m in p.moves} == {"d:4"} and len(p.moves) == 6
    assert p.after["d:4"] == 60.0


def test_already_balanced_moves_nothing() -> None:
    units = [Unit(i, NODES[i % 3], 10.0 + (i % 2), 50, (("q", i),)) for i in range(12)]
    p = placement.place(units, NODES, 0.1)
    assert p.moves == () and p.within_tolerance and p.reason == ""


def test_no_load_moves_nothing() -> None:
    p = placement.place(units_on("a:1", [0.0] * 4), NODES, 0.1)
    assert p.moves == () and p.within_tolerance


def test_a_lone_hot_partition_is_named_and_the_rest_is_done() -> None:
    units = [
        Unit(0, "a:1", 100.0, 10, (("q", 0),)),
        Unit(1, "a:1", 1.0, 10, (("q", 1),)),
        Unit(2, "b:2", 1.0, 10, (("q", 2),)),
    ]
    p = placement.place(units, NODES, 0.1)
    assert not p.within_tolerance
    assert "slot 0 (partition q/0) alone carries more than the mean" in p.reason
    assert [u.slot for u in p.heavy] == [0]
    # best possible: the hot one stays, the light one leaves its primary for the empty one
    assert [(m.slot, m.target) for m in p.moves] == [(1, "c:3")]
    assert p.ratio_after <= p.ratio_before


def test_slots_too_coarse_for_the_tolerance_is_proven_and_said() -> None:
    # 4 equal slots over 3 primaries: some primary has 2 (1.5 x the mean) whatever we do
    p = placement.place(units_on("a:1", [10.0] * 4), NODES, 0.1)
    assert not p.within_tolerance and not p.optimal
    assert "exhaustive search" in p.reason
    assert p.ratio_after == pytest.approx(1.5)  # still the best there is: 2/1/1


def test_load_that_cannot_move_counts_in_the_mean() -> None:
    units = units_on("b:2", [10.0] * 6)
    p = placement.place(units, NODES, 0.1, base={"a:1": 60.0})
    assert p.mean == pytest.approx(40.0)
    assert all(m.target != "a:1" for m in p.moves)


@pytest.mark.parametrize(
    ("units", "nodes", "tolerance", "message"),
    [
        ([Unit(0, "z:9", 1.0, 1)], NODES, 0.1, "not one of"),
        ([Unit(0, "a:1", 1.0, 1), Unit(0, "b:2", 1.0, 1)], NODES, 0.1, "listed twice"),
        ([Unit(0, "a:1", -1.0, 1)], NODES, 0.1, "negative"),
        ([Unit(0, "a:1", 1.0, 1)], [], 0.1, "no primaries"),
        ([Unit(0, "a:1", 1.0, 1)], NODES, -0.1, "tolerance"),
    ],
)
def test_bad_input_is_refused(
    units: list[Unit], nodes: list[str], tolerance: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        placement.place(units, nodes, tolerance)


def test_deterministic_and_independent_of_input_order() -> None:
    units = [Unit(i * 7, NODES[i % 2], float(1 + i % 5), 10 + i, (("q", i),)) for i in range(40)]
    first = placement.place(units, NODES, 0.05)
    assert placement.place(list(reversed(units)), list(reversed(NODES)), 0.05) == first


@st.composite
def cases(draw: st.DrawFn, max_units: int = 30) -> tuple[list[Unit], list[str], float]:
    nodes = NODES[: draw(st.integers(2, 3))] + (["d:4"] if draw(st.booleans()) else [])
    n = draw(st.integers(1, max_units))
    units = [
        Unit(
            slot=i,
            node=draw(st.sampled_from(nodes[:-1] if len(nodes) > 2 else nodes)),
            load=float(draw(st.integers(0, 50))),
            bytes=draw(st.integers(0, 1000)),
            partitions=(("q", i),),
        )
        for i in range(n)
    ]
    tolerance = draw(st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.5]))
    return units, nodes, tolerance


@settings(max_examples=300, deadline=None)
@given(cases())
def test_never_worse_every_move_real_and_the_result_is_what_the_moves_give(
    case: tuple[list[Unit], list[str], float],
) -> None:
    units, nodes, tolerance = case
    p = placement.place(units, nodes, tolerance)
    assert placement.deviation(p.after) <= placement.deviation(p.before) + 1e-9
    slots = {u.slot for u in units}
    assert all(m.slot in slots and m.target in nodes and m.source != m.target for m in p.moves)
    assert len({m.slot for m in p.moves}) == len(p.moves), "a slot moves once"
    assert apply(units, p) == pytest.approx(p.after)
    assert p.bytes_moved == sum(m.bytes for m in p.moves)
    assert p.within_tolerance == within(p.after, tolerance)
    if not p.within_tolerance:
        assert p.reason


@settings(max_examples=300, deadline=None)
@given(cases(max_units=7))
def test_within_tolerance_when_feasible_and_fewest_bytes_against_brute_force(
    case: tuple[list[Unit], list[str], float],
) -> None:
    units, nodes, tolerance = case
    p = placement.place(units, nodes, tolerance)
    best = brute_force(units, nodes, tolerance)
    if best is None:
        assert not p.within_tolerance
        return
    assert p.within_tolerance, "a placement within tolerance exists and was missed"
    assert p.bytes_moved == best
    assert p.optimal or not p.moves
