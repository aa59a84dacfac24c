"""Key layout: every script call stays in one slot, and partitions spread evenly over slots."""

from __future__ import annotations

import binascii
import itertools
import random
import types
import uuid
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
import redis
from helpers import FAST_DISPATCHER, Runner, idem_key_in, job_id_in, wait_for

from shardq import JobRequest
from shardq.client import Client
from shardq.config import ProducerSettings
from shardq.errors import PermanentError
from shardq.jobs import Backoff, Job
from shardq.store import keys, producer, transport
from shardq.store.op import Op

PARTITION_COUNTS = [*range(1, 65), 256]
# Every script the client, the dispatcher and the worker run in normal operation.
RUNTIME_SCRIPTS = {
    "queue-create", "enqueue", "enqueue-batch", "get", "cancel", "reschedule",
    "lease-acquire", "lease-renew", "lease-release", "promote",
    "fetch", "ack", "fail", "touch", "reclaim", "retire",
}  # fmt: skip
AT_SHUTDOWN = {"retire", "lease-release"}
SETTINGS = ProducerSettings()


def _sampled(partitions: int) -> list[int]:
    if partitions <= 64:
        return list(range(partitions))
    rng = random.Random(partitions)
    return sorted({0, partitions - 1, *rng.sample(range(partitions), 24)})


def _call_slots(call: Op[Any]) -> set[int]:
    """Slots of a call's KEYS and of any key-like ARGV (the sharded pub/sub hint channels)."""
    assert len(call.keys) == call.script.num_keys, (call.name, call.keys)
    names = list(call.keys)
    names += [a for a in call.argv if isinstance(a, str) and a.startswith("{")]
    return {keys.slot_of(k) for k in names}


def producer_calls(queue: str, partition: int, partitions: int) -> list[Op[Any]]:
    """Every call the producer builds for one partition (shared by sync and async)."""
    job_id = job_id_in(partition, partitions)
    idem = idem_key_in(partition, partitions)
    single = producer.prepare_enqueue(queue, partitions, JobRequest("t", job_id=job_id), SETTINGS)
    deduped = producer.prepare_enqueue(
        queue, partitions, JobRequest("t", idempotency_key=idem, delay=5), SETTINGS
    )
    bulk = [
        producer.prepare_enqueue(
            queue, partitions, JobRequest("t", job_id=f"{job_id}.{i}"), SETTINGS
        )
        for i in range(3)
    ]
    bulk = [b for b in bulk if b.partition == partition] or [single]
    calls = [
        single.op(),
        deduped.op(),
        *(c.op for c in producer.plan_bulk([*bulk, deduped])),
        producer.cancel(queue, partitions, job_id),
        producer.reschedule(queue, partitions, job_id, None, 10, SETTINGS),
        producer.get(queue, partitions, job_id),
    ]
    assert keys.partition_for(idem, partitions) == partition
    return calls


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
def test_every_producer_call_and_partition_key_is_in_one_slot(partitions: int) -> None:
    queue = "slots-" + uuid.uuid4().hex[:6]
    for p in _sampled(partitions):
        pk = keys.partition_keys(queue, p, partitions)
        names = [
            pk.due,
            pk.jobs,
            pk.ready,
            pk.dead,
            pk.lease,
            pk.fence,
            pk.stats,
            pk.errors,
            pk.due_hint,
            pk.ready_hint,
            pk.idem("some-key"),
            pk.idem("{braces}in:key"),
            pk.idem_placeholder,
        ]
        assert len(set(names)) == len(names)
        assert {keys.slot_of(n) for n in names} == {keys.slot_of("{" + pk.tag + "}")}
        for call in producer_calls(queue, p, partitions):
            assert len(_call_slots(call)) == 1, (call.name, call.keys)
            assert _call_slots(call) == {keys.slot_of(pk.due)}


@pytest.mark.parametrize("partitions", [*PARTITION_COUNTS, 1024])
def test_partition_slot_lies_in_its_own_slot_range(partitions: int) -> None:
    for queue in ("q", "emails", "x" * 64, uuid.uuid4().hex):
        slots = []
        for p in range(partitions):
            lo, hi = keys.slot_range(p, partitions)
            slot = keys.slot_of("{" + keys.partition_tag(queue, p, partitions) + "}")
            assert lo <= slot < hi, (queue, p, slot, lo, hi)
            slots.append(slot)
        assert slots == sorted(slots)
    # the ranges tile the slot space exactly
    ranges = [keys.slot_range(p, partitions) for p in range(partitions)]
    assert ranges[0][0] == 0 and ranges[-1][1] == keys.SLOTS
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


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


def test_partition_tags_are_deterministic_and_cheap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same tags every time; the search costs at most about 4 * P CRC16s per partition
    (as partition_tag says), counted rather than timed, and nothing once cached."""
    crcs = 0
    real_crc = binascii.crc_hqx

    def counting_crc(data: bytes, value: int) -> int:
        nonlocal crcs
        crcs += 1
        return real_crc(data, value)

    monkeypatch.setattr(keys, "binascii", types.SimpleNamespace(crc_hqx=counting_crc))
    for partitions in (64, 1024):
        keys.partition_tag.cache_clear()
        crcs = 0
        first = [keys.partition_tag("cheap", p, partitions) for p in range(partitions)]
        assert crcs <= 4 * partitions * partitions, (partitions, crcs / partitions)
        crcs = 0
        assert first == [keys.partition_tag("cheap", p, partitions) for p in range(partitions)]
        assert crcs == 0  # cached: every enqueue asks for its partition's tag
        keys.partition_tag.cache_clear()
        assert first == [keys.partition_tag("cheap", p, partitions) for p in range(partitions)]
        assert len(set(first)) == partitions


def test_routing_spreads_ids_over_partitions() -> None:
    counts = Counter(keys.partition_for(uuid.uuid4().hex, 16) for _ in range(16000))
    assert set(counts) == set(range(16))
    assert min(counts.values()) > 800 and max(counts.values()) < 1200


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

    real_call, real_send = transport.call, transport.send
    real_acall, real_run_on = transport.AsyncTransport.call, transport.AsyncTransport.run_on

    def call(client: Any, op: Op[Any]) -> Any:
        record([op])
        return real_call(client, op)

    def send(client: Any, ops: Any, wait: Any = None) -> Any:
        record(ops)  # every pipelined batch (send_and_read and enqueue_many go through it)
        return real_send(client, ops, wait)

    async def acall(self: Any, op: Op[Any]) -> Any:
        record([op])
        return await real_acall(self, op)

    async def run_on(self: Any, node: str, ops: Any) -> Any:
        record(ops)
        return await real_run_on(self, node, ops)

    monkeypatch.setattr(transport, "call", call)
    monkeypatch.setattr(transport, "send", send)
    monkeypatch.setattr(transport.AsyncTransport, "call", acall)
    monkeypatch.setattr(transport.AsyncTransport, "run_on", run_on)

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
        later = client.enqueue(queue, "ok", delay=60)
        client.reschedule(queue, later, delay=30)
        assert client.get(queue, later) is not None
        assert client.cancel(queue, later)
        handlers = {"ok": lambda job: done.append(job.id), "slow": slow, "fail": fail}
        # max_sleep above the renewal interval: idle partitions get explicit lease renewals
        slow_wakeups = replace(FAST_DISPATCHER, max_sleep=1.0)
        with Runner(cluster_url, queue, handlers, dispatcher_settings=slow_wakeups):
            wait_for(lambda: len(done) == len(ids) + 50, 15, lambda: f"{len(done)} done")
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
