"""A fresh 6-node cluster of a test's own (to kill, pause and move nodes of), and the ledger
of what producers were told, checked against what ran (tests/fleet: failover, Node interop)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from shardq import Client
from shardq.dev.devcluster import cluster_down, cluster_up, node_pid
from shardq.store import keys
from support.helpers import Runs, queue_settled, scaled, wait_for
from support.ports import TestPorts


@dataclass
class FreshCluster:
    url: str
    base: int
    root: Path

    def primary_port(self, client: Client, key: str) -> int:
        manager = client.redis.nodes_manager  # type: ignore[union-attr]
        manager.initialize()
        return int(manager.get_node_from_slot(keys.slot_of(key)).port)

    def ports(self) -> list[int]:
        return list(range(self.base, self.base + 6))


@pytest.fixture
def fresh(test_ports: TestPorts, tmp_path: Path) -> Iterator[FreshCluster]:
    base = test_ports.failover
    url = cluster_up(base, root=tmp_path)
    try:
        yield FreshCluster(url, base, tmp_path)
    finally:
        cluster_down(base, root=tmp_path)


@dataclass
class Ledger:
    """What producers were told: job id -> when the call that stored it started and returned
    (monotonic s), and which were stored durably (a replica confirmed them)."""

    stored: dict[str, float] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    durable: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ids: list[str], durable: bool = False, started: float | None = None) -> None:
        """``ids`` were stored by a call that began at ``started`` (monotonic; None: the
        producer cannot say, then any time before now)."""
        now = time.monotonic()
        with self.lock:
            self.calls += 1
            for job_id in ids:
                if job_id not in self.stored:
                    self.stored[job_id] = now
                    self.started[job_id] = started if started is not None else 0.0
                if durable:
                    self.durable.add(job_id)


#: How long after a primary acknowledged a write its replica may still lack it (Redis streams
#: every write to its replicas at once: on one host that takes milliseconds; this bound is the
#: generous one a loaded test box needs, scaled by SHARDQ_TEST_TIME_FACTOR).
REPLICATION_LAG = 0.5


@dataclass
class Kill:
    """A primary killed with SIGKILL: the slots it served then, and the monotonic times just
    before the signal was sent and just after."""

    port: int
    slots: set[int]
    before: float
    after: float
    queue: str
    #: the (generation, partitions) a job of the queue may have been stored in
    layouts: list[tuple[int, int]]

    def on_victim(self, job_id: str) -> bool:
        """Whether a partition the job may have been stored in lived on the killed primary."""
        return any(
            self.holds(keys.fleet_id(g, keys.partition_for(job_id, n))) for g, n in self.layouts
        )

    def holds(self, fleet_id: int) -> bool:
        """Whether the partition with this fleet id (Job.partition) lived on the killed primary."""
        generation, p = divmod(fleet_id, keys.MAX_PARTITIONS)
        n = dict(self.layouts)[generation]
        return keys.slot_of(keys.partition_keys(self.queue, p, n, generation).due) in self.slots


def kill_primary(
    fresh: FreshCluster, client: Client, port: int, queue: str, layouts: list[tuple[int, int]]
) -> Kill:
    """SIGKILL the primary on ``port``, noting the slots it served and when."""
    manager = client.redis.nodes_manager  # type: ignore[union-attr]
    manager.initialize()
    slots = {s for s, nodes in manager.slots_cache.items() if nodes and nodes[0].port == port}
    assert slots, f"{port} serves no slot: not a primary"
    pid = node_pid(fresh.base, port, root=fresh.root)
    assert pid is not None
    before = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    return Kill(port, slots, before, time.monotonic(), queue, layouts)


def may_be_lost(ledger: Ledger, kill: Kill | None) -> set[str]:
    """The stored jobs the guarantee lets a failover lose (README, Guarantees, "No job is
    lost"): written, not durably, to the killed primary by a call that began before the kill
    and returned no earlier than the replication lag before it (acknowledged, but possibly
    not yet on the replica that took over).  A job on any other primary is never lost."""
    if kill is None:
        return set()
    lag = scaled(REPLICATION_LAG)
    return {
        j
        for j, returned in ledger.stored.items()
        if j not in ledger.durable
        and ledger.started[j] < kill.after
        and returned >= kill.before - lag
        and kill.on_victim(j)
    }


#: How long after a job's handler started its ack may still wait to be sent: it rides with the
#: next read of its partition, up to 100 ms (README, Guarantees, "At-least-once execution").
ACK_RIDE = 0.1


def failover_reruns(runs: Runs, kill: Kill, failed_over_at: float) -> tuple[int, list[str]]:
    """How many jobs ran again as the guarantee allows across a failover, and a line for each
    job that ran again otherwise (README, Guarantees, "At-least-once execution": "a primary
    failed over before replicating a delivery").  Allowed: a job of a partition on the killed
    primary whose first run began before the failover ended and no earlier than its ack and
    the replication lag before the kill (its fetch or ack may have died with the primary);
    every later run after the kill."""
    window = scaled(ACK_RIDE + REPLICATION_LAG)
    allowed, other = 0, []
    for job_id, n in runs.count().items():
        if n < 2:
            continue
        starts = runs.of(job_id)
        first_job, first_at = starts[0]
        if (
            kill.holds(first_job.partition)
            and kill.before - window <= first_at <= failed_over_at
            and all(at >= kill.before for _, at in starts[1:])
        ):
            allowed += 1
            continue
        other.append(
            f"{job_id} (partition {first_job.partition}, "
            f"{'on' if kill.holds(first_job.partition) else 'not on'} the killed primary): "
            + ", ".join(
                f"attempt {j.attempt} delivery {j.deliveries} at {at - kill.before:+.3f} s"
                for j, at in starts
            )
        )
    return allowed, other


def check(ledger: Ledger, runs: Runs, kill: Kill | None) -> dict[str, Any]:
    """0 duplicated by retries; lost only what :func:`may_be_lost` allows; the lost jobs are
    counted, with how long before the kill their calls returned."""
    assert not ledger.errors, ledger.errors
    ran = set(runs.count())
    unknown = ran - set(ledger.stored)
    assert not unknown, f"{len(unknown)} jobs ran that no producer was given: retries duplicated"
    lost = set(ledger.stored) - ran
    assert not lost & ledger.durable, f"durable jobs lost: {sorted(lost & ledger.durable)[:5]}"
    allowed = may_be_lost(ledger, kill)
    beyond = lost - allowed
    if beyond:
        where = [
            (j, "killed primary" if kill and kill.on_victim(j) else "another primary",
             round(ledger.stored[j] - kill.before, 3) if kill else None)
            for j in sorted(beyond)[:5]
        ]  # fmt: skip
        raise AssertionError(
            f"{len(beyond)} lost beyond the replication window (job, where, s after the kill "
            f"its call returned): {where}"
        )
    figures: dict[str, Any] = {
        "stored": len(ledger.stored),
        "lost": len(lost),
        "calls": ledger.calls,
    }
    if kill is not None:
        figures["could_lose"] = len(allowed)
        if lost:
            before_kill = sorted(kill.before - ledger.stored[j] for j in lost)
            # how long before the kill the lost jobs' calls returned (negative: after it)
            figures["lost_returned_before_kill_s"] = (
                round(before_kill[0], 3),
                round(before_kill[-1], 3),
            )
    return figures


def drain(client: Client, queue: str, runs: Runs) -> None:
    """Wait until the queue holds nothing (no job stored, due or pending, no resize running):
    every job still stored has run and been acknowledged, and a job not run by then never
    will (then :func:`check` tells a loss the guarantee allows from one it does not)."""

    def settled() -> bool:
        layout = client.layout(queue)
        return layout.draining is None and queue_settled(
            client.redis, queue, layout.partitions, layout.generation
        )

    wait_for(settled, 90, lambda: f"the queue still holds jobs; {len(runs.jobs)} starts so far")
