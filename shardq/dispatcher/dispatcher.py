"""The dispatcher: promotes due jobs of the partitions it holds leases on.

A small coordinator over components with one concern each, every background loop under one
:class:`~shardq.runtime.supervisor.Supervisor`:

- ``membership``: the heartbeat into the fleet, on its own so nothing else can delay it;
- ``leases`` (:mod:`.leases`): fair share, renew, hand back, take over;
- ``promoter:<primary>`` (:mod:`.promoter`): one promote loop per Redis primary;
- ``promoter-topology``: keeps those loops in step with the slot map;
- ``hints``: wake-ups from enqueues over sharded pub/sub;
- ``schedules:<primary>`` (:mod:`.ticker`): fires the periodic schedules of held partitions,
  one loop per Redis primary; ``schedules-topology`` keeps them in step with the slot map;
- ``trim`` (:mod:`.trimmer`) and ``sample`` (:mod:`.sampler`): stream bounds and metrics.

Shutdown (SIGTERM, :meth:`Dispatcher.stop`) stops hints, then the promote loops (no new
promote is sent), then trimming and sampling, then the lease loop and the heartbeat; it then
releases every lease (peers take them on their next round, with no expiry to wait out) and
leaves the fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from shardq.config import DispatcherSettings
from shardq.connection import AsyncRedis
from shardq.dispatcher.leases import Leases
from shardq.dispatcher.promoter import Promoter
from shardq.dispatcher.sampler import Sampler
from shardq.dispatcher.ticker import Ticker
from shardq.dispatcher.trimmer import Trimmer
from shardq.errors import UnknownQueueError
from shardq.logs import log_context
from shardq.runtime import health, hints, redis_config
from shardq.runtime.identity import member_id
from shardq.runtime.membership import Membership
from shardq.runtime.startup import queue_meta
from shardq.runtime.supervisor import Supervisor
from shardq.store import keys
from shardq.store.transport import AsyncTransport

log = logging.getLogger("shardq.dispatcher")


@dataclass(frozen=True, slots=True)
class DispatcherStats:
    """A snapshot of this process's counters."""

    promoted: int = 0
    promote_calls: int = 0
    errors: int = 0
    fenced: int = 0
    leases_acquired: int = 0
    leases_lost: int = 0
    leases_released: int = 0
    takeovers: int = 0
    by_partition: dict[int, int] = field(default_factory=dict)


STOP_ORDER = [
    "hints",
    "schedules:",
    "schedules-topology",
    "promoter:",
    "promoter-topology",
    "trim",
    "sample",
    "leases",
]


