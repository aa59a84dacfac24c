"""Prometheus metrics: the metric objects (:mod:`shardq.metrics.registry`) and the
per-partition collector that reads Redis through the store (:mod:`shardq.metrics.collector`).

``from shardq import metrics; metrics.X`` offers what the single module ``shardq.metrics``
offered.  Code below the collector's layer needs only the objects: runtime, worker and
dispatcher modules import ``shardq.metrics.registry``.
"""

from shardq.metrics.collector import COUNTERS as COUNTERS
from shardq.metrics.collector import PARTITIONS as PARTITIONS
from shardq.metrics.collector import HotShardReport as HotShardReport
from shardq.metrics.collector import HotShardWatch as HotShardWatch
from shardq.metrics.collector import PartitionCollector as PartitionCollector
from shardq.metrics.collector import RateWindow as RateWindow
from shardq.metrics.collector import log as log
from shardq.metrics.collector import node_of as node_of
from shardq.metrics.collector import serve as serve
from shardq.metrics.collector import snapshot_sync as snapshot_sync
from shardq.metrics.registry import BUILD_INFO as BUILD_INFO
from shardq.metrics.registry import JOB_DURATION as JOB_DURATION
from shardq.metrics.registry import JOB_LATENESS as JOB_LATENESS
from shardq.metrics.registry import JOBS_DEFERRED as JOBS_DEFERRED
from shardq.metrics.registry import LATENESS_BUCKETS as LATENESS_BUCKETS
from shardq.metrics.registry import LEASE_EVENTS as LEASE_EVENTS
from shardq.metrics.registry import LEASES_HELD as LEASES_HELD
from shardq.metrics.registry import LOOP_ERRORS as LOOP_ERRORS
from shardq.metrics.registry import MALFORMED as MALFORMED
from shardq.metrics.registry import OTHER_TYPE as OTHER_TYPE
from shardq.metrics.registry import OUTCOMES as OUTCOMES
from shardq.metrics.registry import PROMOTE_CALLS as PROMOTE_CALLS
from shardq.metrics.registry import PROMOTED as PROMOTED
from shardq.metrics.registry import SCRIPT_ERRORS as SCRIPT_ERRORS
from shardq.metrics.registry import WORKER_FETCH_CALLS as WORKER_FETCH_CALLS
from shardq.metrics.registry import WORKER_INFLIGHT as WORKER_INFLIGHT
from shardq.metrics.registry import WORKER_JOBS as WORKER_JOBS
from shardq.metrics.registry import WORKER_LOST as WORKER_LOST
from shardq.metrics.registry import WORKER_RECLAIMED as WORKER_RECLAIMED
from shardq.metrics.registry import CounterFamily as CounterFamily
from shardq.metrics.registry import HistogramFamily as HistogramFamily
from shardq.metrics.registry import LocalHistogram as LocalHistogram
from shardq.metrics.registry import _shardq_version as _shardq_version
from shardq.metrics.registry import job_type_label as job_type_label
