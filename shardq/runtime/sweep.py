"""A safety-net sweep over a process's partitions at a bounded rate.

A loop that looks at its partitions only in case an event was missed (the worker's reclaim
probe, its janitor) looks at a rotating slice of them each round, so its calls per second stay
under a fixed rate whatever the partitions: a whole cycle over ``n`` partitions takes
``max(interval, n / rate)``.  The cursor is the last partition looked at, not an index, so a
change of the set (a member joined or left) goes on from where the sweep was.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence


class Sweep:
    """Rotating slices of a sorted list of partitions, at most ``rate`` a second when one is
    taken every ``interval`` seconds."""

    __slots__ = ("last", "size")

    def __init__(self, rate: float, interval: float) -> None:
        #: Partitions one slice holds at most (at least one).
        self.size = max(1, math.floor(rate * interval))
        self.last: int | None = None

    def cycle(self, count: int, interval: float) -> float:
        """Seconds a whole cycle over ``count`` partitions takes, one slice every ``interval``."""
        return interval * max(1, math.ceil(count / self.size))

    def take(self, partitions: Sequence[int]) -> list[int]:
        """The next slice of ``partitions`` (sorted, ascending), after the last one taken."""
        if not partitions:
            return []
        if len(partitions) <= self.size:
            self.last = partitions[-1]
            return list(partitions)
        start = 0 if self.last is None else bisect.bisect_right(partitions, self.last)
        out = list(partitions[start : start + self.size])
        if len(out) < self.size:
            out += partitions[: self.size - len(out)]
        self.last = out[-1]
        return out
