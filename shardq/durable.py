"""Durable enqueue: run a script and WAIT for replicas on the very connection that wrote.

Redis replicates asynchronously: a primary that acknowledges an enqueue and dies before its
replica received it loses the job in the failover.  WAIT after the write closes that window for
callers who ask, but only on the connection that made the write (redis-py's cluster ``wait()``
broadcasts to every node and proves nothing), so the script and WAIT go out in one pipeline on
the partition's own node connection.  Each call waits on its own node, so a partition whose
primary lost its replica (after a failover) cannot stall enqueues to other primaries.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio
from redis.exceptions import NoScriptError, ResponseError

from shardq.connection import node_client_async
from shardq.errors import NotDurableError
from shardq.keys import slot_of
from shardq.scripts import Call

_ATTEMPTS = 3


def _moved(reply: Any) -> bool:
    return isinstance(reply, ResponseError) and str(reply).startswith(("MOVED", "ASK"))


def node_client(client: Any, key: str) -> Any:
    """The plain client of the primary serving ``key`` (the client itself when standalone)."""
    manager = getattr(client, "nodes_manager", None)
    if manager is None:
        return client
    return client.get_redis_connection(manager.get_node_from_slot(slot_of(key)))


def run_durable(client: Any, call: Call, replicas: int, timeout_ms: int) -> tuple[Any, int]:
    """Run one script call, then WAIT on the same connection; returns (reply, replicas acked)."""
    lua, keys, argv = call
    args = lua.args(keys, argv)
    for _ in range(_ATTEMPTS):
        node = node_client(client, keys[0])
        pipe = node.pipeline(transaction=False)
        pipe.execute_command("EVALSHA", lua.sha, *args)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        reply, acked = pipe.execute(raise_on_error=False)
        if isinstance(reply, NoScriptError):
            node.script_load(lua.source)
            continue
        if _moved(reply):
            client.nodes_manager.initialize()
            continue
        if isinstance(reply, Exception):
            raise reply
        return reply, int(acked)
    raise NotDurableError("the partition's slot kept moving; retry the enqueue")


class AsyncNodes:
    """Plain asyncio clients per primary, for WAIT on the connection that wrote."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._nodes: dict[str, redis.asyncio.Redis] = {}

    def for_key(self, key: str) -> Any:
        if getattr(self.client, "nodes_manager", None) is None:
            return self.client
        node = self.client.nodes_manager.get_node_from_slot(slot_of(key))
        existing = self._nodes.get(node.name)
        if existing is None:
            existing = self._nodes[node.name] = node_client_async(node)
        return existing

    async def run_durable(self, call: Call, replicas: int, timeout_ms: int) -> tuple[Any, int]:
        lua, keys, argv = call
        args = lua.args(keys, argv)
        for _ in range(_ATTEMPTS):
            node = self.for_key(keys[0])
            pipe = node.pipeline(transaction=False)
            pipe.execute_command("EVALSHA", lua.sha, *args)
            pipe.execute_command("WAIT", replicas, timeout_ms)
            reply, acked = await pipe.execute(raise_on_error=False)
            if isinstance(reply, NoScriptError):
                await node.script_load(lua.source)
                continue
            if _moved(reply):
                await self.client.nodes_manager.initialize()
                continue
            if isinstance(reply, Exception):
                raise reply
            return reply, int(acked)
        raise NotDurableError("the partition's slot kept moving; retry the enqueue")

    async def aclose(self) -> None:
        for node in self._nodes.values():
            await node.aclose()
        self._nodes.clear()
