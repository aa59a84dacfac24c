"""Key layout: every script call stays in one slot, and partitions spread evenly over slots (on
the real cluster: tests/integration/test_keys.py)."""

from __future__ import annotations

import binascii
import itertools
import random
import types
import uuid
from collections import Counter
from typing import Any

import pytest
from support.helpers import idem_key_in, job_id_in

from shardq import JobRequest
from shardq.config import ProducerSettings
from shardq.store import keys, producer
from shardq.store.op import Op

PARTITION_COUNTS = [*range(1, 65), 256]
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
