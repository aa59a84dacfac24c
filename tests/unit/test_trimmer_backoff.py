"""The trimmer's idle back-off: which held partitions each round trims (no Redis: the replies
are canned; the trim script itself is tested against Redis in
tests/integration/test_observability.py).  Activity is told (Trimmer.touch), not looked for,
and a partition idle for good is left to the safety net (shardq/runtime/pacing.py)."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace
from typing import Any

from shardq.config import DispatcherSettings
from shardq.dispatcher.trimmer import IDLE_TRIM_RATE, MAX_SKIP, Trimmer
from shardq.store import fleet
from shardq.store.layout import Layout


class Transport:
    """Answers every trim with ``removed[p]`` entries removed (0 by default), and the stream
    owing a job a run for the partitions in ``owed``."""

    def __init__(self, pks: dict[int, Any]) -> None:
        self.removed: dict[int, int] = {}
        self.owed: set[int] = set()
        self.trimmed: list[list[int]] = []
        self.partition_of = {pk.ready: p for p, pk in pks.items()}

    async def run_many(self, ops: list[Any]) -> list[Any]:
        parts = [self.partition_of[op.keys[0]] for op in ops]
        self.trimmed.append(parts)
        return [fleet.Trimmed(self.removed.get(p, 0), 0, p in self.owed) for p in parts]


def trimmer(partitions: int = 2) -> tuple[Trimmer, Transport]:
    pks = dict(Layout("q", partitions).fleet())
    transport = Transport(pks)
    ctx = SimpleNamespace(
        transport=transport,
        meta=SimpleNamespace(queue="q", ack_retention_ms=0, dead_cap=100),
        pks=pks,
        settings=DispatcherSettings(),
    )
    callbacks: list[Any] = []
    leases = SimpleNamespace(
        tokens=dict.fromkeys(pks, "t"), target=len(pks), when_acquired=callbacks.append
    )
    t = Trimmer(ctx, leases=leases)  # type: ignore[arg-type]
    for p in pks:  # every lease won at start-up
        for callback in callbacks:
            callback(p)
    return t, transport


def rounds(t: Trimmer, transport: Transport, n: int) -> list[list[int]]:
    transport.trimmed.clear()
    for _ in range(n):
        before = len(transport.trimmed)
        asyncio.run(t.round())
        if len(transport.trimmed) == before:
            transport.trimmed.append([])
    return transport.trimmed[-n:]


def net_rounds(partitions: int) -> tuple[int, int]:
    """The least and most rounds between two safety-net trims of a partition."""
    period = max(MAX_SKIP + 1, partitions / IDLE_TRIM_RATE)  # trim_interval 1 s
    return int(period / 2), int(1.5 * period) + 1


def test_an_idle_partition_is_trimmed_once_at_start_then_by_the_safety_net() -> None:
    """No activity since the dispatcher started: the first trim finds nothing, and the next
    comes about MAX_SKIP rounds later (not 1, 2, 4 ... rounds: six trims a partition in a
    minute), at the partition's phase of the safety net's cycle."""
    t, transport = trimmer()
    seen = rounds(t, transport, 3 * (MAX_SKIP + 1))
    trimmed_0 = [i for i, parts in enumerate(seen) if 0 in parts]
    least, most = net_rounds(2)
    assert trimmed_0[0] == 0 and least <= trimmed_0[1] <= most, trimmed_0
    assert all(least <= b - a <= most for a, b in itertools.pairwise(trimmed_0)), trimmed_0


def test_idle_trims_per_round_stay_bounded_whatever_the_partitions_held() -> None:
    """At 4,096 partitions held an idle dispatcher trims about IDLE_TRIM_RATE partitions a
    round (trim_interval 1 s), evenly, not 4,096 every 31 rounds: the safety net's period grows
    with the partitions held, and each is trimmed again within 1.5 periods."""
    t, transport = trimmer(4096)
    least, most = net_rounds(4096)
    seen = rounds(t, transport, most + 2)
    assert sum(len(parts) for parts in seen[:2]) == 4096  # each once at start-up
    later = seen[2:]
    assert {p for parts in later for p in parts} == set(range(4096))  # each again in time
    assert all(not parts for parts in later[: least - 2])
    busiest = max(sum(len(parts) for parts in later[i : i + 100]) for i in range(len(later)))
    assert busiest <= 2 * IDLE_TRIM_RATE * 100, busiest  # (before: 4,096 per 31 rounds)


def test_activity_trims_at_the_next_round_and_an_empty_trim_then_backs_off_from_one() -> None:
    t, transport = trimmer()
    rounds(t, transport, 1)  # the start-up trim: nothing
    t.touch(1)  # jobs promoted (or an enqueue hint) in partition 1
    seen = rounds(t, transport, 8)
    trimmed_1 = [i for i, parts in enumerate(seen) if 1 in parts]
    assert trimmed_1 == [0, 1, 3, 6]  # at once, then skips 0, 1, 2 ... rounds (doubling)
    assert all(0 not in parts for parts in seen)  # the idle one is left alone
    transport.removed[1] = 50  # a trim that removes entries starts the back-off over
    t.touch(1)
    seen = rounds(t, transport, 3)
    assert [1 in parts for parts in seen] == [True, True, True]


def test_a_stream_that_owes_a_job_a_run_is_trimmed_again_soon() -> None:
    """Jobs this dispatcher never saw (a worker's read promoted them, or an enqueue for now went
    straight to the stream) leave entries to trim when they settle: a stream found owing a job
    a run, when it owed none before, starts its back-off over; still owing, it doubles."""
    t, transport = trimmer()
    transport.owed.add(1)  # at start-up partition 1 holds a pending job
    seen = rounds(t, transport, 8)
    assert [i for i, parts in enumerate(seen) if 1 in parts] == [0, 1, 3, 6]
    assert [i for i, parts in enumerate(seen) if 0 in parts] == [0]  # empty: the longest
    transport.owed.add(0)  # a job landed in 0 unseen; its next (safety-net) trim finds it owed
    seen = rounds(t, transport, 2 * MAX_SKIP + 8)
    trimmed_0 = [i for i, parts in enumerate(seen) if 0 in parts]
    first = trimmed_0[0]
    assert [i - first for i in trimmed_0[:4]] == [0, 1, 3, 6]


def test_a_partition_no_longer_held_is_forgotten() -> None:
    t, transport = trimmer()
    rounds(t, transport, 1)
    t.touch(0)
    del t.leases.tokens[0]
    assert rounds(t, transport, 2) == [[], []]
    assert 0 not in t.next_round
