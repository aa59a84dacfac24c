"""The worker's context: what every worker component is built on.

:class:`~shardq.worker.worker.Worker` builds it once the queue is known (the shared start-up in
:mod:`shardq.runtime.process`) and hands it to each component, with the components it uses as
keyword-only arguments: ``Settler(ctx, wake=...)``, ``Executor(ctx, settler=...)``,
``Fetcher(ctx, settler=..., executor=..., loops=...)`` and so on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardq.config import WorkerSettings
from shardq.jobs import Job
from shardq.runtime.process import RoleContext
from shardq.worker.inflight import InFlight, WorkerStats

Handler = Callable[[Job], Any]


@dataclass(frozen=True, kw_only=True, eq=False)
class WorkerContext(RoleContext[WorkerSettings]):
    """:class:`~shardq.runtime.process.RoleContext` plus what the worker's components share."""

    stats: WorkerStats
    inflight: InFlight  # the deliveries held and the room for more
    handlers: dict[str, Handler]  # the worker's live registry: job type -> handler
    inline_types: set[str]  # job types whose (sync) handler runs on the event loop
    on_complete: Callable[[Job], None] | None = None
    #: Job type -> seconds one attempt may run, for declared tasks (shardq.tasks); others have
    #: the settings' handler_timeout.
    timeouts: dict[str, float] = field(default_factory=dict)

    @property
    def consumer(self) -> str:
        """This worker's consumer name in every partition's group (its member id)."""
        return self.member
