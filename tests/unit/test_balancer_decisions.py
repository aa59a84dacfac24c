"""The placement autopilot's decisions, without Redis (shardq.admin.balancer): what a slot's
load is, when the balancer acts, and how a plan is carried out within a budget (the moves
themselves are the safe slot move, tested on a cluster of the tests' own in
tests/fleet/test_balancer.py)."""

from __future__ import annotations

import threading
import time

import pytest

from shardq.admin import balancer, placement
from shardq.admin.balancer import Budget, Measurement, Moved, SlotLoad


def measurement(*slots: tuple[int, str, float, int]) -> Measurement:
    return Measurement(
        ("q",),
        ("a:1", "b:1", "c:1"),
        tuple(SlotLoad(s, n, r, b, (("q", i),)) for i, (s, n, r, b) in enumerate(slots)),
        1.0,
    )


def test_load_is_each_slots_share_of_rate_plus_its_share_of_bytes() -> None:
    m = measurement((1, "a:1", 30.0, 100), (2, "a:1", 10.0, 300), (3, "b:1", 0.0, 0))
    by_load = {u.slot: u.load for u in m.units("load")}
    # rate shares 0.75, 0.25, 0; byte shares 0.25, 0.75, 0: each slot 50 % of the total
    assert by_load == pytest.approx({1: 50.0, 2: 50.0, 3: 0.0})
    assert sum(by_load.values()) == pytest.approx(100.0)
    assert {u.slot: u.load for u in m.units("rate")} == {1: 30.0, 2: 10.0, 3: 0.0}
    assert {u.slot: u.load for u in m.units("bytes")} == {1: 100.0, 2: 300.0, 3: 0.0}
    assert m.loads("load") == pytest.approx({"a:1": 100.0, "b:1": 0.0, "c:1": 0.0})
    assert m.deviation("load") == pytest.approx(2.0)  # all on one of three: 3x the mean
    # A figure that is zero everywhere (an idle cluster's rate) counts for nothing.
    idle = measurement((1, "a:1", 0.0, 100), (2, "b:1", 0.0, 100), (3, "c:1", 0.0, 100))
    assert [u.load for u in idle.units("load")] == pytest.approx([100 / 3] * 3)
    assert idle.deviation("load") == pytest.approx(0.0)
    empty = measurement((1, "a:1", 0.0, 0))
    assert [u.load for u in empty.units("load")] == [0.0]


