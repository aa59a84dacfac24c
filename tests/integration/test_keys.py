"""Key layout against the real cluster: the slot arithmetic matches CLUSTER KEYSLOT, a fresh
cluster gets equal partition counts per primary, and every call a real dispatcher and worker
run stays in one slot (the rules alone, without Redis, are in tests/unit/test_keys_layout.py)."""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
import redis
from support.helpers import FAST_DISPATCHER, Runner, job_id_in, wait_for

from shardq import JobRequest
from shardq.client import Client
from shardq.errors import PermanentError
from shardq.jobs import Backoff, Job
from shardq.store import delivery, keys, transport
from shardq.store.op import Op

# Every script the client, the dispatcher and the worker run in normal operation.
RUNTIME_SCRIPTS = {
    "queue-create", "enqueue", "enqueue-batch", "get", "cancel", "reschedule",
    "lease-acquire", "lease-renew", "lease-release", "promote",
    "fetch", "ack", "fail", "touch", "reclaim", "retire",
}  # fmt: skip


AT_SHUTDOWN = {"retire", "lease-release"}


def _sampled(partitions: int) -> list[int]:
    if partitions <= 64:
        return list(range(partitions))
    rng = random.Random(partitions)
    return sorted({0, partitions - 1, *rng.sample(range(partitions), 24)})


def test_slot_of_matches_cluster_keyslot(cluster_url: str) -> None:
    node = redis.Redis.from_url(cluster_url)
    try:
        names = ["plain", "{tag}x", "a{b}{c}", "{}x", "{x", "x}", "{{a}}", "é{ü}", ""]
        for partitions in (1, 7, 64, 256):
            for p in _sampled(partitions)[:16]:
                pk = keys.partition_keys("keyslot-check", p, partitions)
                names += [pk.due, pk.ready, pk.idem("k"), pk.ready_hint]
        pipe = node.pipeline(transaction=False)
        for name in names:
            pipe.execute_command("CLUSTER", "KEYSLOT", name)
        server = pipe.execute()
        assert server == [keys.slot_of(n) for n in names]
    finally:
        node.close()


def _primary_ranges(cluster_url: str) -> list[tuple[int, int, int]]:
    node = redis.Redis.from_url(cluster_url)
    try:
        raw = node.execute_command("CLUSTER", "SLOTS")
    finally:
        node.close()
    out = []
    for entry in raw:
        lo, hi, primary = entry[0], entry[1], entry[2]
        out.append((int(lo), int(hi), int(primary[1])))
    return out


def test_fresh_cluster_gets_equal_partition_counts_per_primary(cluster_url: str) -> None:
    ranges = _primary_ranges(cluster_url)
    ports = {port for _, _, port in ranges}
    assert len(ports) == 3, "the test cluster is a fresh 3-primary cluster"
    names = ["emails", "q", "test-123", "a", "orders.v2", *(uuid.uuid4().hex for _ in range(20))]
    for queue in names:
        per_primary: Counter[int] = Counter()
        for p in range(64):
            slot = keys.slot_of("{" + keys.partition_tag(queue, p, 64) + "}")
            [port] = [port for lo, hi, port in ranges if lo <= slot <= hi]
            per_primary[port] += 1
        counts = sorted(per_primary[port] for port in ports)
        assert sum(counts) == 64
        assert counts[-1] - counts[0] <= 1, (queue, per_primary)


