"""Runs calls against Redis: alone, pipelined per node, on one named primary, or with WAIT.

Every call (:mod:`shardq.store.op`) is sent on a plain connection of the primary that serves its
route key, as the client's slot map says.  So an FCALL costs one round trip (redis-py's cluster
client would ask the server for its keys first), and redirects come back to the caller as they
are: the facades' runner resends after a fresh look at the slot map (:mod:`shardq.store.retry`),
loops on their next round.

Two transports of one shape: :class:`SyncTransport` over a sync client (producers, the CLI, the
admin tools) and :class:`AsyncTransport` over an asyncio one (workers, dispatchers, the async
producer); tests/unit/test_transport.py keeps their methods alike.  Both return parsed results
(per call its parsed reply, or the exception it met):

- ``run(call)``: one call, raising what it met;
- ``run_many(calls)``: one pipeline per node, every node written before any is read;
- ``send(calls)``: the same, written now and read by the returned :class:`SyncSent` /
  :class:`AsyncSent`'s ``results()`` later, so a caller writes its next round while Redis works
  on this one (the runners' :class:`~shardq.store.op.Rounds`);
- ``run_waiting(calls, replicas, timeout_ms)``: each node's calls followed by ``WAIT`` on the
  connection that wrote them;
- ``run_on(node, calls)``: a batch on one named primary, so a loop per primary is held up only by
  its own node.

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


def _address(node: Any) -> str:
    kwargs = getattr(getattr(node, "connection_pool", None), "connection_kwargs", {})
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def _again(ops: Sequence[Call[Any]], replies: Sequence[Reply]) -> list[int]:
    """The calls to send once more, alone: those that met a missing library, and those that met
    a transient fault (one not ``safe_to_repeat`` only when the fault proves nothing was
    written)."""
    return [
        i
        for i, r in enumerate(replies)
        if isinstance(r, BaseException)
        and (
            faults.is_code_missing(r)
            or (faults.is_transient(r) and (ops[i].safe_to_repeat or faults.surely_not_written(r)))
        )
    ]


def _needs_refresh(replies: Sequence[Reply], again: list[int]) -> bool:
    """Whether the slot map is read again before :func:`_again`'s resends (a fault other than a
    missing library: the call may belong elsewhere now)."""
    return any(not faults.is_code_missing(replies[i]) for i in again)


def _parsed(ops: Sequence[Call[T]], replies: Sequence[Reply]) -> list[T | BaseException]:
    return [result(r, o.parse) for r, o in zip(replies, ops, strict=True)]


class _SlotMap:
    """What both transports know of the cluster, from the client's slot map: which primary
    serves a key, the primaries, their replicas."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.cluster = is_cluster(client)

    def node_name(self, key: str) -> str:
        """The ``host:port`` of the primary serving ``key`` (:data:`STANDALONE` for a single
        node)."""
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
        """A route key per primary, for a keyless command every primary must run (SCAN): a
        call routed by one goes to that primary, through the usual retries."""
        if not self.cluster:
            return [keys.slot_route(0)]  # one node serves every slot
        first: dict[str, int] = {}
        for slot, nodes in self.client.nodes_manager.slots_cache.items():
            if nodes:
                name = nodes[0].name
                first[name] = min(first.get(name, slot), slot)
        return [keys.slot_route(slot) for slot in sorted(first.values())]

    def replicas_by_primary(self) -> dict[str, int]:
        """Each primary's replicas (``host:port`` -> count), the fewest over its slots; empty
        for a single node."""
        manager = self.client.nodes_manager if self.cluster else None
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

    def most_replicas(self) -> int:
        """The most replicas any primary has (0 for a single node)."""
        return max(self.replicas_by_primary().values(), default=0)

    def group(self, ops: Sequence[Call[Any]]) -> dict[str, list[int]]:
        """Op indexes by the primary serving them."""
        groups: dict[str, list[int]] = {}
        for i, o in enumerate(ops):
            groups.setdefault(self.node_name(o.route_key), []).append(i)
        return groups

    def label(self, node: str) -> str:
        """How an error names ``node`` (a single node: its address)."""
        return node if self.cluster else _address(self.client)


