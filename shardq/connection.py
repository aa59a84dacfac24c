"""Opens redis-py clients (sync or asyncio, cluster or standalone) from RedisSettings.

The same URL works for both topologies: unless the settings say otherwise, the seed node is
asked (INFO cluster) whether it runs in cluster mode.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.driver_info import DriverInfo
from redis.retry import Retry

from shardq.config import RedisSettings

SyncRedis = redis.Redis | redis.cluster.RedisCluster
AsyncRedis = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster

# Transient faults (a failover, a slot moving) are retried briefly inside redis-py; the
# long-running loops of dispatchers and workers add their own back-off on top.
_RETRY_ATTEMPTS = 3

# How long a call waits for one of ``max_connections`` to come free.  redis-py's default pools
# fail at once ("Too many connections") when a burst wants more: a worker settling a few hundred
# failures together, or a producer gathering many enqueues.  Blocking pools make the burst
# queue on the client instead; a call still waiting after this long fails with a (transient)
# ConnectionError.
POOL_WAIT = 10.0

# No CLIENT SETINFO on connect.  Servers since Redis 7.2 (every Valkey) have it, and the shipped
# least-privilege roles (shardq.admin.acl) cannot grant it while Redis 7.0, which has no such
# subcommand, refuses an ACL rule naming it: sent, each connection's refusal would fill the
# server's ACL log.  (Left to redis-py, each new connection also looked the package's version up
# in its installed metadata: a scan of sys.path, 10-40 ms of blocked event loop when a stalled
# primary made every process reconnect at once.)
_DRIVER_INFO: DriverInfo | None = None


def _pooled(kwargs: dict[str, Any], ssl_class: type, plain_class: type) -> dict[str, Any]:
    """Pool keyword arguments from client ones: ``ssl`` becomes the connection class."""
    kwargs = dict(kwargs)
    kwargs["connection_class"] = ssl_class if kwargs.pop("ssl", False) else plain_class
    return kwargs


def _standalone_kwargs(settings: RedisSettings, asyncio: bool = False) -> dict[str, Any]:
    kwargs = settings.connection_kwargs()
    kwargs["driver_info"] = _DRIVER_INFO
    # redis-py 8.2 converts a sync Retry given to an asyncio client, with a warning: each kind
    # of client gets its own.
    retry_class = AsyncRetry if asyncio else Retry
    kwargs["retry"] = retry_class(ExponentialBackoff(cap=0.5, base=0.01), _RETRY_ATTEMPTS)
    return kwargs


def _standalone(settings: RedisSettings) -> redis.Redis:
    """A sync standalone client whose pool waits for a free connection."""
    kwargs = _pooled(
        _standalone_kwargs(settings), redis.connection.SSLConnection, redis.connection.Connection
    )
    pool = redis.BlockingConnectionPool(timeout=POOL_WAIT, **kwargs)  # type: ignore[no-untyped-call]
    return redis.Redis.from_pool(pool)


def _standalone_async(settings: RedisSettings) -> redis.asyncio.Redis:
    """An asyncio standalone client whose pool waits for a free connection."""
    kwargs = _pooled(
        _standalone_kwargs(settings, asyncio=True),
        redis.asyncio.connection.SSLConnection,
        redis.asyncio.connection.Connection,
    )
    return redis.asyncio.Redis.from_pool(
        redis.asyncio.BlockingConnectionPool(timeout=POOL_WAIT, **kwargs)
    )


def _cluster_kwargs(settings: RedisSettings) -> dict[str, Any]:
    kwargs = settings.connection_kwargs()
    kwargs.pop("max_connections")
    kwargs["max_connections"] = settings.max_connections
    kwargs["driver_info"] = _DRIVER_INFO
    return kwargs


class _SyncCluster(redis.cluster.RedisCluster):
    """redis-py's sync cluster client, whose close() also disconnects the nodes' pools: when
    they come from connection_pool_class (see :func:`_sync_cluster_kwargs`) the node clients do
    not own them, and ``RedisCluster.close`` alone leaves their connections open."""

    def close(self) -> None:
        manager = getattr(self, "nodes_manager", None)
        nodes = list(manager.nodes_cache.values()) if manager is not None else []
        super().close()
        for node in nodes:
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()


def _sync_cluster_kwargs(settings: RedisSettings) -> dict[str, Any]:
    # The sync cluster client builds its nodes' pools from connection_pool_class only when it
    # is given a URL (the asyncio cluster client has no such option: shardq's asyncio calls go
    # through node_client_async instead).
    kwargs = _cluster_kwargs(settings)
    host, port = kwargs.pop("host"), kwargs.pop("port")
    scheme = "rediss" if settings.ssl else "redis"
    host = f"[{host}]" if ":" in host else host
    return {
        **kwargs,
        "url": f"{scheme}://{host}:{port}",
        "connection_pool_class": redis.BlockingConnectionPool,
    }


def connect(settings: RedisSettings) -> SyncRedis:
    """A sync client for the settings' topology."""
    cluster = settings.cluster
    if cluster is None:
        probe = redis.Redis(**_standalone_kwargs(settings))
        try:
            cluster = probe.info("cluster").get("cluster_enabled") == 1
        finally:
            probe.close()
    if cluster:
        return _SyncCluster(**_sync_cluster_kwargs(settings))
    return _standalone(settings)


