"""Per-partition snapshots and the hot-shard figures, read from Redis through the store.

Per-partition figures (backlog, lag, pending, dead letters and the counters the scripts keep in
each partition's ``stats`` hash) are read by the dispatcher that owns the partition, so the
fleet shares the scraping work and each partition is exported once, by its current owner only:
a lease lost or released drops its series at once (:meth:`PartitionCollector.drop`), so
``sum()`` never counts a partition twice during a rollout.  The dispatcher that owns the
first partition (0, or the first of the oldest live generation after a resize) also samples
every partition's counters for the hot-shard figures.  A partition's ``partition`` label is
its name (:func:`keys.label_of_fleet_id`: ``5``, ``g1.5`` after a resize).
A scrape never touches Redis: the owning loop refreshes the snapshots in the background.
:func:`serve` starts the /metrics, /healthz and /readyz endpoint.  The metric objects and the
label rules are in :mod:`shardq.metrics.registry`.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from shardq.config import ProducerSettings
from shardq.logs import log_event
from shardq.store import keys
from shardq.store.inspection import PartitionSnapshot, partition_stats
from shardq.store.transport import SyncTransport

log = logging.getLogger("shardq.metrics")

# The counters the scripts keep in each partition's stats hash, exported as shardq_jobs_<name>.
COUNTERS = (
    "enqueued",
    "promoted",
    "completed",
    "failed",
    "retried",
    "dead",
    "cancelled",
    "reclaimed",
    "malformed",
    "deferred",
    "results",
    "debounced",
)
#: What a counter counts, where "Jobs <name>" would not say it.
COUNTER_DOCS = {
    "results": "Results kept (jobs that ended with keep_result), counted by the scripts in Redis.",
    "debounced": "Enqueues that replaced a waiting job's payload and due time (debounce=), "
    "counted by the scripts in Redis.",
}


def serve(port: int, addr: str = "127.0.0.1") -> None:
    """Serve /metrics, /healthz and /readyz on ``addr:port`` from a background thread."""
    from shardq.runtime.health import serve as serve_http

    serve_http(port, addr)


def node_of(redis: Any, pk: keys.PartitionKeys) -> str:
    """The host:port serving a partition (``standalone`` when not a cluster)."""
    return SyncTransport(redis).node_name(pk.due)


def snapshot_sync(redis: Any, pks: list[keys.PartitionKeys]) -> list[PartitionSnapshot]:
    """Snapshots of partitions with a sync client (one pipelined round trip per node)."""
    transport = SyncTransport(redis)
    ops = [partition_stats(pk, transport.node_name(pk.due)) for pk in pks]
    out = []
    for result in transport.run_many(ops):
        if isinstance(result, BaseException):
            raise result
        out.append(result)
    return out


@dataclass(frozen=True, slots=True)
class HotShardReport:
    """Where the load goes, over a sliding window."""

    window_seconds: float
    partition_rates: dict[int, float]  # enqueued + promoted jobs/s per partition
    node_rates: dict[str, float]
    hot_partition_ratio: float  # busiest partition over the mean
    hot_node_ratio: float

    @property
    def total_rate(self) -> float:
        return sum(self.partition_rates.values())

    def node_share(self) -> dict[str, float]:
        total = self.total_rate
        return {n: (r / total if total else 0.0) for n, r in self.node_rates.items()}

    def hottest(self, n: int = 5) -> list[tuple[int, float]]:
        return sorted(self.partition_rates.items(), key=lambda kv: -kv[1])[:n]


class RateWindow:
    """Keeps recent counter samples per partition and turns them into rates."""

    def __init__(self, window_seconds: float = 60.0) -> None:
        self.window = window_seconds
        self._samples: deque[tuple[float, dict[int, int], dict[int, str]]] = deque()

    def add(self, snapshots: list[PartitionSnapshot], at: float | None = None) -> None:
        """Add one sample taken ``at`` (monotonic seconds; now by default: pass the time the
        snapshots were taken when they are added later)."""
        now = time.monotonic() if at is None else at
        load = {
            s.partition: s.counters.get("enqueued", 0) + s.counters.get("promoted", 0)
            for s in snapshots
        }
        self._samples.append((now, load, {s.partition: s.node for s in snapshots}))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window:
            self._samples.popleft()

    def report(self) -> HotShardReport | None:
        if len(self._samples) < 2:
            return None
        (t0, first, _), (t1, last, nodes) = self._samples[0], self._samples[-1]
        span = max(t1 - t0, 1e-9)
        rates = {p: max(0, last[p] - first.get(p, 0)) / span for p in last}
        node_rates: dict[str, float] = {}
        for p, rate in rates.items():
            node_rates[nodes[p]] = node_rates.get(nodes[p], 0.0) + rate
        return HotShardReport(
            span, rates, node_rates, _ratio(rates.values()), _ratio(node_rates.values())
        )


def _ratio(values: Iterable[float]) -> float:
    items = list(values)
    mean = sum(items) / len(items) if items else 0.0
    return max(items) / mean if mean > 0 else 0.0


class PartitionCollector(Collector):
    """Renders the latest snapshots of the partitions this process owns, at scrape time.

    Scrapes never touch Redis: the owning loop refreshes the snapshots in the background.
    """

    def __init__(self) -> None:
        # Keyed by fleet id (keys.fleet_id), as leases are: unique across the generations a
        # resize keeps live together.
        self.snapshots: dict[tuple[str, int], PartitionSnapshot] = {}
        self.hot: dict[str, HotShardReport] = {}
        #: The partition whose owner computes each queue's hot-shard figures (its first).
        self.hot_from: dict[str, int] = {}

    def update(self, queue: str, snapshots: list[PartitionSnapshot], owned: set[int]) -> None:
        """Export ``snapshots`` of the partitions ``owned`` (fleet ids), and no other."""
        for key in [k for k in self.snapshots if k[0] == queue and k[1] not in owned]:
            del self.snapshots[key]
        for s in snapshots:
            if s.partition in owned:
                self.snapshots[(queue, s.partition)] = s

    def put(self, queue: str, snapshots: list[PartitionSnapshot], owned: Container[int]) -> None:
        """Export these fresh ``snapshots`` of partitions ``owned`` (fleet ids); the others'
        last snapshots stand (a partition whose lease goes is dropped then: :meth:`drop`)."""
        for s in snapshots:
            if s.partition in owned:
                self.snapshots[(queue, s.partition)] = s

    def drop(self, queue: str, partitions: Iterable[int]) -> None:
        """Stop exporting partitions whose lease this process just lost or gave back: their
        new owner exports them from now on, and a sum over the fleet must not count them twice
        until the next sample here."""
        gone = set(partitions)
        for p in gone:
            self.snapshots.pop((queue, p), None)
        if self.hot_from.get(queue) in gone:
            # The hot-shard figures come from the first partition's owner.
            self.hot.pop(queue, None)

    def forget(self, queue: str) -> None:
        for key in [k for k in self.snapshots if k[0] == queue]:
            del self.snapshots[key]
        self.hot.pop(queue, None)

    def collect(self) -> Iterator[Any]:
        labels = ["queue", "partition", "node"]
        gauges: dict[str, tuple[str, Callable[[PartitionSnapshot], float]]] = {
            "due_jobs": (
                "Jobs waiting in the due set: scheduled and retrying (backlog).",
                lambda s: s.due,
            ),
            "overdue_jobs": ("Jobs past their due time, not yet promoted.", lambda s: s.overdue),
            "promotion_lag_seconds": ("Age of the oldest overdue job.", lambda s: s.lag_seconds),
            "ready_entries": (
                "Ready entries not yet delivered to a worker: ready jobs.",
                lambda s: s.ready,
            ),
            "pending_deliveries": (
                "Deliveries held by workers, not yet acked: running jobs.",
                lambda s: s.pending,
            ),
            "oldest_pending_seconds": (
                "Idle time of the oldest pending delivery.",
                lambda s: s.oldest_pending_seconds,
            ),
            "dead_letters": ("Entries in the dead-letter stream: dead jobs.", lambda s: s.dead),
            "paused": (
                "1 while the partition is paused (shardq queue pause), else 0.",
                lambda s: float(s.paused),
            ),
        }
        snaps = list(self.snapshots.values())
        # The partition label is the name every surface uses ('5', 'g1.5' after a resize): one
        # series per live partition, as before a resize.
        names = {s.partition: keys.label_of_fleet_id(s.partition) for s in snaps}
        for name, (doc, get) in gauges.items():
            family = GaugeMetricFamily(f"shardq_partition_{name}", doc, labels=labels)
            for s in snaps:
                family.add_metric([s.queue, names[s.partition], s.node], float(get(s)))
            yield family
        for counter in COUNTERS:
            counts = CounterMetricFamily(
                f"shardq_jobs_{counter}",
                COUNTER_DOCS.get(counter, f"Jobs {counter}, counted by the scripts in Redis."),
                labels=["queue", "partition"],
            )
            for s in snaps:
                if "counter " + counter in s.malformed:
                    continue  # unreadable (not 0: a counter going to 0 would read as a reset)
                counts.add_metric([s.queue, names[s.partition]], float(s.counters.get(counter, 0)))
            yield counts
        ratio = GaugeMetricFamily(
            "shardq_hot_partition_ratio",
            "Busiest partition's enqueue+promote rate over the mean, over the window.",
            labels=["queue"],
        )
        node_ratio = GaugeMetricFamily(
            "shardq_hot_node_ratio", "Busiest primary's rate over the mean.", labels=["queue"]
        )
        share = GaugeMetricFamily(
            "shardq_node_load_share_ratio",
            "Share of the queue's enqueue+promote rate on each primary (0-1).",
            labels=["queue", "node"],
        )
        for queue, report in self.hot.items():
            ratio.add_metric([queue], report.hot_partition_ratio)
            node_ratio.add_metric([queue], report.hot_node_ratio)
            for node, value in report.node_share().items():
                share.add_metric([queue, node], value)
        yield ratio
        yield node_ratio
        yield share


PARTITIONS = PartitionCollector()
REGISTRY.register(PARTITIONS)


#: The jobs of one sticky run (the producers' default), the unit a partition's count moves by.
RUN = ProducerSettings().sticky_jobs


class HotShardWatch:
    """Logs a warning when a partition runs hotter than ``multiple`` x the mean (rate-limited)."""

    def __init__(self, queue: str, multiple: float = 3.0, every: float = 60.0) -> None:
        self.queue = queue
        self.multiple = multiple
        self.every = every
        self.window = RateWindow()
        self._last_warned: dict[int, float] = {}

    def observe(
        self, snapshots: list[PartitionSnapshot], at: float | None = None
    ) -> HotShardReport | None:
        """Add a sample (taken ``at``, monotonic seconds: now by default), warn about the hot
        partitions, and return the window's report (None until it has two samples)."""
        self.window.add(snapshots, at)
        report = self.window.report()
        if report is None:
            return None
        PARTITIONS.hot[self.queue] = report
        rates = report.partition_rates
        mean = report.total_rate / len(rates) if rates else 0.0
        now = time.monotonic()
        # Producers send jobs due together to one partition, up to a run of
        # ProducerSettings.sticky_jobs (shardq.store.sticky), so a partition's count over the
        # window moves by whole runs: a queue fed in bursts at tens of jobs/s reads 3-7x the
        # mean on some partition by chance alone.  A hot partition must be above the mean by
        # more than five standard deviations of that chance: its load (enqueued + promoted)
        # moves by up to 2 x RUN a run.
        noise = 5.0 * math.sqrt(mean * report.window_seconds * 2 * RUN)
        for p, rate in rates.items():
            hot = (
                mean > 0
                and rate > self.multiple * mean
                and rate > 1.0
                and (rate - mean) * report.window_seconds > noise
            )
            if hot and now - self._last_warned.get(p, -1e9) >= self.every:
                self._last_warned[p] = now
                log_event(
                    log,
                    "partition.hot",
                    queue=self.queue,
                    partition=keys.label_of_fleet_id(p),
                    rate_per_s=round(rate, 1),
                    mean_per_s=round(mean, 1),
                    ratio=round(rate / mean, 2),
                )
        return report
