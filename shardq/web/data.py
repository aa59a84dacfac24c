"""What each console page reads from Redis, and what it costs (docs/capacity.md has the table).

Every reader goes through the :class:`~shardq.inspector.AsyncInspector`'s bounded plans:

- a queue's partitions: one partition-stats script and one lease read per partition (2 P
  calls, pipelined per node; O(1)/O(log n) each, whatever the backlog);
- a job list: one page of at most ``limit`` jobs per partition, merged (P calls);
- fleet: two registry reads plus a lease read and an XPENDING summary per partition (2 P + 5);
- a job: one script call; a search by idempotency key: one GET and one script call;
- schedules: the schedule store's own paged listing.
- batches: one read of the queue's index of batches, then the record and TTL of each batch
  listed (at most ``limit``, pipelined); a batch: its record and TTL (2 calls).

Nothing here scans a backlog.  Rates (enqueued/completed/failed per second, each partition's
hot ratio and each node's load share) come from the counters of successive reads, kept in this
process (:class:`Rates`): O(P) memory per queue watched, never per job.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from shardq.admin import slots
from shardq.aio import AsyncClient
from shardq.errors import ShardqError
from shardq.inspector import AsyncInspector, PartitionInfo
from shardq.workflows import BATCH_STATE_MEANINGS, BatchInfo, callback_id

RATE_COUNTERS = ("enqueued", "completed", "failed", "retried", "dead", "promoted")
HEAT_METRICS = ("backlog", "lag", "hot", "ready", "running", "dead")
RATE_WINDOW_S = 30.0


def _load(p: PartitionInfo) -> int:
    """A partition's load as `shardq queue stats` counts it: jobs enqueued + promoted."""
    return p.counters.get("enqueued", 0) + p.counters.get("promoted", 0)


@dataclass
class _Sample:
    at: float
    totals: dict[str, int]
    loads: dict[int, int]


@dataclass
class Rates:
    """Counter samples of each watched queue over the last ``window`` seconds."""

    window: float = RATE_WINDOW_S
    _samples: dict[str, deque[_Sample]] = field(default_factory=dict)

    def add(self, queue: str, parts: list[PartitionInfo], now: float | None = None) -> None:
        at = time.monotonic() if now is None else now
        samples = self._samples.setdefault(queue, deque())
        if samples and at - samples[-1].at < 0.5:
            return  # two pages polled at once: one sample is enough
        totals = {c: sum(p.counters.get(c, 0) for p in parts) for c in RATE_COUNTERS}
        samples.append(_Sample(at, totals, {p.partition: _load(p) for p in parts}))
        while len(samples) > 2 and at - samples[1].at >= self.window:
            samples.popleft()

    def _span(self, queue: str) -> tuple[_Sample, _Sample, float] | None:
        samples = self._samples.get(queue)
        if not samples or len(samples) < 2:
            return None
        first, last = samples[0], samples[-1]
        return first, last, max(last.at - first.at, 1e-6)

    def queue_rates(self, queue: str) -> dict[str, float | None]:
        """Per second over the window; None until two samples exist."""
        got = self._span(queue)
        if got is None:
            return dict.fromkeys(RATE_COUNTERS)
        first, last, span = got
        return {
            c: round(max(0, last.totals[c] - first.totals.get(c, 0)) / span, 1)
            for c in RATE_COUNTERS
        }

    def partition_rates(self, queue: str) -> dict[int, float]:
        got = self._span(queue)
        if got is None:
            return {}
        first, last, span = got
        return {p: max(0, n - first.loads.get(p, 0)) / span for p, n in last.loads.items()}


def _ratio(value: float, mean: float) -> float:
    return round(value / mean, 2) if mean > 0 else 0.0


def _heat_value(metric: str, row: dict[str, Any]) -> float:
    return float(
        {
            "backlog": row["scheduled"],
            "lag": row["lag_s"],
            "hot": row["hot"],
            "ready": row["ready"],
            "running": row["running"],
            "dead": row["dead"],
        }[metric]
    )


