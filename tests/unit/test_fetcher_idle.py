"""The worker's fallback reads of an assigned partition found empty (no Redis): the wait
doubles from idle_poll up to max_idle_poll, and a hint or found work starts it over; an
unassigned partition is swept every sweep_interval x (N - 1).  The bookkeeping only
(shardq/worker/fetcher.py); reads on Redis are tests/integration's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from shardq.config import WorkerSettings
from shardq.worker.fetcher import Fetcher


def reader(**settings: Any) -> Any:
    return SimpleNamespace(
        settings=WorkerSettings(**settings),
        assigned={0},
        idle_streak={},
        fleet_size=3,
        poll_at={},
        hints={},
        known_work=set(),
        read_upto={},
        nodes=SimpleNamespace(wake=lambda p: None),
        share=settings.get("lateness_budget", 0.0) / 2,
    )


def test_an_assigned_partition_found_empty_again_waits_longer_up_to_max_idle_poll() -> None:
    r = reader(lateness_budget=0.0)
    waits = [Fetcher.idle_interval(r, 0) for _ in range(6)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    Fetcher.hint(r, 0)  # a ready hint: read now, and the next empty read starts over
    assert r.poll_at[0] == 0.0
    assert Fetcher.idle_interval(r, 0) == 1.0
    # not assigned to this worker: the sweep, whatever happened before
    assert Fetcher.idle_interval(r, 1) == 5.0 * 2


def test_max_idle_poll_below_idle_poll_means_no_backoff() -> None:
    r = reader(idle_poll=2.0, max_idle_poll=0.5)
    assert [Fetcher.idle_interval(r, 0) for _ in range(3)] == [2.0, 2.0, 2.0]


def test_under_a_budget_a_hint_schedules_the_read_within_the_share_never_later() -> None:
    import time

    woken: list[int] = []
    r = reader(lateness_budget=0.02)
    r.nodes = SimpleNamespace(wake=woken.append)
    r.poll_at[0] = time.monotonic() + 5.0  # found empty: next read in 5 s
    before = time.monotonic()
    Fetcher.hint(r, 0)
    assert before + 0.01 <= r.poll_at[0] <= time.monotonic() + 0.01  # the share: 10 ms
    assert woken == [0] and 0 in r.known_work  # its loop looks again (it slept past it)
    at = r.poll_at[0]
    Fetcher.hint(r, 0)  # a second hint moves nothing and wakes nobody
    assert r.poll_at[0] == at and woken == [0]
    r.poll_at[0] = 0.0  # due already: a hint leaves it due
    Fetcher.hint(r, 0)
    assert r.poll_at[0] == 0.0


def test_a_hint_naming_an_entry_already_read_is_no_news() -> None:
    woken: list[int] = []
    r = reader(lateness_budget=0.0)
    r.nodes = SimpleNamespace(wake=woken.append)
    r.read_upto[0] = (1700000000000, 5)
    r.poll_at[0] = 99.0
    Fetcher.hint(r, 0, b"1700000000000-5")  # read already
    Fetcher.hint(r, 0, b"1699999999999-9")
    assert woken == [] and r.poll_at[0] == 99.0 and 0 not in r.known_work
    Fetcher.hint(r, 0, b"1700000000000-6")  # newer: read it
    assert woken == [0] and r.poll_at[0] == 0.0
    Fetcher.hint(r, 0, b"1")  # a hint of another kind (a resume): always read
    assert woken == [0, 0]
