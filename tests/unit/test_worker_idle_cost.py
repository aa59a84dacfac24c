"""A worker's idle cost does not grow with its partitions (no Redis): its fallback reads and
its reclaim probes per second stay under fixed rates at 64 and at 16,384 partitions, while a
hint, a member leaving and a delivery this worker left unclaimed are acted on at once (or
once idle past the visibility timeout).  The Redis side: tests/integration/test_idle.py."""

from __future__ import annotations

import asyncio
import math
import time
from types import SimpleNamespace
from typing import Any

from shardq.config import WorkerSettings
from shardq.store.layout import Layout
from shardq.worker.readtimes import FALLBACK, FALLBACK_BURST_S, FALLBACK_READS_PER_S, ReadTimes
from shardq.worker.recoverer import SWEEP_PROBES_PER_S, Recoverer


def idle_reads(partitions: int, seconds: float) -> int:
    """Fallback reads of ``partitions`` idle partitions on 3 primaries over ``seconds``, each
    read filed again for max_idle_poll (30 s), the loops looking every 0.1 s."""
    nodes = ["a", "b", "c"]
    times = ReadTimes(range(partitions), lambda p: nodes[p % 3], lambda: 0, lambda: 3)
    start = 1000.0
    for p in range(partitions):
        times.set_fallback(p, start + 30.0)  # found empty at start-up
    reads = 0
    t = start
    while t < start + seconds:
        for node in nodes:
            due = times.due(node, t)
            for p in list(due):
                reads += 1
                times.set_fallback(p, t + 30.0)
        t += 0.1
    return reads


def test_idle_fallback_reads_stay_under_the_rate_whatever_the_partitions() -> None:
    seconds = 120.0
    small, large = idle_reads(64, seconds), idle_reads(16_384, seconds)
    # 64 partitions: each read every 30 s, as before (3 rounds of reads in 90 s after the first)
    assert 64 * 3 <= small <= 64 * 4
    # 16,384: the rate (and a burst per primary after a quiet spell), not P / 30 (~65,000)
    rate = FALLBACK_READS_PER_S
    assert large <= rate * (seconds - 30.0) + rate * FALLBACK_BURST_S
    assert large >= rate * (seconds - 30.0) * 0.9  # the rate is used


def test_a_hint_files_an_idle_partition_for_now_whatever_its_fallback_waits_for() -> None:
    times = ReadTimes(range(10_000), lambda p: "a", lambda: 0, lambda: 1)
    now = time.monotonic()
    for p in range(10_000):
        times.set_fallback(p, now - 1.0)  # all overdue, the rate far behind
    assert times.at(7) == float("inf") and times.filed(7) == FALLBACK
    times.set(7, now, now)  # a ready hint
    due = times.due("a", now)
    assert 7 in due
    # the rest wait for the rate: a burst's worth now, not 10,000
    assert len(due) <= 1 + FALLBACK_READS_PER_S * FALLBACK_BURST_S
    at = times.next_at("a", now)
    assert at == now  # due partitions wait for a round, not for the rate


def recoverer(partitions: int, settings: WorkerSettings) -> tuple[Recoverer, list[int]]:
    """A recoverer over ``partitions`` assigned partitions whose XPENDING probes are counted
    (every one answers: nothing to take)."""
    pks = dict(Layout("q", partitions).fleet())
    by_ready = {pk.ready: p for p, pk in pks.items()}
    probed: list[int] = []

    class Calls:
        async def run(self, ops: list[Any], handle: Any, wait: float) -> Any:
            results: list[Any] = []
            for op in ops:
                assert op.name == "xpending"
                probed.append(by_ready[op.args[1]])
                results.append(False)
            handle(list(range(len(ops))), results)
            return SimpleNamespace(errors=[], late=0, skipped=[])

    ctx = SimpleNamespace(
        supervisor=None, transport=None, queue="q", pks=pks, consumer="w1", settings=settings,
        membership=None, inflight=SimpleNamespace(room=lambda: 64), stats=None,
    )  # fmt: skip
    fetcher = SimpleNamespace(assigned=set(pks), assigned_sorted=sorted(pks))
    executor = SimpleNamespace(settler=SimpleNamespace(partitions_with_acks=lambda: []))
    rec = Recoverer(ctx, executor=executor, fetcher=fetcher)  # type: ignore[arg-type]
    rec.calls = Calls()  # type: ignore[assignment]
    return rec, probed


def test_reclaim_probes_per_sweep_round_do_not_grow_with_the_partitions() -> None:
    settings = WorkerSettings()
    per_round = {}
    for partitions in (64, 4096):
        rec, probed = recoverer(partitions, settings)
        assert asyncio.run(rec.round()) == "done"  # start-up: every partition at once
        assert sorted(probed) == list(range(partitions))
        probed.clear()
        rec._next_sweep = 0.0  # a sweep is due
        asyncio.run(rec.round())
        per_round[partitions] = len(probed)
        assert asyncio.run(rec.round()) == "done" and len(probed) == per_round[partitions]
    assert per_round[64] == 64  # a whole cycle every reclaim_interval, as before
    assert per_round[4096] == SWEEP_PROBES_PER_S * settings.reclaim_interval
    rec, _ = recoverer(4096, settings)
    assert rec.cycle() == settings.reclaim_interval * math.ceil(4096 / per_round[4096])


def test_a_member_gone_and_a_delivery_left_unclaimed_are_looked_at_without_the_sweep() -> None:
    settings = WorkerSettings(visibility_timeout=1.0, heartbeat_interval=0.25)
    rec, probed = recoverer(4096, settings)
    asyncio.run(rec.round())  # start-up
    probed.clear()
    rec._next_sweep = time.monotonic() + 3600  # no sweep in this test
    rec.trigger()  # a member left: every assigned partition now
    asyncio.run(rec.round())
    assert len(probed) == 4096
    probed.clear()
    rec.watch(17)  # a fetch's reply lost on partition 17
    rec.watch(17)  # again: one look, once the later one is idle long enough
    assert asyncio.run(rec.round()) == "done" and probed == []  # not idle long enough yet
    time.sleep(settings.visibility_timeout + 0.3)
    asyncio.run(rec.round())  # the member's follow-up (every partition) comes due too
    assert 17 in probed
    probed.clear()
    asyncio.run(rec.round())
    assert probed == []
