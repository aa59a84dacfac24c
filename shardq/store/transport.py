"""Runs ops against Redis: alone, pipelined per node, per primary, or with WAIT.

Every op is an FCALL of shardq's functions library (see :mod:`shardq.store.loader`), sent on a
plain connection of the primary that serves its keys, as the client's slot map says.  So a call
costs one round trip (redis-py's cluster client would ask the server for an FCALL's keys first),
and redirects come back to the caller as they are: producers resend after a fresh look at the
slot map (:mod:`shardq.store.retry`), loops on their next round.

Sync (producers, the CLI): :func:`run` sends one call; :func:`run_many` groups calls by node and
sends each node's batch on one connection, all nodes written before any is read, so nodes work
in parallel.  Asyncio (workers, dispatchers, the async producer): :class:`AsyncTransport` does the
same and also runs a batch on one named primary (:meth:`AsyncTransport.run_on`), so a loop per
primary is held up only by its own node.

A node that lacks the library ("Function not found": a new node, FUNCTION FLUSH) gets it with
FUNCTION LOAD and the calls are sent again; a user without the permission gets
:class:`~shardq.errors.FunctionsNotLoadedError` saying to run ``shardq functions load``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio
from redis import exceptions as rx

from shardq.connection import is_cluster, node_client_async
from shardq.errors import FunctionsNotLoadedError
from shardq.store import faults, keys
from shardq.store.keys import slot_of
from shardq.store.loader import library
from shardq.store.op import Call, result

T = TypeVar("T")
Reply = Any  # a raw reply, or the exception a call met

_pack: Any
try:
    from hiredis import pack_command as _pack
except ImportError:  # pragma: no cover - hiredis is a dependency; stay usable without it
    _pack = None

STANDALONE = "standalone"


def _packed(commands: list[tuple[Any, ...]], conn: Any) -> list[bytes]:
    """Commands in wire format (a list of chunks, as ``send_packed_command`` takes them):
    hiredis' C packer when present, else redis-py's."""
    if _pack is not None:
        return [b"".join(_pack(c) for c in commands)]
    packed: list[bytes] = conn.pack_commands(commands)
    return packed


def _not_loaded(node: str, exc: BaseException) -> FunctionsNotLoadedError:
    lib = library().name
    return FunctionsNotLoadedError(
        f"shardq's functions ({lib}) are not loaded on {node} and this Redis user may not load "
        f"them ({exc}): run `shardq functions load` as an admin user (see docs/deploy.md, ACLs)"
    )


def _loaded_or_raise(reply: Any, node: str) -> None:
    if isinstance(reply, BaseException) and "already exists" not in str(reply):
        if faults.is_no_permission(reply):
            raise _not_loaded(node, reply)
        raise reply


# sync ------------------------------------------------------------------------------------------


def node_of(client: Any, key: str) -> Any:
    """The plain client of the primary serving ``key`` (the client itself when standalone)."""
    manager = getattr(client, "nodes_manager", None)
    if manager is None:
        return client
    return client.get_redis_connection(manager.get_node_from_slot(slot_of(key)))


def node_name(client: Any, key: str) -> str:
    """The ``host:port`` of the primary serving ``key`` per a sync client's slot map
    (:data:`STANDALONE` for a single node)."""
    manager = getattr(client, "nodes_manager", None)
    if manager is None:
        return STANDALONE
    return str(manager.get_node_from_slot(slot_of(key)).name)


def most_replicas(client: Any) -> int:
    """The most replicas any primary has per a client's slot map (0 for a single node)."""
    return max(replicas_by_primary(client).values(), default=0)


def replicas_by_primary(client: Any) -> dict[str, int]:
    """Each primary's replicas (``host:port`` -> count) per a client's slot map, the fewest
    over its slots; empty for a single node."""
    manager = getattr(client, "nodes_manager", None)
    if manager is None or not manager.slots_cache:
        return {}
    # redis-py's map shares one node list per slot range: one look per run of slots sharing
    # a list, grouped in C (a Python loop over the 16,384 slots took ~6 ms, and the relay
    # asks once per round and per Waiting batch).
    out: dict[str, int] = {}
    for _, run in itertools.groupby(manager.slots_cache.values(), key=id):
        nodes = next(run)
        if nodes:
            name, n = nodes[0].name, len(nodes) - 1
            out[name] = min(out.get(name, n), n)
    return out


