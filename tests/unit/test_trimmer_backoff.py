"""The trimmer's idle back-off: which held partitions each round trims (no Redis: the replies
are canned; the trim script itself is tested against Redis in
tests/integration/test_observability.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from shardq.dispatcher.trimmer import MAX_SKIP, Trimmer
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


def trimmer(activity: dict[int, int]) -> tuple[Trimmer, Transport]:
    pks = dict(Layout("q", 2).fleet())
    transport = Transport(pks)
    ctx = SimpleNamespace(
        transport=transport,
        meta=SimpleNamespace(queue="q", ack_retention_ms=0, dead_cap=100),
        pks=pks,
    )
    leases = SimpleNamespace(tokens={0: "t", 1: "t"})
    t = Trimmer(ctx, leases=leases, activity=lambda p: activity.get(p, 0))  # type: ignore[arg-type]
    return t, transport


def rounds(t: Trimmer, transport: Transport, n: int) -> list[list[int]]:
    transport.trimmed.clear()
    for _ in range(n):
        before = len(transport.trimmed)
        asyncio.run(t.round())
        if len(transport.trimmed) == before:
            transport.trimmed.append([])
    return transport.trimmed[-n:]


def test_an_idle_partition_is_trimmed_once_at_start_then_every_thirty_first_round() -> None:
    """No activity since the dispatcher started: the first trim finds nothing, and the next
    comes MAX_SKIP rounds later (not 1, 2, 4 ... rounds: six trims a partition in a minute)."""
    activity: dict[int, int] = {}
    t, transport = trimmer(activity)
    seen = rounds(t, transport, 2 * (MAX_SKIP + 1))
    trimmed_0 = [i for i, parts in enumerate(seen) if 0 in parts]
    assert trimmed_0 == [0, MAX_SKIP + 1]


def test_activity_trims_at_the_next_round_and_an_empty_trim_then_backs_off_from_one() -> None:
    activity: dict[int, int] = {}
    t, transport = trimmer(activity)
    rounds(t, transport, 1)  # the start-up trim: nothing
    activity[1] = 5  # jobs promoted (or an enqueue hint) in partition 1
    seen = rounds(t, transport, 8)
    trimmed_1 = [i for i, parts in enumerate(seen) if 1 in parts]
    assert trimmed_1 == [0, 1, 3, 6]  # at once, then skips 0, 1, 2 ... rounds (doubling)
    assert all(0 not in parts for parts in seen)  # the idle one is left alone
    transport.removed[1] = 50  # a trim that removes entries starts the back-off over
    activity[1] = 6
    seen = rounds(t, transport, 3)
    assert [1 in parts for parts in seen] == [True, True, True]


def test_a_stream_that_owes_a_job_a_run_is_trimmed_again_soon() -> None:
    """Jobs this dispatcher never saw (a worker's read promoted them, or an enqueue for now went
    straight to the stream) leave entries to trim when they settle: a stream found owing a job
    a run, when it owed none before, starts its back-off over; still owing, it doubles."""
    activity: dict[int, int] = {}
    t, transport = trimmer(activity)
    transport.owed.add(1)  # at start-up partition 1 holds a pending job
    seen = rounds(t, transport, 8)
    assert [i for i, parts in enumerate(seen) if 1 in parts] == [0, 1, 3, 6]
    assert [i for i, parts in enumerate(seen) if 0 in parts] == [0]  # empty: the longest
    rounds(t, transport, MAX_SKIP)  # partition 0's long skip is over: trimmed, still idle
    transport.owed.add(0)  # a job landed in 0 unseen; its next trim finds it owed
    seen = rounds(t, transport, MAX_SKIP + 8)
    trimmed_0 = [i for i, parts in enumerate(seen) if 0 in parts]
    first = trimmed_0[0]
    assert [i - first for i in trimmed_0[:4]] == [0, 1, 3, 6]
