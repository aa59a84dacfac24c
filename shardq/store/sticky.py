"""Sticky routing: the jobs a process enqueues without an id or a key, due at about the same
time, go to one partition together.

Why: a job's calls (its promote, the read that delivers it, its ack) are per partition, and
cost about as much for one job as for a few dozen.  Jobs spread one by one over P partitions
reach each partition a few at a time: at 2,000 jobs/s over 64 partitions every call carries
about one job, and a job costs 3-5x what a full call charges it (docs/capacity.md §1.1).  So,
as Kafka's sticky partitioner does for its batches (KIP-480), a process sends the jobs that
come due within one ``ProducerSettings.sticky_window`` (10 ms, about the lateness budget) to
one partition, ``sticky_jobs`` (16) at most, then starts a run on another partition chosen at
random.  The runs are per window of due times, not per stretch of enqueues: jobs due together
travel together whatever order they were enqueued in, and jobs due far apart (which go in
separate calls anyway) are spread one by one as before.  Over the many runs of a minute the
partitions get even shares, which is what spreading a queue is for (the hot-partition warning
compares a minute's rates); a burst due at one instant still spreads over one partition per 16
jobs.  A job with an id or an idempotency key still goes where its id or key hashes:
duplicates must meet, and nothing about them is the producer's to choose.

Routing stays ``crc32(id) % P`` (shardq.store.keys.partition_for), so get, cancel and a resize
find a job from its id as before, and a producer in another language need not do this: the
producer makes the generated id hash to the run's partition.  It draws the id as always and
then picks its last two characters: CRC-32 is affine, so with ``D[s] = crc32(s) ^ crc32(S0)``
for each two-character suffix ``s``, ``crc32(stem + s) == crc32(stem + S0) ^ D[s]`` for any
stem, and when P is a power of two the partition (the CRC's low bits) is picked by a table
lookup, one CRC per job.  The pick among the suffixes that fit is made with the two random
characters it replaces, so an id keeps all its randomness but the log2(P) bits that name its
partition.  Any other P of at most ``MAX_SEARCHED`` partitions is searched (P tries on
average); above that, jobs are routed one by one as before (no run).
"""

from __future__ import annotations

import binascii
import random
import threading
from functools import lru_cache

from shardq import jobs as jobmod
from shardq.config import ProducerSettings

#: The characters of a generated id (URL-safe base64, '-' written '.': shardq.jobs.new_job_id).
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_."
S0 = "AA"
#: A count of partitions that is not a power of two is searched, P tries a job on average:
#: ~26 µs a job at 100 partitions against ~1.3 µs for a table lookup at any power of two up
#: to 4,096 (2026-12-06), so only small counts are.
MAX_SEARCHED = 16

_crc32 = binascii.crc32
new_job_id = jobmod.new_job_id
_INDEX = {c: i for i, c in enumerate(ALPHABET)}
_S0_CRC = _crc32(S0.encode())
#: Every suffix with its CRC difference from S0, in a fixed order.
_SUFFIXES: list[tuple[str, int]] = [
    (a + b, _crc32((a + b).encode()) ^ _S0_CRC) for a in ALPHABET for b in ALPHABET
]


def supports(partitions: int) -> bool:
    """Whether a generated id can be steered to any of ``partitions`` partitions cheaply."""
    return partitions > 1 and (partitions & (partitions - 1) == 0 or partitions <= MAX_SEARCHED)


@lru_cache(maxsize=64)
def _table(partitions: int) -> tuple[tuple[str, ...], ...]:
    """For a power-of-two ``partitions``: per value of ``D[s] % partitions``, the suffixes.

    Two characters reach every value up to 512 partitions; above it some values have none,
    and the id is drawn again (at 16,384 about 4 draws on average)."""
    mask = partitions - 1
    by: list[list[str]] = [[] for _ in range(partitions)]
    for s, d in _SUFFIXES:
        by[d & mask].append(s)
    return tuple(tuple(x) for x in by)


def steer(head: str, partition: int, partitions: int) -> str:
    """A new random job id that starts with ``head`` (a timed id's due time, or "") and hashes
    to ``partition`` of ``partitions`` (:func:`supports` must hold)."""
    mask = partitions - 1
    table = _table(partitions) if partitions & mask == 0 else None
    want = partition & mask
    while True:
        drawn = new_job_id()
        stem = head + drawn[:-2]
        c0 = _crc32((stem + S0).encode())
        # The two characters replaced choose among the suffixes that fit (their randomness).
        pick = _INDEX[drawn[-2]] * 64 + _INDEX[drawn[-1]]
        if table is not None:
            fits = table[(c0 & mask) ^ want]
            if fits:
                return stem + fits[pick % len(fits)]
            continue
        n = len(_SUFFIXES)
        for i in range(n):
            s, d = _SUFFIXES[(pick + i) % n]
            if (c0 ^ d) % partitions == partition:
                return stem + s


#: Open runs kept per process (the oldest window's run is dropped past it).
MAX_OPEN = 256


class Runs:
    """The open runs of this process: per queue and window of due times, the run's partition
    and the jobs it still takes.

    Shared by every client of the process, as the id pool is, so by threads too: a lock keeps
    the table whole (dropping the oldest run while another thread opens one would otherwise
    fail an enqueue); the id is steered outside it."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, int, int], list[int]] = {}
        self._lock = threading.Lock()

    def place(
        self, queue: str, partitions: int, head: str, due_ms: int, settings: ProducerSettings
    ) -> tuple[str, int]:
        """A generated id (``head`` first) for a job of ``queue`` due about ``due_ms``, and its
        partition: the run's of its due window, or a new run's chosen at random when that
        window has none or its run is full (``settings.sticky_jobs``)."""
        window = max(1, round(settings.sticky_window * 1000))
        key = (queue, partitions, due_ms // window)
        runs = self._runs
        with self._lock:
            state = runs.get(key)
            if state is None or state[1] <= 0:
                if state is None and len(runs) >= MAX_OPEN:
                    del runs[next(iter(runs))]  # the oldest opened: windows mostly come in order
                state = runs[key] = [random.randrange(partitions), settings.sticky_jobs]
            state[1] -= 1
            partition = state[0]
        return steer(head, partition, partitions), partition

    def place_job(
        self,
        queue: str,
        partitions: int,
        schedule: jobmod.Schedule,
        timed_due: int | None,
        settings: ProducerSettings,
        now_ms: int,
    ) -> tuple[str, int]:
        """:meth:`place` for a job to be enqueued with ``schedule`` ('in' or 'at'): its id is
        timed when ``timed_due`` is given (a compact waiting job), and its run is that of its
        due time, about ``now_ms`` (the Redis clock) plus its delay."""
        head = "" if timed_due is None else jobmod.timed_head(max(0, timed_due))
        at = now_ms + schedule.ms if schedule.mode == "in" else schedule.ms
        return self.place(queue, partitions, head, at, settings)

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()


RUNS = Runs()