class _Written:
    """What both kinds of written batch hold: the calls, the connections written and not read
    yet, the replies as they are read, and per call how many replicas acknowledged its node's
    batch."""

    def __init__(
        self,
        transport: Any,
        ops: Sequence[Call[Any]],
        wait: tuple[int, int] | None = None,
        present: dict[str, int] | None = None,
    ) -> None:
        """``present``: each primary's replicas, when each node's WAIT is capped at them."""
        self.transport = transport
        self.written: list[tuple[str, Any, Any, list[int]]] = []  # node, pool, conn, indexes
        self.ops = ops
        self.wait = wait
        self.present = present
        self.replies: list[Reply] = [None] * len(ops)
        self.acked: list[int | None] = [None] * len(ops)

    def wait_of(self, node: str) -> tuple[int, int] | None:
        if self.present is None:
            return self.wait
        return capped_wait(self.wait, self.present.get(node))

    def commands(self, node: str, indexes: list[int]) -> list[tuple[Any, ...]]:
        commands = [self.ops[i].command() for i in indexes]
        wait = self.wait_of(node)
        if wait is not None:
            commands.append(("WAIT", *wait))
        return commands

    def fail(self, indexes: list[int], exc: BaseException) -> None:
        for i in indexes:
            self.replies[i] = exc

    def store(
        self, node: str, indexes: list[int], replies: list[Reply], n: int | None, read: bool
    ) -> None:
        """Keep a node's replies and, when its WAIT was ``read``, what it answered."""
        if self.wait is not None and read and self.present is not None:
            n = acked_as_asked(self.wait[0], self.wait_of(node), n)
        for i, reply in zip(indexes, replies, strict=True):
            self.replies[i] = reply
            if self.wait is not None and read and not isinstance(reply, BaseException):
                self.acked[i] = n

    def missing(self, node: str, indexes: list[int]) -> list[int]:
        """The calls of ``node`` to send again once it has the library: the whole batch when a
        WAIT follows it (it must follow the writes on one connection), else those that met the
        missing library."""
        lacking = [i for i in indexes if faults.is_code_missing(self.replies[i])]
        return indexes if lacking and self.wait is not None else lacking

    def lacking_library(self, indexes: list[int], exc: BaseException) -> None:
        for i in indexes:
            if faults.is_code_missing(self.replies[i]):
                self.replies[i] = exc


# sync ------------------------------------------------------------------------------------------