def capped_wait(wait: tuple[int, int] | None, present: int | None) -> tuple[int, int] | None:
    """The ``WAIT replicas timeout`` a node's batch ends with: ``wait`` itself, or with
    ``present`` (the replicas the node has, per the slot map: a Waiting ``per_node`` batch) at
    most that many, and no WAIT for a node with none."""
    if wait is None or present is None or present >= wait[0]:
        return wait
    return (present, wait[1]) if present > 0 else None


def acked_as_asked(asked: int, wait: tuple[int, int] | None, n: int | None) -> int | None:
    """The replicas a capped batch counts as confirmed by (:func:`capped_wait`): all it asked
    for when every replica its node has confirmed it (none to wait for included), else what
    the WAIT answered (None: not answered)."""
    if wait is None:
        return asked
    if n is None:
        return None
    return asked if n >= wait[0] else n


def _routes(manager: Any) -> list[str]:
    """One route key per primary of a slot map: a key of the first slot it serves."""
    first: dict[str, int] = {}
    for slot, nodes in manager.slots_cache.items():
        if nodes:
            name = nodes[0].name
            first[name] = min(first.get(name, slot), slot)
    return [keys.slot_route(slot) for slot in sorted(first.values())]


def primary_routes(client: Any) -> list[str]:
    """A route key per primary (sync client), for a keyless command every primary must run
    (SCAN): a call routed by one goes to that primary, through the usual retries."""
    manager = getattr(client, "nodes_manager", None)
    if manager is None:
        return [keys.slot_route(0)]  # one node serves every slot
    return _routes(manager)


def _address(node: Any) -> str:
    kwargs = getattr(getattr(node, "connection_pool", None), "connection_kwargs", {})
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def refresh_sync(client: Any) -> None:
    """Re-read the slot map of a sync cluster client (no-op when standalone)."""
    manager = getattr(client, "nodes_manager", None)
    if manager is None:
        return
    try:
        manager.initialize()
    except Exception:  # every node down: the next attempt fails and retries again
        return


def load_library(node: Any, name: str = "") -> None:
    """FUNCTION LOAD shardq's library on one node (a no-op if it is there)."""
    try:
        node.execute_command("FUNCTION", "LOAD", library().code)
    except rx.ResponseError as exc:
        _loaded_or_raise(exc, name or _address(node))


def run(client: Any, op: Call[T]) -> T:
    """Run one op with a sync client (cluster or standalone) and parse its reply.

    Raises what the call met: a typed shardq error from the script's code, or redis-py's
    exception (see :mod:`shardq.store.faults`).
    """
    return op.parse(call(client, op))


def call(client: Any, op: Call[Any]) -> Any:
    """The raw reply of one op (the library loaded first where it is missing)."""
    node = node_of(client, op.route_key)
    try:
        return node.execute_command(*op.command())
    except rx.ResponseError as exc:
        if not faults.is_code_missing(exc):
            raise
    load_library(node)
    return node.execute_command(*op.command())


def _by_node(client: Any, ops: Sequence[Call[Any]]) -> list[tuple[str, Any, list[int]]]:
    """Op indexes grouped by the node serving them: (its name, its plain client, indexes)."""
    manager = getattr(client, "nodes_manager", None)
    if manager is None:
        return [(STANDALONE, client, list(range(len(ops))))]
    groups: dict[str, tuple[str, Any, list[int]]] = {}
    for i, o in enumerate(ops):
        node = manager.get_node_from_slot(slot_of(o.route_key))
        if node.name not in groups:
            groups[node.name] = (node.name, client.get_redis_connection(node), [])
        groups[node.name][2].append(i)
    return list(groups.values())


