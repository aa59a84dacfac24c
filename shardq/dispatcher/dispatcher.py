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
- ``relay`` (:mod:`.relay`): carries workflow children's ends from the held partitions'
  outboxes to their batches, and enqueues the callbacks and chain steps they call for;
- ``trim`` (:mod:`.trimmer`) and ``sample`` (:mod:`.sampler`): stream bounds and metrics.

Start-up and shutdown are the ones every role shares (:mod:`shardq.runtime.process`); the
dispatcher adds its components, each built on one
:class:`~shardq.dispatcher.context.DispatcherContext`.
Shutdown (SIGTERM, :meth:`Dispatcher.stop`) stops hints, then the promote loops (no new
promote is sent), then trimming and sampling, then the lease loop and the heartbeat; it then
releases every lease (peers take them on their next round, with no expiry to wait out) and
leaves the fleet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from shardq.config import DispatcherSettings
from shardq.connection import AsyncRedis
from shardq.dispatcher.context import DispatcherContext
from shardq.dispatcher.leases import Leases
from shardq.dispatcher.promoter import Promoter
from shardq.dispatcher.relay import Relay
from shardq.dispatcher.sampler import Sampler
from shardq.dispatcher.ticker import Ticker
from shardq.dispatcher.trimmer import Trimmer
from shardq.runtime.identity import member_id
from shardq.runtime.process import RoleContext, RoleProcess, Stopping
from shardq.store import keys


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
    "relay",
    "promoter:",
    "promoter-topology",
    "trim",
    "sample",
    "leases",
]


class Dispatcher(RoleProcess[DispatcherSettings]):
    """Drains due jobs of one queue's partitions.

    By default it joins the queue's dispatcher fleet and holds its fair share of partitions.
    ``partitions`` pins it to a fixed set instead (no fair-share balancing; leases still make a
    second dispatcher on the same partitions a standby).  ``instance`` names where it runs
    (default ``SHARDQ_INSTANCE`` or ``host:pid``): a dispatcher restarted with the same instance
    takes over its predecessor's leases at once.
    """

    role = "dispatcher"

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
        super().__init__(
            redis,
            queue,
            settings or DispatcherSettings(),
            owner or member_id("dispatcher", instance),
            partitions,
        )
        self.owner = self.member
        self.leases: Leases | None = None
        self.promoter: Promoter | None = None
        self.ticker: Ticker | None = None
        self.relay: Relay | None = None

    def stop(self) -> None:
        """Ask the dispatcher to stop: it releases its leases and returns from :meth:`run`."""
        super().stop()

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

    # running (RoleProcess.run: the start-up and shutdown both roles share) ------------------

    def membership_keys(self) -> tuple[str, str]:
        return keys.dispatchers_key(self.queue), keys.drain_key(self.queue)

    async def start_role(self, core: RoleContext[DispatcherSettings]) -> Stopping:
        s = self.settings
        assert core.membership is not None  # membership_keys names the dispatcher fleet
        ctx = DispatcherContext(**core.fields())
        # Built in the order they need each other; the promoter and the ticker follow the
        # leases' acquisitions from their construction (Leases.when_acquired).
        leases = Leases(ctx)
        promoter = Promoter(ctx, leases=leases)
        ticker = Ticker(ctx, leases=leases)
        relay = Relay(ctx, leases=leases)
        # Activity a trim follows: jobs promoted here, and enqueue hints (workers' reads promote
        # too, and their acks leave entries to trim that this process never promoted); the
        # sampler follows promotes and every hint.  Both are told (touch), neither looks.
        trimmer = Trimmer(ctx, leases=leases)
        sampler = Sampler(ctx, leases=leases)
        promoter.on_moved += [trimmer.touch, sampler.touch]
        self.leases, self.promoter, self.ticker, self.relay = leases, promoter, ticker, relay

        def hint(p: int, message: bytes | None) -> None:
            sampler.touch(p)  # something happened there: its figures are read next round
            if message == b"o":  # a workflow child's end in the outbox (lua/includes/outbox.lua)
                relay.wake(p)
                return
            if message is None:  # resubscribed: any hint may have been missed
                relay.wake(p)
            else:
                trimmer.touch(p)  # an enqueue there: its acks are coming
            promoter.hint(p, resubscribed=message is None)
            ticker.wake(p)

        sup = self.supervisor
        sup.every("membership", s.renew_interval, leases.beat)
        sup.every("leases", s.renew_interval, leases.round, first_at_once=True)
        promoter.start()
        ticker.start()
        relay.start()
        self.listen_for_hints({ctx.pks[p].due_hint: p for p in ctx.partitions}, hint)
        sup.every("trim", s.trim_interval, trimmer.round)
        sup.every("sample", s.metrics_interval, sampler.round)

        async def close() -> None:
            await leases.calls.close()  # no grant may land after the leases are given back
            await leases.release(list(leases.tokens), "shutdown", wait=True)
            sampler.forget()

        return Stopping(STOP_ORDER, close=close, summary=lambda: f"promoted {promoter.promoted}")
