"""Wake-up hints over sharded pub/sub.

Scripts publish a hint on a partition's channel (same slot as its keys) when the due head moves
earlier or jobs land in the ready stream.  Hints only make sleepers wake early: a lost hint costs
latency up to the sleeper's bounded fallback interval, never a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from shardq.connection import AsyncRedis, is_cluster

log = logging.getLogger("shardq.hints")


async def listen(
    redis: AsyncRedis,
    channels: dict[str, int],
    on_hint: Callable[[int], None],
    stop: asyncio.Event,
) -> None:
    """Call ``on_hint(partition)`` for each hint until ``stop`` is set; reconnects on errors."""
    by_name = {name.encode(): partition for name, partition in channels.items()}
    cluster = is_cluster(redis)
    while not stop.is_set():
        pubsub: Any = redis.pubsub()
        try:
            await pubsub.ssubscribe(*channels)
            while not stop.is_set():
                if cluster:
                    msg = await pubsub.get_sharded_message(
                        ignore_subscribe_messages=True, timeout=0.5
                    )
                else:
                    msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
                if msg and msg.get("type") in (b"smessage", "smessage"):
                    channel = msg["channel"]
                    key = channel if isinstance(channel, bytes) else str(channel).encode()
                    partition = by_name.get(key)
                    if partition is not None:
                        on_hint(partition)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # hints are best effort; the fallback poll covers the gap
            log.warning("hint subscription failed (%s); retrying in 1 s", exc)
            await asyncio.sleep(1.0)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