def run_many(client: Any, ops: Sequence[Call[T]]) -> list[T | BaseException]:
    """Run many ops, one pipeline per node; parsed results (or exceptions) in op order.

    A call that met a missing library, a redirect or a broken connection is sent again once,
    alone, after a fresh look at the slot map (a call not ``safe_to_repeat`` only when the
    fault proves nothing was written).
    """
    return complete(client, ops, send_and_read(client, ops, None)[0])


def complete(client: Any, ops: Sequence[Call[T]], replies: list[Reply]) -> list[T | BaseException]:
    """Parsed results of ops whose raw replies were read (see :func:`run_many`); a call that
    met a missing library, a redirect or a broken connection is sent again, alone."""
    again = [
        i
        for i, r in enumerate(replies)
        if isinstance(r, BaseException)
        and (
            faults.is_code_missing(r)
            or (faults.is_transient(r) and (ops[i].safe_to_repeat or faults.surely_not_written(r)))
        )
    ]
    if again:
        if any(faults.is_redirect(replies[i]) for i in again):
            refresh_sync(client)
        for i in again:
            try:
                replies[i] = call(client, ops[i])
            except Exception as exc:  # reported per call, like a pipeline does
                replies[i] = exc
    return [result(r, o.parse) for r, o in zip(replies, ops, strict=True)]


def send_and_read(
    client: Any, ops: Sequence[Call[Any]], wait: tuple[int, int] | None, per_node: bool = False
) -> tuple[list[Reply], list[int | None]]:
    """Each node's ops on one connection, plus ``WAIT replicas timeout`` after them when asked
    (``per_node``: capped at the replicas each node has, :class:`~shardq.store.op.Waiting`).

    Returns the raw replies (or exceptions) in op order and, per op, how many replicas
    acknowledged its node's batch (None when the WAIT was not answered).  All nodes are written
    before any is read and wait at once, so one slow node does not stall the others' sends.
    A node that lacks the library gets it and its batch is sent again (with the WAIT after it).
    """
    return send(client, ops, wait, per_node).read()


class Sent:
    """Ops written to their nodes, replies not read yet (see :func:`send`)."""

    def __init__(
        self,
        client: Any,
        ops: Sequence[Call[Any]],
        wait: tuple[int, int] | None,
        present: dict[str, int] | None = None,
    ) -> None:
        """``present``: each primary's replicas, when each node's WAIT is capped at them."""
        self.client = client
        self.ops = ops
        self.wait = wait
        self.present = present
        self.replies: list[Reply] = [None] * len(ops)
        self.acked: list[int | None] = [None] * len(ops)
        self.sent: list[tuple[str, Any, Any, Any, list[int]]] = []

    def _wait_of(self, name: str) -> tuple[int, int] | None:
        if self.present is None:
            return self.wait
        return capped_wait(self.wait, self.present.get(name))

    def write(self, groups: list[tuple[str, Any, list[int]]]) -> None:
        ops, replies = self.ops, self.replies
        for name, node_client, indexes in groups:
            pool = node_client.connection_pool
            try:
                conn = pool.get_connection()
            except Exception as exc:  # connect refused: the node is down
                for i in indexes:
                    replies[i] = exc
                continue
            try:
                commands = [ops[i].command() for i in indexes]
                wait = self._wait_of(name)
                if wait is not None:
                    commands.append(("WAIT", *wait))
                conn.send_packed_command(_packed(commands, conn))
            except Exception as exc:
                conn.disconnect()
                pool.release(conn)
                for i in indexes:
                    replies[i] = exc
                continue
            self.sent.append((name, node_client, pool, conn, indexes))

    def _read_sent(self) -> list[tuple[str, Any, list[int]]]:
        """Read every written batch; returns the groups whose node lacked the library."""
        replies, acked = self.replies, self.acked
        missing: list[tuple[str, Any, list[int]]] = []
        sent, self.sent = self.sent, []
        for name, node_client, pool, conn, indexes in sent:
            broken: BaseException | None = None
            for i in indexes:
                if broken is not None:
                    replies[i] = broken
                    continue
                try:
                    replies[i] = conn.read_response()
                except rx.ResponseError as exc:
                    replies[i] = exc
                except Exception as exc:
                    conn.disconnect()
                    broken = replies[i] = exc
            wait = self._wait_of(name)
            if self.wait is not None and broken is None:
                n: int | None = None
                try:
                    if wait is not None:
                        n = int(conn.read_response())
                    if self.present is not None:
                        n = acked_as_asked(self.wait[0], wait, n)
                    for i in indexes:
                        if not isinstance(replies[i], BaseException):
                            acked[i] = n
                except Exception:
                    conn.disconnect()
            pool.release(conn)
            if any(faults.is_code_missing(replies[i]) for i in indexes):
                missing.append((name, node_client, indexes))
        return missing

    def read(self) -> tuple[list[Reply], list[int | None]]:
        """The raw replies in op order and the replicas that acknowledged each (see
        :func:`send_and_read`); a node that lacked the library gets it and its batch again."""
        missing = self._read_sent()
        if missing:
            again: list[tuple[str, Any, list[int]]] = []
            for name, node_client, indexes in missing:
                try:
                    load_library(node_client)
                except Exception as exc:  # reported per call: the caller decides on resends
                    for i in indexes:
                        self.replies[i] = exc
                    continue
                again.append((name, node_client, indexes))
            self.write(again)
            self._read_sent()
        return self.replies, self.acked


