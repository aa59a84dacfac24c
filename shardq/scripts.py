"""Loads the Lua scripts in lua/ and runs them, reloading after NOSCRIPT.

One file per operation, named ``<operation>-<number of KEYS>.lua``; ``--@include name.lua`` lines
pull in shared helpers from lua/includes/.  Each script is registered once by its SHA1 and sent
with EVALSHA; a node that lost its script cache (restart, failover, SCRIPT FLUSH) answers NOSCRIPT
and gets the full text with EVAL, which also caches it again.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from redis.exceptions import (
    ConnectionError,
    NoScriptError,
    RedisError,
    ResponseError,
    TimeoutError,
)

from shardq.errors import ConfigError
from shardq.keys import slot_of

_hiredis_pack: Any
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is a dependency, but stay usable without it
    _hiredis_pack = None

_FILE_RE = re.compile(r"^(?P<name>[a-z][a-z-]*)-(?P<keys>\d+)\.lua$")
_INCLUDE_RE = re.compile(r"^--@include\s+(?P<file>[\w.-]+)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class LuaScript:
    """One operation's script: its name, how many KEYS it takes, its expanded source and SHA1."""

    name: str
    num_keys: int
    source: str
    sha: str

    def args(self, keys: list[str], argv: list[Any]) -> list[Any]:
        """EVAL/EVALSHA arguments after the script: numkeys, keys, argv."""
        if len(keys) != self.num_keys:
            raise ValueError(f"{self.name} takes {self.num_keys} keys, got {len(keys)}")
        return [self.num_keys, *keys, *argv]


def lua_dir() -> Path:
    """Where the scripts are: inside the installed package, or lua/ beside it in a checkout."""
    packaged = Path(__file__).with_name("lua")
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "lua"
    if checkout.is_dir():
        return checkout
    raise ConfigError(
        f"Lua scripts not found in {packaged} or {checkout}: reinstall shardq (the wheel ships "
        "them as shardq/lua)"
    )


