"""Prometheus metric objects: what the runtime, workers and dispatchers count and time.

Only the objects live here (no Redis, no store): :mod:`shardq.metrics.collector` renders the
per-partition figures it reads through the store.  These rules hold for both:

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
import platform
from collections.abc import Container, Iterator
from typing import Any

import redis
from prometheus_client import REGISTRY, Counter, Gauge, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

disable_created_metrics()  # type: ignore[no-untyped-call]

# The label a job type gets when no handler for it is registered on the worker: producers choose
# job types freely, so only registered ones (a set the worker's code bounds) become label values.
OTHER_TYPE = "other"

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
    "(dead-lettered), cancelled (cancelled while running), gone (reclaimed by another worker "
    "or cancelled before the settle), "
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
WORKER_FETCH_CALLS = Counter(
    "shardq_worker_fetch_calls_total",
    "Reads of a partition's ready jobs (fetch script calls) this worker made: per job "
    "completed, the cost of its reads.",
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
