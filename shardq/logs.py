"""Structured logs: one JSON object per line for job and lease events."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson


def log_event(
    logger: logging.Logger, event: str, level: int = logging.WARNING, **fields: Any
) -> None:
    """Log one event as a JSON line: ``{"ts":..., "event":..., **fields}`` (None fields dropped)."""
    if not logger.isEnabledFor(level):
        return
    record = {"ts": round(time.time(), 3), "event": event}
    record.update((k, v) for k, v in fields.items() if v is not None)
    logger.log(level, orjson.dumps(record, default=str).decode())


def setup_logging(level: str = "INFO") -> None:
    """Plain message lines on stderr (events are already JSON)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("shardq")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