def expand_includes(source: str, includes: Path, seen: frozenset[str] = frozenset()) -> str:
    """Replace each ``--@include file`` line with that file's text (recursively, once each)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group("file")
        if name in seen:
            raise ConfigError(f"include cycle through {name}")
        path = includes / name
        if not path.is_file():
            raise ConfigError(f"missing Lua include {path}")
        return expand_includes(path.read_text(), includes, seen | {name})

    return _INCLUDE_RE.sub(replace, source)


def load_dir(directory: Path) -> dict[str, LuaScript]:
    """Every script of a directory, by operation name."""
    scripts: dict[str, LuaScript] = {}
    for path in sorted(directory.glob("*.lua")):
        match = _FILE_RE.match(path.name)
        if match is None:
            raise ConfigError(f"{path.name}: script files are named <operation>-<numkeys>.lua")
        source = expand_includes(path.read_text(), directory / "includes")
        sha = hashlib.sha1(source.encode()).hexdigest()
        scripts[match.group("name")] = LuaScript(
            match.group("name"), int(match.group("keys")), source, sha
        )
    return scripts


@cache
def scripts() -> dict[str, LuaScript]:
    """All scripts, loaded once per process."""
    return load_dir(lua_dir())


def script(name: str) -> LuaScript:
    """One script by operation name (e.g. ``"promote"``)."""
    return scripts()[name]


def run(client: Any, lua: LuaScript, keys: list[str], argv: list[Any]) -> Any:
    """Run a script on the node that owns its keys (sync client, cluster or standalone)."""
    args = lua.args(keys, argv)
    try:
        return client.evalsha(lua.sha, *args)
    except NoScriptError:
        return client.eval(lua.source, *args)


async def arun(client: Any, lua: LuaScript, keys: list[str], argv: list[Any]) -> Any:
    """Run a script with an asyncio client; see :func:`run`."""
    args = lua.args(keys, argv)
    try:
        return await client.evalsha(lua.sha, *args)
    except NoScriptError:
        return await client.eval(lua.source, *args)


Call = tuple[LuaScript, list[str], list[Any]]


def _retry_noscript(results: list[Any], calls: list[Call]) -> list[int]:
    return [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]


def _by_node(client: Any, calls: list[Call]) -> list[tuple[Any, list[int]]]:
    """Group call indexes by the client that serves their slot (one group when standalone)."""
    nodes_manager = getattr(client, "nodes_manager", None)
    if nodes_manager is None:
        return [(client, list(range(len(calls))))]
    groups: dict[str, tuple[Any, list[int]]] = {}
    for i, (_, keys, _) in enumerate(calls):
        node = nodes_manager.get_node_from_slot(slot_of(keys[0]))
        if node.name not in groups:
            groups[node.name] = (client.get_redis_connection(node), [])
        groups[node.name][1].append(i)
    return list(groups.values())


def run_many(client: Any, calls: list[Call]) -> list[Any]:
    """Run many script calls, one plain pipeline per node, results in call order.

    redis-py's cluster pipeline refuses EVALSHA in released versions and serialises nodes, so
    the commands go out on each node's own connection: all nodes are sent their batch before
    any reply is read, so the nodes work in parallel.

    Each result is the script's reply or the exception it raised.  A call that met NOSCRIPT, a
    moved slot (MOVED/ASK) or a broken connection is sent again on its own through the client,
    which loads the script or follows the redirect; scripts that write are safe to resend.
    """
    results, _ = _send_and_read(client, calls, None)
    for i, reply in enumerate(results):
        if _needs_single_retry(reply):
            try:
                results[i] = run(client, *calls[i])
            except Exception as exc:  # reported per call, like a pipeline does
                results[i] = exc
    return results


def run_many_waiting(
    client: Any, calls: list[Call], replicas: int, timeout_ms: int
) -> tuple[list[Any], list[int | None]]:
    """Like :func:`run_many`, with ``WAIT replicas timeout`` at the end of each node's batch,
    on the connection that wrote it.  Returns the replies and, per call, how many replicas
    acknowledged its node's batch.  Calls that need a resend (see :func:`run_many`) are not
    resent here: they come back as their error, with None acknowledged, for the caller to send
    again durably.  All nodes wait at once, so one slow node does not stall the others.
    """
    return _send_and_read(client, calls, (replicas, timeout_ms))


def _send_and_read(
    client: Any, calls: list[Call], wait: tuple[int, int] | None
) -> tuple[list[Any], list[int | None]]:
    results: list[Any] = [None] * len(calls)
    acked: list[int | None] = [None] * len(calls)
    sent: list[tuple[Any, Any, list[int]]] = []
    for node_client, indexes in _by_node(client, calls):
        pool = node_client.connection_pool
        conn = pool.get_connection()
        try:
            packed = _pack([calls[i] for i in indexes], conn)
            if wait is not None:
                packed.extend(conn.pack_command("WAIT", *wait))
            conn.send_packed_command(packed)
        except (ConnectionError, TimeoutError, OSError) as exc:
            conn.disconnect()
            pool.release(conn)
            for i in indexes:
                results[i] = exc
            continue
        sent.append((pool, conn, indexes))
    for pool, conn, indexes in sent:
        broken: Exception | None = None
        for i in indexes:
            if broken is not None:
                results[i] = broken
                continue
            try:
                results[i] = conn.read_response()
            except ResponseError as exc:
                results[i] = exc
            except (ConnectionError, TimeoutError, OSError) as exc:
                conn.disconnect()
                broken = results[i] = exc
        if wait is not None and broken is None:
            try:
                n = int(conn.read_response())
                for i in indexes:
                    if not isinstance(results[i], Exception):
                        acked[i] = n
            except (ConnectionError, TimeoutError, OSError, ResponseError):
                conn.disconnect()
        pool.release(conn)
    return results, acked


def _pack(calls: list[Call], conn: Any) -> list[bytes]:
    """EVALSHA commands in wire format; hiredis' C packer when present (the hot path of bulk
    enqueue), else redis-py's."""
    if _hiredis_pack is not None:
        return [
            b"".join(
                _hiredis_pack(("EVALSHA", lua.sha, *lua.args(keys, argv)))
                for lua, keys, argv in calls
            )
        ]
    packed: list[bytes] = conn.pack_commands(
        [("EVALSHA", lua.sha, *lua.args(keys, argv)) for lua, keys, argv in calls]
    )
    return packed


def _needs_single_retry(reply: Any) -> bool:
    if isinstance(reply, NoScriptError | ConnectionError | TimeoutError | OSError):
        return True
    return isinstance(reply, ResponseError) and str(reply).startswith(("MOVED", "ASK"))


async def arun_many(client: Any, calls: list[Call]) -> list[Any]:
    """Asyncio form of :func:`run_many`: redis-py's pipeline (grouped by node, nodes in
    parallel, MOVED/ASK followed).  When a node is down the whole pipeline fails; the calls are
    then sent one by one, concurrently, so partitions on healthy nodes are still served and
    only the failed node's calls come back as errors."""
    if not calls:
        return []
    pipe = client.pipeline(transaction=False)
    for lua, keys, argv in calls:
        pipe.execute_command("EVALSHA", lua.sha, *lua.args(keys, argv))
    try:
        results: list[Any] = await pipe.execute(raise_on_error=False)
    except RedisError:
        return list(
            await asyncio.gather(*(arun(client, *call) for call in calls), return_exceptions=True)
        )
    for i in _retry_noscript(results, calls):
        lua, keys, argv = calls[i]
        try:
            results[i] = await client.eval(lua.source, *lua.args(keys, argv))
        except Exception as exc:
            results[i] = exc
    return results
