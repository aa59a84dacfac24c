"""Prometheus metrics and per-partition snapshots.

Per-partition figures (backlog, lag, pending, dead letters and the counters the scripts keep in
each partition's ``stats`` hash) are read by the dispatcher that owns the partition, so the
fleet shares the scraping work and each partition is exported once, by its current owner only:
a lease lost or released drops its series at once (:meth:`PartitionCollector.drop`), so
``sum()`` never counts a partition twice during a rollout.  The dispatcher that owns
partition 0 also samples every partition's counters for the hot-shard figures.

Every label value comes from a bounded set: queue names, partition numbers, primaries, outcome
and event names from this code, exception class names, and job types that have a handler
registered on the worker (any other type a producer sends is counted as ``other``).  Never a job
id, and no per-process id: Prometheus' ``instance`` label already tells processes apart, and an
id that changes on every restart would start new series each time.

Names are ``shardq_*`` in base units (seconds), counters end in ``_total``, fractions in
``_ratio``.  prometheus-client's ``*_created`` series are turned off: they double the series
count and no query here uses them.
"""

from __future__ import annotations

import bisect
import importlib.metadata
import logging
import platform
import time
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import redis
from prometheus_client import REGISTRY, Counter, Gauge, disable_created_metrics
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

from shardq.logs import log_event
from shardq.store import keys, transport
from shardq.store.inspect import PartitionSnapshot, partition_stats

log = logging.getLogger("shardq.metrics")

disable_created_metrics()  # type: ignore[no-untyped-call]

# The label a job type gets when no handler for it is registered on the worker: producers choose
# job types freely, so only registered ones (a set the worker's code bounds) become label values.
OTHER_TYPE = "other"

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
)
LATENESS_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)


# worker ----------------------------------------------------------------------------------------
class LocalHistogram:
    """One histogram series counted with plain ints: ``observe`` is a bisect and two adds.

    prometheus-client's Histogram takes a lock and updates every bucket per observation, about
    2 us; a worker observes two per job at tens of thousands of jobs per second.  Observations
    happen on the worker's event loop thread only; scrapes read the counts from another thread,
    which at worst sees one observation half-applied.
    """

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value


class HistogramFamily(Collector):
    """A histogram metric whose series are LocalHistograms, rendered at scrape time."""

    def __init__(self, name: str, doc: str, labels: list[str], buckets: tuple[float, ...]) -> None:
        self.name, self.doc, self.label_names, self.buckets = name, doc, labels, buckets
        self.series: dict[tuple[str, ...], LocalHistogram] = {}
        REGISTRY.register(self)

    def labels(self, *values: str) -> LocalHistogram:
        series = self.series.get(values)
        if series is None:
            series = self.series[values] = LocalHistogram(self.buckets)
        return series

    def collect(self) -> Iterator[Any]:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.label_names)
        for values, h in list(self.series.items()):
            counts = list(h.counts)
            cumulative, buckets = 0, []
            for bound, n in zip((*self.buckets, float("inf")), counts, strict=True):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            family.add_metric(list(values), buckets, h.total)
        yield family


class CounterFamily(Collector):
    """A counter metric kept in a plain dict of ints, rendered at scrape time.

    Like :class:`LocalHistogram`, for counts bumped per job on the event loop thread: an add to
    a dict entry instead of prometheus-client's lock per increment.
    """

    def __init__(self, name: str, doc: str, labels: list[str]) -> None:
        self.name, self.doc, self.label_names = name, doc, labels
        self.values: dict[tuple[str, ...], float] = {}
        REGISTRY.register(self)

    def inc(self, values: tuple[str, ...], amount: float = 1) -> None:
        self.values[values] = self.values.get(values, 0) + amount

    def collect(self) -> Iterator[Any]:
        family = CounterMetricFamily(self.name, self.doc, labels=self.label_names)
        for values, total in list(self.values.items()):
            family.add_metric(list(values), total)
        yield family


def job_type_label(job_type: str, registered: Container[str]) -> str:
    """The ``job_type`` label of a job: its type if a handler is registered, else ``other``."""
    return job_type if job_type in registered else OTHER_TYPE


