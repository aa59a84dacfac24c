"""How a queue is cut into partitions and its partitions placed on the cluster's slots: a key's
slot (CRC16), each partition's hash tag, reading a tag back, which partition a job id or key
routes to, a slot's route key, and the partitions' numbers (fleet ids) and names (labels).
:mod:`shardq.store.keys` builds every key name on these tags (and re-exports these names).

Each partition's keys share one hash tag.  A plain ``{sq:q:0..P-1}`` would let CRC16 scatter P
tags unevenly over the 16,384 slots, giving one primary of a fresh cluster noticeably more
partitions than another.  Instead partition ``p`` of ``P`` gets the tag ``sq:<queue>:<p>.<s>``
with the smallest suffix ``s`` whose slot falls inside the p-th of P equal slot ranges, near
its middle.  The rule
is deterministic, so every process derives the same tags without a lookup, and "which node holds
partition p" is simply "which node holds slot range p".

Past :data:`SEARCHED_PARTITIONS` partitions the search would cost too much (at 16,384 the range
is one slot: ~16,384 CRC16s per partition, minutes for a queue), so the tag there is
``sq:<queue>:<p>:<four letters of @A-O>`` whose slot is exactly the middle of the range: CRC16
is linear, so the four letters (four free bits each) are solved for, not searched
(:func:`_exact_suffix`).  Queues up to 1,024 partitions keep the tags they were created with.
"""

from __future__ import annotations

import binascii
from functools import lru_cache

from shardq import names

SLOTS = 16384
#: One partition per slot at most: a queue's partitions never share a slot.
MAX_PARTITIONS = SLOTS
#: Up to this many partitions, tags are found by search (the rule every queue created before
#: 16,384 partitions were allowed has); beyond, by solving for the slot (module docstring).
SEARCHED_PARTITIONS = 1024


def slot_of(key: str | bytes) -> int:
    """Redis Cluster slot of a key (CRC16/XMODEM of the hash tag, as the server computes it)."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start != -1:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return binascii.crc_hqx(data, 0) % SLOTS


def slot_range(partition: int, partitions: int) -> tuple[int, int]:
    """The half-open slot range [lo, hi) that partition ``partition`` of ``partitions`` lives in."""
    return partition * SLOTS // partitions, (partition + 1) * SLOTS // partitions


def generation_prefix(queue: str, generation: int = 0) -> str:
    """What every partition tag of one generation of ``queue`` starts with: ``sq:<queue>:`` for
    the partitions a queue was created with (generation 0), ``sq:<queue>:g<g>.`` for those a
    resize made (:class:`Layout`).  A later generation's count may equal an earlier one's (8 ->
    16 -> 8), so the number keeps their keys apart; both shapes stay under ``{sq:<queue>:``, so
    the ACL patterns and SCAN patterns below cover every generation."""
    return f"sq:{queue}:" if generation == 0 else f"sq:{queue}:g{generation}."


@lru_cache(maxsize=65536)
def partition_tag(queue: str, partition: int, partitions: int, generation: int = 0) -> str:
    """The hash tag of one partition: its slot lies near the middle of its own slot range.

    Anywhere in the range is not enough: a range that straddles two primaries' slot ranges
    would go to either at random, and a fresh 3-primary cluster could get 22/20/22 of 64
    partitions.  Within an eighth of the range width (at least 8 slots) of its centre, a
    partition lands on the primary that holds its centre unless a primary's boundary passes
    that close to it: on a fresh 3-primary cluster the counts then differ by at most one for
    every P up to 512.  The search costs about 4 * P CRC16s per partition.  Past
    :data:`SEARCHED_PARTITIONS` the tag is solved for the middle slot (module docstring).
    """
    lo, hi = slot_range(partition, partitions)
    head = generation_prefix(queue, generation) + str(partition)
    if partitions > SEARCHED_PARTITIONS:
        solved = head + ":"
        return solved + _exact_suffix(solved.encode(), (lo + hi) // 2)
    # Compare doubled values so the centre (lo + hi) / 2 stays an integer.
    centre2, reach2 = lo + hi, 2 * max((hi - lo) // 8, 8)
    prefix = (head + ".").encode()
    suffix = 0
    while True:
        slot = binascii.crc_hqx(prefix + str(suffix).encode(), 0) % SLOTS
        if lo <= slot < hi and abs(2 * slot + 1 - centre2) <= reach2:
            return f"{head}.{suffix}"
        suffix += 1


# Four suffix letters '@'..'O' (0x40 | nibble): the tag's bytes are the prefix's, then 0x40 in
# each, XOR 16 free bits.  With CRC16/XMODEM's zero init, crc(a ^ b) == crc(a) ^ crc(b) for
# messages of one length, and leading zero bytes leave the CRC at 0, so
#     slot(prefix + letters) == (crc(prefix + "@@@@") ^ crc(nibble bytes)) % SLOTS
# and a table from the 14 low bits of crc(nibble bytes) to the smallest nibbles giving them
# names the suffix for any slot in one lookup (every slot is reachable: test_keys checks).
_LETTER_BASE = b"@@@@"


@lru_cache(maxsize=1)
def _syndromes() -> dict[int, int]:
    table: dict[int, int] = {}
    for n in range(1 << 16):
        nibbles = bytes((n >> (4 * i)) & 0xF for i in range(4))
        table.setdefault(binascii.crc_hqx(nibbles, 0) % SLOTS, n)
    return table


def _exact_suffix(prefix: bytes, slot: int) -> str:
    """Four letters that put ``prefix`` + them on ``slot`` exactly."""
    base = binascii.crc_hqx(prefix + _LETTER_BASE, 0) % SLOTS
    n = _syndromes()[base ^ slot]
    return "".join(chr(0x40 | ((n >> (4 * i)) & 0xF)) for i in range(4))


def fleet_id(generation: int, partition: int) -> int:
    """A partition's number in the fleet (leases, the owners hash, the workers' split, metrics):
    ``generation * MAX_PARTITIONS + partition``, so the partitions of generation 0 keep their
    numbers and two generations live during a resize never share one."""
    return generation * MAX_PARTITIONS + partition


def partition_label(generation: int, partition: int) -> str:
    """A partition's one user-facing name: ``5`` for partition 5 of generation 0, ``g1.5`` for
    partition 5 of generation 1.  The CLI (text and --json), the console, metric labels and
    logs all name a partition by it (``shardq.format.partition``); the library's values (and a
    trace's ``shardq.partition`` attribute) carry the fleet id (:func:`fleet_id`)."""
    return str(partition) if generation == 0 else f"g{generation}.{partition}"