async def connect_async(settings: RedisSettings) -> AsyncRedis:
    """An asyncio client for the settings' topology."""
    cluster = settings.cluster
    if cluster is None:
        probe = redis.asyncio.Redis(**_standalone_kwargs(settings, asyncio=True))
        try:
            info = await probe.info("cluster")
            cluster = info.get("cluster_enabled") == 1
        finally:
            await probe.aclose()
    if cluster:
        client: AsyncRedis = redis.asyncio.cluster.RedisCluster(**_cluster_kwargs(settings))
        await client.initialize()
        return client
    return _standalone_async(settings)


def is_cluster(client: Any) -> bool:
    """Whether a redis-py client talks to a cluster."""
    return isinstance(client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster)


# Connection settings a per-node client copies from the cluster client's node.
_NODE_CONNECTION_KEYS = (
    "username",
    "password",
    "ssl_ca_certs",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cert_reqs",
    "ssl_check_hostname",
    "socket_connect_timeout",
    "socket_timeout",
    "credential_provider",
    "client_name",
    "driver_info",
)


def node_client_async(node: Any) -> redis.asyncio.Redis:
    """A plain asyncio client of one cluster node (an asyncio ClusterNode), with the same
    credentials, TLS settings and connection limit, for per-primary batches and commands that
    must stay on one connection (sharded pub/sub, WAIT after a write).  Its pool waits for a
    free connection (:data:`POOL_WAIT`) rather than failing a burst."""
    kwargs = {k: v for k, v in node.connection_kwargs.items() if k in _NODE_CONNECTION_KEYS}
    pool = redis.asyncio.BlockingConnectionPool(
        host=node.host,
        port=node.port,
        max_connections=node.max_connections,
        timeout=POOL_WAIT,
        connection_class=node.connection_class,
        **kwargs,
    )
    return redis.asyncio.Redis.from_pool(pool)


def as_text(value: Any) -> str:
    """A reply value as text: redis-py returns bytes unless ``decode_responses`` is set.  Bytes
    that are not UTF-8 (a record written by hand) are shown with replacement characters rather
    than failing whoever reads them."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def ping(client: SyncRedis) -> None:
    """PING (every primary, in cluster mode): whether Redis answers at all, for health checks.
    Not a command on shardq's keys, so not a store call (tests/unit/test_store.py allows it
    here)."""
    client.ping()


async def ping_async(client: AsyncRedis) -> None:
    """:func:`ping` with an asyncio client."""
    await client.ping()  # type: ignore[misc]