def test_hysteresis_acts_only_after_sustain_rounds_past_the_trigger() -> None:
    h = balancer.Hysteresis(trigger=0.25, sustain=3)
    # Noise around the tolerance and spikes shorter than sustain never act.
    assert [h.observe(d) for d in (0.3, 0.3, 0.1, 0.3, 0.3, 0.2, 0.26)] == [False] * 7
    assert [h.observe(d) for d in (0.26, 0.5)] == [False, True]
    h.reset()
    assert not h.observe(0.9)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tolerance": 0.3, "trigger": 0.2}, "must be above the tolerance"),
        ({"tolerance": 0.2, "trigger": 0.2}, "must be above the tolerance"),
        ({"sustain": 0}, "sustain must be at least 1"),
        ({"window": 20.0, "lease_ms": 30_000}, "at most a third of the lease"),
        ({"window": 0.0}, "must be above 0"),
        ({"interval": 1.0, "window": 2.0}, "at least the window"),
        ({"by": "cpu"}, "by must be one of load, rate, bytes"),
    ],
)
def test_settings_refuse_what_would_misbehave(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(balancer.BalancerError, match=message):
        balancer.BalancerSettings(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": 0}, "concurrency must be at least 1"),
        ({"bytes_per_second": 0.0}, "above 0"),
        ({"max_moves": 0}, "max moves must be at least 1"),
    ],
)
def test_budget_refuses_nonsense(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(balancer.BalancerError, match=message):
        Budget(**kwargs)  # type: ignore[arg-type]


def move(slot: int, source: str, target: str, size: int = 100) -> placement.Move:
    return placement.Move(slot, (("q", slot),), source, target, size, 1.0)


class Recorder:
    """A stand-in for the slot move (the scheduling is what is tested): records which moves
    ran at the same time, sleeps a little, fails on the slots it is told to."""

    def __init__(
        self,
        seconds: float = 0.05,
        fail: frozenset[int] = frozenset(),
        seconds_of: dict[int, float] | None = None,
    ) -> None:
        self.seconds = seconds
        self.seconds_of = seconds_of or {}
        self.fail = fail
        self.lock = threading.Lock()
        self.running: set[int] = set()
        self.nodes: list[str] = []
        self.overlaps: list[set[int]] = []
        self.started: dict[int, float] = {}
        self.t0 = time.monotonic()

    def __call__(self, m: placement.Move) -> Moved:
        with self.lock:
            self.started[m.slot] = time.monotonic() - self.t0
            self.running.add(m.slot)
            self.overlaps.append(set(self.running))
            self.nodes.extend((m.source, m.target))
        time.sleep(self.seconds_of.get(m.slot, self.seconds))
        with self.lock:
            self.running.discard(m.slot)
        if m.slot in self.fail:
            raise RuntimeError(f"slot {m.slot} refused")
        return Moved(m, 3, 0.001, 0.0, self.seconds)


def no_client() -> balancer.Client:
    raise AssertionError("the recorder makes the moves")


def test_moves_run_at_most_concurrency_at_once_and_never_two_on_one_primary() -> None:
    moves = [
        move(1, "a", "b"),
        move(2, "a", "c"),  # shares a with 1: waits for it
        move(3, "c", "d"),
        move(4, "e", "f"),
        move(5, "g", "h"),
        move(6, "i", "j"),
    ]
    rec = Recorder()
    out = balancer.carry_out(no_client, moves, Budget(concurrency=3), move_one=rec)
    assert [m.move.slot for m in sorted(out.done, key=lambda m: m.move.slot)] == [1, 2, 3, 4, 5, 6]
    assert out.error is None and out.left == () and not out.fenced
    assert 1 < out.most_at_once <= 3
    assert max(len(o) for o in rec.overlaps) <= 3
    by_slot = {m.slot: m for m in moves}
    for together in rec.overlaps:
        nodes = [n for s in together for n in (by_slot[s].source, by_slot[s].target)]
        assert len(nodes) == len(set(nodes)), f"two moves on one primary at once: {together}"
    assert out.bytes_moved == 600


def test_max_moves_leaves_the_rest_for_the_next_plan() -> None:
    moves = [move(i, f"s{i}", f"t{i}") for i in range(5)]
    out = balancer.carry_out(no_client, moves, Budget(max_moves=2), move_one=Recorder(seconds=0.0))
    assert [m.move.slot for m in out.done] == [0, 1]
    assert [m.slot for m in out.left] == [2, 3, 4]


def test_the_byte_rate_spaces_the_starts_out() -> None:
    """Move k starts no earlier than the bytes of the moves before it take at the rate (a lower
    bound: a slow machine only starts them later)."""
    moves = [move(i, f"s{i}", f"t{i}", size=1000) for i in range(4)]
    rec = Recorder(seconds=0.0)
    out = balancer.carry_out(
        no_client, moves, Budget(concurrency=4, bytes_per_second=10_000), move_one=rec
    )
    assert len(out.done) == 4
    starts = [m.started for m in sorted(out.done, key=lambda m: m.move.slot)]
    for k, at in enumerate(starts):
        assert at >= k * 0.1 - 0.005, starts
    assert out.seconds >= 0.3 - 0.005


def test_the_first_error_stops_new_moves_and_lets_running_ones_finish() -> None:
    moves = [move(1, "a", "b"), move(2, "c", "d"), move(3, "a", "e"), move(4, "f", "g")]
    # 1 fails at once and 2 runs long, so the error is seen while 2 still runs: were 2 to
    # finish first (a thread scheduled late on a busy machine), 4 (free nodes) could start.
    rec = Recorder(fail=frozenset({1}), seconds_of={1: 0.0, 2: 0.5})
    out = balancer.carry_out(no_client, moves, Budget(concurrency=2), move_one=rec)
    assert out.failed is not None and out.failed.slot == 1
    assert isinstance(out.error, RuntimeError) and "slot 1 refused" in str(out.error)
    # 2 ran beside 1 and finished; 3 and 4 never started.
    assert [m.move.slot for m in out.done] == [2]
    assert sorted(rec.started) == [1, 2]
    assert [m.slot for m in out.left] == [3, 4]


def test_a_process_that_no_longer_leads_starts_nothing_more() -> None:
    moves = [move(i, f"s{i}", f"t{i}") for i in range(4)]
    answers = iter([True, True, False])
    rec = Recorder(seconds=0.0)
    out = balancer.carry_out(
        no_client, moves, Budget(), keep_going=lambda: next(answers), move_one=rec
    )
    assert out.fenced and [m.move.slot for m in out.done] == [0, 1]
    assert [m.slot for m in out.left] == [2, 3]
