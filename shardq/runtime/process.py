"""What a worker and a dispatcher share: the role context and one start-up/shut-down path.

A role process (:class:`~shardq.worker.Worker`, :class:`~shardq.dispatcher.Dispatcher`) is a
:class:`RoleProcess`.  Its :meth:`~RoleProcess.run` is the same for both roles (the model is
asynq's ``Server.Start``/``Shutdown``):

1. register with the health endpoints and name the queue and member in every log line;
2. wait for Redis and read the queue's meta (:func:`~shardq.runtime.startup.queue_meta`: a
   process started while Redis is down waits, not ready, instead of exiting);
3. check the Redis configuration (:mod:`~shardq.runtime.redis_config`; a setting that loses
   jobs stops the start), check pinned partitions against the queue, join the fleet's
   membership (a worker pinned to partitions has none);
4. hand the role a :class:`RoleContext` to build its components on and start their loops
   (:meth:`RoleProcess.start_role`), which answers with how they stop (:class:`Stopping`);
5. watch the Redis configuration, report ready, and wait for :meth:`RoleProcess.stop`;
6. stop the loops the role names first, in its order, while the others keep running; let the
   role drain (a worker's handlers get their grace while the heartbeat keeps their deliveries
   claimed); stop the other loops; let the role close (a dispatcher releases its leases);
   leave the fleet; close the connections.

Each role adds only its components.  They take the role's context (a frozen dataclass that
extends :class:`RoleContext`: ``WorkerContext``, ``DispatcherContext``), like asynq's params
structs, plus keyword-only arguments for the other components they use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Generic, Protocol, TypeVar

from shardq.connection import AsyncRedis
from shardq.errors import UnknownQueueError
from shardq.logs import log_context
from shardq.runtime import health, hints, redis_config
from shardq.runtime.membership import Membership
from shardq.runtime.startup import queue_meta
from shardq.runtime.supervisor import Supervisor
from shardq.store import keys
from shardq.store.layout import Layout
from shardq.store.meta import QueueMeta, read_meta
from shardq.store.transport import AsyncTransport

#: How often a worker or dispatcher reads the queue's meta to see a resize begin or end.
LAYOUT_CHECK = 1.0


def _describe(layout: Layout) -> str:
    text = f"{layout.partitions} partitions"
    if layout.generation:
        text += f" of generation {layout.generation}"
    if layout.draining is not None:
        text += f", draining generation {layout.draining[0]} ({layout.draining[1]} partitions)"
    if layout.coming is not None:
        text += f", generation {layout.coming[0]} coming ({layout.coming[1]} partitions)"
    return text


class RoleSettings(Protocol):
    """The settings the shared start-up reads (WorkerSettings and DispatcherSettings have them)."""

    @property
    def allow_evicting_redis(self) -> bool: ...
    @property
    def require_appendonly(self) -> bool: ...
    @property
    def redis_check_interval(self) -> float: ...
    @property
    def membership_timeout(self) -> float: ...
    @property
    def tick(self) -> float: ...


S = TypeVar("S", bound=RoleSettings)


@dataclass(frozen=True, kw_only=True, eq=False)
class RoleContext(Generic[S]):
    """What every component of one worker or dispatcher shares, fixed once the queue is known.

    A role's context extends it (``WorkerContext(**core.fields(), stats=..., ...)``).
    """

    role: str  # "worker" or "dispatcher"
    queue: str
    member: str  # this process's member id in its fleet (runtime.identity): consumer, owner
    redis: AsyncRedis
    transport: AsyncTransport
    meta: QueueMeta
    # every live partition's keys by fleet id (keys.fleet_id: generation 0's are 0..P-1; while
    # a resize runs, the generation it empties and the new one)
    pks: Mapping[int, keys.PartitionKeys]
    pinned: Sequence[int] | None  # the partitions (fleet ids) this process is pinned to
    settings: S
    supervisor: Supervisor
    membership: Membership | None  # None: not in a fleet (a worker pinned to partitions)
    stop: asyncio.Event  # set by RoleProcess.stop
    log: logging.Logger

    @property
    def partitions(self) -> list[int]:
        """The partitions this process serves: the pinned ones, else all of the queue's."""
        return list(self.pinned) if self.pinned is not None else list(self.pks)

    def fields(self) -> dict[str, Any]:
        """The shared fields by name, to build a role's context from."""
        return {f.name: getattr(self, f.name) for f in fields(RoleContext)}