class SyncTransport(_SlotMap):
    """Runs calls with a sync client (cluster or standalone); see the module docstring.

    Stateless but for the client: the cluster client holds the slot map and a plain client per
    node, whose pools carry the per-node batches."""

    def node_client(self, name: str) -> Any:
        """The plain client of one primary (the client itself when standalone)."""
        if not self.cluster:
            return self.client
        node = self.client.get_node(node_name=name)
        if node is None:
            raise rx.ConnectionError(f"{name} is no longer part of the cluster")
        return self.client.get_redis_connection(node)

    def refresh(self) -> None:
        """Re-read the slot map (no-op when standalone; every node down: the next call fails
        and its caller retries)."""
        if not self.cluster:
            return
        try:
            self.client.nodes_manager.initialize()
        except Exception:
            return

    def load_library(self, node: str) -> None:
        """FUNCTION LOAD shardq's library on one primary (a no-op if it is there)."""
        try:
            self.node_client(node).execute_command("FUNCTION", "LOAD", library().code)
        except rx.ResponseError as exc:
            _loaded_or_raise(exc, self.label(node))

    def run(self, op: Call[T]) -> T:
        """Run one call and parse its reply; raises what it met: a typed shardq error from the
        script's code, or redis-py's exception (see :mod:`shardq.store.faults`)."""
        return op.parse(self.call(op))

    def call(self, op: Call[Any]) -> Any:
        """The raw reply of one call (the library loaded first where it is missing)."""
        node = self.node_name(op.route_key)
        client = self.node_client(node)
        try:
            return client.execute_command(*op.command())
        except rx.ResponseError as exc:
            if not faults.is_code_missing(exc):
                raise
        self.load_library(node)
        return client.execute_command(*op.command())

    def run_on(self, node: str, ops: Sequence[Call[T]]) -> list[T | BaseException]:
        """Run a batch on one primary's connection; results in op order.  A call that met a
        redirect comes back as its exception: the caller refreshes and regroups."""
        sent = SyncSent(self, ops)
        sent.write({node: list(range(len(ops)))} if ops else {})
        return _parsed(ops, sent.read()[0])

    def run_many(self, ops: Sequence[Call[T]]) -> list[T | BaseException]:
        """Run calls, one pipeline per node; results in op order (see :meth:`SyncSent.results`
        for the calls sent again)."""
        return self.send(ops).results()

    def send(self, ops: Sequence[Call[T]]) -> SyncSent:
        """Write each node's calls on one connection without reading the replies: the caller
        can prepare its next batch while Redis works on this one, then read them with
        :meth:`SyncSent.results`.  The connections stay out of their pools until then."""
        sent = SyncSent(self, ops)
        sent.write(self.group(ops))
        return sent

    def run_waiting(
        self, ops: Sequence[Call[T]], replicas: int, timeout_ms: int, per_node: bool = False
    ) -> tuple[list[T | BaseException], list[int | None]]:
        """Each node's calls on one connection, followed by ``WAIT replicas timeout``; all nodes
        written before any is read.  Returns results and, per call, how many replicas
        acknowledged its node's batch (None when not answered).  ``per_node``: each batch's
        WAIT is capped at the replicas its primary has (:class:`~shardq.store.op.Waiting`)."""
        present = self.replicas_by_primary() if per_node else None
        sent = SyncSent(self, ops, (replicas, timeout_ms), present)
        sent.write(self.group(ops))
        replies, acked = sent.read()
        return _parsed(ops, replies), acked


class SyncSent(_Written):
    """Calls written to their nodes, replies not read yet (:meth:`SyncTransport.send`)."""

    transport: SyncTransport

    def write(self, groups: dict[str, list[int]]) -> None:
        for node, indexes in groups.items():
            try:
                pool = self.transport.node_client(node).connection_pool
                conn = pool.get_connection()
            except Exception as exc:  # connect refused: the node is down
                self.fail(indexes, exc)
                continue
            try:
                conn.send_packed_command(_packed(self.commands(node, indexes), conn))
            except Exception as exc:
                conn.disconnect()
                pool.release(conn)
                self.fail(indexes, exc)
                continue
            self.written.append((node, pool, conn, indexes))

    def _read_written(self) -> dict[str, list[int]]:
        """Read every written batch; returns the calls to send again once their node has the
        library."""
        missing: dict[str, list[int]] = {}
        written, self.written = self.written, []
        for node, pool, conn, indexes in written:
            replies: list[Reply] = []
            n: int | None = None
            read = False
            try:
                for _ in indexes:
                    try:
                        replies.append(conn.read_response())
                    except rx.ResponseError as exc:
                        replies.append(exc)
                if self.wait_of(node) is not None:
                    n = int(conn.read_response())
                read = True
            except Exception as exc:
                # The connection is in an unknown state: the calls not read are lost replies.
                conn.disconnect()
                if len(replies) < len(indexes):
                    replies.extend([exc] * (len(indexes) - len(replies)))
            finally:
                pool.release(conn)
            self.store(node, indexes, replies, n, read)
            if again := self.missing(node, indexes):
                missing[node] = again
        return missing

    def read(self) -> tuple[list[Reply], list[int | None]]:
        """The raw replies in op order and the replicas that acknowledged each; a node that
        lacked the library gets it and its calls again."""
        missing = self._read_written()
        if missing:
            again: dict[str, list[int]] = {}
            for node, indexes in missing.items():
                try:
                    self.transport.load_library(node)
                except Exception as exc:  # reported per call: the caller decides on resends
                    self.lacking_library(indexes, exc)
                    continue
                again[node] = indexes
            self.write(again)
            self._read_written()
        return self.replies, self.acked

    def results(self) -> list[Any]:
        """Parsed results in op order.  A call that met a missing library, a redirect or a
        broken connection is sent again once, alone, after a fresh look at the slot map (one
        not ``safe_to_repeat`` only when the fault proves nothing was written)."""
        replies, _ = self.read()
        again = _again(self.ops, replies)
        if again:
            if _needs_refresh(replies, again):
                self.transport.refresh()
            for i in again:
                try:
                    replies[i] = self.transport.call(self.ops[i])
                except Exception as exc:  # reported per call, like a pipeline does
                    replies[i] = exc
        return _parsed(self.ops, replies)

    def abandon(self) -> None:
        """Drop the connections of batches not read (the caller gave up on their replies)."""
        written, self.written = self.written, []
        for _, pool, conn, _ in written:
            conn.disconnect()
            pool.release(conn)