def send(
    client: Any,
    ops: Sequence[Call[Any]],
    wait: tuple[int, int] | None = None,
    per_node: bool = False,
) -> Sent:
    """Write each node's ops on one connection without reading the replies: the caller can
    prepare its next batch while Redis works on this one, then :meth:`Sent.read` it.  The
    connections stay out of their pools until then.  ``per_node``: each node's WAIT is capped
    at the replicas it has (:class:`~shardq.store.op.Waiting`)."""
    sent = Sent(client, ops, wait, replicas_by_primary(client) if per_node else None)
    sent.write(_by_node(client, ops))
    return sent


# asyncio ---------------------------------------------------------------------------------------


class AsyncTransport:
    """Runs ops with an asyncio client; knows which primary serves which partition.

    One plain client per primary (same credentials and TLS as the cluster client) carries the
    per-node batches, so a batch for one primary never waits for another.  The slot map is the
    cluster client's; :meth:`refresh` re-reads it (coalesced: many loops that meet one failover
    cause one refresh).
    """

    REFRESH_MIN_INTERVAL = 0.25

    def __init__(self, client: Any) -> None:
        self.client = client
        self.cluster = is_cluster(client)
        self._nodes: dict[str, redis.asyncio.Redis] = {}
        self._refresh: asyncio.Task[None] | None = None
        self._refreshed_at = 0.0
        # The primary that last failed to answer: a refresh asks it for the slot map last, so a
        # paused or sleeping node does not hold every refresh for a socket timeout.
        self._unreachable: str | None = None
        #: Called after each refresh of the slot map (the hint subscriptions regroup at once).
        self.on_refresh: list[Callable[[], None]] = []

    # topology ------------------------------------------------------------------------------

    def node_name(self, key: str) -> str:
        """The ``host:port`` of the primary serving ``key``, per the current slot map."""
        if not self.cluster:
            return STANDALONE
        return str(self.client.nodes_manager.get_node_from_slot(slot_of(key)).name)

    def slot_node_name(self, slot: int) -> str:
        """:meth:`node_name` of a key of ``slot``, the CRC16 already known."""
        if not self.cluster:
            return STANDALONE
        return str(self.client.nodes_manager.get_node_from_slot(slot).name)

    def primaries(self) -> list[str]:
        if not self.cluster:
            return [STANDALONE]
        return sorted(n.name for n in self.client.get_primaries())

    def primary_routes(self) -> list[str]:
        """A route key per primary (see the sync :func:`primary_routes`)."""
        if not self.cluster:
            return [keys.slot_route(0)]
        return _routes(self.client.nodes_manager)

    def node_client(self, name: str) -> Any:
        """A plain asyncio client of one primary (the client itself when standalone)."""
        if not self.cluster:
            return self.client
        existing = self._nodes.get(name)
        if existing is None:
            node = self.client.get_node(node_name=name)
            if node is None:
                raise rx.ConnectionError(f"{name} is no longer part of the cluster")
            existing = self._nodes[name] = node_client_async(node)
        return existing

    async def refresh(self) -> None:
        """Re-read the slot map (after a redirect or a dead node); concurrent calls share one."""
        if not self.cluster:
            return
        if self._refresh is None or self._refresh.done():
            if time.monotonic() - self._refreshed_at < self.REFRESH_MIN_INTERVAL:
                return
            self._refresh = asyncio.get_running_loop().create_task(self._do_refresh())
        await asyncio.shield(self._refresh)

    async def _do_refresh(self) -> None:
        try:
            await self.client.nodes_manager.initialize(last_failed_node_name=self._unreachable)
        finally:
            self._refreshed_at = time.monotonic()
            for hook in self.on_refresh:
                hook()
        live = {n.name for n in self.client.get_nodes()}
        for name in [n for n in self._nodes if n not in live]:
            stale = self._nodes.pop(name)
            await _close_quietly(stale)

    async def load_library(self, node: str) -> None:
        """FUNCTION LOAD shardq's library on one primary (a no-op if it is there)."""
        try:
            await self.node_client(node).execute_command("FUNCTION", "LOAD", library().code)
        except rx.ResponseError as exc:
            _loaded_or_raise(exc, node)

    # running -------------------------------------------------------------------------------

    async def run(self, op: Call[T]) -> T:
        """Run one op on the primary serving its keys and parse its reply."""
        return op.parse(await self.call(op))

    async def call(self, op: Call[Any]) -> Any:
        node = self.node_name(op.route_key)
        client = self.node_client(node)
        try:
            return await client.execute_command(*op.command())
        except rx.ResponseError as exc:
            if not faults.is_code_missing(exc):
                raise
        await self.load_library(node)
        return await client.execute_command(*op.command())

    async def run_on(self, node: str, ops: Sequence[Call[T]]) -> list[T | BaseException]:
        """Run a batch on one primary's connection; parsed results or exceptions in op order.

        Calls that meet a redirect come back as their exception: the caller refreshes the slot
        map and regroups.  A missing library is loaded on the node and those calls resent.
        """
        if not ops:
            return []
        try:
            client = self.node_client(node)
        except Exception as exc:
            return [exc] * len(ops)
        replies, _ = await _pipeline(client, ops)
        if any(isinstance(r, BaseException) and faults.is_unreachable(r) for r in replies):
            self._unreachable = node
        retry = [i for i, r in enumerate(replies) if faults.is_code_missing(r)]
        if retry:
            try:
                await self.load_library(node)
            except FunctionsNotLoadedError as exc:
                return [
                    exc if i in retry else result(r, o.parse)
                    for i, (r, o) in enumerate(zip(replies, ops, strict=True))
                ]
            again, _ = await _pipeline(client, [ops[i] for i in retry])
            for i, reply in zip(retry, again, strict=True):
                replies[i] = reply
        return [result(r, o.parse) for r, o in zip(replies, ops, strict=True)]

    async def run_waiting(
        self, ops: Sequence[Call[T]], replicas: int, timeout_ms: int, per_node: bool = False
    ) -> tuple[list[T | BaseException], list[int | None]]:
        """Run ops per primary, each batch followed by ``WAIT replicas timeout`` on the
        connection that wrote it; all primaries at once.  Returns results and, per op, how many
        replicas acknowledged its batch (None when its batch was not acknowledged at all).
        ``per_node``: each batch's WAIT is capped at the replicas its primary has
        (:class:`~shardq.store.op.Waiting`)."""
        out: list[T | BaseException] = [RuntimeError("not run")] * len(ops)
        acked: list[int | None] = [None] * len(ops)
        groups = self.group(ops)
        present = replicas_by_primary(self.client) if per_node else None

        async def one(node: str, idx: list[int]) -> None:
            batch = [ops[i] for i in idx]
            try:
                client = self.node_client(node)
            except Exception as exc:
                for i in idx:
                    out[i] = exc
                return
            wait: tuple[int, int] | None = (replicas, timeout_ms)
            if present is not None:
                wait = capped_wait(wait, present.get(node))
            replies, n = await _pipeline(client, batch, wait=wait)
            if any(faults.is_code_missing(r) for r in replies):
                # Load the library, then send the whole batch again: a resent enqueue is
                # recognised, and the WAIT must follow the writes on one connection.
                await self.load_library(node)
                replies, n = await _pipeline(client, batch, wait=wait)
            if present is not None:
                n = acked_as_asked(replicas, wait, n)
            for i, reply in zip(idx, replies, strict=True):
                out[i] = result(reply, ops[i].parse)
                acked[i] = n if not isinstance(reply, BaseException) else None

        await asyncio.gather(*(one(node, idx) for node, idx in groups.items()))
        return out, acked

    def group(self, ops: Sequence[Call[Any]]) -> dict[str, list[int]]:
        """Op indexes by the primary serving them."""
        groups: dict[str, list[int]] = {}
        for i, o in enumerate(ops):
            groups.setdefault(self.node_name(o.route_key), []).append(i)
        return groups

    async def run_many(self, ops: Sequence[Call[T]]) -> list[T | BaseException]:
        """Run ops on every node at once (one batch per primary); results in op order.

        Calls that met a redirect or a broken connection are sent once more, alone, after a
        fresh look at the slot map (those not ``safe_to_repeat`` only when the fault proves
        nothing was written).
        """
        if not ops:
            return []
        out: list[T | BaseException] = [RuntimeError("not run")] * len(ops)
        groups = self.group(ops)
        batches = await asyncio.gather(
            *(self.run_on(node, [ops[i] for i in idx]) for node, idx in groups.items())
        )
        retry: list[int] = []
        for idx, results in zip(groups.values(), batches, strict=True):
            for i, r in zip(idx, results, strict=True):
                out[i] = r
                if (
                    isinstance(r, BaseException)
                    and faults.is_transient(r)
                    and (ops[i].safe_to_repeat or faults.surely_not_written(r))
                ):
                    retry.append(i)
        if retry:
            await self.refresh()
            again = await asyncio.gather(*(self.run(ops[i]) for i in retry), return_exceptions=True)
            for i, r in zip(retry, again, strict=True):
                out[i] = r
        return out

    async def aclose(self) -> None:
        for client in self._nodes.values():
            await _close_quietly(client)
        self._nodes.clear()


