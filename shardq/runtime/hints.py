"""Wake-up hints over sharded pub/sub.

Scripts publish a hint on a partition's channel (same slot as its keys) when the due head moves
earlier or jobs land in the ready stream; a promote's ready hint carries the id of the last
entry it added, so a worker that has read past it already ignores it.  Hints only make
sleepers wake early: a lost hint costs latency up to the sleeper's bounded fallback interval,
never a job. After every (re)subscription each partition gets one hint, covering any
published while no subscription was in place.

In cluster mode each primary gets its own subscriber connection and listening task: redis-py's
cluster pub/sub polls nodes one after another, which would add up to one timeout per node to
every hint.  A node's subscription is made again when a slot moves (the server sends
``sunsubscribe``), after an error on it, and when a look at the client's slot map (each second)
finds its channels changed; the other nodes' subscriptions stay as they are, so a failover of
one primary costs the others no hint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from shardq.connection import AsyncRedis, is_cluster, node_client_async
from shardq.runtime.supervisor import LoopState, Supervisor, log_redirect
from shardq.runtime.waits import wait_event_until
from shardq.store.faults import is_migration
from shardq.store.keys import slot_of

log = logging.getLogger("shardq.hints")

# How long a pass of the listen loop waits before it reports progress (the stall bound) and
# looks at the slot map again: to the process's first grid moment at least this far off, so up
# to a tick more; also the longest it waits for a closing listener before it cancels it.  The
# slot map look is a backstop: a slot move ends the moved channels' subscription
# (sunsubscribe), a failed node its listener, and a refresh of the slot map by any loop wakes
# the listen loop (AsyncTransport.on_refresh), each at once.
PASS_WAIT = 2.0
# The longest the channels' grouping by node is kept without being made again when nothing
# said it changed (a redirect that patched the slot map in place: see listen).
LAYOUT_RECHECK = 30.0
# The shortest one read of a subscription waits for a message before the listener looks at its
# stop and end events again; it waits on to the process's next grid moment (the supervisor's
# tick), where the periodic loops wake the process anyway.  Each return is a wake-up: at 0.5 s
# off the grid, two a second per subscribed primary on an idle queue.  A listener being
# replaced (its node's channels changed: a slot moved to it) or stopped ends within this and a
# tick (under PASS_WAIT plus a tick, and the supervisor's 2 s stop grace cancels it after
# that), so a regrouping may take up to it longer.
LISTEN_WAIT = 1.0
# A node whose subscription failed is subscribed again after this long.
ERROR_BACKOFF = 0.5
# Most SSUBSCRIBE commands written to a subscriber connection in one go.  Each takes the
# channel of one slot (a cluster refuses channels of several slots in one call), and a
# partition's channel has a slot of its own, so a node serving 5,461 partitions of a queue of
# 16,384 takes 5,461 commands: sent one call at a time (redis-py's ssubscribe: a write and a
# drain each, with its bookkeeping) that took tens of seconds at start-up; written as pipelined
# batches, without waiting for the replies (they come in as subscribe messages the listener
# skips), it takes a fraction of a second.
SUBSCRIBE_BATCH = 1024


async def _listen_one(
    client: Any,
    channels: dict[str, int],
    on_hint: Callable[[int, bytes | None], None],
    stop: asyncio.Event,
    end: asyncio.Event,
    state: LoopState,
    ended: asyncio.Event,
    on_tick: Callable[[float], float],
) -> None:
    """Listen on one connection until stop, ``end``, a slot move (sunsubscribe) or an error;
    sets ``ended`` when it returns.

    Loops end by checking the events rather than by cancellation: redis-py drops a connection
    whose read was cancelled and, on reconnecting, resubscribes every channel in one SSUBSCRIBE,
    which a cluster rejects as cross-slot.
    """
    by_name = {name.encode(): partition for name, partition in channels.items()}
    pubsub = client.pubsub()
    try:
        await _ssubscribe_all(pubsub, list(channels))
        # Hints published while we were not subscribed (start-up, a slot move, a reconnect) are
        # gone: wake every partition once so nobody waits out the fallback interval for them.
        for each in set(channels.values()):
            on_hint(each, None)
        while not stop.is_set() and not end.is_set():
            state.progress()
            now = time.monotonic()
            wait = max(0.0, on_tick(now + LISTEN_WAIT) - now)
            msg = await pubsub.get_message(ignore_subscribe_messages=False, timeout=wait)
            if not msg:
                continue
            kind = msg.get("type")
            kind = kind.decode() if isinstance(kind, bytes) else kind
            if kind == "smessage":
                channel = msg["channel"]
                raw = channel if isinstance(channel, bytes) else str(channel).encode()
                partition = by_name.get(raw)
                if partition is not None:
                    data = msg.get("data")
                    on_hint(partition, data if isinstance(data, bytes) else None)
            elif kind == "sunsubscribe":
                return  # a slot moved away from this node: regroup
    finally:
        try:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
        finally:
            # The listen loop looks at once: a new subscription for this node.  Set once the
            # task is all but done (after the close), so that look finds it ended: set
            # before, the look found the task still running and left it until the next pass.
            ended.set()


async def _ssubscribe_all(pubsub: Any, names: list[str]) -> None:
    """SSUBSCRIBE to every channel of ``names`` on ``pubsub``'s connection: one command per
    channel (SSUBSCRIBE takes channels of one slot only), pipelined (:data:`SUBSCRIBE_BATCH`).

    The first goes through redis-py's ``ssubscribe``, which opens the connection; the others
    are written on it as packed commands, and recorded in the pubsub's table of shard channels
    as ``ssubscribe`` records them (redis-py reads their confirmations as messages)."""
    if not names:
        return
    await pubsub.ssubscribe(names[0])
    conn = pubsub.connection
    for start in range(1, len(names), SUBSCRIBE_BATCH):
        chunk = names[start : start + SUBSCRIBE_BATCH]
        packed = conn.pack_commands([("SSUBSCRIBE", name) for name in chunk])
        await conn.send_packed_command(packed, check_health=False)
        # Keyed as redis-py keys them (its _normalize_keys: encoded, decoded as the client's
        # responses are), so its reconnect and its message handling find them.
        enc = pubsub.encoder
        added = {enc.decode(enc.encode(name)): None for name in chunk}
        pubsub.shard_channels.update(added)
        pubsub.pending_unsubscribe_shard_channels.difference_update(added)


def _layout(cluster: Any, channels: dict[str, int]) -> dict[str, tuple[Any, dict[str, int]]]:
    """Channels grouped by the name of the node serving their slot, per the client's slot map
    (with the node itself, to open a connection to it)."""
    layout: dict[str, tuple[Any, dict[str, int]]] = {}
    for name, partition in channels.items():
        node = cluster.nodes_manager.get_node_from_slot(slot_of(name))
        layout.setdefault(node.name, (node, {}))[1][name] = partition
    return layout


@dataclass(eq=False)
class _Listener:
    """One node's subscriber: its channels, its connection, the task listening on it."""

    channels: dict[str, int]
    client: Any
    end: asyncio.Event
    task: asyncio.Task[None]

    async def close(self) -> BaseException | None:
        """Stop it (by its event, see :func:`_listen_one`); returns what it raised, if anything."""
        self.end.set()
        _, pending = await asyncio.wait([self.task], timeout=PASS_WAIT)
        for task in pending:
            task.cancel()
        results = await asyncio.gather(self.task, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.client.aclose()
        error = results[0]
        return error if isinstance(error, Exception) else None


async def listen(
    client: AsyncRedis,
    channels: dict[str, int],
    on_hint: Callable[[int, bytes | None], None],
    supervisor: Supervisor,
    loop: str,
    refresh: Callable[[], Awaitable[None]] | None = None,
    changed: asyncio.Event | None = None,
) -> None:
    """Call ``on_hint(partition, message)`` for each hint (message None for the one every
    partition gets after a (re)subscription) until the supervisor stops ``loop``;
    reconnects and regroups by itself after errors and slot moves (the supervisor restarts it
    if it raises).  ``refresh`` re-reads the slot map (the process's coalesced refresh, see
    :meth:`~shardq.store.transport.AsyncTransport.refresh`); by default the client's own.
    ``changed``: set when ``channels`` changed (a :class:`HintHub`), to look at once."""
    if not is_cluster(client):
        await _listen_standalone(client, channels, on_hint, supervisor, loop, changed)
        return
    cluster: Any = client
    stop = supervisor.stop_event(loop)
    state = supervisor.state(loop)
    reread = refresh or cluster.nodes_manager.initialize
    listeners: dict[str, _Listener] = {}
    retry_at: dict[str, float] = {}
    changed = changed or asyncio.Event()  # a listener ended (or channels changed): look at once
    stale_map = False
    # The grouping is made again only when it may have changed: a listener ended or the
    # channels changed (changed), a new slot map (a new slots_cache), or LAYOUT_RECHECK passed
    # (a redirect patches the map in place).  Made every pass, it was the largest piece of an
    # idle process's Python at 16,384 partitions (a slot and a node for every channel).
    layout: dict[str, tuple[Any, dict[str, int]]] = {}
    layout_key: tuple[int, int] | None = None
    layout_at = 0.0
    try:
        while not stop.is_set():
            state.progress()
            regroup = changed.is_set() or stale_map
            if stale_map:
                # A slot moved or a node failed: group channels by the slot map as it is now,
                # not as this client last saw it (else SSUBSCRIBE meets MOVED).
                stale_map = False
                await reread()
            key = (id(cluster.nodes_manager.slots_cache), len(channels))
            if regroup or key != layout_key or time.monotonic() - layout_at > LAYOUT_RECHECK:
                layout, layout_key, layout_at = _layout(cluster, channels), key, time.monotonic()
            # Only the nodes whose channels changed (a failover, a slot move) or whose listener
            # ended get a new subscription: the others keep theirs, so a stalled or failing
            # primary never opens a gap in the hints of the healthy ones.
            closing = [
                name
                for name, listener in listeners.items()
                if listener.task.done()
                or name not in layout
                or (
                    layout[name][1] is not listener.channels
                    and layout[name][1] != listener.channels
                )
            ]
            # Closed together: one stuck node's listener (its server asleep) costs the pass at
            # most PASS_WAIT, once.
            errors = await asyncio.gather(*(listeners.pop(name).close() for name in closing))
            for name, error in zip(closing, errors, strict=True):
                if error is None:
                    continue
                if is_migration(error):
                    log_redirect(log, error, loop=loop, from_node=name)
                else:
                    log.warning("hint subscription on %s failed: %s; resubscribing", name, error)
                    retry_at[name] = time.monotonic() + ERROR_BACKOFF
                stale_map = True
            changed.clear()
            now = time.monotonic()
            for name, (node, chans) in layout.items():
                if name in listeners or retry_at.get(name, 0.0) > now:
                    continue
                end = asyncio.Event()
                node_client = node_client_async(node)
                task = asyncio.create_task(
                    _listen_one(
                        node_client, chans, on_hint, stop, end, state, changed, supervisor.on_tick
                    )
                )
                listeners[name] = _Listener(chans, node_client, end, task)
            state.ok()
            # A node whose subscription failed is tried again at its time, not at the pass's.
            now = time.monotonic()
            retries = [at for name, at in retry_at.items() if at > now and name in layout]
            await wait_event_until(changed, min([supervisor.on_tick(now + PASS_WAIT), *retries]))
    finally:
        await asyncio.gather(*(listener.close() for listener in listeners.values()))


async def _listen_standalone(
    client: AsyncRedis,
    channels: dict[str, int],
    on_hint: Callable[[int, bytes | None], None],
    supervisor: Supervisor,
    loop: str,
    changed: asyncio.Event | None = None,
) -> None:
    stop = supervisor.stop_event(loop)
    state = supervisor.state(loop)
    while True:
        if changed is not None:
            changed.clear()
        end = asyncio.Event()
        listening = dict(channels)
        task = asyncio.create_task(
            _listen_one(client, listening, on_hint, stop, end, state, end, supervisor.on_tick)
        )
        try:
            while not stop.is_set() and not task.done():
                if changed is not None and changed.is_set():
                    break  # the channels changed (or a stop): subscribe to them as they are now
                pass_wait = supervisor.on_tick(time.monotonic() + PASS_WAIT) - time.monotonic()
                if changed is None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(task), pass_wait)
                else:
                    flag = asyncio.ensure_future(changed.wait())
                    try:
                        await asyncio.wait(
                            [task, flag], timeout=pass_wait, return_when=asyncio.FIRST_COMPLETED
                        )
                    finally:
                        flag.cancel()
                state.ok()
        finally:
            end.set()
            results = await asyncio.gather(task, return_exceptions=True)
        if isinstance(results[0], Exception) and not stop.is_set():
            raise results[0]
        if stop.is_set() or changed is None or not changed.is_set():
            return


