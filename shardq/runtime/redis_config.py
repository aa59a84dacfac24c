"""Checks each primary's configuration for settings that lose jobs without an error.

* ``maxmemory-policy`` other than ``noeviction``: when memory fills, Redis deletes keys to make
  room (``allkeys-*`` any key, ``volatile-*`` keys with an expiry: leases and idempotency
  keys).  Jobs, due entries and ready entries vanish silently.  Under ``noeviction`` a full
  Redis refuses writes instead, and shardq turns that into ``RedisFullError``.
* ``appendonly no`` when durability was asked for (``require_appendonly``): a restarted primary
  comes back with its last RDB snapshot, or empty.
* a server older than shardq needs (:data:`MIN_VERSIONS`: Redis 7.0, Valkey 7.2): refused with
  the version found and the one needed, never overridden.  A server of another name is judged
  by the Redis version it reports compatibility with.

Workers and dispatchers check at start (refusing to start on an evicting policy unless told
``allow_evicting_redis``) and then every ``redis_check_interval`` seconds, exporting
``shardq_redis_misconfigured{node,check}`` and logging ``redis.misconfigured`` when a finding
appears or clears.  ``shardq redis check`` and ``shardq queue create`` check too.  INFO is all
it needs (every role may run it; CONFIG GET is an admin command).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardq.connection import is_cluster
from shardq.errors import MisconfiguredRedisError
from shardq.logs import log_event
from shardq.store.transport import AsyncTransport

if TYPE_CHECKING:
    from prometheus_client import Gauge

log = logging.getLogger("shardq.redis_config")

SAFE_POLICY = "noeviction"


@functools.cache
def misconfigured_gauge() -> Gauge:
    """``shardq_redis_misconfigured``, registered by the first process that watches its Redis
    (:class:`ConfigWatch`): a producer only reads the settings, and need not load the
    metrics library to do so."""
    from prometheus_client import Gauge

    return Gauge(
        "shardq_redis_misconfigured",
        "1 while a primary runs with a setting that can lose jobs silently (check: eviction = "
        "maxmemory-policy is not noeviction; appendonly = AOF off while require_appendonly is "
        "set; version = a server older than shardq needs).",
        ["node", "check"],
    )


#: The oldest release of each server shardq runs on (Functions, XAUTOCLAIM, XTRIM MINID, sharded
#: pub/sub: Redis 7.0; Valkey began at 7.2).  Other servers: their reported Redis version.
MIN_VERSIONS: dict[str, tuple[int, ...]] = {"redis": (7, 0, 0), "valkey": (7, 2, 0)}
SERVER_NAMES = {"redis": "Redis", "valkey": "Valkey"}


def version_tuple(text: str) -> tuple[int, ...]:
    """``7.0.15`` as (7, 0, 15); the parts that are not numbers read as 0."""
    return tuple(int(p) if p.isdigit() else 0 for p in text.split(".")[:3])


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """What INFO says about one primary."""

    node: str
    maxmemory_policy: str
    maxmemory: int
    aof_enabled: bool
    server: str = "redis"
    """INFO's ``server_name`` (``valkey``), else ``redis``."""
    version: str = "0"
    """The server's own version (``valkey_version`` on Valkey)."""
    redis_version: str = "0"
    """The Redis version the server reports compatibility with."""

    @property
    def describe_server(self) -> str:
        """``Redis 7.0.15``, ``Valkey 8.1.8``."""
        return f"{SERVER_NAMES.get(self.server, self.server)} {self.version}"

    def too_old(self) -> str | None:
        """Why shardq cannot run on this server, or None."""
        known = self.server in MIN_VERSIONS
        found = self.version if known else self.redis_version
        if version_tuple(found) >= MIN_VERSIONS[self.server if known else "redis"]:
            return None
        reported = "" if known else f" (compatible with Redis {self.redis_version})"
        return (
            f"{self.describe_server}{reported} is older than shardq needs (Redis >= 7.0 or "
            "Valkey >= 7.2): upgrade the server"
        )


@dataclass(frozen=True, slots=True)
class Finding:
    node: str
    check: str  # "version" | "eviction" | "appendonly"
    detail: str


def _node_config(node: str, memory: dict[str, Any], persistence: dict[str, Any]) -> NodeConfig:
    server = str(memory.get("server_name") or "redis").lower()
    redis_version = str(memory.get("redis_version") or "0")
    return NodeConfig(
        node=node,
        maxmemory_policy=str(memory.get("maxmemory_policy", "unknown")),
        maxmemory=int(memory.get("maxmemory", 0) or 0),
        aof_enabled=str(persistence.get("aof_enabled", "0")) == "1",
        server=server,
        version=str(memory.get(f"{server}_version") or redis_version),
        redis_version=redis_version,
    )


