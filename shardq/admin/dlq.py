"""The dead-letter stream, for the operator: newest dead letters, replay, purge, count.

Each function drives a plan of :mod:`shardq.plans.admin` through the client's runner (retries
and typed errors as for ``Client.get``); replay and purge go a bounded batch of entries per
script call (:data:`DLQ_BATCH`).
"""

from __future__ import annotations

from shardq.client import Client
from shardq.plans import admin as admin_plans
from shardq.plans.admin import DLQ_BATCH
from shardq.store.inspection import DeadLetter

__all__ = ["DLQ_BATCH", "DeadLetter", "dead_count", "dead_letters", "purge", "replay"]


def dead_letters(
    client: Client, queue: str, limit: int = 50, partition: int | None = None
) -> list[DeadLetter]:
    """Newest dead letters first, at most ``limit`` per partition read (of every partition,
    or of ``partition``, a fleet id: ``keys.fleet_id``)."""
    plan = admin_plans.dead_letters(client.cache, queue, limit, partition)
    return client.run(plan, f"reading the dead letters of {queue!r}")


def replay(client: Client, queue: str, job_ids: list[str] | None = None) -> tuple[int, int]:
    """Move dead jobs back to the due set (due now, attempts reset).  Returns (moved, skipped)."""
    plan = admin_plans.replay(client.cache, queue, job_ids)
    return client.run(plan, f"replaying dead jobs of {queue!r}")


def purge(client: Client, queue: str, job_ids: list[str] | None = None) -> int:
    """Delete dead letters (all, or those of the given jobs) and their dead jobs."""
    return client.run(admin_plans.purge(client.cache, queue, job_ids), f"purging {queue!r}")


def dead_count(client: Client, queue: str) -> int:
    """How many dead letters the queue holds (XLEN of every partition's dead stream)."""
    return client.run(admin_plans.dead_count(client.cache, queue), f"counting dead of {queue!r}")
