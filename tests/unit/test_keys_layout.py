"""Key layout: every script call stays in one slot, and partitions spread evenly over slots (on
the real cluster: tests/integration/test_keys.py)."""

from __future__ import annotations

import binascii
import hashlib
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
from shardq.store import keys, partitioning, producer
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
    home = keys.partition_keys(queue, keys.partition_for(job_id, partitions), partitions)
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
        producer.cancel(home, job_id),
        producer.reschedule(home, job_id, None, 10, SETTINGS),
        producer.get(home, job_id),
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

    monkeypatch.setattr(partitioning, "binascii", types.SimpleNamespace(crc_hqx=counting_crc))
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


# Digests of every tag of queue 'orders' at these counts, as queues were created with them:
# a queue's tags may never change (its keys would be orphaned), whatever the rule becomes.
KNOWN_TAGS = {
    1: "d4239193bdf4dfdc",
    8: "4d3ed1a963761b12",
    64: "d9c3e94d7199851e",
    256: "5dcac707a85b0c48",
    1024: "e4cfaa76be893708",
}


@pytest.mark.parametrize("partitions", sorted(KNOWN_TAGS))
def test_searched_tags_never_change(partitions: int) -> None:
    tags = [keys.partition_tag("orders", p, partitions) for p in range(partitions)]
    digest = hashlib.sha256("\n".join(tags).encode()).hexdigest()[:16]
    assert digest == KNOWN_TAGS[partitions]


@pytest.mark.parametrize("partitions", [1025, 2048, 5000, keys.MAX_PARTITIONS])
def test_solved_tags_sit_on_the_middle_of_their_range(partitions: int) -> None:
    """Past SEARCHED_PARTITIONS a tag is solved for: its slot is its range's middle slot, so
    at 16,384 partition p is on slot p, and every tag is one of the queue's."""
    for queue in ("q", "x" * 64):
        tags = [keys.partition_tag(queue, p, partitions) for p in range(partitions)]
        assert len(set(tags)) == partitions
        for p, tag in enumerate(tags):
            lo, hi = keys.slot_range(p, partitions)
            assert keys.slot_of("{" + tag + "}") == (lo + hi) // 2, (queue, p, tag)
            pk = keys.partition_keys(queue, p, partitions)
            assert keys.tag_of_queue(queue, pk.due) and keys.tag_of_queue(queue, pk.idem("k"))
            assert not keys.tag_of_queue(queue + "x", pk.due)
    if partitions == keys.MAX_PARTITIONS:
        assert [keys.slot_of("{" + t + "}") for t in tags] == list(range(keys.SLOTS))


def test_solved_tags_are_cheap(monkeypatch: pytest.MonkeyPatch) -> None:
    """One CRC16 per partition once the table is built (65,536 CRC16s, once per process)."""
    partitioning._syndromes()
    crcs = 0
    real_crc = binascii.crc_hqx

    def counting_crc(data: bytes, value: int) -> int:
        nonlocal crcs
        crcs += 1
        return real_crc(data, value)

    monkeypatch.setattr(partitioning, "binascii", types.SimpleNamespace(crc_hqx=counting_crc))
    keys.partition_tag.cache_clear()
    [keys.partition_tag("cheap", p, keys.MAX_PARTITIONS) for p in range(keys.MAX_PARTITIONS)]
    assert crcs == keys.MAX_PARTITIONS


def test_tag_of_queue_takes_only_the_queues_own_tag_shapes() -> None:
    for key in ("{sq:q:3:ABCD}:due", "{sq:q:3.17}:due", "{sq:q:limit:x}:limit"):
        assert keys.tag_of_queue("q", key), key
    for key in (
        "{sq:q:3:ABCP}:due",  # 'P' is past 'O'
        "{sq:q:3:ABC}:due",
        "{sq:q:3:ABCDE}:due",
        "{sq:q:x:ABCD}:due",
        "{sq:q:3.1x}:due",
        "{sq:q:3}:due",
        "{sq:q}:meta",
    ):
        assert not keys.tag_of_queue("q", key), key


def test_routing_spreads_ids_over_partitions() -> None:
    counts = Counter(keys.partition_for(uuid.uuid4().hex, 16) for _ in range(16000))
    assert set(counts) == set(range(16))
    assert min(counts.values()) > 800 and max(counts.values()) < 1200


@pytest.mark.parametrize("partitions", [64, 2048, keys.MAX_PARTITIONS])
def test_partition_of_key_reads_back_every_partition_key(partitions: int) -> None:
    for queue in ("q", "a.b-c_9"):
        for p in (0, 1, partitions - 1):
            pk = keys.partition_keys(queue, p, partitions)
            for key in [*pk.all(), pk.idem("k:{x}")]:
                assert keys.partition_of_key(key) == (queue, p), key
    for key in (
        keys.queue_meta_key("q"),
        keys.limit_state_key("q", "type:t"),
        "{sq:q:3:ABCP}:due",
        "{sq:q:3.x}:due",
        "{sq:q}:due",
        "{other:q:3.1}:due",
        "plain",
    ):
        assert keys.partition_of_key(key) is None, key


def test_a_coming_generation_is_served_by_the_fleet_but_not_routed_to() -> None:
    """The meta's 'next' (a resize's new generation before the switch): the fleet serves it,
    producers and by-id calls still use the active one; a damaged value is refused by name."""
    from shardq.errors import MalformedRecordError
    from shardq.store.meta import parse_meta

    meta = parse_meta("q", {"partitions": "4", "next": "1:8"})
    layout = meta.key_layout
    assert meta.coming == (1, 8) and layout.coming == (1, 8)
    assert sorted(layout.fleet()) == [0, 1, 2, 3, *range(16384, 16392)]
    assert [pk.generation for pk in layout.every()] == [0] * 4  # listings: stored jobs only
    assert layout.route("job-1").generation == 0
    assert layout.homes("job-1") == [layout.route("job-1")]
    # After the switch 'next' is emptied: served partitions are the same set.
    switched = parse_meta(
        "q",
        {
            "partitions": "resized: needs shardq >= 0.2",
            "generation": "1",
            "generation:partitions": "8",
            "draining": "0:4",
            "next": "",
        },
    )
    assert switched.coming is None and set(switched.key_layout.fleet()) == set(layout.fleet())
    for bad in ("8", "x:8", "0:8"):  # no generation, not a number, the active generation
        with pytest.raises(MalformedRecordError, match="next"):
            parse_meta("q", {"partitions": "4", "next": bad})
