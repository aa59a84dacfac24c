"""The dispatcher: promotes due jobs of the partitions it holds leases on.

Each partition is drained by the promote script, at most K jobs per call, on the Redis clock,
checking the fencing token of this dispatcher's lease.  Between calls the dispatcher sleeps
until the partition's next due time (bounded by ``max_sleep``), woken early by hints when an
enqueue moves a partition's head earlier.  Payloads never reach this process, and it keeps a
few numbers per partition, so its memory does not depend on the backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from shardq import hints, keys, ops, scripts
from shardq.config import DispatcherSettings
from shardq.connection import AsyncRedis
from shardq.errors import FencedError, UnknownQueueError
from shardq.hints import stop_tasks

log = logging.getLogger("shardq.dispatcher")

# After a Redis error a partition is retried this much later; others keep being served.
ERROR_BACKOFF = 0.25


def process_id(role: str) -> str:
    """An id that says where a process runs: role, host, pid and a random suffix."""
    return f"{role}:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


async def queue_partitions(redis: AsyncRedis, queue: str) -> int:
    """The partition count of an existing queue."""
    raw = await redis.hget(keys.queue_meta_key(queue), "partitions")  # type: ignore[misc]
    if raw is None:
        raise UnknownQueueError(
            f"queue {queue!r} does not exist: create it with `shardq queue create {queue}`"
        )
    return int(raw)


@dataclass(slots=True)
class DispatcherStats:
    """Counters of this process (the per-partition counters live in Redis)."""

    promoted: int = 0
    promote_calls: int = 0
    fenced: int = 0
    errors: int = 0
    leases_acquired: int = 0
    leases_lost: int = 0
    by_partition: dict[int, int] = field(default_factory=dict)


class Dispatcher:
    """Drains due jobs of one queue's partitions.

    ``partitions`` limits it to some partitions (default: all).  Leases make a second
    dispatcher on the same partitions a standby: it takes over when the first one's leases
    expire or are released.
    """

    def __init__(
        self,
        redis: AsyncRedis,
        queue: str,
        *,
        settings: DispatcherSettings | None = None,
        partitions: Iterable[int] | None = None,
        owner: str | None = None,
    ) -> None:
        self.redis = redis
        self.queue = queue
        self.settings = settings or DispatcherSettings()
        self.owner = owner or process_id("dispatcher")
        self._wanted = None if partitions is None else sorted(set(partitions))
        self.stats = DispatcherStats()
        self.tokens: dict[int, str] = {}
        self._next_wake: dict[int, float] = {}
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._pk: list[keys.PartitionKeys] = []
        # Hints seen per partition: one that lands while a promote is in flight must not be
        # overwritten by that promote's "next due later" result.
        self._hints: dict[int, int] = {}

    def stop(self) -> None:
        """Ask the dispatcher to stop: it releases its leases and returns from :meth:`run`."""
        self._stop.set()
        self._wake.set()

    def _hint(self, partition: int) -> None:
        if partition in self.tokens:
            self._next_wake[partition] = 0.0
            self._hints[partition] = self._hints.get(partition, 0) + 1
            self._wake.set()

    async def run(self) -> None:
        """Run until :meth:`stop`; leases are released on the way out."""
        total = await queue_partitions(self.redis, self.queue)
        self._pk = keys.all_partition_keys(self.queue, total)
        wanted = self._wanted if self._wanted is not None else list(range(total))
        bad = [p for p in wanted if not 0 <= p < total]
        if bad:
            raise UnknownQueueError(f"queue {self.queue!r} has partitions 0..{total - 1}: {bad}")
        channels = {self._pk[p].due_hint: p for p in wanted}
        tasks = [
            asyncio.create_task(self._lease_loop(wanted)),
            asyncio.create_task(hints.listen(self.redis, channels, self._hint, self._stop)),
        ]
        log.info("dispatcher %s started on %s (%d partitions)", self.owner, self.queue, total)
        try:
            await self._promote_loop()
        finally:
            self._stop.set()
            await stop_tasks(tasks)
            await self._release_all()
            log.info("dispatcher %s stopped (promoted %d)", self.owner, self.stats.promoted)

    # leases --------------------------------------------------------------------------------

    async def _lease_loop(self, wanted: list[int]) -> None:
        while not self._stop.is_set():
            try:
                await self._maintain_leases(wanted)
            except RedisError as exc:
                log.warning("lease maintenance failed (%s); retrying", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.settings.renew_interval)

    async def _maintain_leases(self, wanted: list[int]) -> None:
        ttl = round(self.settings.lease_time * 1000)
        held = list(self.tokens)
        renew = [
            (scripts.script("lease-renew"), [self._pk[p].lease], [self.tokens[p], ttl])
            for p in held
        ]
        for p, reply in zip(held, await scripts.arun_many(self.redis, renew), strict=True):
            if isinstance(reply, list) and reply and reply[0] == -1:
                self._drop(p, "lease lost before renewal")
            elif isinstance(reply, Exception):
                log.warning("renewing lease on partition %d failed: %s", p, reply)
        free = [p for p in wanted if p not in self.tokens]
        acquire = [
            (
                scripts.script("lease-acquire"),
                [self._pk[p].lease, self._pk[p].fence],
                [self.owner, ttl],
            )
            for p in free
        ]
        for p, reply in zip(free, await scripts.arun_many(self.redis, acquire), strict=True):
            if isinstance(reply, list) and reply and reply[0] == 1:
                self.tokens[p] = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
                self._next_wake[p] = 0.0
                self.stats.leases_acquired += 1
                self._wake.set()

    def _drop(self, partition: int, why: str) -> None:
        if self.tokens.pop(partition, None) is not None:
            self._next_wake.pop(partition, None)
            self.stats.leases_lost += 1
            log.warning(
                "dispatcher %s dropped partition %d of %s: %s",
                self.owner,
                partition,
                self.queue,
                why,
            )

    async def _release_all(self) -> None:
        held = list(self.tokens)
        calls = [
            (scripts.script("lease-release"), [self._pk[p].lease], [self.tokens[p]]) for p in held
        ]
        try:
            await scripts.arun_many(self.redis, calls)
        except RedisError as exc:
            log.warning("releasing leases failed (%s): they expire on their own", exc)
        self.tokens.clear()

    # promotion -----------------------------------------------------------------------------

    async def _promote_loop(self) -> None:
        s = self.settings
        while not self._stop.is_set():
            now = time.monotonic()
            ready = [p for p in self.tokens if self._next_wake.get(p, 0.0) <= now]
            if ready:
                await self._promote(ready[: s.max_inflight_calls])
                continue
            wake_at = min((self._next_wake.get(p, 0.0) for p in self.tokens), default=None)
            timeout = s.max_sleep if wake_at is None else max(0.0, wake_at - now)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(timeout, s.max_sleep))

    async def _promote(self, partitions: list[int]) -> None:
        s = self.settings
        tokens = [self.tokens[p] for p in partitions]
        calls = [
            (
                scripts.script("promote"),
                [self._pk[p].due, self._pk[p].ready, self._pk[p].lease, self._pk[p].stats],
                [token, s.batch, self._pk[p].ready_hint],
            )
            for p, token in zip(partitions, tokens, strict=True)
        ]
        hints_before = [self._hints.get(p, 0) for p in partitions]
        try:
            replies = await scripts.arun_many(self.redis, calls)
        except RedisError as exc:
            replies = [exc] * len(calls)
        now = time.monotonic()
        self.stats.promote_calls += len(calls)
        for p, reply, seen in zip(partitions, replies, hints_before, strict=True):
            if p not in self.tokens:
                continue
            try:
                moved, next_due, redis_now = ops.check_reply(reply)
            except FencedError as exc:
                self.stats.fenced += 1
                self._drop(p, str(exc))
                continue
            except Exception as exc:
                self.stats.errors += 1
                log.warning("promote on partition %d failed: %s", p, exc)
                self._next_wake[p] = now + ERROR_BACKOFF
                continue
            self.stats.promoted += moved
            self.stats.by_partition[p] = self.stats.by_partition.get(p, 0) + moved
            if moved >= s.batch or self._hints.get(p, 0) != seen:
                self._next_wake[p] = now  # more are due, or a hint came meanwhile: go again
            elif next_due < 0:
                self._next_wake[p] = now + s.max_sleep
            else:
                wait = max(0.0, (next_due - redis_now) / 1000.0)
                self._next_wake[p] = now + min(wait, s.max_sleep)
