"""Loading and checking shardq's Redis Functions library on every primary (admin tools)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shardq.connection import as_text, is_cluster
from shardq.store.loader import library, lua_dir
from shardq.store.op import Op, op
from shardq.store.transport import SyncTransport


def name() -> str:
    return library().name


def _primaries(client: Any) -> dict[str, Any]:
    if not is_cluster(client):
        return {"standalone": client}
    return {n.name: client.get_redis_connection(n) for n in client.get_primaries()}


def load_everywhere(client: Any) -> dict[str, str]:
    """FUNCTION LOAD on every primary (replicas get it by replication); node -> what happened."""
    out = {}
    for node_name, node in _primaries(client).items():
        before = _loaded(node)
        SyncTransport(client).load_library(node_name)
        out[node_name] = "already loaded" if before else f"loaded {name()}"
    return out


def status(client: Any) -> dict[str, bool]:
    """Node -> whether this version's library is loaded there."""
    return {node_name: _loaded(node) for node_name, node in _primaries(client).items()}


def _loaded(node: Any) -> bool:
    reply = node.execute_command("FUNCTION", "LIST", "LIBRARYNAME", name())
    for entry in reply or []:
        fields = (
            entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=False))
        )
        if as_text(fields.get(b"library_name", fields.get("library_name", ""))) == name():
            return True
    return False


def can_run(route_key: str, lines: Sequence[str]) -> Op[list[int]]:
    """Which of ``lines`` (command lines, words split by single spaces) the calling user may run
    on the node serving ``route_key``: 1 it may, 0 its ACL refuses, -1 the server has no such
    command (renamed or removed, as managed services do): lua/can-run-1.lua."""
    return op("can-run", [route_key], list(lines), lambda r: [int(x) for x in r])


# For clients in other languages and their conformance runner (wire/spec.py): the
# library as a whole, and how a call of one function looks on the wire.

#: The commands that call a function of the library.
CALL_VERBS: tuple[str, ...] = ("FCALL", "FCALL_RO")


def code() -> str:
    """The library's source, as FUNCTION LOAD takes it."""
    return library().code


def contract(operation: str) -> dict[str, Any]:
    """One operation's contract: its file, KEYS count, ARGV cap, whether it only reads, and
    its header (the KEYS, ARGV and replies it documents)."""
    lua = library().scripts[operation]
    path = lua_dir() / f"{operation}-{lua.num_keys}.lua"
    return {
        "file": f"lua/{path.name}",
        "keys": lua.num_keys,
        "max_argv": lua.max_argv,
        "read_only": lua.read_only,
        "header": path.read_text().split("]]", 1)[0],
    }


def call_command(operation: str, keys: list[str], argv: list[str]) -> list[str]:
    """The command that calls ``operation`` with these KEYS and ARGV, as Redis receives it."""
    lua = library().scripts[operation]
    verb = CALL_VERBS[1] if lua.read_only else CALL_VERBS[0]
    return [verb, lua.function, str(len(keys)), *keys, *argv]