def read_sync(client: Any) -> list[NodeConfig]:
    """Every primary's configuration, through a sync redis-py client (cluster or standalone)."""
    if not is_cluster(client):
        info = client.info()
        return [_node_config("standalone", info, info)]
    per_node = client.info(target_nodes=client.PRIMARIES)
    return [_node_config(name, info, info) for name, info in sorted(per_node.items())]


async def read_async_client(client: Any) -> list[NodeConfig]:
    """Every primary's configuration, through an asyncio redis-py client."""
    if not is_cluster(client):
        info = await client.info()
        return [_node_config("standalone", info, info)]
    per_node = await client.info(target_nodes=client.PRIMARIES)
    return [_node_config(name, info, info) for name, info in sorted(per_node.items())]


async def read_async(transport: AsyncTransport) -> list[NodeConfig]:
    """Every primary's configuration, one INFO per primary."""
    out = []
    for node in transport.primaries():
        info = await transport.node_client(node).info()
        out.append(_node_config(node, info, info))
    return out


def findings(nodes: list[NodeConfig], require_appendonly: bool) -> list[Finding]:
    found = []
    for n in nodes:
        if (old := n.too_old()) is not None:
            found.append(Finding(n.node, "version", old))
        if n.maxmemory_policy != SAFE_POLICY:
            found.append(
                Finding(
                    n.node,
                    "eviction",
                    f"maxmemory-policy is {n.maxmemory_policy}: when memory fills Redis deletes "
                    "keys and jobs vanish without an error; set `maxmemory-policy noeviction` "
                    "(a full Redis then refuses enqueues with RedisFullError)",
                )
            )
        if require_appendonly and not n.aof_enabled:
            found.append(
                Finding(
                    n.node,
                    "appendonly",
                    "appendonly is off: a restarted primary loses the writes since its last "
                    "snapshot; set `appendonly yes` (and `appendfsync everysec` or always)",
                )
            )
    return found


def refusal(found: list[Finding], allow_eviction: bool) -> MisconfiguredRedisError | None:
    """The error that stops a start, or None when every finding is allowed."""
    blocking = [f for f in found if f.check != "eviction" or not allow_eviction]
    if not blocking:
        return None
    lines = "; ".join(f"{f.node}: {f.detail}" for f in blocking)
    if all(f.check == "version" for f in blocking):
        return MisconfiguredRedisError(f"shardq cannot run on this server: {lines}")
    override = (
        " (or pass --allow-evicting-redis / SHARDQ_*_ALLOW_EVICTING_REDIS=true for a "
        "throwaway setup)"
        if any(f.check == "eviction" for f in blocking)
        else ""
    )
    return MisconfiguredRedisError(f"Redis would lose jobs silently: {lines}{override}")


class ConfigWatch:
    """Checks at start and periodically; exports the gauge and logs changes."""

    def __init__(
        self,
        transport: AsyncTransport,
        role: str,
        queue: str,
        *,
        allow_eviction: bool,
        require_appendonly: bool,
    ) -> None:
        self.transport = transport
        self.role = role
        self.queue = queue
        self.allow_eviction = allow_eviction
        self.require_appendonly = require_appendonly
        self.current: set[tuple[str, str]] = set()
        self.findings: list[Finding] = []
        self.gauge = misconfigured_gauge()

    async def at_start(self) -> None:
        """Raise MisconfiguredRedisError for a setting that loses jobs (unless allowed)."""
        await self.round()
        error = refusal(self.findings, self.allow_eviction)
        if error is not None:
            raise error

    async def round(self) -> None:
        nodes = await read_async(self.transport)
        found = findings(nodes, self.require_appendonly)
        now = {(f.node, f.check) for f in found}
        for f in found:
            self.gauge.labels(f.node, f.check).set(1)
            if (f.node, f.check) not in self.current:
                log_event(
                    log,
                    "redis.misconfigured",
                    logging.ERROR,
                    role=self.role,
                    queue=self.queue,
                    node=f.node,
                    check=f.check,
                    detail=f.detail,
                    allowed=f.check == "eviction" and self.allow_eviction,
                )
        for node, check in self.current - now:
            self.gauge.labels(node, check).set(0)
            log_event(
                log,
                "redis.config_fixed",
                logging.WARNING,
                role=self.role,
                queue=self.queue,
                node=node,
                check=check,
            )
        for n in nodes:
            for check in ("version", "eviction", "appendonly"):
                if (n.node, check) not in now:
                    self.gauge.labels(n.node, check).set(0)
        self.current, self.findings = now, found


async def check_at_start(watch: ConfigWatch) -> None:
    """:meth:`ConfigWatch.at_start`, except that Redis not answering does not stop the start
    (the periodic check runs once it does); a misconfiguration does."""
    from shardq.store.faults import is_transient

    try:
        await watch.at_start()
    except MisconfiguredRedisError:
        raise
    except Exception as exc:
        if not is_transient(exc):
            raise
        log_event(log, "redis.config_unchecked", logging.WARNING, error=f"{exc}")
