"""shardq.dev.devcluster against real redis-server processes (no mocks).

Ports: the session block's devcluster ports (tests/support/ports.py). Every test stops what it
started (fixtures call *_down in their teardown) and keeps its files under tmp_path.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from support.helpers import scaled
from support.ports import session_ports

from shardq.cli.dev import dev
from shardq.dev import devcluster
from shardq.dev.devcluster import PortInUseError, RedisServerMissingError

BASE_PORT = session_ports().devcluster
PORTS = list(range(BASE_PORT, BASE_PORT + 6))
STANDALONE_PORT = session_ports().dev_standalone


def _is_running_redis(pid: int) -> bool:
    """Independent of the module under test: a live, non-zombie redis-server (or
    valkey-server) process."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        return b"redis-server" in cmdline or b"valkey-server" in cmdline
    except OSError:
        return False


def _pids(root: Path) -> list[int]:
    pids = [node.pid for node in devcluster.cluster_status(BASE_PORT, root=root)]
    assert all(pid is not None for pid in pids), pids
    return sorted(pid for pid in pids if pid is not None)


@pytest.fixture
def cluster_root(tmp_path: Path) -> Iterator[Path]:
    try:
        yield tmp_path
    finally:
        devcluster.cluster_down(BASE_PORT, root=tmp_path)


@pytest.fixture
def standalone_root(tmp_path: Path) -> Iterator[Path]:
    try:
        yield tmp_path
    finally:
        devcluster.standalone_down(STANDALONE_PORT, root=tmp_path)


def _assert_healthy_cluster(root: Path) -> None:
    primaries, replicas = [], []
    for port in PORTS:
        client = redis.Redis(port=port, decode_responses=True)
        try:
            info = client.cluster("INFO")
            assert info["cluster_state"] == "ok", (port, info)
            assert int(info["cluster_slots_assigned"]) == 16384
            assert int(info["cluster_known_nodes"]) == 6
            repl = client.info("replication")
        finally:
            client.close()
        if repl["role"] == "master":
            primaries.append(port)
            assert repl["connected_slaves"] == 1, (port, repl)
            assert repl["slave0"]["state"] == "online", (port, repl)  # not wait_bgsave
        else:
            replicas.append(port)
            assert repl["master_link_status"] == "up", (port, repl)
    assert len(primaries) == 3 and len(replicas) == 3
    status = devcluster.cluster_status(BASE_PORT, root=root)
    assert [node.port for node in status] == PORTS
    assert all(node.alive and node.cluster_state == "ok" for node in status)
    assert sum(node.slots or 0 for node in status if node.role == "primary") == 16384
    assert all(node.master_link == "up" for node in status if node.role == "replica")


def test_cluster_up_returns_url_of_synced_cluster(cluster_root: Path) -> None:
    url = devcluster.cluster_up(BASE_PORT, root=cluster_root)

    assert url == f"redis://127.0.0.1:{BASE_PORT}"
    _assert_healthy_cluster(cluster_root)
    client = redis.RedisCluster.from_url(url)
    try:
        for i in range(50):  # keys spread over all three primaries
            client.set(f"k{i}", i)
        assert client.get("k42") == b"42"
    finally:
        client.close()
    for port in PORTS:
        node_dir = cluster_root / f"cluster-{BASE_PORT}" / f"node-{port}"
        assert (node_dir / "redis.pid").is_file() and (node_dir / "redis.log").is_file()


def test_fresh_cluster_confirms_a_write_to_its_replicas_at_once(cluster_root: Path) -> None:
    """Right after `up`, a write + WAIT 1 on every primary is acknowledged within 200 ms. Without
    the probe write in `up`, the first WAIT after a replica's full sync often took ~1 s
    (bench/wait_after_sync.py), which failed durable enqueues with a short timeout."""
    url = devcluster.cluster_up(BASE_PORT, root=cluster_root)
    cluster = redis.RedisCluster.from_url(url)
    try:
        first_key: dict[str, str] = {}  # primary -> a key it serves
        for i in range(100):
            first_key.setdefault(cluster.get_node_from_key(f"w{i}").name, f"w{i}")
        assert len(first_key) == 3
        for name, key in first_key.items():
            conn = cluster.get_redis_connection(cluster.get_node(node_name=name))
            conn.set(key, 1)
            assert conn.wait(1, 200) == 1, f"{name}: replica did not acknowledge in 200 ms"
    finally:
        cluster.close()


def test_cluster_up_twice_keeps_the_same_processes(cluster_root: Path) -> None:
    first = devcluster.cluster_up(BASE_PORT, root=cluster_root)
    pids = _pids(cluster_root)

    second = devcluster.cluster_up(BASE_PORT, root=cluster_root)

    assert second == first
    assert _pids(cluster_root) == pids


def test_cluster_up_recovers_after_a_node_was_killed(cluster_root: Path) -> None:
    devcluster.cluster_up(BASE_PORT, root=cluster_root)
    pidfile = cluster_root / f"cluster-{BASE_PORT}" / f"node-{BASE_PORT + 2}" / "redis.pid"
    victim = int(pidfile.read_text())
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + scaled(10)
    while _is_running_redis(victim):
        assert time.monotonic() < deadline, "killed node did not exit"
        time.sleep(0.05)
    assert not devcluster.cluster_status(BASE_PORT, root=cluster_root)[2].alive

    url = devcluster.cluster_up(BASE_PORT, root=cluster_root)

    assert url == f"redis://127.0.0.1:{BASE_PORT}"
    _assert_healthy_cluster(cluster_root)
    assert victim not in _pids(cluster_root)


