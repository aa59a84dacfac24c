"""The worker: fetches ready jobs, runs handlers, settles each outcome, recovers deliveries."""

from shardq.worker.context import Handler
from shardq.worker.inflight import WorkerStats
from shardq.worker.pool import QueueChoice
from shardq.worker.worker import Worker, inline

__all__ = ["Handler", "QueueChoice", "Worker", "WorkerStats", "inline"]
