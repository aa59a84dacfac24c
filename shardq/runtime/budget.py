"""The lateness budget: how long a promote or a fetch may wait so that its call carries more jobs.

A call's Redis cost is mostly fixed: a promote of one job and one of a hundred differ by a few
microseconds per job (docs/benchmarks.md, "Cost per stage"), and at the rates most queues see
each partition has a job due every few milliseconds at best, so calls made the moment a job is
due carry about one job each.  ``lateness_budget`` (seconds, DispatcherSettings and
WorkerSettings, one value for both: ``--lateness-budget 20ms`` or SHARDQ_LATENESS_BUDGET) is how
much lateness the user grants the processes to spend on fewer, fuller calls; Redis and network
time come on top.

The worker goes first.  The worker a partition is assigned to reads it when its head job is
due plus the worker's share, half of the budget (:func:`worker_share`), and that read promotes
the partition's due jobs itself in the same call (lua/fetch-9.lua); a ready hint likewise
schedules a read a share later instead of at once, and a read round that runs takes every
hinted partition of its primary due within the share, so one call carries what came due in
the window.  Acks of finished jobs ride with the next read of their partition.  So in steady
state a job costs one call (shardq/worker/fetcher.py).

The dispatcher backs the workers up: it promotes a partition only once its head job is the
whole budget late, and waits longer still while its calls find that a worker took the jobs
(up to a second more; shardq/dispatcher/promoter.py), so it moves what no worker read in
time: backlogs, partitions of busy or dead workers.  Partitions with lanes on are the
exception (their jobs go through the lane, which reads do not fill): the dispatcher promotes
them at its share, half of the budget (:func:`dispatcher_share`), or sooner when the
partition's due rate fills a call (:data:`ENOUGH_PER_CALL` jobs) first.  Whenever one of a
primary's partitions reaches its deadline, the dispatcher promotes *every* partition of that
primary with a job due, so one round takes what all of them collected.  A budget of 0 keeps
every wait sized for punctuality (read and promote when due, read on each hint).
"""

from __future__ import annotations

#: The split of the budget: the worker's read waits up to the rest after a head is due; the
#: dispatcher promotes partitions with lanes on within this part (others after the whole
#: budget).  Measured: docs/design/lateness-budget.md.
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
