"""Start-up that waits out an outage: a process started while Redis is down waits (reporting
not ready) instead of exiting, and a queue that does not exist is an error at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from shardq import backoff
from shardq.logs import log_event
from shardq.store import faults
from shardq.store.meta import QueueMeta, read_meta
from shardq.store.transport import AsyncTransport


async def queue_meta(
    transport: AsyncTransport, queue: str, stop: asyncio.Event, log: logging.Logger
) -> QueueMeta | None:
    """The queue's settings, retrying while Redis does not answer; None if stopped meanwhile."""
    failures = 0
    while not stop.is_set():
        try:
            return await read_meta(transport.client, queue)
        except Exception as exc:
            if not faults.is_transient(exc):
                raise
            failures += 1
            if failures == 1 or failures % 20 == 0:
                log_event(
                    log,
                    "startup.waiting_for_redis",
                    logging.WARNING,
                    queue=queue,
                    error=f"{type(exc).__name__}: {exc}",
                    attempts=failures,
                )
            if failures % 5 == 0:
                try:
                    await transport.refresh()
                except Exception as again:  # still down
                    if not faults.is_transient(again):
                        raise
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff.delay(failures))
    return None
