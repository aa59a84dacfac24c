"""Loading and checking shardq's Redis Functions library on every primary (admin tools)."""

from __future__ import annotations

from typing import Any

from shardq.connection import as_text, is_cluster
from shardq.store.loader import library
from shardq.store.transport import load_library


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
        load_library(node, node_name)
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
