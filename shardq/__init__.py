"""shardq: delayed jobs over the partitions of a Redis Cluster.

The public names are imported on first use (module ``__getattr__``): importing any part of
shardq runs this file first, and a command such as ``shardq --help`` must not pay for the
client, the worker and redis-py before it needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports them
    from shardq.aio import AsyncClient as AsyncClient
    from shardq.client import Client as Client
    from shardq.config import DispatcherSettings as DispatcherSettings
    from shardq.config import ProducerSettings as ProducerSettings
    from shardq.config import RedisSettings as RedisSettings
    from shardq.config import WorkerSettings as WorkerSettings
    from shardq.connection import connect as connect
    from shardq.connection import connect_async as connect_async
    from shardq.dispatcher import Dispatcher as Dispatcher
    from shardq.errors import PermanentError as PermanentError
    from shardq.errors import RetryAfter as RetryAfter
    from shardq.errors import ShardqError as ShardqError
    from shardq.inspector import AsyncInspector as AsyncInspector
    from shardq.inspector import Inspector as Inspector
    from shardq.jobs import Backoff as Backoff
    from shardq.jobs import EnqueueResult as EnqueueResult
    from shardq.jobs import Job as Job
    from shardq.jobs import JobInfo as JobInfo
    from shardq.jobs import JobRequest as JobRequest
    from shardq.jobs import JobResult as JobResult
    from shardq.limits import Limit as Limit
    from shardq.tasks import Task as Task
    from shardq.tasks import Tasks as Tasks
    from shardq.worker import QueueChoice as QueueChoice
    from shardq.worker import Worker as Worker
    from shardq.worker import inline as inline
    from shardq.workflows import Batch as Batch
    from shardq.workflows import BatchInfo as BatchInfo
    from shardq.workflows import Chain as Chain

# Each public name -> the module that defines it (the same pairs as the block above;
# tests/unit/test_startup.py keeps them equal).
_EXPORTS: dict[str, str] = {
    "AsyncClient": "shardq.aio",
    "AsyncInspector": "shardq.inspector",
    "Backoff": "shardq.jobs",
    "Batch": "shardq.workflows",
    "BatchInfo": "shardq.workflows",
    "Chain": "shardq.workflows",
    "Client": "shardq.client",
    "Dispatcher": "shardq.dispatcher",
    "DispatcherSettings": "shardq.config",
    "EnqueueResult": "shardq.jobs",
    "Inspector": "shardq.inspector",
    "Job": "shardq.jobs",
    "JobInfo": "shardq.jobs",
    "JobRequest": "shardq.jobs",
    "JobResult": "shardq.jobs",
    "Limit": "shardq.limits",
    "PermanentError": "shardq.errors",
    "ProducerSettings": "shardq.config",
    "QueueChoice": "shardq.worker",
    "RedisSettings": "shardq.config",
    "RetryAfter": "shardq.errors",
    "ShardqError": "shardq.errors",
    "Task": "shardq.tasks",
    "Tasks": "shardq.tasks",
    "Worker": "shardq.worker",
    "WorkerSettings": "shardq.config",
    "connect": "shardq.connection",
    "connect_async": "shardq.connection",
    "inline": "shardq.worker",
}

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


if not TYPE_CHECKING:  # hidden from type checkers, so they still flag a name that is not here

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'shardq' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # the next lookup finds it without coming here
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