JOB_LATENESS = HistogramFamily(
    "shardq_job_lateness_seconds",
    "Handler start minus due time, on the Redis clock.",
    ["queue"],
    LATENESS_BUCKETS,
)
JOB_DURATION = HistogramFamily(
    "shardq_job_duration_seconds",
    "Handler run time, by job type (a type with no handler registered counts as 'other').",
    ["queue", "job_type"],
    (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0),
)
OUTCOMES = ("completed", "retried", "dead", "gone", "abandoned")
WORKER_JOBS = CounterFamily(
    "shardq_worker_jobs",
    "Jobs this worker settled, by job type ('other': no handler registered) and outcome: "
    "completed (acked), retried (back to due with backoff, RetryAfter included), dead "
    "(dead-lettered), gone (reclaimed by another worker or cancelled before the settle), "
    "abandoned (the outcome could not be written; the job runs again after reclaim).",
    ["queue", "job_type", "outcome"],
)
WORKER_RECLAIMED = Counter(
    "shardq_worker_reclaimed_total", "Deliveries taken over from dead workers.", ["queue"]
)
WORKER_LOST = Counter(
    "shardq_worker_lost_deliveries_total",
    "Running deliveries another worker reclaimed (this worker was paused too long).",
    ["queue"],
)
WORKER_INFLIGHT = Gauge(
    "shardq_worker_inflight_jobs",
    "Deliveries this worker holds now (running, or finished and not yet settled).",
    ["queue"],
)

# dispatcher ------------------------------------------------------------------------------------
# No dispatcher id label: one process's series are told apart by Prometheus' ``instance``.
LEASES_HELD = Gauge(
    "shardq_dispatcher_leases_held", "Partitions this process's dispatchers own.", ["queue"]
)
LEASE_EVENTS = Counter(
    "shardq_dispatcher_lease_events_total",
    "Lease changes: acquired, lost, released, takeover (acquired after a peer's lease "
    "expired), fenced (a write rejected for a stale token), <call>_failed.",
    ["queue", "event"],
)
PROMOTED = Counter("shardq_dispatcher_promoted_total", "Jobs this process promoted.", ["queue"])
PROMOTE_CALLS = Counter("shardq_dispatcher_promote_calls_total", "Promote script calls.", ["queue"])
SCRIPT_ERRORS = Counter(
    "shardq_script_errors_total",
    "Script calls that failed, by script (promote, fetch, ack, fail, reclaim, trim, "
    "lease-acquire, lease-renew) and error class.",
    ["queue", "script", "error"],
)

JOBS_DEFERRED = Counter(
    "shardq_worker_deferred_total",
    "Fetched jobs a rate limit held back (put back in due until the limit's next free start, "
    "no attempt used), by limit (type:<job type> or key:<limit key>).",
    ["queue", "limit"],
)

MALFORMED = Counter(
    "shardq_malformed_records_total",
    "Records read from Redis that could not be parsed and were skipped or dead-lettered, by "
    "kind (job: a stored job a worker cannot read, dead-lettered; owner: a bad field of the "
    "advisory owners hash, skipped; stats: a partition counter or figure that is not a number "
    "in range, left out, counted per sample). Ready entries the scripts dead-letter count in "
    "the partition's 'malformed' counter.",
    ["queue", "kind"],
)

LOOP_ERRORS = Counter(
    "shardq_loop_errors_total",
    "Errors of a background loop (retried with backoff), by process role and loop.",
    ["role", "loop"],
)

BUILD_INFO = Gauge(
    "shardq_build_info",
    "Always 1; the labels say which shardq, Python and redis-py this process runs.",
    ["version", "python", "redis_py"],
)


