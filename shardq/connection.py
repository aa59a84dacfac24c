"""Opens redis-py clients (sync or asyncio, cluster or standalone) from RedisSettings.

The same URL works for both topologies: unless the settings say otherwise, the seed node is
asked (INFO cluster) whether it runs in cluster mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from shardq.config import RedisSettings

_log = logging.getLogger("shardq.connection")

SyncRedis = redis.Redis | redis.cluster.RedisCluster
AsyncRedis = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster

# Transient faults (a failover, a slot moving) are retried briefly inside redis-py; the
# long-running loops of dispatchers and workers add their own back-off on top.
_RETRY_ATTEMPTS = 3


def _standalone_kwargs(settings: RedisSettings) -> dict[str, Any]:
    kwargs = settings.connection_kwargs()
    kwargs["retry"] = Retry(ExponentialBackoff(cap=0.5, base=0.01), _RETRY_ATTEMPTS)
    return kwargs


def _cluster_kwargs(settings: RedisSettings) -> dict[str, Any]:
    kwargs = settings.connection_kwargs()
    kwargs.pop("max_connections")
    kwargs["max_connections"] = settings.max_connections
    return kwargs


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
        return redis.cluster.RedisCluster(**_cluster_kwargs(settings))
    return redis.Redis(**_standalone_kwargs(settings))


async def connect_async(settings: RedisSettings) -> AsyncRedis:
    """An asyncio client for the settings' topology."""
    cluster = settings.cluster
    if cluster is None:
        probe = redis.asyncio.Redis(**_standalone_kwargs(settings))
        try:
            info = await probe.info("cluster")
            cluster = info.get("cluster_enabled") == 1
        finally:
            await probe.aclose()
    if cluster:
        client: AsyncRedis = redis.asyncio.cluster.RedisCluster(**_cluster_kwargs(settings))
        await client.initialize()
        return client
    return redis.asyncio.Redis(**_standalone_kwargs(settings))


def is_cluster(client: Any) -> bool:
    """Whether a redis-py client talks to a cluster."""
    return isinstance(client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster)


# Connection settings a per-node client copies from the cluster client's node.
_NODE_CONNECTION_KEYS = (
    "username",
    "password",
    "ssl",
    "ssl_ca_certs",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cert_reqs",
    "ssl_check_hostname",
    "socket_connect_timeout",
    "socket_timeout",
    "credential_provider",
)


def node_client_async(node: Any) -> redis.asyncio.Redis:
    """A plain asyncio client of one cluster node (an asyncio ClusterNode), with the same
    credentials and TLS settings, for commands that must stay on one connection (sharded
    pub/sub, WAIT after a write)."""
    kwargs = {k: v for k, v in node.connection_kwargs.items() if k in _NODE_CONNECTION_KEYS}
    return redis.asyncio.Redis(host=node.host, port=node.port, **kwargs)


def as_text(value: Any) -> str:
    """A reply value as text: redis-py returns bytes unless ``decode_responses`` is set.  Bytes
    that are not UTF-8 (a record written by hand) are shown with replacement characters rather
    than failing whoever reads them."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


async def connect_async_waiting(settings: RedisSettings, stop: asyncio.Event) -> AsyncRedis | None:
    """:func:`connect_async`, retried while no Redis node answers (a process started during an
    outage waits for Redis instead of exiting); None if ``stop`` is set first.  Errors that
    waiting cannot fix (bad credentials, a bad URL) are raised at once."""
    from shardq.logs import log_event
    from shardq.runtime.supervisor import backoff_delay
    from shardq.store.faults import is_transient

    failures = 0
    while not stop.is_set():
        try:
            return await connect_async(settings)
        except Exception as exc:
            if not is_transient(exc):
                raise
            failures += 1
            if failures == 1 or failures % 20 == 0:
                log_event(
                    _log,
                    "startup.waiting_for_redis",
                    logging.WARNING,
                    url=settings.url,
                    error=f"{type(exc).__name__}: {exc}",
                    attempts=failures,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff_delay(failures))
    return None
