"""Handlers that do nothing, for workers run against the dev cluster: the benchmarks and the
tests' worker processes:
``shardq worker run --handlers shardq.dev.handlers:handlers``.

Inline (``@shardq.inline``), so a job costs the worker only its own bookkeeping: what a
benchmark of the fleet must measure.  A deployment's example handlers are elsewhere
(shardq/examples/handlers.py).
"""

from __future__ import annotations

from typing import Any

from shardq.worker import inline


@inline
def _noop(job: Any) -> None:
    """A handler that does nothing (benchmarks, demos, tests)."""


@inline
def _echo(job: Any) -> Any:
    """Returns the payload: a result as large as the job (bench.results_cost)."""
    return job.payload


handlers = {"bench": _noop, "demo": _noop, "echo": _echo}
"""The job types the demo (``demo``) and the benchmarks (``bench``, ``echo``) enqueue."""
