"""Operator actions: lease owners and rebalancing (:mod:`~shardq.admin.owners`), the
dead-letter stream (:mod:`~shardq.admin.dlq`), moving a partition's slot between primaries
(:mod:`~shardq.admin.slots`) and the roles' Redis users (:mod:`~shardq.admin.acl`).

``shardq.admin.owners(client, queue)`` and the others are re-exported here, as they were when
this was one module.
"""

from shardq.admin.dlq import DLQ_BATCH, DeadLetter, dead_count, dead_letters, purge, replay
from shardq.admin.owners import (
    OwnerRow,
    Spread,
    cancel_drain,
    excess_leases,
    live_dispatchers,
    owners,
    queue_stats,
    request_drain,
    revoke,
    spread,
)

__all__ = [
    "DLQ_BATCH",
    "DeadLetter",
    "OwnerRow",
    "Spread",
    "cancel_drain",
    "dead_count",
    "dead_letters",
    "excess_leases",
    "live_dispatchers",
    "owners",
    "purge",
    "queue_stats",
    "replay",
    "request_drain",
    "revoke",
    "spread",
]
