"""The worker's fallback reads of an assigned partition found empty (no Redis): the wait
doubles from idle_poll up to max_idle_poll, and a hint or found work starts it over; an
unassigned partition is swept every sweep_interval x (N - 1).  The bookkeeping only
(shardq/worker/fetcher.py); reads on Redis are tests/integration's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from shardq.config import WorkerSettings
from shardq.worker.fetcher import THIN_FETCH, Fetcher
from shardq.worker.readtimes import ReadTimes


def read_times(partitions: list[int], at: float = 0.0) -> ReadTimes:
    """Read times of partitions on one primary ("n"), all at ``at``."""
    import time

    times = ReadTimes(partitions, lambda p: "n", lambda: 0, lambda: 1)
    now = time.monotonic()
    for p in partitions:
        times.set(p, at, now)
    return times


def set_at(r: Any, partition: int, at: float) -> None:
    import time

    r.times.set(partition, at, time.monotonic())


def reader(**settings: Any) -> Any:
    times = read_times([0])
    r = SimpleNamespace(
        settings=WorkerSettings(**settings),
        assigned={0},
        idle_streak={},
        fleet_size=3,
        times=times,
        poll_at=times.poll_at,
        hints={},
        known_work=set(),
        read_upto={},
        heads=set(),
        redis_offset=None,
        nodes=SimpleNamespace(wake=lambda p: None),
        share=settings.get("lateness_budget", 0.0) / 2,
    )
    r._monotonic = lambda ms, now: Fetcher._monotonic(r, ms, now)  # type: ignore[arg-type]
    return r


def test_an_assigned_partition_found_empty_again_waits_longer_up_to_max_idle_poll() -> None:
    r = reader(lateness_budget=0.0)
    r.nodes = SimpleNamespace(wake=lambda p: None)
    # No work seen since the worker started: the longest wait at once (its start-up read
    # found it empty; 1, 2, 4 ... s would read every idle partition six times in a minute).
    assert [Fetcher.idle_interval(r, 0) for _ in range(2)] == [30.0, 30.0]
    # A resubscription's wake-up (no message) is one read; the partition keeps its wait.
    Fetcher.hint(r, 0)
    assert r.poll_at[0] == 0.0
    assert Fetcher.idle_interval(r, 0) == 30.0
    # A ready hint (a promote's, naming its last entry): the next empty read starts over.
    Fetcher.hint(r, 0, b"1700000000000-0")
    waits = [Fetcher.idle_interval(r, 0) for _ in range(8)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]  # max_idle_poll 30 s
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
    set_at(r, 0, time.monotonic() + 5.0)  # next read in 5 s
    before = time.monotonic()
    Fetcher.hint(r, 0)
    assert before + 0.01 <= r.poll_at[0] <= time.monotonic() + 0.01  # the share: 10 ms
    assert woken == [0] and 0 in r.known_work  # its loop looks again (it slept past it)
    at = r.poll_at[0]
    Fetcher.hint(r, 0)  # a second hint moves nothing and wakes nobody
    assert r.poll_at[0] == at and woken == [0]
    set_at(r, 0, 0.0)  # due already: a hint leaves it due
    Fetcher.hint(r, 0)
    assert r.poll_at[0] == 0.0


def test_a_hint_naming_an_entry_already_read_is_no_news() -> None:
    woken: list[int] = []
    r = reader(lateness_budget=0.0)
    r.nodes = SimpleNamespace(wake=woken.append)
    r.read_upto[0] = (1700000000000, 5)
    set_at(r, 0, 99.0)
    Fetcher.hint(r, 0, b"1700000000000-5")  # read already
    Fetcher.hint(r, 0, b"1699999999999-9")
    assert woken == [] and r.poll_at[0] == 99.0 and 0 not in r.known_work
    Fetcher.hint(r, 0, b"1700000000000-6")  # newer: read it
    assert woken == [0] and r.poll_at[0] == 0.0
    Fetcher.hint(r, 0, b"1")  # a hint of another kind (a resume): always read
    assert woken == [0, 0]


def planner(partitions: list[int], budget: float = 0.0) -> Any:
    """A fetcher's rounds with its collaborators reduced to bookkeeping: the rounds'
    calls are built (real ops) but sent nowhere."""
    import asyncio

    from shardq.store import keys
    from shardq.worker.inflight import InFlight, WorkerStats
    from shardq.worker.settler import Settler

    sent: list[list[Any]] = []

    async def nothing() -> list[Any]:
        return []

    def run_on(node: str, ops: list[Any]) -> Any:
        sent.append(ops)
        return nothing()

    r = reader(lateness_budget=budget)
    r.assigned = set(partitions)
    r.times = read_times(partitions)
    r.poll_at = r.times.poll_at
    r.last_read = {}
    r.expect = {}
    r.horizon_ms = round(r.share * 1000)
    r.stats = WorkerStats()
    r._m_fetches = SimpleNamespace(inc=lambda n: None)
    r.waiting = {}
    r._rotate = 0
    r.pks = {p: keys.partition_keys("q", p, 64) for p in [*partitions, 5]}
    r.consumer = "w1"
    r.inflight = InFlight(concurrency=300)
    r.nodes = SimpleNamespace(mine=lambda node: partitions, node_of=lambda p: "n")
    r.settler = Settler(
        SimpleNamespace(
            transport=None,
            queue="q",
            pks=r.pks,
            inflight=r.inflight,
            settings=r.settings,
            stats=WorkerStats(),
            handlers={},
        ),  # type: ignore[arg-type]
        wake=lambda p: None,
    )
    r.transport = SimpleNamespace(run_on=run_on)
    r.sent = sent
    r.loop = asyncio.new_event_loop()
    return r


def test_a_partition_whose_thin_read_is_in_flight_is_not_read_again_beside_it() -> None:
    r = planner([0, 1, 2, 3])
    # 0, 1: a job or none last time (steady state); 2: a full batch last time; 3: a partial
    # batch of a fast flow (the dispatcher refills it while the read is out).
    r.last_read = {0: 1, 1: 0, 3: 20}

    async def plan_two() -> tuple[Any, Any]:
        first = Fetcher._send_round(r, "n", [])
        second = Fetcher._send_round(r, "n", [first])
        return first, second

    first, second = r.loop.run_until_complete(plan_two())
    assert sorted(first.due) == [0, 1, 2, 3]
    # Only the flowing partitions are read again while the first round is out: the thin ones'
    # read takes what they hold, and its reply says when to read them next.
    assert sorted(second.due) == [2, 3]

    async def after_reply() -> Any:
        return Fetcher._send_round(r, "n", [])  # the first round was taken: nothing in flight

    assert sorted(r.loop.run_until_complete(after_reply()).due) == [0, 1, 2, 3]
    r.loop.close()


def test_a_partition_whose_reply_counted_its_next_run_is_read_for_all_of_it_once() -> None:
    """A reply that counted the jobs due by the next read (Batch.due_soon) sizes that read:
    16 due after a read that brought 2 is asked for half as many again, not twice 2; and the read in
    flight, asking for more than were due, is not doubled by the round sent beside it."""
    r = planner([0, 1, 2], budget=0.01)
    # 0: a run of 16 due next, its last read brought 2; 1: nothing due soon; 2: counted none
    # (routed one by one: a job or two a read) and a thin last read.
    r.last_read = {0: 2, 1: 0, 2: 1}
    r.expect = {0: 16, 1: 0}

    async def plan_two() -> tuple[Any, Any]:
        first = Fetcher._send_round(r, "n", [])
        second = Fetcher._send_round(r, "n", [first])
        return first, second

    first, second = r.loop.run_until_complete(plan_two())
    counts = dict(zip(first.due, first.counts, strict=True))
    assert counts == {0: 16 + 8 + 1, 1: THIN_FETCH, 2: THIN_FETCH}
    # Each read's reply counts the jobs due by the next read past the share (5 ms).
    assert {int(op.argv[4]) for op in r.sent[0]} == {5}
    assert second is None  # every read in flight takes all its partition has due
    assert r.stats.fetches == 3
    r.loop.close()


def test_acks_ride_with_the_read_of_their_partition_and_the_others_wait_the_linger() -> None:
    import time

    from shardq.worker.inflight import Delivery
    from shardq.worker.settler import ACK_LINGER

    r = planner([0, 1], budget=0.01)
    r.last_read = {0: 1, 1: 1}
    set_at(r, 1, time.monotonic() + 60.0)  # only partition 0 is due to be read
    set_at(r, 5, time.monotonic() + 60.0)
    # 5: a partition of this primary's not read now
    finished = {p: Delivery(p, f"1-{p}".encode(), f"job{p}".encode(), None) for p in (0, 1, 5)}
    r.nodes.mine = lambda node: [0, 1, 5]
    for d in finished.values():
        r.inflight.add(d)
        r.settler.succeeded(d)

    async def plan() -> Any:
        return Fetcher._send_round(r, "n", [])

    first = r.loop.run_until_complete(plan())
    assert first.due == [0]
    # Partition 0's ack is in its fetch (ARGV[6..]); 1's and 5's wait for a read of their own.
    assert first.folded == [[finished[0]]] and first.ack_ops == []
    [fetch] = r.sent[-1]
    assert list(fetch.argv[5:]) == [b"1-0", b"job0"]
    assert sorted(r.settler.acks) == [1, 5]
    at = r.settler.acks_due_at(lambda p: "n", "n")
    assert at is not None and at - time.monotonic() <= ACK_LINGER
    set_at(r, 0, time.monotonic() + 60.0)
    assert r.loop.run_until_complete(plan()) is None  # nothing to read, the acks not due yet
    for p in (1, 5):
        r.settler.ack_since[p] -= ACK_LINGER  # the linger has passed
    alone = r.loop.run_until_complete(plan())
    assert alone.due == [] and [p for p, _ in alone.acked] == [1, 5]
    assert [o.script.name for o in alone.ack_ops] == ["ack", "ack"]
    r.loop.close()


def test_with_no_budget_acks_go_with_the_next_round_whatever_it_reads() -> None:
    from shardq.worker.inflight import Delivery

    r = planner([0, 1])
    r.nodes.mine = lambda node: [0, 1]
    set_at(r, 1, float("inf"))
    set_at(r, 5, float("inf"))
    d = Delivery(1, b"1-1", b"job1", None)
    r.inflight.add(d)
    r.settler.succeeded(d)

    async def plan() -> Any:
        return Fetcher._send_round(r, "n", [])

    first = r.loop.run_until_complete(plan())
    assert first.due == [0] and [p for p, _ in first.acked] == [1]
    r.loop.close()


def test_past_half_the_concurrency_of_acks_waiting_they_all_go_at_once() -> None:
    """A finished job is free room only up to one concurrency's worth: acks never wait the
    linger once half the concurrency's worth of them wait (else a busy worker starves)."""
    import time

    from shardq.worker.inflight import Delivery, InFlight

    r = planner([0, 1], budget=0.01)
    r.inflight = InFlight(concurrency=4)
    r.settler.inflight = r.inflight
    r.settler.ack_bound = 2
    r.nodes.mine = lambda node: [0, 1, 5]
    for p in (0, 1, 5):
        set_at(r, p, time.monotonic() + 60.0)  # nothing due to be read

    async def plan() -> Any:
        return Fetcher._send_round(r, "n", [])

    first = Delivery(5, b"1-5", b"job5", None)
    r.inflight.add(first)
    r.settler.succeeded(first)
    assert r.loop.run_until_complete(plan()) is None  # one ack: it waits for a read
    second = Delivery(1, b"1-1", b"job1", None)
    r.inflight.add(second)
    r.settler.succeeded(second)
    assert r.settler.acks_due_at(lambda p: "n", "n") <= time.monotonic()
    alone = r.loop.run_until_complete(plan())
    assert sorted(p for p, _ in alone.acked) == [1, 5]
    r.loop.close()