# asyncio ---------------------------------------------------------------------------------------


class AsyncTransport(_SlotMap):
    """Runs calls with an asyncio client (cluster or standalone); see the module docstring.

    One plain client per primary (same credentials and TLS as the cluster client) carries the
    per-node batches, so a batch for one primary never waits for another.  The slot map is the
    cluster client's; :meth:`refresh` re-reads it (coalesced: many loops that meet one failover
    cause one refresh).
    """

    REFRESH_MIN_INTERVAL = 0.25

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self._nodes: dict[str, redis.asyncio.Redis] = {}
        self._refresh: asyncio.Task[None] | None = None
        self._refreshed_at = 0.0
        #: The primary that last failed to answer: a refresh asks it for the slot map last, so
        #: a paused or sleeping node does not hold every refresh for a socket timeout.
        self.unreachable: str | None = None
        #: Called after each refresh of the slot map (the hint subscriptions regroup at once).
        self.on_refresh: list[Callable[[], None]] = []

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
            await self.client.nodes_manager.initialize(last_failed_node_name=self.unreachable)
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
            _loaded_or_raise(exc, self.label(node))

    async def run(self, op: Call[T]) -> T:
        """Run one call on the primary serving its keys and parse its reply."""
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
        sent = await self._written(AsyncSent(self, ops), {node: list(range(len(ops)))})
        return _parsed(ops, (await sent.read())[0])

    async def run_many(self, ops: Sequence[Call[T]]) -> list[T | BaseException]:
        """Run calls on every node at once (one batch per primary); results in op order (see
        :meth:`AsyncSent.results` for the calls sent again)."""
        if not ops:
            return []
        return await (await self.send(ops)).results()

    async def send(self, ops: Sequence[Call[T]]) -> AsyncSent:
        """Write each primary's calls on one connection without reading the replies (see
        :meth:`SyncTransport.send`); read them with :meth:`AsyncSent.results`."""
        return await self._written(AsyncSent(self, ops), self.group(ops))

    async def run_waiting(
        self, ops: Sequence[Call[T]], replicas: int, timeout_ms: int, per_node: bool = False
    ) -> tuple[list[T | BaseException], list[int | None]]:
        """Run calls per primary, each batch followed by ``WAIT replicas timeout`` on the
        connection that wrote it; all primaries at once (see :meth:`SyncTransport.run_waiting`)."""
        present = self.replicas_by_primary() if per_node else None
        sent = AsyncSent(self, ops, (replicas, timeout_ms), present)
        replies, acked = await (await self._written(sent, self.group(ops))).read()
        return _parsed(ops, replies), acked

    async def _written(self, sent: AsyncSent, groups: dict[str, list[int]]) -> AsyncSent:
        try:
            await sent.write(groups)
        except BaseException:
            await sent.abandon()
            raise
        return sent

    async def aclose(self) -> None:
        for client in self._nodes.values():
            await _close_quietly(client)
        self._nodes.clear()