def _shardq_version() -> str:
    # From the installed distribution: shardq/__init__.py imports this module before it sets
    # __version__, and the two are the same number (pyproject.toml).
    try:
        return importlib.metadata.version("shardq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


BUILD_INFO.labels(_shardq_version(), platform.python_version(), redis.__version__).set(1)


def serve(port: int, addr: str = "127.0.0.1") -> None:
    """Serve /metrics, /healthz and /readyz on ``addr:port`` from a background thread."""
    from shardq.runtime.health import serve as serve_http

    serve_http(port, addr)


def node_of(redis: Any, pk: keys.PartitionKeys) -> str:
    """The host:port serving a partition (``standalone`` when not a cluster)."""
    manager = getattr(redis, "nodes_manager", None)
    if manager is None:
        return "standalone"
    return str(manager.get_node_from_slot(keys.slot_of(pk.due)).name)


def snapshot_sync(redis: Any, pks: list[keys.PartitionKeys]) -> list[PartitionSnapshot]:
    """Snapshots of partitions with a sync client (one pipelined round trip per node)."""
    ops = [partition_stats(pk, node_of(redis, pk)) for pk in pks]
    out = []
    for result in transport.run_many(redis, ops):
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

    def add(self, snapshots: list[PartitionSnapshot]) -> None:
        now = time.monotonic()
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
        self.snapshots: dict[tuple[str, int], PartitionSnapshot] = {}
        self.hot: dict[str, HotShardReport] = {}

    def update(self, queue: str, snapshots: list[PartitionSnapshot], owned: set[int]) -> None:
        for key in [k for k in self.snapshots if k[0] == queue and k[1] not in owned]:
            del self.snapshots[key]
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
        if 0 in gone:
            # The hot-shard figures come from partition 0's owner.
            self.hot.pop(queue, None)

    def forget(self, queue: str) -> None:
        for key in [k for k in self.snapshots if k[0] == queue]:
            del self.snapshots[key]
        self.hot.pop(queue, None)

    def collect(self) -> Iterator[Any]:
        labels = ["queue", "partition", "node"]
        gauges: dict[str, tuple[str, Callable[[PartitionSnapshot], float]]] = {
            "due_jobs": ("Jobs waiting in the due set (backlog).", lambda s: s.due),
            "overdue_jobs": ("Jobs past their due time, not yet promoted.", lambda s: s.overdue),
            "promotion_lag_seconds": ("Age of the oldest overdue job.", lambda s: s.lag_seconds),
            "ready_entries": ("Ready entries not yet delivered to a worker.", lambda s: s.ready),
            "pending_deliveries": (
                "Deliveries held by workers, not yet acked.",
                lambda s: s.pending,
            ),
            "oldest_pending_seconds": (
                "Idle time of the oldest pending delivery.",
                lambda s: s.oldest_pending_seconds,
            ),
            "dead_letters": ("Entries in the dead-letter stream.", lambda s: s.dead),
            "paused": (
                "1 while the partition is paused (shardq queue pause), else 0.",
                lambda s: float(s.paused),
            ),
        }
        snaps = list(self.snapshots.values())
        for name, (doc, get) in gauges.items():
            family = GaugeMetricFamily(f"shardq_partition_{name}", doc, labels=labels)
            for s in snaps:
                family.add_metric([s.queue, str(s.partition), s.node], float(get(s)))
            yield family
        for counter in COUNTERS:
            counts = CounterMetricFamily(
                f"shardq_jobs_{counter}",
                f"Jobs {counter}, counted by the scripts in Redis.",
                labels=["queue", "partition"],
            )
            for s in snaps:
                if "counter " + counter in s.malformed:
                    continue  # unreadable (not 0: a counter going to 0 would read as a reset)
                counts.add_metric([s.queue, str(s.partition)], float(s.counters.get(counter, 0)))
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


class HotShardWatch:
    """Logs a warning when a partition runs hotter than ``multiple`` x the mean (rate-limited)."""

    def __init__(self, queue: str, multiple: float = 3.0, every: float = 60.0) -> None:
        self.queue = queue
        self.multiple = multiple
        self.every = every
        self.window = RateWindow()
        self._last_warned: dict[int, float] = {}

    def observe(self, snapshots: list[PartitionSnapshot]) -> HotShardReport | None:
        self.window.add(snapshots)
        report = self.window.report()
        if report is None:
            return None
        PARTITIONS.hot[self.queue] = report
        rates = report.partition_rates
        mean = report.total_rate / len(rates) if rates else 0.0
        now = time.monotonic()
        for p, rate in rates.items():
            hot = mean > 0 and rate > self.multiple * mean and rate > 1.0
            if hot and now - self._last_warned.get(p, -1e9) >= self.every:
                self._last_warned[p] = now
                log_event(
                    log,
                    "partition.hot",
                    queue=self.queue,
                    partition=p,
                    rate_per_s=round(rate, 1),
                    mean_per_s=round(mean, 1),
                    ratio=round(rate / mean, 2),
                )
        return report