def label_of_fleet_id(partition_id: int) -> str:
    """:func:`partition_label` of a fleet id."""
    return partition_label(*divmod(partition_id, MAX_PARTITIONS))


def _tag(key: str) -> str | None:
    start = key.find("{")
    end = key.find("}", start + 1) if start == 0 else -1
    return key[1:end] if end > 1 else None


def _generation_in_tag(rest: str) -> tuple[int, str] | None:
    """The generation of a partition tag's part after ``sq:<queue>:`` and what follows it
    (``g<g>.`` first for a resize's generation, :func:`generation_prefix`)."""
    if not rest.startswith("g"):
        return 0, rest
    generation, dot, tail = rest[1:].partition(".")
    if dot and generation.isascii() and generation.isdigit() and not generation.startswith("0"):
        return int(generation), tail
    return None


def _partition_in_tag(rest: str) -> int | None:
    """The fleet id (:func:`fleet_id`) of a partition tag's part after ``sq:<queue>:``
    (``[g<g>.]<p>.<digits>``, or ``[g<g>.]<p>:<four letters @..O>`` past SEARCHED_PARTITIONS),
    else None."""
    found = _generation_in_tag(rest)
    if found is None:
        return None
    generation, rest = found
    partition, sep, suffix = rest.partition(":") if ":" in rest else rest.partition(".")
    if not (sep and partition.isdigit() and partition.isascii()):
        return None
    if sep == ":":
        ok = len(suffix) == 4 and all("@" <= c <= "O" for c in suffix)
    else:
        ok = suffix.isdigit() and suffix.isascii()
    return fleet_id(generation, int(partition)) if ok else None


def tag_of_queue(queue: str, key: str) -> bool:
    """Whether ``key``'s hash tag is one of ``queue``'s partitions' (``sq:<queue>:<p>.<s>``,
    ``sq:<queue>:<p>:<letters>``), limits' (``sq:<queue>:limit:<name>``) or batches'
    (``sq:<queue>:batch:<id>``): the keys a queue
    deletion finds by SCAN and removes (whatever follows the tag), and only those."""
    tag = _tag(key)
    prefix = "sq:" + queue + ":"
    if tag is None or not tag.startswith(prefix):
        return False
    rest = tag[len(prefix) :]
    for prefix in ("limit:", "batch:"):
        if rest.startswith(prefix):
            return len(rest) > len(prefix)
    return _partition_in_tag(rest) is not None


def partition_of_key(key: str) -> tuple[str, int] | None:
    """``(queue, fleet id)`` of a key of some queue's partition (any tag shape), else None
    (a queue's own keys, a limit's, anything not shardq's).  Queue names hold no ':'."""
    tag = _tag(key)
    if tag is None or not tag.startswith("sq:"):
        return None
    queue, sep, rest = tag[3:].partition(":")
    if not sep or not names.QUEUE_NAME_RE.fullmatch(queue):
        return None
    partition = _partition_in_tag(rest)
    return None if partition is None else (queue, partition)


@lru_cache(maxsize=SLOTS)
def slot_route(slot: int) -> str:
    """A key name of ``slot``, for sending a keyless command (SCAN) to the node serving that
    slot through the same routing as every call (a call goes where its route key's slot is)."""
    n = 0
    while binascii.crc_hqx(f"sq-route:{n}".encode(), 0) % SLOTS != slot:
        n += 1
    return "{" + f"sq-route:{n}" + "}"


# Periodic schedules (shardq.schedules): a name, and the id of the job one tick enqueues.
SCHEDULE_JOB_PREFIX = "sq-sched:"


def schedule_job_id(name: str, tick_ms: int) -> str:
    """The job id of schedule ``name``'s tick at ``tick_ms``: ``sq-sched:<name>@<tick ms>``.

    At most 9 + 100 + 1 + 16 characters, within a job id's 128.  The fire script builds the
    same string (lua/schedule-fire-7.lua)."""
    return f"{SCHEDULE_JOB_PREFIX}{name}@{tick_ms}"


def partition_for(routing_key: str, partitions: int) -> int:
    """The partition a job id or idempotency key belongs to (stable across processes).

    A tick job's id (``sq-sched:<name>@<tick ms>``, :func:`schedule_job_id`) routes by the
    schedule's name, so it lives in its schedule's partition and get/cancel find it from the id;
    every other key routes by its own CRC32, as it always has."""
    if routing_key.startswith(SCHEDULE_JOB_PREFIX):
        name, at, tick = routing_key[len(SCHEDULE_JOB_PREFIX) :].rpartition("@")
        if at and tick.isascii() and tick.isdigit() and names.SCHEDULE_NAME_RE.fullmatch(name):
            routing_key = name
    return binascii.crc32(routing_key.encode()) % partitions