class AsyncSent(_Written):
    """Calls written to their primaries, replies not read yet (:meth:`AsyncTransport.send`).
    Each primary is written and read on its own, all at once, so a slow one holds up no other."""

    transport: AsyncTransport

    def _note(self, node: str, replies: Sequence[Reply]) -> None:
        if any(isinstance(r, BaseException) and faults.is_unreachable(r) for r in replies):
            self.transport.unreachable = node

    async def write(self, groups: dict[str, list[int]]) -> None:
        await _each(self._write_one(node, indexes) for node, indexes in groups.items())

    async def _write_one(self, node: str, indexes: list[int]) -> None:
        try:
            pool = self.transport.node_client(node).connection_pool
            conn = await pool.get_connection()
        except Exception as exc:
            self.fail(indexes, exc)
            self._note(node, [exc])
            return
        try:
            commands = self.commands(node, indexes)
            await conn.send_packed_command(_packed(commands, conn), check_health=False)
        except Exception as exc:
            await conn.disconnect()
            await pool.release(conn)
            self.fail(indexes, exc)
            self._note(node, [exc])
            return
        except BaseException:
            await pool.release(conn)
            raise
        self.written.append((node, pool, conn, indexes))

    async def _read_written(self) -> dict[str, list[int]]:
        """Read every written batch, all at once; returns the calls to send again once their
        node has the library."""
        missing: dict[str, list[int]] = {}
        try:
            await _each(self._read_one(entry, missing) for entry in list(self.written))
        finally:
            await self.abandon()  # a batch whose reader never started (cancelled)
        return missing

    async def _read_one(
        self, entry: tuple[str, Any, Any, list[int]], missing: dict[str, list[int]]
    ) -> None:
        self.written.remove(entry)
        node, pool, conn, indexes = entry
        replies: list[Reply] = []
        n: int | None = None
        read = False
        try:
            for _ in indexes:
                try:
                    replies.append(await conn.read_response())
                except rx.ResponseError as exc:
                    replies.append(exc)
            if self.wait_of(node) is not None:
                n = int(await conn.read_response())
            read = True
        except BaseException as exc:
            # The connection is in an unknown state: drop it; the calls not read are lost
            # replies (their effect unknown), reported as this error.
            await conn.disconnect()
            if isinstance(exc, asyncio.CancelledError):
                raise
            if len(replies) < len(indexes):
                replies.extend([exc] * (len(indexes) - len(replies)))
        finally:
            await pool.release(conn)
        self.store(node, indexes, replies, n, read)
        self._note(node, replies)
        if again := self.missing(node, indexes):
            missing[node] = again

    async def read(self) -> tuple[list[Reply], list[int | None]]:
        """The raw replies in op order and the replicas that acknowledged each; a node that
        lacked the library gets it and its calls again (see :meth:`SyncSent.read`)."""
        missing = await self._read_written()
        if missing:
            again: dict[str, list[int]] = {}
            for node, indexes in missing.items():
                try:
                    await self.transport.load_library(node)
                except Exception as exc:
                    self.lacking_library(indexes, exc)
                    continue
                again[node] = indexes
            try:
                await self.write(again)
            except BaseException:
                await self.abandon()
                raise
            await self._read_written()
        return self.replies, self.acked

    async def results(self) -> list[Any]:
        """Parsed results in op order; the calls sent again as :meth:`SyncSent.results` says,
        all at once."""
        replies, _ = await self.read()
        again = _again(self.ops, replies)
        if again:
            if _needs_refresh(replies, again):
                await self.transport.refresh()
            resent = await asyncio.gather(
                *(self.transport.call(self.ops[i]) for i in again), return_exceptions=True
            )
            for i, reply in zip(again, resent, strict=True):
                replies[i] = reply
        return _parsed(self.ops, replies)

    async def abandon(self) -> None:
        """Drop the connections of batches not read (see :meth:`SyncSent.abandon`)."""
        written, self.written = self.written, []
        for _, pool, conn, _ in written:
            await conn.disconnect()
            await pool.release(conn)


async def _each(coros: Any) -> None:
    """Await every coroutine, at once when there are several (one: no task to make)."""
    pending = list(coros)
    if len(pending) == 1:
        await pending[0]
    elif pending:
        await asyncio.gather(*pending)


async def _close_quietly(client: Any) -> None:
    try:
        await client.aclose()
    except Exception:  # closing a client of a dead node can fail; nothing to do about it
        return