async def queue_view(
    client: AsyncClient, rates: Rates, queue: str, metric: str = "backlog"
) -> dict[str, Any]:
    """A queue's summary, every partition (with its heat level) and its nodes' load shares."""
    ins = AsyncInspector(client)
    parts = await ins.partitions(queue)
    rates.add(queue, parts)
    per_partition = rates.partition_rates(queue)
    mean = sum(per_partition.values()) / len(per_partition) if per_partition else 0.0
    rows: list[dict[str, Any]] = [
        {
            "partition": p.partition,
            "node": p.node,
            "owner": p.owner,
            "scheduled": p.scheduled,
            "overdue": p.overdue,
            "ready": p.ready,
            "running": p.running,
            "dead": p.dead,
            "lag_s": round(p.lag_seconds, 3),
            "oldest_due_ms": p.oldest_due_ms,
            "paused": p.paused,
            "rate_per_s": round(per_partition.get(p.partition, 0.0), 1),
            "hot": _ratio(per_partition.get(p.partition, 0.0), mean),
        }
        for p in parts
    ]
    metric = metric if metric in HEAT_METRICS else "backlog"
    top = max((_heat_value(metric, r) for r in rows), default=0.0)
    for r in rows:
        value = _heat_value(metric, r)
        r["heat"] = 0 if top <= 0 or value <= 0 else min(9, 1 + int(8 * value / top))
    loads = slots.node_loads({"partitions": rows}, client.transport.primaries())
    nodes: list[dict[str, Any]] = []
    for load in loads:
        mine = [r for r in rows if r["node"] == load.node]
        nodes.append(
            {
                "node": load.node,
                "partitions": len(load.partitions),
                "rate_per_s": load.rate_per_s,
                "share": load.share,
                "scheduled": sum(r["scheduled"] for r in mine),
                "overdue": sum(r["overdue"] for r in mine),
                "running": sum(r["running"] for r in mine),
                "dead": sum(r["dead"] for r in mine),
            }
        )
    paused = sum(1 for r in rows if r["paused"])
    node_rates = [n["rate_per_s"] for n in nodes if n["partitions"]]
    node_mean = sum(node_rates) / len(node_rates) if node_rates else 0.0
    summary: dict[str, Any] = {
        "queue": queue,
        "partitions": len(rows),
        "scheduled": sum(r["scheduled"] for r in rows),
        "overdue": sum(r["overdue"] for r in rows),
        "ready": sum(r["ready"] for r in rows),
        "running": sum(r["running"] for r in rows),
        "dead": sum(r["dead"] for r in rows),
        "max_lag_s": max((r["lag_s"] for r in rows), default=0.0),
        "paused": paused,
        "paused_state": "paused" if paused == len(rows) else ("partly paused" if paused else ""),
        "owned": sum(1 for r in rows if r["owner"]),
        "hot_partition_ratio": max((r["hot"] for r in rows), default=0.0),
        "hot_node_ratio": _ratio(max(node_rates, default=0.0), node_mean),
        "rates": rates.queue_rates(queue),
        "counters": {c: sum(p.counters.get(c, 0) for p in parts) for c in RATE_COUNTERS},
    }
    return {"summary": summary, "partitions": rows, "nodes": nodes, "metric": metric}


async def overview(client: AsyncClient, rates: Rates) -> list[dict[str, Any]]:
    """Every queue's summary (2 P calls per queue)."""
    out: list[dict[str, Any]] = []
    for queue in await client.queues():
        try:
            view = await queue_view(client, rates, queue)
        except (ShardqError, RedisError, ValueError) as exc:
            # One damaged queue (a key overwritten by hand, a half-deleted queue) must not
            # take the overview down: its row says what is wrong, the others render.
            out.append({"queue": queue, "error": str(exc)})
            continue
        out.append(view["summary"])
    return out


async def fleet(client: AsyncClient, queue: str) -> dict[str, Any]:
    """Live dispatchers and workers: heartbeat expiry, partitions held, deliveries in flight."""
    members = await AsyncInspector(client).members(queue)
    rows: list[dict[str, Any]] = [
        {
            "role": m.role,
            "id": m.id,
            "instance": m.instance,
            "heartbeat_expires_ms": m.heartbeat_expires_ms,
            "draining": m.draining,
            "partitions": len(m.partitions),
            "inflight": m.inflight,
        }
        for m in sorted(members, key=lambda m: (m.role, m.id))
    ]
    return {
        "dispatchers": [r for r in rows if r["role"] == "dispatcher"],
        "workers": [r for r in rows if r["role"] == "worker"],
    }


def batch_row(b: BatchInfo) -> dict[str, Any]:
    """A batch or chain as its pages (and the batch page's live JSON) show it: its fields, what
    its state means, its parent's id and index, and its callbacks' job ids."""
    parent_id, _, parent_index = (b.parent or "").partition("|")
    return {
        **b.as_dict(),
        "meaning": BATCH_STATE_MEANINGS.get(b.state, ""),
        "ended": b.ended,
        "cancellable": b.state in ("open", "running"),
        "parent_id": parent_id or None,
        "parent_index": parent_index or None,
        "callback_jobs": [[name, callback_id(b.batch_id, name)] for name in b.callbacks],
    }


async def batches(client: AsyncClient, queue: str, limit: int) -> list[dict[str, Any]]:
    """The queue's newest batches and chains, newest first."""
    return [batch_row(b) for b in await AsyncInspector(client).batches(queue, limit)]


async def batch(client: AsyncClient, queue: str, batch_id: str) -> dict[str, Any] | None:
    """One batch or chain, or None (unknown, or expired)."""
    found = await AsyncInspector(client).batch(queue, batch_id)
    return None if found is None else batch_row(found)
