"""Typed errors. Every error says what the caller should do about it."""

from __future__ import annotations


class ShardqError(Exception):
    """Base class of every error shardq raises on purpose."""