def test_dispatcher_and_worker_calls_stay_in_one_slot(
    cluster_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spy on the script runner while a real dispatcher and worker run every kind of call.

    The cluster itself rejects a cross-slot call; this also checks the hint channels in ARGV
    and that every script of lua/ was exercised.
    """
    seen: list[tuple[str, list[str], list[Any]]] = []

    def record(ops: Any) -> None:
        # Script calls only: a plain command (store.op.Command: meta, registry, limits) names
        # its keys in its args, and the cluster refuses one that spans slots by itself.
        seen.extend((o.name, list(o.keys), list(o.argv)) for o in ops if isinstance(o, Op))

    real_call, real_write = transport.SyncTransport.call, transport.SyncSent.write
    real_acall, real_awrite = transport.AsyncTransport.call, transport.AsyncSent.write

    def written(sent: Any, groups: dict[str, list[int]]) -> list[Any]:
        return [sent.ops[i] for indexes in groups.values() for i in indexes]

    def call(self: Any, op: Op[Any]) -> Any:
        record([op])
        return real_call(self, op)

    def write(self: Any, groups: dict[str, list[int]]) -> None:
        record(written(self, groups))  # every batch: pipelined, on one primary, with WAIT
        real_write(self, groups)

    async def acall(self: Any, op: Op[Any]) -> Any:
        record([op])
        return await real_acall(self, op)

    async def awrite(self: Any, groups: dict[str, list[int]]) -> None:
        record(written(self, groups))
        await real_awrite(self, groups)

    monkeypatch.setattr(transport.SyncTransport, "call", call)
    monkeypatch.setattr(transport.SyncSent, "write", write)
    monkeypatch.setattr(transport.AsyncTransport, "call", acall)
    monkeypatch.setattr(transport.AsyncSent, "write", awrite)

    partitions = 64
    done: list[str] = []

    async def slow(job: Job) -> None:
        import asyncio

        await asyncio.sleep(1.2)  # spans heartbeats (touch)
        done.append(job.id)

    def fail(job: Job) -> None:
        done.append(job.id)
        raise PermanentError("no")

    client = Client.from_url(cluster_url)
    try:
        client.create_queue(queue, partitions)
        ids = [
            client.enqueue(queue, "ok", None, job_id=job_id_in(p, partitions))
            for p in range(partitions)
        ]
        client.enqueue_many(queue, [JobRequest("ok", delay=0.3) for _ in range(50)])
        ids.append(client.enqueue(queue, "slow"))
        ids.append(client.enqueue(queue, "fail", backoff=Backoff("fixed", 0.1)))
        # A delivery of a worker that died before the fleet started: only such a one makes
        # the recoverer send its reclaim (it asks XPENDING IDLE first).
        orphan = client.enqueue(queue, "ok", None)
        orphan_pk = keys.partition_keys(queue, keys.partition_for(orphan, partitions), partitions)
        taken = client.transport.run(delivery.fetch(orphan_pk, "crashed-before", 10))
        assert orphan.encode() in [j.raw_id for j in taken.jobs]
        ids.append(orphan)
        later = client.enqueue(queue, "ok", delay=60)
        client.reschedule(queue, later, delay=30)
        assert client.get(queue, later) is not None
        assert client.cancel(queue, later)
        handlers = {"ok": lambda job: done.append(job.id), "slow": slow, "fail": fail}
        slow_wakeups = replace(FAST_DISPATCHER, max_sleep=1.0)
        with Runner(cluster_url, queue, handlers, dispatcher_settings=slow_wakeups) as runner:
            wait_for(lambda: len(done) == len(ids) + 50, 15, lambda: f"{len(done)} done")
            # Lease renewals: a dispatcher checks every lease it holds after a gap in its own
            # heartbeats longer than the membership timeout (its loop frozen here).
            assert runner.loop is not None
            gap = 1.5 * slow_wakeups.membership_timeout
            runner.loop.call_soon_threadsafe(time.sleep, gap)
            # Wait for the background calls too (reclaim rounds, lease renewals, trims).
            running = RUNTIME_SCRIPTS - AT_SHUTDOWN
            wait_for(
                lambda: {name for name, _, _ in seen} >= running,
                15,
                lambda: f"never called: {running - {name for name, _, _ in seen}}",
            )
    finally:
        client.close()

    names = {name for name, _, _ in seen}
    assert names >= RUNTIME_SCRIPTS, RUNTIME_SCRIPTS - names
    for name, call_keys, argv in seen:
        slots = {keys.slot_of(k) for k in call_keys}
        slots |= {keys.slot_of(a) for a in argv if isinstance(a, str) and a.startswith("{")}
        assert len(slots) == 1, (name, call_keys, argv)
