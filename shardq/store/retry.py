"""Producer retries: ride out failovers, slot moves and restarts within a time window.

redis-py's own retries do not span a failover (a killed primary is replaced in 3-4.5 s with
``cluster-node-timeout 2000``), so producers retry here: after each transient fault the slot map
is read again and the call resent after a short, growing pause (50 ms doubling to 0.5 s), until
``ProducerSettings.retry_timeout`` has passed.  Once the new slot map is visible, the next resend
goes to the right node: producers follow a failover within about half a second of it.

Only calls that are safe to repeat are resent after an ambiguous fault (sent, reply lost):
enqueue recognises its own job id and body, reads repeat freely.  Others are resent only when
the fault proves nothing was written (refused connection, redirect, CLUSTERDOWN, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from shardq import backoff
from shardq.store import faults

T = TypeVar("T")

# Shorter than a process loop's backoff (shardq.backoff): a caller waits on these resends and
# the call ends at retry_timeout, so each should land soon after a failover is over.
FIRST_PAUSE = 0.05
MAX_PAUSE = 0.5
PAUSE_JITTER = 0.25


def pause(attempt: int) -> float:
    """Seconds before resend number ``attempt`` (1-based), jittered by +-25 %."""
    return backoff.delay(attempt, first=FIRST_PAUSE, cap=MAX_PAUSE, jitter=PAUSE_JITTER)


def should_retry(exc: BaseException, safe_to_repeat: bool) -> bool:
    if not faults.is_transient(exc) and not faults.is_code_missing(exc):
        return False
    return safe_to_repeat or faults.surely_not_written(exc)


def refresh_sync(client: Any) -> None:
    """Re-read the slot map of a sync cluster client (no-op when standalone)."""
    manager = getattr(client, "nodes_manager", None)
    if manager is None:
        return
    try:
        manager.initialize()
    except Exception:  # every node down: the next attempt fails and retries again
        return


def sync_call(
    client: Any, fn: Callable[[], T], window: float, *, safe_to_repeat: bool, what: str
) -> T:
    """``fn()`` with resends through transient faults for up to ``window`` seconds."""
    deadline = time.monotonic() + window
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            attempt += 1
            if not should_retry(exc, safe_to_repeat) or time.monotonic() >= deadline:
                raise faults.translate(exc, what) from exc
            refresh_sync(client)
            time.sleep(min(pause(attempt), max(0.0, deadline - time.monotonic())))


async def async_call(
    refresh: Callable[[], Awaitable[None]],
    fn: Callable[[], Awaitable[T]],
    window: float,
    *,
    safe_to_repeat: bool,
    what: str,
) -> T:
    """Asyncio form of :func:`sync_call`; ``refresh`` re-reads the slot map."""
    deadline = time.monotonic() + window
    attempt = 0
    while True:
        try:
            return await fn()
        except Exception as exc:
            attempt += 1
            if not should_retry(exc, safe_to_repeat) or time.monotonic() >= deadline:
                raise faults.translate(exc, what) from exc
            with contextlib.suppress(Exception):  # every node down: the next attempt retries
                await refresh()
            await asyncio.sleep(min(pause(attempt), max(0.0, deadline - time.monotonic())))