def test_a_chain_steps_end_goes_at_once_and_a_batch_childs_waits_the_linger() -> None:
    """The next step of a chain waits for its step's end, so it does not linger; a batch
    child's end waits like an ack, to ride with its partition's next read."""
    import time
    from types import SimpleNamespace as NS

    from shardq.worker.inflight import Delivery

    r = planner([0, 1], budget=0.01)
    step = Delivery(0, b"1-0", b"c#0", NS(keep_result=None, carries_value=True))
    child = Delivery(1, b"1-1", b"b#3", NS(keep_result=None, carries_value=False))
    for d, record in ((step, b'{"v":1}'), (child, b"")):
        d.result = record
        r.inflight.add(d)
        r.settler.succeeded(d)
    assert r.settler.ack_since[0] == 0.0  # due at once
    assert r.settler.ack_since[1] > time.monotonic() - 1  # waits its linger
    r.loop.close()


def test_a_due_hint_reads_an_assigned_partition_when_its_new_head_is_due() -> None:
    """An enqueue that moved a partition's head earlier publishes its due ms: the assigned
    worker reads (and so promotes) it then plus its share, never later than it would have;
    an unassigned partition, an outbox hint and a later head change nothing."""
    import time

    woken: list[int] = []
    r = reader(lateness_budget=0.02)
    r.nodes = SimpleNamespace(wake=woken.append)
    now = time.monotonic()
    r.redis_offset = 1_000.0 - now  # the Redis clock reads 1,000 s now
    set_at(r, 0, now + 5.0)
    Fetcher.due_hint(r, 0, b"1000200")  # due in 200 ms
    assert now + 0.21 - 1e-9 <= r.poll_at[0] <= time.monotonic() + 0.21 and 0 in r.heads
    Fetcher.due_hint(r, 0, b"1003000")  # later than the read already set: nothing
    assert r.poll_at[0] < now + 0.3 and woken == [0]
    Fetcher.due_hint(r, 0, b"o")  # a workflow child's end: the relay's, not the reader's
    Fetcher.due_hint(r, 1, b"1000000")  # not assigned: its worker reads it
    assert woken == [0] and 1 not in r.poll_at
    set_at(r, 0, now + 5.0)
    Fetcher.due_hint(r, 0, None)  # resubscribed: a hint may be lost, read within the share
    assert r.poll_at[0] <= time.monotonic() + 0.01


def test_a_round_takes_the_partitions_whose_heads_are_due_by_then() -> None:
    """Partitions whose next read was set from their head's due time go in the round that
    goes, when their head is due by then; one whose head comes later waits for it."""
    import time

    r = planner([0, 1, 2], budget=0.02)
    r.heads = {1, 2}
    now = time.monotonic()
    for p, at in {0: now - 0.001, 1: now + 0.005, 2: now + 0.5, 5: now + 60}.items():
        set_at(r, p, at)  # 1's head due 5 ms ago

    async def plan() -> Any:
        return Fetcher._send_round(r, "n", [])

    first = r.loop.run_until_complete(plan())
    assert sorted(first.due) == [0, 1]
    [fetch, *_] = r.sent[-1]
    assert fetch.argv[3] == "1"  # every read promotes first
    r.loop.close()
