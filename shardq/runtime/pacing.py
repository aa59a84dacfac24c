"""Safety-net looks at a bounded rate per process, whatever the number of partitions.

A loop that serves partitions acts on signals: a hint, a known due time, a promote that moved
jobs, a won lease.  Its periodic look at a partition with no signal only covers one that was
lost (a hint published while no subscription was in place and not covered by the wake-up
every partition gets after a (re)subscription; a change this process cannot see, such as an
operator's purge).  Paced per partition (one look every 30 s), those looks cost an idle
process P / 30 s calls, the largest part of an idle fleet's cost at large P.

:class:`SafetyNet` gives each partition its next look on a cycle of ``period = max(shortest,
held / rate)`` seconds, at the partition's own phase in it (its id times the golden ratio,
modulo 1: held partitions spread evenly over the cycle whatever ids they are): a process's
safety-net looks come at most ``rate`` a second on average and evenly, not in bursts, and each
partition is looked at within ``1.5 * period`` of its last look (its next phase at least half a
period on).  Signals still act at once; only the looks without one are paced.
"""

from __future__ import annotations

import math
from collections.abc import Callable

#: Fractional part of the golden ratio: k * GOLDEN modulo 1 spreads any run of ids evenly.
GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


class SafetyNet:
    """Next safety-net look of each partition: at most ``rate`` a second for the process."""

    __slots__ = ("held", "rate", "shortest")

    def __init__(self, rate: float, shortest: float, held: Callable[[], int]) -> None:
        """``held()``: how many partitions the loop serves now (the cycle grows with it);
        ``shortest``: the least period (a small process looks as often as it always did)."""
        if rate <= 0.0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.shortest = shortest
        self.held = held

    def period(self) -> float:
        """Seconds between two safety-net looks at one partition."""
        return max(self.shortest, self.held() / self.rate)

    def next_look(self, partition: int, now: float) -> float:
        """When (monotonic seconds) ``partition``, looked at ``now``, is looked at again if no
        signal comes first: its phase of the cycle, at least half a period after ``now``."""
        period = self.period()
        phase = (partition * GOLDEN) % 1.0 * period
        start = now + period / 2.0
        return phase + math.ceil((start - phase) / period) * period

    def rounds_ahead(self, partition: int, now: float, interval: float) -> int:
        """:meth:`next_look` in rounds of a loop that runs every ``interval`` seconds (1 at
        least): for loops that count rounds rather than read the clock."""
        return max(1, math.ceil((self.next_look(partition, now) - now) / interval))
