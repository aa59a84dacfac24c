"""The lateness budget's wait rule (shardq/runtime/budget.py) and how the promoter applies it:
which partitions a primary's round takes, and when, through canned replies (no Redis)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from shardq.config import DispatcherSettings, WorkerSettings
from shardq.dispatcher.promoter import Promoter
from shardq.errors import ConfigError
from shardq.runtime.budget import (
    ENOUGH_PER_CALL,
    DueRates,
    dispatcher_share,
    worker_share,
)
from shardq.store import fleet
from tests.unit.test_promoter_bookkeeping import NODE, promoter


def test_the_budget_is_split_between_dispatcher_and_worker() -> None:
    assert dispatcher_share(0.02) + worker_share(0.02) == pytest.approx(0.02)
    assert dispatcher_share(0.02) == pytest.approx(0.01)
    assert dispatcher_share(0.0) == worker_share(0.0) == 0.0


def test_a_partitions_rate_follows_what_its_promotes_carry() -> None:
    rates = DueRates()
    rates.observe(0, 5, 10.0)  # the first promote: no interval yet
    assert rates.rate(0) == 0.0
    assert rates.slack(0, 0.01) == 0.01  # no rate known: the whole share
    rates.observe(0, 10, 10.1)  # 10 jobs in 100 ms: 100/s
    assert rates.rate(0) == pytest.approx(100.0)
    rates.observe(0, 0, 10.2)  # nothing: the estimate decays, it does not drop to 0
    assert 0.0 < rates.rate(0) < 100.0
    assert rates.slack(0, 0.01) == 0.01  # 32 jobs take far longer than 10 ms at ~70/s
    for k in range(30):  # 10,000 jobs/s: a call fills with 32 in 3.2 ms
        rates.observe(0, 10, 10.2 + 0.001 * (k + 1))
    assert rates.rate(0) == pytest.approx(10_000, rel=0.05)
    assert rates.slack(0, 0.01) == pytest.approx(ENOUGH_PER_CALL / rates.rate(0))
    assert rates.slack(0, 0.0) == 0.0  # no budget: no slack whatever the rate
    rates.forget(0)
    assert rates.rate(0) == 0.0


def test_settings_refuse_a_budget_out_of_range() -> None:
    for bad in (-0.001, 1.5, float("nan")):
        with pytest.raises(ConfigError, match="lateness_budget"):
            DispatcherSettings(lateness_budget=bad)
        with pytest.raises(ConfigError, match="lateness_budget"):
            WorkerSettings(lateness_budget=bad)


def budget_promoter(budget: float, partitions: int = 3) -> Promoter:
    p, _, leases = promoter(partitions)
    p.settings = replace(p.settings, lateness_budget=budget)
    p.share = dispatcher_share(budget)
    p.budget = budget
    for q in range(partitions):
        leases.win(q, "1")
    assert sorted(p._take(NODE, time.monotonic(), 100)) == list(range(partitions))
    return p


def test_a_round_waits_for_the_first_deadline_then_takes_every_due_partition() -> None:
    """Budget 20 ms: workers' reads promote a partition within their 10 ms share of it, so the
    dispatcher promotes one only a whole budget after its head is due.  Heads due at t, t+4 ms
    and t+30 ms: nothing is taken before t+20 ms although two are due; at t+20 ms both due
    ones go in one round (the second's deadline is within the share), the third stays."""
    p = budget_promoter(0.02)
    t = 1000.0
    for q, wait in ((0, 0.0), (1, 0.004), (2, 0.030)):
        p._due_in(q, wait, t)
    assert p.next_wake.get(0) == pytest.approx(t + 0.020)
    assert p._take(NODE, t + 0.010, 100) == []  # due, but the workers' to promote first
    assert sorted(p._take(NODE, t + 0.020, 100)) == [0, 1]
    assert p._take(NODE, t + 0.049, 100) == []  # 2 was put back with its own deadline
    assert p._take(NODE, t + 0.050, 100) == [2]


def test_with_lanes_on_the_dispatcher_promotes_at_its_share() -> None:
    """Reads do not promote a partition with lanes on (its jobs go through the lane): the
    dispatcher promotes it at its own share, as before workers promoted."""
    p = budget_promoter(0.02)
    t = 1000.0
    p.laned.add(0)
    p._due_in(0, 0.0, t)
    p._due_in(1, 0.0, t)
    assert p.next_wake.get(0) == pytest.approx(t + 0.010)
    assert p.next_wake.get(1) == pytest.approx(t + 0.020)


def test_the_dispatcher_yields_while_workers_take_the_jobs_and_stops_when_they_do_not() -> None:
    """A promote made for a head believed due that finds nothing to move (a worker's read took
    it) doubles the partition's extra wait up to MAX_YIELD; one that moves jobs a budget late
    ends it (no worker read them); one that moves jobs just due (a race with a read) changes
    nothing; a lanes answer puts the partition at the share."""
    from shardq.dispatcher.promoter import MAX_YIELD

    p = budget_promoter(0.02, partitions=1)
    now_ms = 10_000_000
    empty = fleet.Promoted(0, now_ms + 13, now_ms)
    waits = []
    for _ in range(8):
        p._yield(0, empty, expected=True)
        waits.append(p._slack(0))
    assert waits[0] == pytest.approx(0.04) and waits[1] == pytest.approx(0.06)
    assert waits[-1] == pytest.approx(0.02 + MAX_YIELD)
    p._yield(0, empty, expected=False)  # a fallback look at an idle partition: no news
    assert p._slack(0) == pytest.approx(0.02 + MAX_YIELD)
    just_due = fleet.Promoted(1, now_ms + 13, now_ms, False, now_ms - 5)
    p._yield(0, just_due, expected=True)
    assert p._slack(0) == pytest.approx(0.02 + MAX_YIELD)
    late = fleet.Promoted(3, now_ms + 13, now_ms, False, now_ms - 900)
    p._yield(0, late, expected=True)
    assert p._slack(0) == pytest.approx(0.02)
    p._yield(0, fleet.Promoted(0, -1, now_ms, True, None), expected=True)
    assert 0 in p.laned and p._slack(0) == pytest.approx(0.01)


def test_without_a_budget_a_partition_goes_the_moment_it_is_due() -> None:
    p = budget_promoter(0.0)
    t = 1000.0
    p._due_in(0, 0.0, t)
    p._due_in(1, 0.004, t)
    assert p._take(NODE, t, 100) == [0]
    assert p._take(NODE, t + 0.004, 100) == [1]


def test_a_full_batch_goes_again_at_once_and_a_thin_one_within_the_slack() -> None:
    p = budget_promoter(0.02, partitions=2)
    transport = p.transport
    batch = p.settings.batch
    transport.replies = [fleet.Promoted(batch, 1000, 1000), fleet.Promoted(1, 1050, 1000)]  # type: ignore[attr-defined]
    before = time.monotonic()
    asyncio.run(p._promote(NODE, [0, 1]))
    after = time.monotonic()
    assert p.next_wake.get(0) <= after  # a backlog: no waiting
    # the next job of 1 is due in 50 ms: promoted by 50 + 20 ms (workers' reads go first)
    assert before + 0.070 <= p.next_wake.get(1) <= after + 0.070
    assert before + 0.050 <= p.due_at[1] <= after + 0.050


def test_a_hint_never_moves_a_deadline_later() -> None:
    p = budget_promoter(0.02, partitions=1)
    now = time.monotonic()
    p._schedule(0, now - 1.0, now - 0.5)  # overdue already
    p.hint(0)
    assert p.next_wake.get(0) == now - 0.5
    p._due_in(0, 5.0, now)  # next job in 5 s
    p.hint(0)  # a job due now was enqueued: promoted within the slack
    assert p.next_wake.get(0) <= time.monotonic() + 0.020
    assert p.due_at[0] <= time.monotonic()
