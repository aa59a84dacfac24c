"""Task declarations: a job type's handler and its defaults, declared once for producers and
workers (Celery's ``@app.task``, dramatiq's ``@actor``, Sidekiq's ``sidekiq_options``).

>>> tasks = Tasks()
>>> @tasks.task("send", queue="emails", max_attempts=8, timeout=30, keep_result=3600)
... async def send(job): ...
>>> send.enqueue(client, {"to": "a@example.com"})          # queue, attempts, retention: declared
>>> Worker(redis, "emails", handlers=tasks)                   # the queue's declared handlers

A :class:`Task` carries the enqueue options a producer would otherwise repeat at every call
(``queue``, ``max_attempts``, ``backoff``, ``keep_result``, ``priority``, ``limit_key``); each
can still be given per call, which wins.  ``timeout`` bounds one attempt of the task's jobs on
the worker (instead of the worker's ``handler_timeout``).  A declaration is checked when it is
made (a bad option raises the error enqueue would, at import time).  A plain dict of job type to
handler keeps working wherever a Tasks does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol, Unpack

from shardq import names
from shardq.config import ProducerSettings
from shardq.errors import InvalidJobError
from shardq.jobs.body import request_body
from shardq.jobs.models import EnqueueResult, JobRequest
from shardq.jobs.options import Backoff, JobOptions, takes_job_options, task_options
from shardq.names import Priority


class Client(Protocol):
    """What :meth:`Task.enqueue` needs of a client (:class:`shardq.Client`); a model imports
    nothing of the clients."""

    def enqueue_detailed(
        self, queue: str, request: JobRequest, *, durable: bool = False
    ) -> EnqueueResult: ...


class AsyncClient(Protocol):
    """:class:`Client` of :class:`shardq.AsyncClient`."""

    async def enqueue_detailed(
        self, queue: str, request: JobRequest, *, durable: bool = False
    ) -> EnqueueResult: ...


Handler = Callable[..., Any]

#: Longest per-task timeout (as WorkerSettings.handler_timeout).
MAX_TIMEOUT = 30 * 86400.0


@dataclass(frozen=True, eq=False)
class Task:
    """One declared job type: its handler and defaults.  Calling it calls the handler (tests
    can run a task directly); :meth:`enqueue` and :meth:`request` build its jobs."""

    name: str
    fn: Handler
    queue: str
    max_attempts: int | None = None
    backoff: Backoff | None = None
    keep_result: timedelta | float | None = None
    priority: Priority | None = None
    limit_key: str | None = None
    timeout: float | None = None
    """Seconds one attempt may run on a worker (then it fails as over handler_timeout and is
    retried); None: the worker's handler_timeout."""

    def __post_init__(self) -> None:
        names.check_job_type(self.name)
        names.check_queue_name(self.queue)
        if self.timeout is not None and (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, int | float)
            or not 0.001 <= self.timeout <= MAX_TIMEOUT
        ):
            raise InvalidJobError(
                f"task {self.name!r}: timeout must be 0.001..{MAX_TIMEOUT:.0f} seconds, got "
                f"{self.timeout!r:.40}"
            )
        # The defaults are checked as an enqueue would check them, now (import time).
        request_body(JobRequest(self.name, None, **self.defaults()), ProducerSettings())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def defaults(self) -> JobOptions:
        """The options this task declares (those it sets)."""
        declared = {name: getattr(self, name) for name in _DECLARED}
        return {k: v for k, v in declared.items() if v is not None}  # type: ignore[return-value]

    @takes_job_options
    def request(self, payload: Any = None, **options: Unpack[JobOptions]) -> JobRequest:
        """A :class:`~shardq.jobs.JobRequest` of this task with its declared defaults; any
        option given here wins (``delay``, ``run_at``, ``idempotency_key``, ...)."""
        unknown = set(options) - _REQUEST_OPTIONS
        if unknown:
            raise InvalidJobError(
                f"task {self.name!r}: unknown enqueue option(s) {sorted(unknown)}; known: "
                f"{sorted(_REQUEST_OPTIONS)}"
            )
        merged: JobOptions = {**self.defaults(), **options}
        return JobRequest(self.name, payload, **merged)

    @takes_job_options
    def enqueue(
        self,
        client: Client,
        payload: Any = None,
        *,
        durable: bool = False,
        **options: Unpack[JobOptions],
    ) -> str:
        """Enqueue one job of this task into its queue with ``client``; returns its id."""
        request = self.request(payload, **options)
        return client.enqueue_detailed(self.queue, request, durable=durable).job_id

    @takes_job_options
    async def enqueue_async(
        self,
        client: AsyncClient,
        payload: Any = None,
        *,
        durable: bool = False,
        **options: Unpack[JobOptions],
    ) -> str:
        """:meth:`enqueue` with an :class:`~shardq.client.AsyncClient`."""
        request = self.request(payload, **options)
        return (await client.enqueue_detailed(self.queue, request, durable=durable)).job_id


# The options a task declares defaults for (shardq.jobs.options: ``task=True``).
_DECLARED = task_options()
_REQUEST_OPTIONS = {f.name for f in dataclasses.fields(JobRequest)} - {"job_type", "payload"}


@dataclass
class Tasks(Mapping[str, Handler]):
    """A registry of declared tasks.  As a mapping it is job type -> handler (of every queue:
    a Worker given it takes the tasks of its own queue, :meth:`for_queue`)."""

    default_queue: str | None = None
    """The queue of tasks declared without one."""
    _tasks: dict[str, Task] = field(default_factory=dict)

    def task(
        self,
        name: str | None = None,
        *,
        queue: str | None = None,
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        keep_result: timedelta | float | None = None,
        priority: Priority | None = None,
        limit_key: str | None = None,
        timeout: float | None = None,
    ) -> Callable[[Handler], Task]:
        """Declare the decorated function as the handler of job type ``name`` (default: the
        function's name) with these defaults; returns the :class:`Task`."""

        def declare(fn: Handler) -> Task:
            job_type = name or fn.__name__
            where = queue or self.default_queue
            if where is None:
                raise InvalidJobError(
                    f"task {job_type!r} has no queue: pass queue=... or Tasks(default_queue=...)"
                )
            if job_type in self._tasks:
                raise InvalidJobError(f"task {job_type!r} is declared twice")
            t = Task(job_type, fn, where, max_attempts, backoff, keep_result, priority,
                     limit_key, timeout)  # fmt: skip
            self._tasks[job_type] = t
            return t

        return declare

    def add(self, task: Task) -> Task:
        """Register a Task made elsewhere (another registry's, or built by hand)."""
        if task.name in self._tasks:
            raise InvalidJobError(f"task {task.name!r} is declared twice")
        self._tasks[task.name] = task
        return task

    def get_task(self, name: str) -> Task | None:
        return self._tasks.get(name)

    def tasks(self) -> list[Task]:
        return list(self._tasks.values())

    def for_queue(self, queue: str) -> dict[str, Task]:
        """The tasks declared for ``queue``, by job type."""
        return {n: t for n, t in self._tasks.items() if t.queue == queue}

    def timeouts(self, queue: str | None = None) -> dict[str, float]:
        """Job type -> declared timeout, of the tasks that declare one."""
        return {
            n: t.timeout
            for n, t in self._tasks.items()
            if t.timeout is not None and (queue is None or t.queue == queue)
        }

    def queues(self) -> list[str]:
        return sorted({t.queue for t in self._tasks.values()})

    # Mapping: job type -> handler
    def __getitem__(self, name: str) -> Handler:
        return self._tasks[name].fn

    def __iter__(self) -> Iterator[str]:
        return iter(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)
