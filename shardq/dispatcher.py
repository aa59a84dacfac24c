"""The dispatcher: promotes due jobs of the partitions it holds leases on.

Each partition is drained by the promote script, at most K jobs per call, on the Redis clock,
checking the fencing token of this dispatcher's lease.  Between calls the dispatcher sleeps
until the partition's next due time (bounded by ``max_sleep``), woken early by hints when an
enqueue moves a partition's head earlier.  Payloads never reach this process, and it keeps a
few numbers per partition, so its memory does not depend on the backlog.

Fleet: dispatchers heartbeat into a membership set; each computes its fair share from the sorted
list of live, non-draining members (the first ``P mod N`` get the ceiling, the rest the floor),
takes free partitions up to it and hands back what is above it.  A dispatcher that dies stops
renewing, its leases expire and the others take its partitions; SIGTERM hands them back at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from shardq import hints, keys, metrics, ops, scripts
from shardq.config import DispatcherSettings
from shardq.connection import AsyncRedis, as_text
from shardq.errors import FencedError, UnknownQueueError
from shardq.hints import stop_tasks
from shardq.logs import log_event

log = logging.getLogger("shardq.dispatcher")

# After a Redis error a partition is retried this much later; others keep being served.
ERROR_BACKOFF = 0.25
# Most entries one trim call removes from a stream: keeps the call short.
TRIM_LIMIT = 1000


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


def fair_share(partitions: int, members: list[str], me: str) -> int:
    """How many partitions ``me`` should hold: floor or ceiling of P / N, by sorted position."""
    if me not in members:
        return 0
    ordered = sorted(members)
    base, extra = divmod(partitions, len(ordered))
    return base + (1 if ordered.index(me) < extra else 0)


@dataclass(slots=True)
class DispatcherStats:
    """Counters of this process (the per-partition counters live in Redis)."""

    promoted: int = 0
    promote_calls: int = 0
    fenced: int = 0
    errors: int = 0
    leases_acquired: int = 0
    leases_lost: int = 0
    leases_released: int = 0
    takeovers: int = 0
    by_partition: dict[int, int] = field(default_factory=dict)


class Dispatcher:
    """Drains due jobs of one queue's partitions.

    By default it joins the queue's dispatcher fleet and holds its fair share of partitions.
    ``partitions`` pins it to a fixed set instead (no fair-share balancing; leases still make a
    second dispatcher on the same partitions a standby).
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
        self._pinned = None if partitions is None else sorted(set(partitions))
        self.stats = DispatcherStats()
        self.tokens: dict[int, str] = {}
        self.target = 0
        self.members: list[str] = []
        self._next_wake: dict[int, float] = {}
        self._renewed: dict[int, float] = {}
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._pk: list[keys.PartitionKeys] = []
        self._total = 0
        # Hints seen per partition: one that lands while a promote is in flight must not be
        # overwritten by that promote's "next due later" result.
        self._hints: dict[int, int] = {}
        self._ack_retention_ms = 0
        self._dead_cap = ops.DEFAULT_DEAD_CAP
        self._m_held = metrics.LEASES_HELD.labels(queue, self.owner)
        self._m_promoted = metrics.PROMOTED.labels(queue, self.owner)
        self._m_calls = metrics.PROMOTE_CALLS.labels(queue, self.owner)
        self._hot = metrics.HotShardWatch(queue, self.settings.hot_multiple)

    def stop(self) -> None:
        """Ask the dispatcher to stop: it releases its leases and returns from :meth:`run`."""
        self._stop.set()
        self._wake.set()

    def _hint(self, partition: int) -> None:
        if partition in self.tokens:
            self._next_wake[partition] = 0.0
            self._hints[partition] = self._hints.get(partition, 0) + 1
            self._wake.set()

    def _event(self, event: str, **fields: Any) -> None:
        metrics.LEASE_EVENTS.labels(self.queue, self.owner, event).inc()
        # Losing a partition to fencing means this process was paused or cut off: say so loudly.
        level = logging.WARNING if event == "fenced" else logging.INFO
        log_event(log, f"lease.{event}", level, queue=self.queue, dispatcher=self.owner, **fields)

    async def run(self) -> None:
        """Run until :meth:`stop`; leases are released and membership left on the way out."""
        self._total = await queue_partitions(self.redis, self.queue)
        retention, cap = await self.redis.hmget(  # type: ignore[misc]
            keys.queue_meta_key(self.queue), ["ack_retention_ms", "dead_cap"]
        )
        self._ack_retention_ms = int(retention or 0)
        self._dead_cap = int(cap or ops.DEFAULT_DEAD_CAP)
        self._pk = keys.all_partition_keys(self.queue, self._total)
        if self._pinned is not None:
            bad = [p for p in self._pinned if not 0 <= p < self._total]
            if bad:
                raise UnknownQueueError(
                    f"queue {self.queue!r} has partitions 0..{self._total - 1}, not {bad}"
                )
        listen = self._pinned if self._pinned is not None else range(self._total)
        channels = {self._pk[p].due_hint: p for p in listen}
        tasks = [
            asyncio.create_task(self._lease_loop()),
            asyncio.create_task(hints.listen(self.redis, channels, self._hint, self._stop)),
            asyncio.create_task(self._metrics_loop()),
        ]
        log.info("dispatcher %s started on %s (%d partitions)", self.owner, self.queue, self._total)
        try:
            await self._promote_loop()
        finally:
            self._stop.set()
            await stop_tasks(tasks)
            await self._release(list(self.tokens), "shutdown")
            with contextlib.suppress(RedisError):
                await self._heartbeat(leaving=True)
            metrics.PARTITIONS.forget(self.queue)
            self._m_held.set(0)
            log.info("dispatcher %s stopped (promoted %d)", self.owner, self.stats.promoted)

    # membership and leases -----------------------------------------------------------------

    async def _heartbeat(self, leaving: bool = False) -> tuple[list[str], list[str]]:
        reply = await scripts.arun(
            self.redis,
            scripts.script("members"),
            [keys.dispatchers_key(self.queue), keys.drain_key(self.queue)],
            [self.owner, round(self.settings.membership_timeout * 1000), "1" if leaving else "0"],
        )
        return [as_text(m) for m in reply[1]], [as_text(m) for m in reply[2]]

    async def _lease_loop(self) -> None:
        while not self._stop.is_set():
            try:
                await self._balance()
            except RedisError as exc:
                log.warning("lease maintenance failed (%s); retrying", exc)
            except Exception:  # a bug must not silently stop lease renewal
                log.exception("lease maintenance failed; retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.settings.renew_interval)

    async def _balance(self) -> None:
        """One round: heartbeat, renew, hand back above the fair share, take up to it."""
        live, draining = await self._heartbeat()
        self.members = live
        if self._pinned is not None:
            wanted = self._pinned
            self.target = len(wanted)
        else:
            wanted = list(range(self._total))
            active = [m for m in live if m not in draining]
            self.target = fair_share(self._total, active, self.owner)
        await self._renew()
        owners_raw = await self.redis.hgetall(keys.owners_key(self.queue))  # type: ignore[misc]
        owners = {int(as_text(k)): as_text(v).split(" ")[0] for k, v in owners_raw.items()}
        await self._fix_owner_entries(owners)
        excess = len(self.tokens) - self.target
        if excess > 0:
            # Hand back the most recently acquired first: the others have warm state.
            give = sorted(self.tokens, key=lambda p: -self._renewed.get(p, 0.0))[:excess]
            await self._release(give, "above fair share")
        need = self.target - len(self.tokens)
        if need > 0 and not self._stop.is_set():
            live_set = set(live)
            free = [
                p
                for p in wanted
                if p not in self.tokens
                and (owners.get(p) is None or owners[p] not in live_set or owners[p] == self.owner)
            ]
            random.shuffle(free)  # peers starting together should not all try the same ones
            # Peers race for the same free partitions: go on down the list until the share is
            # met or every candidate was tried, rather than waiting a whole interval per loss.
            while free and len(self.tokens) < self.target and not self._stop.is_set():
                batch, free = (
                    free[: self.target - len(self.tokens) + 2],
                    free[self.target - len(self.tokens) + 2 :],
                )
                await self._acquire(batch)
        self._m_held.set(len(self.tokens))

    async def _renew(self) -> None:
        """Renew leases not already extended by a promote within the renewal interval."""
        now = time.monotonic()
        due = self.settings.renew_interval * 0.8
        stale = [p for p in self.tokens if now - self._renewed.get(p, 0.0) >= due]
        ttl = round(self.settings.lease_time * 1000)
        calls = [
            (scripts.script("lease-renew"), [self._pk[p].lease], [self.tokens[p], ttl])
            for p in stale
        ]
        for p, reply in zip(stale, await scripts.arun_many(self.redis, calls), strict=True):
            if isinstance(reply, list) and reply and reply[0] == -1:
                self.stats.fenced += 1
                self._event("fenced", partition=p, reason="lease lost before renewal")
                self._drop(p)
            elif isinstance(reply, Exception):
                log.warning("renewing lease on partition %d failed: %s", p, reply)
            else:
                self._renewed[p] = now

    async def _acquire(self, candidates: list[int]) -> None:
        ttl = round(self.settings.lease_time * 1000)
        calls = [
            (
                scripts.script("lease-acquire"),
                [self._pk[p].lease, self._pk[p].fence],
                [self.owner, ttl],
            )
            for p in candidates
        ]
        replies = await scripts.arun_many(self.redis, calls)
        now = time.monotonic()
        won: list[tuple[int, str]] = []
        for p, reply in zip(candidates, replies, strict=True):
            if not (isinstance(reply, list) and reply and reply[0] == 1):
                continue
            token = as_text(reply[1])
            if len(self.tokens) >= self.target and reply[2] == 1:
                # Won more than needed (tried a few spare): give it straight back.
                await scripts.arun(
                    self.redis,
                    scripts.script("lease-release"),
                    [self._pk[p].lease, self._pk[p].fence],
                    [token],
                )
                continue
            self.tokens[p] = token
            self._renewed[p] = now
            self._next_wake[p] = 0.0
            won.append((p, token))
            self.stats.leases_acquired += 1
            takeover = len(reply) > 3 and reply[3] == 1
            if takeover:
                self.stats.takeovers += 1
                self._event("takeover", partition=p, token=token)
            self._event("acquired", partition=p, token=token)
        if won:
            mapping = {str(p): f"{self.owner} {token}" for p, token in won}
            await self.redis.hset(  # type: ignore[misc]
                keys.owners_key(self.queue),
                mapping=mapping,  # type: ignore[arg-type]
            )
            self._wake.set()

    async def _fix_owner_entries(self, owners: dict[int, str]) -> None:
        """Keep the advisory owners hash true for this dispatcher's own entries."""
        wrong = [p for p, o in owners.items() if o == self.owner and p not in self.tokens]
        missing = {
            str(p): f"{self.owner} {t}"
            for p, t in self.tokens.items()
            if owners.get(p) != self.owner
        }
        owners_key = keys.owners_key(self.queue)
        if wrong:
            await self.redis.hdel(owners_key, *[str(p) for p in wrong])  # type: ignore[misc]
        if missing:
            await self.redis.hset(owners_key, mapping=missing)  # type: ignore[misc,arg-type]

    def _drop(self, partition: int) -> None:
        """Forget a partition whose lease is no longer ours (fenced or expired)."""
        if self.tokens.pop(partition, None) is not None:
            self._next_wake.pop(partition, None)
            self._renewed.pop(partition, None)
            self.stats.leases_lost += 1
            metrics.LEASE_EVENTS.labels(self.queue, self.owner, "lost").inc()
            self._m_held.set(len(self.tokens))

    async def _release(self, partitions: list[int], reason: str) -> None:
        if not partitions:
            return
        calls = [
            (
                scripts.script("lease-release"),
                [self._pk[p].lease, self._pk[p].fence],
                [self.tokens[p]],
            )
            for p in partitions
        ]
        try:
            await scripts.arun_many(self.redis, calls)
            await self.redis.hdel(  # type: ignore[misc]
                keys.owners_key(self.queue), *[str(p) for p in partitions]
            )
        except RedisError as exc:
            log.warning("releasing leases failed (%s): they expire on their own", exc)
        for p in partitions:
            self.tokens.pop(p, None)
            self._next_wake.pop(p, None)
            self._renewed.pop(p, None)
            self.stats.leases_released += 1
            self._event("released", partition=p, reason=reason)
        self._m_held.set(len(self.tokens))

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
        lease_ms = round(s.lease_time * 1000)
        calls = [
            (
                scripts.script("promote"),
                [self._pk[p].due, self._pk[p].ready, self._pk[p].lease, self._pk[p].stats],
                [self.tokens[p], s.batch, self._pk[p].ready_hint, lease_ms],
            )
            for p in partitions
        ]
        hints_before = [self._hints.get(p, 0) for p in partitions]
        sent = time.monotonic()
        try:
            replies = await scripts.arun_many(self.redis, calls)
        except RedisError as exc:
            replies = [exc] * len(calls)
        now = time.monotonic()
        self.stats.promote_calls += len(calls)
        self._m_calls.inc(len(calls))
        for p, reply, seen in zip(partitions, replies, hints_before, strict=True):
            if p not in self.tokens:
                continue
            try:
                moved, next_due, redis_now = ops.check_reply(reply)
            except FencedError as exc:
                self.stats.fenced += 1
                log_event(
                    log,
                    "lease.fenced",
                    queue=self.queue,
                    dispatcher=self.owner,
                    partition=p,
                    error=str(exc),
                )
                metrics.LEASE_EVENTS.labels(self.queue, self.owner, "fenced").inc()
                self._drop(p)
                continue
            except Exception as exc:
                self.stats.errors += 1
                metrics.SCRIPT_ERRORS.labels(self.queue, "promote", type(exc).__name__).inc()
                log.warning("promote on partition %d failed: %s", p, exc)
                self._next_wake[p] = now + ERROR_BACKOFF
                continue
            self._renewed[p] = sent  # the promote extended the lease
            self.stats.promoted += moved
            self._m_promoted.inc(moved)
            self.stats.by_partition[p] = self.stats.by_partition.get(p, 0) + moved
            if moved >= s.batch or self._hints.get(p, 0) != seen:
                self._next_wake[p] = now  # more are due, or a hint came meanwhile: go again
            elif next_due < 0:
                self._next_wake[p] = now + s.max_sleep
            else:
                wait = max(0.0, (next_due - redis_now) / 1000.0)
                self._next_wake[p] = now + min(wait, s.max_sleep)

    # metrics -------------------------------------------------------------------------------

    async def _trim(self) -> None:
        """Bound the streams of owned partitions (see lua/trim-6.lua); fenced like promote."""
        held = list(self.tokens)
        calls = [
            (
                scripts.script("trim"),
                [pk.ready, pk.dead, pk.jobs, pk.errors, pk.stats, pk.lease],
                [
                    self.tokens[p],
                    keys.WORKER_GROUP,
                    self._ack_retention_ms,
                    self._dead_cap,
                    TRIM_LIMIT,
                ],
            )
            for p, pk in ((p, self._pk[p]) for p in held)
        ]
        try:
            replies = await scripts.arun_many(self.redis, calls)
        except RedisError as exc:
            log.warning("trimming failed: %s", exc)
            return
        for p, reply in zip(held, replies, strict=True):
            if isinstance(reply, list) and reply and reply[0] == -1 and p in self.tokens:
                self.stats.fenced += 1
                metrics.LEASE_EVENTS.labels(self.queue, self.owner, "fenced").inc()
                self._drop(p)
            elif isinstance(reply, Exception):
                metrics.SCRIPT_ERRORS.labels(self.queue, "trim", type(reply).__name__).inc()
            elif isinstance(reply, list) and len(reply) == 2 and int(reply[1]) > 0:
                log_event(
                    log,
                    "dead.dropped",
                    queue=self.queue,
                    partition=p,
                    dropped=int(reply[1]),
                    cap=self._dead_cap,
                )

    async def _metrics_loop(self) -> None:
        """Trim and sample owned partitions for Prometheus; the owner of partition 0 samples
        them all for the hot-shard figures, so the fleet reads each partition about once per
        interval."""
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.settings.metrics_interval)
            if self._stop.is_set():
                return
            await self._trim()
            owned = set(self.tokens)
            sample_all = 0 in owned
            wanted = range(self._total) if sample_all else sorted(owned)
            try:
                snaps = await metrics.snapshot_async(self.redis, [self._pk[p] for p in wanted])
            except RedisError as exc:
                log.warning("sampling partitions failed: %s", exc)
                continue
            metrics.PARTITIONS.update(self.queue, snaps, owned)
            if sample_all:
                self._hot.observe(snaps)
            else:
                metrics.PARTITIONS.hot.pop(self.queue, None)
