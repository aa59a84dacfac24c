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


def planner(partitions: list[int]) -> Any:
    """A fetcher's round planning with its collaborators reduced to bookkeeping: the rounds'
    calls are built (real ops) but sent nowhere."""
    import asyncio

    from shardq.store import keys
    from shardq.worker.inflight import InFlight

    async def run_on(node: str, ops: list[Any]) -> list[Any]:
        return []

    r = reader(lateness_budget=0.0)
    r.assigned = set(partitions)
    r.poll_at = dict.fromkeys(partitions, 0.0)
    r.last_read = {}
    r.waiting = {}
    r._rotate = 0
    r.pks = {p: keys.partition_keys("q", p, 64) for p in partitions}
    r.consumer = "w1"
    r.inflight = InFlight(concurrency=300)
    r.nodes = SimpleNamespace(mine=lambda node: partitions, node_of=lambda p: "n")
    r.settler = SimpleNamespace(take_acks=lambda mine: ([], []))
    r.transport = SimpleNamespace(run_on=run_on)
    r.loop = asyncio.new_event_loop()
    return r


def test_a_partition_whose_thin_read_is_in_flight_is_not_read_again_beside_it() -> None:
    r = planner([0, 1, 2, 3])
    # 0, 1: a job or none last time (steady state); 2: a full batch last time; 3: a partial
    # batch of a fast flow (the dispatcher refills it while the read is out).
    r.last_read = {0: 1, 1: 0, 3: 20}

    async def plan_two() -> tuple[Any, Any]:
        first = Fetcher._plan(r, "n", [])
        second = Fetcher._plan(r, "n", [first])
        return first, second

    first, second = r.loop.run_until_complete(plan_two())
    assert sorted(first.due) == [0, 1, 2, 3]
    # Only the flowing partitions are read again while the first round is out: the thin ones'
    # read takes what they hold, and its reply says when to read them next.
    assert sorted(second.due) == [2, 3]

    async def after_reply() -> Any:
        return Fetcher._plan(r, "n", [])  # the first round was taken: nothing in flight

    assert sorted(r.loop.run_until_complete(after_reply()).due) == [0, 1, 2, 3]
    r.loop.close()