class Dispatcher:
    """Drains due jobs of one queue's partitions.

    By default it joins the queue's dispatcher fleet and holds its fair share of partitions.
    ``partitions`` pins it to a fixed set instead (no fair-share balancing; leases still make a
    second dispatcher on the same partitions a standby).  ``instance`` names where it runs
    (default ``SHARDQ_INSTANCE`` or ``host:pid``): a dispatcher restarted with the same instance
    takes over its predecessor's leases at once.
    """

    def __init__(
        self,
        redis: AsyncRedis,
        queue: str,
        *,
        settings: DispatcherSettings | None = None,
        partitions: Iterable[int] | None = None,
        owner: str | None = None,
        instance: str | None = None,
    ) -> None:
        self.redis = redis
        self.queue = queue
        self.settings = settings or DispatcherSettings()
        self.owner = owner or member_id("dispatcher", instance)
        self._pinned = None if partitions is None else sorted(set(partitions))
        self._stop = asyncio.Event()
        self.transport = AsyncTransport(redis)
        self.supervisor = Supervisor("dispatcher", queue)
        self.leases: Leases | None = None
        self.promoter: Promoter | None = None
        self.ticker: Ticker | None = None
        self.started = asyncio.Event()

    def stop(self) -> None:
        """Ask the dispatcher to stop: it releases its leases and returns from :meth:`run`."""
        self._stop.set()

    @property
    def stats(self) -> DispatcherStats:
        """Counters of this process (the per-partition counters live in Redis)."""
        counts = self.leases.counts if self.leases is not None else {}
        p = self.promoter
        return DispatcherStats(
            promoted=p.promoted if p else 0,
            promote_calls=p.calls if p else 0,
            errors=p.errors if p else 0,
            fenced=counts.get("fenced", 0),
            leases_acquired=counts.get("acquired", 0),
            leases_lost=counts.get("lost", 0),
            leases_released=counts.get("released", 0),
            takeovers=counts.get("takeover", 0),
            by_partition=dict(p.by_partition) if p else {},
        )

    @property
    def tokens(self) -> dict[int, str]:
        """Partition -> fencing token of every lease held now."""
        return self.leases.tokens if self.leases is not None else {}

    def health(self) -> health.Status:
        ready = self.started.is_set() and not self.supervisor.failing()
        sup = self.supervisor
        return health.Status("dispatcher", self.queue, sup.problems(), ready, sup.stuck())

    async def run(self) -> None:
        """Run until :meth:`stop`; leases are released and membership left on the way out."""
        health.register(self.health)
        try:
            # Every line this dispatcher's loops write names its queue and dispatcher.
            with log_context(queue=self.queue, dispatcher=self.owner):
                await self._run()
        finally:
            health.unregister(self.health)
            await self.transport.aclose()

    async def _run(self) -> None:
        meta = await queue_meta(self.transport, self.queue, self._stop, log)
        if meta is None:
            return
        s = self.settings
        watch = redis_config.ConfigWatch(
            self.transport,
            "dispatcher",
            self.queue,
            allow_eviction=s.allow_evicting_redis,
            require_appendonly=s.require_appendonly,
        )
        await redis_config.check_at_start(watch)
        pks = keys.all_partition_keys(self.queue, meta.partitions)
        if self._pinned is not None:
            bad = [p for p in self._pinned if not 0 <= p < meta.partitions]
            if bad:
                raise UnknownQueueError(
                    f"queue {self.queue!r} has partitions 0..{meta.partitions - 1}, not {bad}"
                )
        membership = Membership(
            self.transport,
            keys.dispatchers_key(self.queue),
            keys.drain_key(self.queue),
            self.owner,
            s.membership_timeout,
        )
        promoter: Promoter | None = None

        ticker: Ticker | None = None

        def acquired(p: int) -> None:
            if promoter is not None:
                promoter.acquired(p)
            if ticker is not None:
                ticker.wake(p)

        leases = Leases(self.transport, self.queue, pks, membership, s, self._pinned, acquired)
        promoter = Promoter(self.supervisor, self.transport, self.queue, pks, leases, s)
        ticker = Ticker(self.supervisor, self.transport, self.queue, pks, leases, s)
        self.leases, self.promoter, self.ticker = leases, promoter, ticker
        on_hint = [promoter.hint, ticker.wake]

        def hint(p: int) -> None:
            for wake in on_hint:
                wake(p)

        trimmer = Trimmer(
            self.transport, meta, pks, leases, lambda p: promoter.by_partition.get(p, 0)
        )
        sampler = Sampler(self.transport, self.queue, pks, leases, s)
        listen = self._pinned if self._pinned is not None else range(meta.partitions)
        channels = {pks[p].due_hint: p for p in listen}
        sup = self.supervisor
        sup.every("membership", s.renew_interval, leases.beat)
        sup.every("leases", s.renew_interval, leases.round, first_at_once=True)
        promoter.start()
        ticker.start()
        sup.forever(
            "hints",
            lambda: hints.listen(self.redis, channels, hint, sup, "hints", self.transport.refresh),
            pace=hints.PASS_WAIT,
        )
        sup.every("trim", s.trim_interval, trimmer.round)
        sup.every("sample", s.metrics_interval, sampler.round)
        sup.every("redis-config", s.redis_check_interval, watch.round)
        self.started.set()
        log.info("dispatcher %s started on %s (%d partitions)", self.owner, self.queue, len(pks))
        try:
            await self._stop.wait()
        finally:
            await sup.stop(STOP_ORDER)
            await leases.calls.close()  # no grant may land after the leases are given back
            await leases.release(list(leases.tokens), "shutdown", wait=True)
            with contextlib.suppress(Exception):
                await membership.leave()
            sampler.forget()
            log.info("dispatcher %s stopped (promoted %d)", self.owner, promoter.promoted)
