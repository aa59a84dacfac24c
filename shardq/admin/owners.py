"""Operator views and actions on leases and load: lease owners, the spread over dispatchers,
revoking leases above fair share, drains, and the stats report.

Everything here is read-only unless its name says otherwise; the CLI asks for ``--yes``
before any action that changes state.  Each function drives a plan of
:mod:`shardq.plans.admin` through the client's runner (retries and typed errors as for
``Client.get``).
"""

from __future__ import annotations

import time
from typing import Any

from shardq.client import Client
from shardq.dispatcher.leases import fair_share
from shardq.plans import admin as admin_plans
from shardq.plans import queue_admin
from shardq.plans.admin import OwnerRow, Spread

__all__ = [
    "OwnerRow",
    "Spread",
    "cancel_drain",
    "excess_leases",
    "live_dispatchers",
    "owners",
    "queue_stats",
    "request_drain",
    "revoke",
    "spread",
]


def owners(client: Client, queue: str) -> list[OwnerRow]:
    """Lease owner, token, lease age and next due time of every partition."""
    return client.run(admin_plans.owners(client.cache, queue), f"reading the owners of {queue!r}")


def live_dispatchers(client: Client, queue: str) -> tuple[list[str], list[str]]:
    """Dispatchers whose heartbeat has not expired, and those asked to drain."""
    plan = admin_plans.live_dispatchers(queue)
    return client.run(plan, f"reading the dispatchers of {queue!r}")


def spread(client: Client, queue: str, rows: list[OwnerRow] | None = None) -> Spread:
    """How the queue's partitions are spread over its live dispatchers."""
    plan = admin_plans.spread(client.cache, queue, fair_share, rows)
    return client.run(plan, f"reading the spread of {queue!r}")


def excess_leases(client: Client, queue: str) -> list[tuple[int, str]]:
    """(partition, owner) leases to revoke so no dispatcher holds more than its fair share."""
    plan = admin_plans.excess_leases(client.cache, queue, fair_share)
    return client.run(plan, f"reading the spread of {queue!r}")


def revoke(client: Client, queue: str, leases: list[tuple[int, str]]) -> int:
    """Revoke these leases, (partition, owner) each (the owner is fenced off; a peer takes
    over).  Returns how many."""
    return client.run(admin_plans.revoke(client.cache, queue, leases), "revoking leases")


def request_drain(client: Client, queue: str, dispatcher: str) -> None:
    """Ask a live dispatcher to hand back every partition (it stays up, holding none)."""
    client.run(admin_plans.request_drain(queue, dispatcher), f"draining {dispatcher}")


def cancel_drain(client: Client, queue: str, dispatcher: str) -> None:
    client.run(admin_plans.cancel_drain(queue, dispatcher), f"cancelling the drain of {dispatcher}")


def queue_stats(client: Client, queue: str, window: float = 1.0) -> dict[str, Any]:
    """Per queue, node and partition: backlog, overdue, lag, pending, dead, rates, hot spots.

    Rates come from two snapshots ``window`` seconds apart (enqueued + promoted per second).
    """

    def node_of(key: str) -> str:
        return client.transport.node_name(key)

    what = f"reading the stats of {queue!r}"
    first = client.run(queue_admin.snapshots(client.cache, queue, node_of), what)
    time.sleep(window)
    snaps = client.run(queue_admin.snapshots(client.cache, queue, node_of), what)
    return admin_plans.stats_report(queue, first, snaps, window)


def partition_rates(
    client: Client, queues: list[str], window: float = 1.0
) -> dict[str, dict[int, float]]:
    """Per queue and partition: jobs/s (enqueued + promoted) over one ``window`` shared by
    every queue (two snapshots of each, ``window`` seconds apart), so many queues cost one
    window, not one each."""

    def node_of(key: str) -> str:
        return client.transport.node_name(key)

    def take() -> dict[str, Any]:
        return {
            q: client.run(
                queue_admin.snapshots(client.cache, q, node_of), f"reading the stats of {q!r}"
            )
            for q in queues
        }

    first = take()
    time.sleep(window)
    last = take()
    out: dict[str, dict[int, float]] = {}
    for q in queues:
        report = admin_plans.stats_report(q, first[q], last[q], window)
        out[q] = {int(r["partition"]): float(r["rate_per_s"]) for r in report["partitions"]}
    return out
