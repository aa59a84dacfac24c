"""A cluster whose nodes announce a hostname, not their IP (``cluster-announce-hostname`` with
``cluster-preferred-endpoint-type hostname``), as clusters behind TLS or on Kubernetes do:
CLUSTER SLOTS, MOVED and ASK name the nodes ``localhost:<port>``, and the fleet is given a
URL by that name.

The fleet serves it, rides out a killed primary and a moved partition under producer load
(counted as the failover tests count), and every surface names each primary once, by the
name the cluster announces: the client's slot map, the per-primary loops, the metrics' node
label, `shardq queue stats` and the console.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.fresh import FreshCluster, Ledger, check, drain, failover_reruns, kill_primary
from support.helpers import Runner, Runs, wait_for
from support.ports import TestPorts

from shardq import Client, ProducerSettings
from shardq.admin import slots as slot_moves
from shardq.cli import main as cli
from shardq.dev.devcluster import cluster_down, cluster_up, restart_node
from shardq.store import keys

PARTITIONS = 12
# A name for the nodes that resolves to the loopback address they listen on: .ci/run adds it
# to /etc/hosts; else this machine's own name where it resolves there.  ("localhost" itself
# would prove nothing: redis-py turns it into 127.0.0.1 before naming a node.)
CANDIDATES = ("shardq-test-node", socket.gethostname())


def _loopback_name() -> str | None:
    for name in CANDIDATES:
        try:
            if socket.gethostbyname(name) == "127.0.0.1" and name != "localhost":
                return name
        except OSError:
            continue
    return None


NAME = _loopback_name() or "unresolvable"
pytestmark = pytest.mark.skipif(
    _loopback_name() is None,
    reason="no hostname resolves to 127.0.0.1 here: add '127.0.0.1 shardq-test-node' to "
    "/etc/hosts (.ci/run does)",
)


@pytest.fixture
def named(test_ports: TestPorts, tmp_path: Path) -> Iterator[FreshCluster]:
    base = test_ports.hostnames
    cluster_up(base, root=tmp_path, announce_hostname=NAME)
    try:
        yield FreshCluster(f"redis://{NAME}:{base}", base, tmp_path)
    finally:
        cluster_down(base, root=tmp_path)


def _primaries(client: Client) -> set[str]:
    client.redis.nodes_manager.initialize()  # type: ignore[union-attr]
    return {n.name for n in client.redis.get_primaries()}  # type: ignore[union-attr]


def _metric_nodes(queue: str) -> set[str]:
    from prometheus_client import REGISTRY

    return {
        s.labels["node"]
        for metric in REGISTRY.collect()
        if metric.name.startswith("shardq_")
        for s in metric.samples
        if s.labels.get("queue") == queue and "node" in s.labels
    }


def test_every_primary_is_named_once_by_its_announced_name(named: FreshCluster, queue: str) -> None:
    client = Client.from_url(named.url)
    client.create_queue(queue, PARTITIONS)
    primaries = _primaries(client)
    assert len(primaries) == 3 and all(p.startswith(f"{NAME}:") for p in primaries), primaries
    runs = Runs()
    with Runner(named.url, queue, {"t": runs.add}) as runner:
        jobs = [client.enqueue(queue, "t", i, delay=random.uniform(0, 0.5)) for i in range(200)]
        wait_for(lambda: set(jobs) <= set(runs.count()), 30, "jobs did not run")
        # the per-primary loops of both roles: one per announced primary, no IP twin
        for role in (runner.dispatcher, *runner.workers):
            assert role is not None
            assert set(role.transport.primaries()) == primaries, role.transport.primaries()
        wait_for(lambda: _metric_nodes(queue) == primaries, 30, lambda: _metric_nodes(queue))
    out = CliRunner().invoke(cli, ["queue", "stats", "-q", queue, "--json", "--url", named.url])
    assert out.exit_code == 0, out.output
    assert {n["node"] for n in json.loads(out.stdout)["nodes"]} == primaries
    # the console's Redis nodes: each primary once, by name, never by its IP
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from shardq.config import RedisSettings
    from shardq.web import WebConfig, create_app

    app = create_app(WebConfig(redis=RedisSettings.from_url(named.url)))
    with TestClient(app, base_url="http://127.0.0.1:8080") as http:
        page = http.get(f"/q/{queue}")
    assert page.status_code == 200
    nodes = page.text.split('id="nodes"', 1)[1]
    assert all(p in nodes for p in primaries), nodes[:2000]
    assert "127.0.0.1:" not in nodes, nodes[:2000]
    client.close()


def test_the_fleet_rides_out_a_killed_primary_and_a_moved_partition_on_named_nodes(
    named: FreshCluster, queue: str
) -> None:
    from test_failover import producers

    client = Client.from_url(named.url)
    mover = Client.from_url(named.url)
    client.create_queue(queue, PARTITIONS)
    ledger, runs, stop = Ledger(), Runs(), threading.Event()
    settings = ProducerSettings(retry_timeout=30, durable_timeout=1.0)
    victim_port = named.primary_port(client, keys.partition_keys(queue, 0, PARTITIONS).due)
    threads = producers(named.url, queue, ledger, stop, settings)
    with Runner(named.url, queue, {"t": runs.add}) as runner:
        for t in threads:
            t.start()
        time.sleep(random.uniform(1.0, 2.5))
        kill = kill_primary(named, client, victim_port, queue, [(0, PARTITIONS)])
        wait_for(
            lambda: (
                named.primary_port(client, keys.partition_keys(queue, 0, PARTITIONS).due)
                != victim_port
            ),
            30,
            "no failover",
        )
        failed_over_at = time.monotonic()
        restart_node(named.base, victim_port, root=named.root)  # back as a replica
        # then a partition of another primary moves, under the same load
        source = slot_moves.prepare_move(mover, queue, 1, slot_moves.primary_addresses(mover)[0])
        target = next(a for a in slot_moves.primary_addresses(mover) if a != source.source)
        assert target.startswith(f"{NAME}:"), target
        assert slot_moves.move(mover, slot_moves.prepare_move(mover, queue, 1, target)).keys_moved
        calls = ledger.calls
        wait_for(lambda: ledger.calls > calls + 50, 30, "producers stalled")
        stop.set()
        for t in threads:
            t.join(60)
        drain(client, queue, runs)
        primaries = _primaries(client)
        assert len(primaries) == 3 and all(p.startswith(f"{NAME}:") for p in primaries)
        for role in (runner.dispatcher, *runner.workers):
            assert role is not None
            assert set(role.transport.primaries()) == primaries, role.transport.primaries()
    figures = check(ledger, runs, kill)
    allowed, other = failover_reruns(runs, kill, failed_over_at)
    assert not other, f"{len(other)} ran again beyond the failover: {other[:5]}"
    figures["ran_again_in_failover"] = allowed
    print(f"named nodes, killed primary and moved partition: {figures}")
    client.close()
    mover.close()
