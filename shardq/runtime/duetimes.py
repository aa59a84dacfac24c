"""When each partition is next due, per primary, with the due ones found in O(log n).

A promote or schedule loop serves the held partitions of one primary: up to 16,384 /
primaries of them.  Scanning them all each round (which partitions are due? when is the
next one?) cost more than the calls themselves past a few thousand partitions, and each
round carries few jobs then, so rounds are many.  :class:`DueTimes` keeps a heap per primary
of ``(time, partition)`` with lazy deletion: setting a partition's time pushes an entry, and
an entry whose time is no longer the partition's is dropped when it reaches the top.

A partition :meth:`~DueTimes.take` hands out leaves its heap until its time is set again (the
caller sets it once the call answers, on every path).  A loop that failed between taking and
setting calls :meth:`~DueTimes.rebuild` when it starts again, so no partition is forgotten.

The worker's fetch loop still scans: with these heaps it drained a 200,000-job backlog 18-25 %
slower (bench.baselines.drain, 3 rounds against the scanning fetcher), not yet understood.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable


class DueTimes:
    """Partition -> next due time (monotonic seconds), grouped by the primary serving it."""

    __slots__ = ("_at", "_heaps", "_live", "_node_of", "_pushed", "_seq")

    def __init__(self, node_of: Callable[[int], str], partitions: Iterable[int] = ()) -> None:
        """``node_of(partition)``: the primary serving it now; ``partitions`` start due."""
        self._node_of = node_of
        self._at: dict[int, float] = dict.fromkeys(partitions, 0.0)
        # Each heap entry is (time, seq, partition); the one valid entry of a partition is the
        # one whose seq is its _live seq (none while it is taken).
        self._live: dict[int, int] = {}
        self._heaps: dict[str, list[tuple[float, int, int]]] = {}
        self._pushed = 0
        self._seq = 0
        self.rebuild()

    def __contains__(self, partition: object) -> bool:
        return partition in self._at

    def __len__(self) -> int:
        return len(self._at)

    def get(self, partition: int, default: float = 0.0) -> float:
        return self._at.get(partition, default)

    def set(self, partition: int, at: float) -> None:
        """Due at ``at`` (replacing its time, earlier or later)."""
        self._seq += 1
        self._at[partition] = at
        self._live[partition] = self._seq
        heap = self._heaps.setdefault(self._node_of(partition), [])
        heapq.heappush(heap, (at, self._seq, partition))
        self._pushed += 1
        if self._pushed > 2 * len(self._at) + 1024:
            self.rebuild()  # mostly stale entries (times set over and over): start afresh

    def discard(self, partition: int) -> None:
        """No longer served (a lease lost, a partition given up): never handed out again."""
        self._at.pop(partition, None)
        self._live.pop(partition, None)

    def rebuild(self) -> None:
        """Heaps made again from the times, taken partitions included: after a topology change
        (partitions moved between primaries) or a loop that failed while it held some."""
        heaps: dict[str, list[tuple[float, int, int]]] = {}
        node_of = self._node_of
        live: dict[int, int] = {}
        for p, at in self._at.items():
            self._seq += 1
            live[p] = self._seq
            heaps.setdefault(node_of(p), []).append((at, self._seq, p))
        for heap in heaps.values():
            heapq.heapify(heap)
        self._heaps, self._live = heaps, live
        self._pushed = len(self._at)

    def _top(self, node: str) -> tuple[float, int, int] | None:
        heap = self._heaps.get(node)
        if not heap:
            return None
        live = self._live
        node_of = self._node_of
        while heap:
            entry = heap[0]
            p = entry[2]
            if live.get(p) != entry[1]:
                heapq.heappop(heap)  # stale: set again since, taken, or discarded
            elif node_of(p) != node:
                heapq.heappop(heap)  # moved to another primary: file it there
                heapq.heappush(self._heaps.setdefault(node_of(p), []), entry)
            else:
                return entry
        return None

    def earliest(self, node: str) -> float | None:
        """The earliest due time of ``node``'s partitions not taken (None: it has none)."""
        top = self._top(node)
        return None if top is None else top[0]

    def take(self, node: str, now: float, limit: int) -> list[int]:
        """Up to ``limit`` of ``node``'s partitions due by ``now``, earliest first; each keeps
        its (past) time but is not handed out again until :meth:`set` gives it a new one (or
        :meth:`put_back` returns it unused)."""
        out: list[int] = []
        while len(out) < limit:
            top = self._top(node)
            if top is None or top[0] > now:
                break
            heapq.heappop(self._heaps[node])
            del self._live[top[2]]
            out.append(top[2])
        return out

    def put_back(self, partitions: Iterable[int]) -> None:
        """Taken partitions not used this round: due again at their time."""
        for p in partitions:
            at = self._at.get(p)
            if at is not None:
                self.set(p, at)
