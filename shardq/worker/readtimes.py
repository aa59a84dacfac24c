"""When the fetcher reads each partition next, per primary, found without scanning them all.

A fetch loop serves up to 16,384 / primaries partitions; each round used to scan every one of
them for those due (and each idle pass for the earliest), so a round's Python cost grew with
the partitions served, not with those that had something to do.  Here a partition is in one of
three places, per primary:

- **due**: to be read now (a hint, a full batch, a newly assigned partition, an error's retry
  come due): read by the next round that has room;
- **timers**: to be read at a known time (its head job's due time, a hint within the lateness
  budget's share, an error's backoff): a heap, moved to *due* when its time comes;
- **fallbacks**: nothing known to do; read at its idle time only in case a hint was lost (an
  assigned partition's doubling ``idle_poll`` .. ``max_idle_poll``, another worker's partition
  every ``sweep_interval`` x (N - 1)): a heap drained at most :data:`FALLBACK_READS_PER_S` a
  second for the whole process (that rate split over the primaries), earliest first.

So a round costs what its due partitions cost, an idle pass a heap look-up, and the idle reads
of the whole process stay under a fixed rate, whatever the partitions: an idle partition is
read at its idle time, or, when more partitions than that rate allows are idle at once, within
``partitions / FALLBACK_READS_PER_S`` of it.  A hint (ready or due) takes a partition off its
fallback and files it under *due* or *timers* at once: the lateness of a job whose hint came
is unchanged; only one whose hint was lost waits for the fallback.

Heap entries are dropped lazily: an entry is live while its time is still the partition's and
the partition is still in that heap's place.  A regrouping (partitions moved to another
primary) files every partition again.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable

# Idle (fallback) reads per second of one worker's fetcher, whatever its partitions: an idle
# queue's reads used to grow with P (P / max_idle_poll: 546 fetch calls/s at 16,384).  At 8 a
# second a worker of up to 240 partitions reads each idle one every max_idle_poll (30 s) as
# before; past that an idle partition waits partitions / 8 s (~34 min at 16,384) for a read
# that only matters when a hint was lost (and every partition gets a hint, so a read, after
# each resubscription).
FALLBACK_READS_PER_S = 8.0
# How many seconds' worth of fallback reads may go at once after a quiet spell: the idle reads
# of a small queue, all due at one grid moment, still go as one round per primary.
FALLBACK_BURST_S = 10.0

DUE, TIMER, FALLBACK = 0, 1, 2


class ReadTimes:
    """Partition -> next read time (monotonic s), filed per primary as due, timer or fallback."""

    def __init__(
        self,
        partitions: Iterable[int],
        node_of: Callable[[int], str],
        generation: Callable[[], int],
        primaries: Callable[[], int],
        rate: float = FALLBACK_READS_PER_S,
        burst_s: float = FALLBACK_BURST_S,
    ) -> None:
        """``node_of``: the primary serving a partition; ``generation()``: changes when
        partitions moved between primaries (then everything is filed again); ``primaries()``:
        how many primaries share the fallback rate."""
        self.node_of = node_of
        self.generation = generation
        self.primaries = primaries
        self.rate = rate
        self.burst_s = burst_s
        #: The partition's read time (a fallback's: the idle time it wants).
        self.poll_at: dict[int, float] = dict.fromkeys(partitions, 0.0)
        #: Where each partition is filed: DUE, TIMER or FALLBACK.
        self.kind: dict[int, int] = dict.fromkeys(self.poll_at, DUE)
        self._due: dict[str, dict[int, None]] = {}
        self._timers: dict[str, list[tuple[float, int]]] = {}
        self._fallbacks: dict[str, list[tuple[float, int]]] = {}
        #: Per primary: fallback reads it may send now, and when that was counted.
        self._tokens: dict[str, tuple[float, float]] = {}
        self._gen: int | None = None
        #: Fallback reads let through, for tests and benchmarks.
        self.fallback_reads = 0

    # filing ---------------------------------------------------------------------------------

    def _check(self) -> None:
        gen = self.generation()
        if gen != self._gen:
            self._gen = gen
            self._file_all()

    def _file_all(self) -> None:
        self._due, self._timers, self._fallbacks = {}, {}, {}
        node_of = self.node_of
        for p, at in self.poll_at.items():
            node = node_of(p)
            kind = self.kind[p]
            if kind == DUE:
                self._due.setdefault(node, {})[p] = None
            elif kind == TIMER:
                self._timers.setdefault(node, []).append((at, p))
            else:
                self._fallbacks.setdefault(node, []).append((at, p))
        for heap in (*self._timers.values(), *self._fallbacks.values()):
            heapq.heapify(heap)

    def at(self, partition: int) -> float:
        """When the partition is read for work it is known to have (inf: only its fallback):
        a hint that would bring it earlier than this files it again."""
        if self.kind.get(partition) == FALLBACK:
            return math.inf
        return self.poll_at.get(partition, 0.0)

    def set(self, partition: int, at: float, now: float) -> None:
        """Read it at ``at`` (now, or a known time: a head due, a hint's share, a backoff)."""
        self._check()
        node = self.node_of(partition)
        self.poll_at[partition] = at
        if at <= now:
            self.kind[partition] = DUE
            self._due.setdefault(node, {})[partition] = None
            return
        if self.kind.get(partition) == DUE:
            self._due.get(node, {}).pop(partition, None)
        self.kind[partition] = TIMER
        heapq.heappush(self._timers.setdefault(node, []), (at, partition))

    def set_fallback(self, partition: int, at: float) -> None:
        """Nothing known to do: read it at ``at`` at the earliest, within the fallback rate."""
        self._check()
        node = self.node_of(partition)
        if self.kind.get(partition) == DUE:
            self._due.get(node, {}).pop(partition, None)
        self.poll_at[partition] = at
        self.kind[partition] = FALLBACK
        heapq.heappush(self._fallbacks.setdefault(node, []), (at, partition))

    # reading --------------------------------------------------------------------------------

    def _top(self, heap: list[tuple[float, int]], kind: int) -> tuple[float, int] | None:
        poll_at, kinds = self.poll_at, self.kind
        while heap:
            at, p = heap[0]
            if kinds.get(p) == kind and poll_at.get(p) == at:
                return heap[0]
            heapq.heappop(heap)  # stale: filed again since
        return None

    def _node_rate(self) -> float:
        return self.rate / max(1, self.primaries())

    def _tokens_now(self, node: str, now: float) -> float:
        rate = self._node_rate()
        burst = max(1.0, rate * self.burst_s)
        held, since = self._tokens.get(node, (burst, now))
        return min(burst, held + max(0.0, now - since) * rate)

    def due(self, node: str, now: float) -> dict[int, None]:
        """``node``'s partitions to read now: timers come due moved in, and fallbacks come
        due as far as the rate lets them (earliest first).  The dict stays theirs until each
        is filed again (a read's reply files it): do not change it."""
        self._check()
        due = self._due.setdefault(node, {})
        kinds = self.kind
        timers = self._timers.get(node)
        if timers:
            while (top := self._top(timers, TIMER)) is not None and top[0] <= now:
                heapq.heappop(timers)
                kinds[top[1]] = DUE
                due[top[1]] = None
        fallbacks = self._fallbacks.get(node)
        if fallbacks:
            top = self._top(fallbacks, FALLBACK)
            if top is not None and top[0] <= now:
                tokens = self._tokens_now(node, now)
                while tokens >= 1.0 and top is not None and top[0] <= now:
                    heapq.heappop(fallbacks)
                    kinds[top[1]] = DUE
                    due[top[1]] = None
                    tokens -= 1.0
                    self.fallback_reads += 1
                    top = self._top(fallbacks, FALLBACK)
                self._tokens[node] = (tokens, now)
        return due

    def next_at(self, node: str, now: float) -> float | None:
        """When ``node`` has a partition to read next (``now`` when one is due; None: none)."""
        self._check()
        if self._due.get(node):
            return now
        best: float | None = None
        timers = self._timers.get(node)
        if timers and (top := self._top(timers, TIMER)) is not None:
            best = top[0]
        fallbacks = self._fallbacks.get(node)
        if fallbacks and (top := self._top(fallbacks, FALLBACK)) is not None:
            at = top[0]
            tokens = self._tokens_now(node, now)
            if tokens < 1.0:  # the rate is spent: when the next read may go
                at = max(at, now + (1.0 - tokens) / self._node_rate())
            best = at if best is None else min(best, at)
        return best

    def filed(self, partition: int) -> int | None:
        return self.kind.get(partition)
