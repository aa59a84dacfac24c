"""Wake-up hints over sharded pub/sub.

Scripts publish a hint on a partition's channel (same slot as its keys) when the due head moves
earlier or jobs land in the ready stream.  Hints only make sleepers wake early: a lost hint costs
latency up to the sleeper's bounded fallback interval, never a job. After every (re)subscription
each partition gets one hint, covering any published while no subscription was in place.

In cluster mode each primary gets its own subscriber connection and listening task: redis-py's
cluster pub/sub polls nodes one after another, which would add up to one timeout per node to
every hint.  Subscriptions are regrouped when a slot moves (the server sends ``sunsubscribe``),
after any error, and when a look at the client's slot map (each second) finds a channel's node
changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from redis.exceptions import AskError, MovedError

from shardq.connection import AsyncRedis, is_cluster, node_client_async
from shardq.runtime.supervisor import LoopState, Supervisor
from shardq.store.keys import slot_of

log = logging.getLogger("shardq.hints")

# The longest a pass of the listen loop waits before it reports progress (the stall bound).
PASS_WAIT = 1.0


async def _listen_one(
    client: Any,
    channels: dict[str, int],
    on_hint: Callable[[int], None],
    stop: asyncio.Event,
    regroup: asyncio.Event,
    state: LoopState,
) -> None:
    """Listen on one connection until stop, regroup, a slot move (sunsubscribe) or an error.

    Loops end by checking the events rather than by cancellation: redis-py drops a connection
    whose read was cancelled and, on reconnecting, resubscribes every channel in one SSUBSCRIBE,
    which a cluster rejects as cross-slot.
    """
    by_name = {name.encode(): partition for name, partition in channels.items()}
    pubsub = client.pubsub()
    try:
        for name in channels:  # one per call: SSUBSCRIBE takes channels of one slot only
            await pubsub.ssubscribe(name)
        # Hints published while we were not subscribed (start-up, a slot move, a reconnect) are
        # gone: wake every partition once so nobody waits out the fallback interval for them.
        for each in set(channels.values()):
            on_hint(each)
        while not stop.is_set() and not regroup.is_set():
            state.progress()
            msg = await pubsub.get_message(ignore_subscribe_messages=False, timeout=0.5)
            if not msg:
                continue
            kind = msg.get("type")
            kind = kind.decode() if isinstance(kind, bytes) else kind
            if kind == "smessage":
                channel = msg["channel"]
                raw = channel if isinstance(channel, bytes) else str(channel).encode()
                partition = by_name.get(raw)
                if partition is not None:
                    on_hint(partition)
            elif kind == "sunsubscribe":
                return  # a slot moved away from this node: regroup
    finally:
        regroup.set()  # one listener ending makes all of them regroup together
        with contextlib.suppress(Exception):
            await pubsub.aclose()


def _layout(cluster: Any, channels: dict[str, int]) -> dict[Any, dict[str, int]]:
    """Channels grouped by the node serving their slot, per the client's slot map (redis-py's
    ClusterNode compares and hashes by ``host:port``)."""
    layout: dict[Any, dict[str, int]] = {}
    for name, partition in channels.items():
        node = cluster.nodes_manager.get_node_from_slot(slot_of(name))
        layout.setdefault(node, {})[name] = partition
    return layout


async def listen(
    client: AsyncRedis,
    channels: dict[str, int],
    on_hint: Callable[[int], None],
    supervisor: Supervisor,
    loop: str,
) -> None:
    """Call ``on_hint(partition)`` for each hint until the supervisor stops ``loop``;
    reconnects and regroups by itself after errors and slot moves (the supervisor restarts it
    if it raises)."""
    stop = supervisor.stop_event(loop)
    state = supervisor.state(loop)
    cluster = is_cluster(client)
    refresh = False
    while not stop.is_set():
        groups: list[tuple[Any, dict[str, int]]] = []
        tasks: list[asyncio.Task[None]] = []
        regroup = asyncio.Event()
        try:
            if cluster and refresh:
                # A slot moved or a node failed: group channels by the slot map as it is now,
                # not as this client last saw it (else SSUBSCRIBE meets MOVED).
                await client.nodes_manager.initialize()  # type: ignore[union-attr]
            refresh = False
            layout = _layout(client, channels) if cluster else {}
            groups = (
                [(node_client_async(node), chans) for node, chans in layout.items()]
                if cluster
                else [(client, channels)]
            )
            tasks = [
                asyncio.create_task(_listen_one(c, chans, on_hint, stop, regroup, state))
                for c, chans in groups
            ]
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(regroup.wait(), PASS_WAIT)
                state.ok()
                # Regroup when a listener ended, or when the client's slot map (refreshed by
                # the other loops after a redirect or a failover) moved a channel's node;
                # tearing down working subscriptions otherwise would open a gap for nothing.
                if regroup.is_set() or (cluster and _layout(client, channels) != layout):
                    break
            refresh = regroup.is_set()  # a listener ended early: sunsubscribe or an error
            regroup.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            errors = [r for r in results if isinstance(r, Exception)]
            if errors and not stop.is_set():
                raise errors[0]
        except asyncio.CancelledError:
            raise
        except (MovedError, AskError) as exc:  # the slot map changed under us: re-read it now
            refresh = True
            log.info("hint subscription redirected (%s); regrouping", exc)
            await asyncio.sleep(0.05)
        except Exception:
            # Hints are best effort (the fallback poll covers the gap); the supervisor logs
            # the error and starts this loop again after a backoff.
            raise
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if cluster:
                for node_client, _ in groups:
                    with contextlib.suppress(Exception):
                        await node_client.aclose()