async def _pipeline(
    client: Any, ops: Sequence[Call[Any]], wait: tuple[int, int] | None = None
) -> tuple[list[Reply], int | None]:
    """Send ops on one connection of ``client`` and read every reply (or the exception); with
    ``wait``, a WAIT after them whose answer (replicas that acknowledged) comes back second."""
    pool = client.connection_pool
    try:
        conn = await pool.get_connection()
    except Exception as exc:
        return [exc] * len(ops), None
    replies: list[Reply] = []
    acked: int | None = None
    try:
        commands = [o.command() for o in ops]
        if wait is not None:
            commands.append(("WAIT", *wait))
        try:
            await conn.send_packed_command(_packed(commands, conn), check_health=False)
        except Exception as exc:
            await conn.disconnect()
            return [exc] * len(ops), None
        for _ in ops:
            try:
                replies.append(await conn.read_response())
            except rx.ResponseError as exc:
                replies.append(exc)
            except BaseException as exc:
                # The connection is in an unknown state: drop it; the calls not read are lost
                # replies (their effect unknown), reported as this error.
                await conn.disconnect()
                if isinstance(exc, asyncio.CancelledError):
                    raise
                replies.extend([exc] * (len(ops) - len(replies)))
                return replies, None
        if wait is not None:
            try:
                acked = int(await conn.read_response())
            except BaseException as exc:
                await conn.disconnect()
                if isinstance(exc, asyncio.CancelledError):
                    raise
    finally:
        await pool.release(conn)
    return replies, acked


async def _close_quietly(client: Any) -> None:
    try:
        await client.aclose()
    except Exception:  # closing a client of a dead node can fail; nothing to do about it
        return