async def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Stopping:
    """How a role's components stop (the order is stated in docs/architecture-processes.md)."""

    #: Loops (names, or prefixes ending in ``:``) stopped first, one group at a time in this
    #: order; every other loop keeps running until :attr:`drain` returns.
    first: Sequence[str]
    #: After the first loops stopped, while the others still run (a worker's handlers finish).
    drain: Callable[[], Awaitable[None]] = _nothing
    #: After every loop stopped, before leaving the fleet (a dispatcher releases its leases).
    close: Callable[[], Awaitable[None]] = _nothing
    #: The end of the "stopped" log line (counters).
    summary: Callable[[], str] = str


class RoleProcess(ABC, Generic[S]):
    """A worker or a dispatcher of one queue: the start-up and shut-down both roles share."""

    #: "worker" or "dispatcher": the supervisor's role label, the health status, log fields.
    role: str

    def __init__(
        self,
        redis: AsyncRedis,
        queue: str,
        settings: S,
        member: str,
        partitions: Iterable[int] | None,
    ) -> None:
        self.redis = redis
        self.queue = queue
        self.settings = settings
        self.member = member
        self.log = logging.getLogger(f"shardq.{self.role}")
        self._pinned = None if partitions is None else sorted(set(partitions))
        self._stop = asyncio.Event()
        self.transport = AsyncTransport(redis)
        #: Whether run() closes the transport at the end (not when another role lent it).
        self.owns_transport = True
        self.supervisor = Supervisor(self.role, queue, tick=settings.tick)
        self.membership: Membership | None = None
        self.started = asyncio.Event()

    # the role's part -----------------------------------------------------------------------

    @abstractmethod
    def membership_keys(self) -> tuple[str, str] | None:
        """The fleet's member and drain keys, or None when this process joins no fleet."""

    @abstractmethod
    async def start_role(self, core: RoleContext[S]) -> Stopping:
        """Build the role's components on ``core`` and start their loops; say how they stop."""

    # control -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the process to stop: :meth:`run` shuts down in the role's order and returns."""
        self._stop.set()

    def health(self) -> health.Status:
        sup = self.supervisor
        ready = self.started.is_set() and not sup.failing()
        return health.Status(self.role, self.queue, sup.problems(), ready, sup.stuck())

    def listen_for_hints(
        self, channels: dict[str, int], on_hint: Callable[[int, bytes | None], None]
    ) -> None:
        """The ``hints`` loop: wake-ups over sharded pub/sub, ``channel -> partition``."""
        sup = self.supervisor
        # Set when the loop is stopped (a wake of the loop: it ends its listeners at once) and
        # when the slot map was read again (a loop met a redirect: the subscriptions regroup
        # now, not at the end of the listen loop's pass).
        look = asyncio.Event()
        self.transport.on_refresh.append(look.set)
        sup.forever(
            "hints",
            lambda: hints.listen(
                self.redis, channels, on_hint, sup, "hints", self.transport.refresh, look
            ),
            pace=hints.PASS_WAIT,
            wakes=(look,),
        )

    # running -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until :meth:`stop`, then shut down in the role's order (module docstring)."""
        health.register(self.health)
        try:
            # Every line this process's loops write names its queue and itself.
            with log_context(queue=self.queue, **{self.role: self.member}):
                await self._run()
        finally:
            health.unregister(self.health)
            if self.owns_transport:
                await self.transport.aclose()

    async def _run(self) -> None:
        meta: QueueMeta | None = await queue_meta(self.transport, self.queue, self._stop, self.log)
        if meta is None:
            return  # stopped while waiting for Redis
        s = self.settings
        watch = redis_config.ConfigWatch(
            self.transport,
            self.role,
            self.queue,
            allow_eviction=s.allow_evicting_redis,
            require_appendonly=s.require_appendonly,
        )
        await redis_config.check_at_start(watch)
        if self._pinned is not None:
            bad = [p for p in self._pinned if not 0 <= p < meta.partitions]
            if bad:
                raise UnknownQueueError(
                    f"queue {self.queue!r} has partitions 0..{meta.partitions - 1}, not {bad}"
                )
        fleet_keys = self.membership_keys()
        if fleet_keys is not None:
            members_key, drain_key = fleet_keys
            self.membership = Membership(
                self.transport, members_key, drain_key, self.member, s.membership_timeout
            )
        try:
            while meta is not None:
                meta = await self._serve(meta, watch)
                if meta is not None:
                    self.supervisor = Supervisor(self.role, self.queue, tick=s.tick)
        finally:
            if self.membership is not None:
                with contextlib.suppress(Exception):  # its heartbeat expires anyway
                    await self.membership.leave()

    def _served(self, meta: QueueMeta) -> tuple[frozenset[tuple[int, int]], tuple[int, ...]]:
        """What this process serves on ``meta``: the generations whose partitions it serves
        (``(generation, partitions)``: the active, draining and coming ones, which is what
        ``Layout.fleet()`` is made of, without building its keys every LAYOUT_CHECK), and the
        pinned partitions (of the active generation)."""
        generations = {(meta.generation, meta.partitions), meta.draining, meta.coming}
        pinned = tuple(keys.fleet_id(meta.generation, p) for p in self._pinned or ())
        return frozenset(g for g in generations if g is not None), pinned

    async def _serve(self, meta: QueueMeta, watch: redis_config.ConfigWatch) -> QueueMeta | None:
        """Run the role on one layout of the queue until :meth:`stop` (None) or until a resize
        changes the layout (the meta read then: the caller runs the role again on it, in this
        same process: leases handed back and in-flight jobs finished first, as at a stop)."""
        s = self.settings
        layout = meta.key_layout
        pinned = None
        if self._pinned is not None:
            pinned = [keys.fleet_id(meta.generation, p) for p in self._pinned]
        core = RoleContext(
            role=self.role,
            queue=self.queue,
            member=self.member,
            redis=self.redis,
            transport=self.transport,
            meta=meta,
            pks=layout.fleet(),
            pinned=pinned,
            settings=s,
            supervisor=self.supervisor,
            membership=self.membership,
            stop=self._stop,
            log=self.log,
        )
        stopping = await self.start_role(core)
        sup = self.supervisor
        sup.every("redis-config", s.redis_check_interval, watch.round)
        changed: asyncio.Future[QueueMeta] = asyncio.get_running_loop().create_future()

        served = self._served(meta)

        async def check_layout() -> None:
            # A resize rewrites the meta as it goes: run again on partitions that changed (the
            # switch itself changes none: the coming generation was served already).
            now = await read_meta(self.redis, self.queue)
            if self._served(now) != served and not changed.done():
                changed.set_result(now)

        sup.every("layout", LAYOUT_CHECK, check_layout)
        self.started.set()
        self.log.info(
            "%s %s started on %s (%s)",
            self.role,
            self.member,
            self.queue,
            _describe(layout),
        )
        stop: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        try:
            waits: list[asyncio.Future[Any]] = [stop, changed]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            await sup.stop(stopping.first, rest=False)
            await stopping.drain()
            await sup.stop()
            await stopping.close()
            self.log.info("%s %s stopped (%s)", self.role, self.member, stopping.summary())
        if self._stop.is_set() or not changed.done():
            return None
        following = changed.result()
        self.log.info("%s %s: the queue's layout changed: %s", self.role, self.member,
                      _describe(following.key_layout))  # fmt: skip
        return following
