"""Start-up that waits out an outage: a process started while Redis is down waits (reporting
not ready) instead of exiting, and a queue that does not exist is an error at once.

One loop does the waiting (:func:`until_redis_answers`) for both steps of a start: opening the
client (:func:`connect_async_waiting`, the CLI's long-running commands) and reading the queue's
settings (:func:`queue_meta`, every worker and dispatcher).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from shardq import backoff
from shardq.config import RedisSettings
from shardq.connection import AsyncRedis, connect_async
from shardq.logs import log_event
from shardq.store import faults
from shardq.store.meta import QueueMeta, read_meta
from shardq.store.transport import AsyncTransport

T = TypeVar("T")

# The logger the wait for a first connection has always written under.
_CONNECT_LOG = logging.getLogger("shardq.connection")
# Every this many failed attempts, the slot map is read again (a cluster that changed while down).
REFRESH_EVERY = 5


async def until_redis_answers(
    call: Callable[[], Awaitable[T]],
    stop: asyncio.Event,
    log: logging.Logger,
    *,
    refresh: Callable[[], Awaitable[object]] | None = None,
    **fields: object,
) -> T | None:
    """``await call()``, tried again after :func:`shardq.backoff.delay` while Redis does not
    answer (a transient fault: down, failing over, a cluster still forming); None if ``stop``
    is set first.  Errors that waiting cannot fix (bad credentials, a bad URL, a queue that
    does not exist) are raised at once.  The wait is logged as ``startup.waiting_for_redis``
    (with ``fields``) on the first failure and every 20th; ``refresh`` (the slot map) runs
    every :data:`REFRESH_EVERY` failures."""
    failures = 0
    while not stop.is_set():
        try:
            return await call()
        except Exception as exc:
            if not faults.is_transient(exc):
                raise
            failures += 1
            if failures == 1 or failures % 20 == 0:
                log_event(
                    log,
                    "startup.waiting_for_redis",
                    logging.WARNING,
                    **fields,
                    error=f"{type(exc).__name__}: {exc}",
                    attempts=failures,
                )
            if refresh is not None and failures % REFRESH_EVERY == 0:
                try:
                    await refresh()
                except Exception as again:  # still down
                    if not faults.is_transient(again):
                        raise
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff.delay(failures))
    return None


async def connect_async_waiting(settings: RedisSettings, stop: asyncio.Event) -> AsyncRedis | None:
    """:func:`shardq.connection.connect_async`, retried while no Redis node answers (a process
    started during an outage waits for Redis instead of exiting); None if ``stop`` is set
    first."""
    return await until_redis_answers(
        lambda: connect_async(settings), stop, _CONNECT_LOG, url=settings.url
    )


async def queue_meta(
    transport: AsyncTransport, queue: str, stop: asyncio.Event, log: logging.Logger
) -> QueueMeta | None:
    """The queue's settings, retrying while Redis does not answer; None if stopped meanwhile."""
    return await until_redis_answers(
        lambda: read_meta(transport.client, queue),
        stop,
        log,
        refresh=transport.refresh,
        queue=queue,
    )
