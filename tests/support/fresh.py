"""A fresh 6-node cluster of a test's own (to kill, pause and move nodes of), and the ledger
of what producers were told, checked against what ran (tests/fleet: failover, Node interop)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shardq import Client
from shardq.dev.devcluster import cluster_down, cluster_up
from shardq.store import keys
from support.helpers import Runs, scaled, wait_for
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
    """What producers were told: job id -> when its call returned (monotonic)."""

    stored: dict[str, float] = field(default_factory=dict)
    durable: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ids: list[str], durable: bool = False) -> None:
        now = time.monotonic()
        with self.lock:
            self.calls += 1
            for job_id in ids:
                self.stored.setdefault(job_id, now)
                if durable:
                    self.durable.add(job_id)


def check(ledger: Ledger, runs: Runs, killed_at: float | None) -> dict[str, int]:
    """0 duplicated by retries; lost only within the replication window of a killed primary."""
    assert not ledger.errors, ledger.errors
    ran = set(runs.count())
    unknown = ran - set(ledger.stored)
    assert not unknown, f"{len(unknown)} jobs ran that no producer was given: retries duplicated"
    lost = set(ledger.stored) - ran
    assert not lost & ledger.durable, f"durable jobs lost: {sorted(lost & ledger.durable)[:5]}"
    if killed_at is None:
        assert not lost, f"{len(lost)} lost, e.g. {sorted(lost)[:5]}"
    else:
        # Acknowledged by the old primary in the instant before SIGKILL, never replicated.
        late = [j for j in lost if ledger.stored[j] < killed_at - scaled(0.5)]
        assert not late, f"{len(late)} lost that were acknowledged well before the kill"
    return {"stored": len(ledger.stored), "lost": len(lost), "calls": ledger.calls}


def drain(client: Client, queue: str, ledger: Ledger, runs: Runs) -> None:
    """Wait until every stored job ran (those lost in replication never will: bounded)."""
    wait_for(
        lambda: (
            len(set(ledger.stored) - set(runs.count())) <= 50
            and client.get(queue, next(iter(ledger.stored))) is None
        ),
        90,
        lambda: f"{len(set(ledger.stored) - set(runs.count()))} jobs not run",
    )
    settle_until = time.monotonic() + scaled(5)
    while time.monotonic() < settle_until and set(ledger.stored) - set(runs.count()):
        time.sleep(0.2)