class HintHub:
    """One hint subscription for several roles of one process (a worker of several queues):
    each role adds its channels with its own callback, and one :meth:`listen` loop serves them
    all, with one subscriber connection per primary whatever the number of queues.

    Channels added or removed are listened on from the loop's next pass (it is woken); the
    nodes whose channels changed subscribe again, and every partition of theirs gets one
    wake-up, as after any (re)subscription."""

    def __init__(self) -> None:
        #: channel -> route id: the dict the listen loop reads each pass (changed in place).
        self.channels: dict[str, int] = {}
        self._routes: dict[int, tuple[int, Callable[[int, bytes | None], None], int]] = {}
        self._next_route = 0
        self._next_token = 0
        self.changed = asyncio.Event()

    def add(self, channels: dict[str, int], on_hint: Callable[[int, bytes | None], None]) -> int:
        """Route hints of ``channels`` (channel -> partition) to ``on_hint``; returns the
        token :meth:`remove` takes."""
        token = self._next_token
        self._next_token += 1
        for name, partition in channels.items():
            route = self._next_route
            self._next_route += 1
            self._routes[route] = (token, on_hint, partition)
            self.channels[name] = route
        self.changed.set()
        return token

    def remove(self, token: int) -> None:
        """Stop routing the channels added under ``token``."""
        gone = {route for route, (owner, _, _) in self._routes.items() if owner == token}
        for route in gone:
            del self._routes[route]
        for name in [n for n, r in self.channels.items() if r in gone]:
            del self.channels[name]
        self.changed.set()

    def dispatch(self, route: int, message: bytes | None) -> None:
        target = self._routes.get(route)
        if target is not None:
            target[1](target[2], message)

    async def listen(
        self,
        client: AsyncRedis,
        supervisor: Supervisor,
        loop: str,
        refresh: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """:func:`listen` on every channel added, until the supervisor stops ``loop``."""
        await listen(client, self.channels, self.dispatch, supervisor, loop, refresh, self.changed)
