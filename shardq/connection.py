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
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from shardq.config import RedisSettings

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
