"""The asyncio producer client (:class:`shardq.client.AsyncClient`), importable from here as
it always was."""

from shardq.client import AsyncClient

__all__ = ["AsyncClient"]
