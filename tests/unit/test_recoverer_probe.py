"""The recoverer's probe, through canned replies (no Redis): it sends the reclaim script only
to partitions where XPENDING IDLE found a delivery to take (or could not tell).  The Redis
side, a delivery that appears where none was pending, is tests/integration/test_idle.py's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from shardq.config import WorkerSettings
from shardq.store import keys
from shardq.store.delivery import Batch
from shardq.store.layout import Layout
from shardq.worker.recoverer import Recoverer

PARTITIONS = 4


class Probes:
    """The recoverer's per-primary calls: XPENDING probes answered from ``pending`` (True,
    False or an exception), reclaims recorded."""

    def __init__(self, pending: dict[int, Any], pks: dict[int, keys.PartitionKeys]) -> None:
        self.pending = pending
        self.by_ready = {pk.ready: p for p, pk in pks.items()}
        self.reclaimed: list[int] = []

    async def run(self, ops: list[Any], handle: Callable[..., Any], wait: float) -> Any:
        results: list[Any] = []
        for op in ops:
            if op.name == "xpending":
                results.append(self.pending[self.by_ready[op.args[1]]])
            else:
                assert op.name == "reclaim"
                self.reclaimed.append(self.by_ready[op.keys[0]])
                results.append(Batch(0, []))
        handle(list(range(len(ops))), results)
        return SimpleNamespace(errors=[], late=0, skipped=[])


def test_the_recoverer_reclaims_only_where_a_delivery_is_idle_enough() -> None:
    pks = dict(Layout("q", PARTITIONS).fleet())
    pending: dict[int, Any] = {0: False, 1: True, 2: ConnectionError("down"), 3: False}
    probes = Probes(pending, pks)
    ctx = SimpleNamespace(
        supervisor=None, transport=None, queue="q", pks=pks, consumer="w1",
        settings=WorkerSettings(), membership=None, inflight=SimpleNamespace(room=lambda: 64),
        stats=None,
    )  # fmt: skip
    fetcher = SimpleNamespace(assigned=set(pks), assigned_sorted=sorted(pks))
    executor = SimpleNamespace(settler=SimpleNamespace(partitions_with_acks=lambda: []))
    rec = Recoverer(ctx, executor=executor, fetcher=fetcher)  # type: ignore[arg-type]
    rec.calls = probes  # type: ignore[assignment]
    assert asyncio.run(rec.round()) == "done"
    assert probes.reclaimed == [1, 2]  # a failed probe counts: the script reports its error
    pending.update({1: False, 2: False, 3: True})  # partition 3 gained a delivery to take
    probes.reclaimed.clear()
    asyncio.run(rec.round())
    assert probes.reclaimed == [3]
    pending[3] = False
    probes.reclaimed.clear()
    assert asyncio.run(rec.round()) == "done" and probes.reclaimed == []