def test_cluster_down_stops_exactly_our_processes(cluster_root: Path) -> None:
    devcluster.cluster_up(BASE_PORT, root=cluster_root)
    pids = _pids(cluster_root)
    assert all(_is_running_redis(pid) for pid in pids)

    stopped = devcluster.cluster_down(BASE_PORT, root=cluster_root)

    assert stopped == pids
    assert not any(_is_running_redis(pid) for pid in pids)
    assert not (cluster_root / f"cluster-{BASE_PORT}").exists()
    status = devcluster.cluster_status(BASE_PORT, root=cluster_root)
    assert [node.port for node in status] == PORTS
    assert not any(node.alive for node in status)
    assert devcluster.cluster_down(BASE_PORT, root=cluster_root) == []


def test_standalone_up_and_down(standalone_root: Path) -> None:
    url = devcluster.standalone_up(STANDALONE_PORT, root=standalone_root)

    assert url == f"redis://127.0.0.1:{STANDALONE_PORT}"
    client = redis.Redis.from_url(url)
    try:
        assert client.ping()
        assert client.info("cluster")["cluster_enabled"] == 0
    finally:
        client.close()
    status = devcluster.standalone_status(STANDALONE_PORT, root=standalone_root)
    assert status.alive and status.role == "primary" and status.pid is not None
    assert devcluster.standalone_up(STANDALONE_PORT, root=standalone_root) == url
    assert devcluster.standalone_status(STANDALONE_PORT, root=standalone_root).pid == status.pid

    assert devcluster.standalone_down(STANDALONE_PORT, root=standalone_root) == [status.pid]

    assert not _is_running_redis(status.pid)
    assert not devcluster.standalone_status(STANDALONE_PORT, root=standalone_root).alive
    assert devcluster.standalone_down(STANDALONE_PORT, root=standalone_root) == []


def test_missing_redis_server_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("SHARDQ_SERVER_BIN", raising=False)

    with pytest.raises(RedisServerMissingError, match="apt-get install"):
        devcluster.cluster_up(BASE_PORT, root=tmp_path)
    with pytest.raises(RedisServerMissingError, match="apt-get install"):
        devcluster.standalone_up(STANDALONE_PORT, root=tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.fixture
def foreign_listener() -> Iterator[socket.socket]:
    """A plain TCP listener on a cluster port: a process shardq did not start."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", BASE_PORT + 3))
    sock.listen()
    try:
        yield sock
    finally:
        sock.close()


def test_port_held_by_someone_else_is_reported_not_touched(
    cluster_root: Path, foreign_listener: socket.socket
) -> None:
    with pytest.raises(PortInUseError, match=rf"port {BASE_PORT + 3} .*--base-port"):
        devcluster.cluster_up(BASE_PORT, root=cluster_root)

    assert not any(node.alive for node in devcluster.cluster_status(BASE_PORT, root=cluster_root))
    assert foreign_listener.fileno() != -1


def test_cli_standalone_prints_url_last(
    standalone_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHARDQ_DEV_DIR", str(standalone_root))
    runner = CliRunner()

    up = runner.invoke(dev, ["standalone", "up", "--port", str(STANDALONE_PORT)])
    assert up.exit_code == 0, up.output
    assert up.stdout.splitlines()[-1] == f"redis://127.0.0.1:{STANDALONE_PORT}"
    assert re.search(r"starting (redis|valkey)-server", up.stderr), up.stderr

    status = runner.invoke(dev, ["standalone", "status", "--port", str(STANDALONE_PORT)])
    assert status.exit_code == 0 and "primary" in status.stdout

    down = runner.invoke(dev, ["standalone", "down", "--port", str(STANDALONE_PORT)])
    assert down.exit_code == 0 and "stopped" in down.stdout

    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("SHARDQ_SERVER_BIN", raising=False)
    missing = runner.invoke(dev, ["cluster", "up", "--base-port", str(BASE_PORT)])
    assert missing.exit_code == 1 and "apt-get install" in missing.output


def test_the_server_comes_from_server_bin_when_given(
    standalone_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--server-bin DIR` (SHARDQ_SERVER_BIN) picks the server: the one in DIR starts, whatever
    PATH holds; a DIR without one is refused naming DIR, before anything starts."""
    from support import servers

    chosen = tmp_path / "bin"
    chosen.mkdir()
    expected = Path(servers.server()).resolve()
    for exe in (servers.server(), servers.cli()):
        (chosen / Path(exe).name).symlink_to(exe)
    monkeypatch.delenv("SHARDQ_SERVER_BIN", raising=False)
    monkeypatch.setenv("SHARDQ_DEV_DIR", str(standalone_root))
    monkeypatch.setenv("PATH", "")
    runner = CliRunner()
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = runner.invoke(
        dev, ["standalone", "up", "--port", str(STANDALONE_PORT), "--server-bin", str(empty)]
    )
    assert refused.exit_code == 1 and str(empty) in refused.output, refused.output
    assert not devcluster.standalone_status(STANDALONE_PORT, root=standalone_root).alive
    up = runner.invoke(
        dev, ["standalone", "up", "--port", str(STANDALONE_PORT), "--server-bin", str(chosen)]
    )
    try:
        assert up.exit_code == 0, up.output
        status = devcluster.standalone_status(STANDALONE_PORT, root=standalone_root)
        assert status.alive and status.pid is not None
        exe = Path(f"/proc/{status.pid}/exe").resolve()
        assert exe == expected
    finally:
        devcluster.standalone_down(STANDALONE_PORT, root=standalone_root)
