"""One sharded pub/sub channel, listened to by a caller waiting for something to happen on it
(``Client.result`` waits on a job's result channel): sync and asyncio.

A waiter subscribes first and reads the state after, so an event published in between is not
missed; it then sleeps in :meth:`wait` until a message or the timeout, and reads the state
again either way.  A message is only a wake-up: a lost one (a failover, a slot moved, the
subscription refused) costs the caller the fallback interval it waits at most, never a wrong
answer.  When subscribing fails, :meth:`wait` just sleeps (the caller's fallback re-read is
then its only news).

In a cluster the subscription is made on a plain connection to the primary serving the
channel's slot (as shardq.runtime.hints does): one channel, one node, no cluster pub/sub
machinery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import redis
import redis.asyncio

from shardq.connection import AsyncRedis, SyncRedis, is_cluster, node_client_async
from shardq.store.keys import slot_of

log = logging.getLogger("shardq.channels")


def _is_message(msg: Any) -> bool:
    if not msg:
        return False
    kind = msg.get("type")
    kind = kind.decode() if isinstance(kind, bytes) else kind
    return kind in ("smessage", "message")


class SyncChannel:
    """A subscription to one sharded channel on a sync client (a context manager)."""

    def __init__(self, client: SyncRedis, channel: str) -> None:
        self.channel = channel
        self._pubsub: Any = None
        try:
            if is_cluster(client):
                cluster: Any = client
                node = cluster.nodes_manager.get_node_from_slot(slot_of(channel))
                source: Any = cluster.get_redis_connection(node)
            else:
                source = client
            self._pubsub = source.pubsub()
            self._pubsub.ssubscribe(channel)
        except (redis.RedisError, OSError) as exc:
            log.debug("no subscription to %s (%s): waiting without one", channel, exc)
            self.close()

    def wait(self, timeout: float) -> bool:
        """Sleep until a message on the channel (True) or ``timeout`` seconds (False)."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._pubsub is None:
                time.sleep(left)
                return False
            try:
                msg = self._pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
            except (redis.RedisError, OSError) as exc:
                log.debug("subscription to %s lost (%s)", self.channel, exc)
                self.close()
                continue
            if _is_message(msg):
                return True

    def close(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                self._pubsub.close()
            self._pubsub = None

    def __enter__(self) -> SyncChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncChannel:
    """A subscription to one sharded channel on an asyncio client (``async with``)."""

    def __init__(self, client: AsyncRedis, channel: str) -> None:
        self.client = client
        self.channel = channel
        self._pubsub: Any = None
        self._node: redis.asyncio.Redis | None = None

    async def __aenter__(self) -> AsyncChannel:
        try:
            if is_cluster(self.client):
                cluster: Any = self.client
                node = cluster.nodes_manager.get_node_from_slot(slot_of(self.channel))
                self._node = node_client_async(node)
                source: Any = self._node
            else:
                source = self.client
            self._pubsub = source.pubsub()
            await self._pubsub.ssubscribe(self.channel)
        except (redis.RedisError, OSError) as exc:
            log.debug("no subscription to %s (%s): waiting without one", self.channel, exc)
            await self.aclose()
        return self

    async def wait(self, timeout: float) -> bool:
        """Sleep until a message on the channel (True) or ``timeout`` seconds (False)."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._pubsub is None:
                await asyncio.sleep(left)
                return False
            try:
                msg = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
            except (redis.RedisError, OSError) as exc:
                log.debug("subscription to %s lost (%s)", self.channel, exc)
                await self.aclose()
                continue
            if _is_message(msg):
                return True

    async def aclose(self) -> None:
        pubsub, node = self._pubsub, self._node
        self._pubsub = self._node = None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
        if node is not None:
            with contextlib.suppress(Exception):
                await node.aclose()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
