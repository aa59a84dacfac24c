"""shardq: delayed jobs over the partitions of a Redis Cluster."""

from shardq.aio import AsyncClient
from shardq.client import Client
from shardq.config import DispatcherSettings, ProducerSettings, RedisSettings, WorkerSettings
from shardq.connection import connect, connect_async
from shardq.dispatcher import Dispatcher
from shardq.errors import PermanentError, RetryAfter, ShardqError
from shardq.inspector import AsyncInspector, Inspector
from shardq.jobs import Backoff, EnqueueResult, Job, JobInfo, JobRequest, JobResult
from shardq.limits import Limit
from shardq.tasks import Task, Tasks
from shardq.worker import QueueChoice, Worker, inline
from shardq.workflows import Batch, BatchInfo, Chain

__all__ = [
    "AsyncClient",
    "AsyncInspector",
    "Backoff",
    "Batch",
    "BatchInfo",
    "Chain",
    "Client",
    "Dispatcher",
    "DispatcherSettings",
    "EnqueueResult",
    "Inspector",
    "Job",
    "JobInfo",
    "JobRequest",
    "JobResult",
    "Limit",
    "PermanentError",
    "ProducerSettings",
    "QueueChoice",
    "RedisSettings",
    "RetryAfter",
    "ShardqError",
    "Task",
    "Tasks",
    "Worker",
    "WorkerSettings",
    "connect",
    "connect_async",
    "inline",
]
__version__ = "0.1.0"
