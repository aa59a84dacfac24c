"""The lateness budget: how long a promote or a fetch may wait so that its call carries more jobs.

A call's Redis cost is mostly fixed: a promote of one job and one of a hundred differ by a few
microseconds per job (docs/benchmarks.md, "Cost per stage"), and at the rates most queues see
each partition has a job due every few milliseconds at best, so calls made the moment a job is
due carry about one job each.  ``lateness_budget`` (seconds, DispatcherSettings and
WorkerSettings, one value for both: ``--lateness-budget 20ms`` or SHARDQ_LATENESS_BUDGET) is how
much lateness the user grants the processes to spend on fewer, fuller calls; Redis and network
time come on top.

Workers go first.  Half of it, the worker's share, goes to reads: a ready hint schedules a read
that much later instead of at once, an assigned partition is read that long after its head job
is due, and a read promotes its partition's due jobs itself (lua/fetch-9.lua), taking every
hinted partition of its primary due within the window, so one fetch round takes what several
enqueues made due.  The dispatcher's promote is the backstop for what no worker read
(shardq/dispatcher/promoter.py): it promotes a partition once its head is a whole budget late,
later while its calls find the jobs already taken (up to ``MAX_YIELD``, 1 s), and then every
partition of the primary due within its share, so one round takes what all of them collected.
Partitions with lanes on (their jobs go through the lane, which reads do not fill) are promoted at
the dispatcher's share, the other half, or sooner when the partition's due rate fills a call
(:data:`ENOUGH_PER_CALL` jobs: at high rates calls fill up and wait less).  A budget of 0 keeps
every wait sized for punctuality (promote when due, read on each hint).
"""

from __future__ import annotations

#: The dispatcher's share of the budget (lanes-on partitions; the worker has the rest):
#: measured, see bench/reference/lateness-budget-record.md.
DISPATCHER_SHARE = 0.5
#: A call carrying this many jobs pays under ~1.5 us of fixed cost per job (a promote call's
#: fixed part is ~40 us, its per-job part ~5-9 us): waiting to fill it further buys little, so a
#: partition whose rate fills this many sooner than the budget waits only that long.
ENOUGH_PER_CALL = 32
#: Weight of the newest observation in the per-partition rate estimate (an EWMA).
RATE_WEIGHT = 0.3


def dispatcher_share(budget: float) -> float:
    """How late the dispatcher promotes a due job of a partition with lanes on, of a lateness
    budget (a partition without lanes: after the whole budget, shardq/dispatcher/promoter.py)."""
    return budget * DISPATCHER_SHARE


def worker_share(budget: float) -> float:
    """How long after a ready hint, or after its head job is due, the worker may read a
    partition, of a lateness budget."""
    return budget - dispatcher_share(budget)


class DueRates:
    """Each partition's due rate (jobs/s), estimated from what its promotes carried over the
    time between them, and the slack it gets from a share of the budget."""

    __slots__ = ("_last", "_rate")

    def __init__(self) -> None:
        self._rate: dict[int, float] = {}
        self._last: dict[int, float] = {}

    def observe(self, partition: int, moved: int, now: float) -> None:
        """A promote of ``partition`` moved ``moved`` jobs at ``now`` (monotonic seconds)."""
        last = self._last.get(partition)
        self._last[partition] = now
        if last is None or now <= last:
            return
        sample = moved / (now - last)
        old = self._rate.get(partition)
        self._rate[partition] = sample if old is None else old + RATE_WEIGHT * (sample - old)

    def rate(self, partition: int) -> float:
        return self._rate.get(partition, 0.0)

    def slack(self, partition: int, share: float) -> float:
        """How long after its head is due ``partition`` may wait: ``share``, or the time its
        rate takes to fill :data:`ENOUGH_PER_CALL` jobs when that is shorter."""
        if share <= 0.0:
            return 0.0
        rate = self._rate.get(partition, 0.0)
        if rate <= 0.0:
            return share
        return min(share, ENOUGH_PER_CALL / rate)

    def forget(self, partition: int) -> None:
        """Not served any more (a lease lost or released)."""
        self._rate.pop(partition, None)
        self._last.pop(partition, None)
