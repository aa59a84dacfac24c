"""The producer clients: :class:`Client` (sync) and :class:`AsyncClient` (asyncio), and their
``schedules`` facades (:class:`Schedules`, :class:`AsyncSchedules`).

Both are thin: each method checks nothing itself and holds no logic; it builds the operation's
plan (:mod:`shardq.plans.producer`, where every decision is written once) and drives it through
the one retry layer (:mod:`shardq.store.retry`), so every call rides out failovers, slot moves
and restarts for up to ``ProducerSettings.retry_timeout``, and raises the same typed
:mod:`shardq.errors` exception from either client.  Enqueue resends the same job id and body,
which the script recognises, so a resend never duplicates a job.  Documentation is written
once, on :class:`Client`; :class:`AsyncClient`'s methods take it (:func:`shardq.plans.twin_of`),
and tests/unit/test_parity.py keeps the two surfaces identical.  Model: httpx's ``Client`` and
``AsyncClient`` over one ``BaseClient``.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar, Unpack

from shardq.config import ProducerSettings, RedisSettings
from shardq.connection import AsyncRedis, SyncRedis, connect, connect_async
from shardq.errors import ShardqError
from shardq.jobs import Backoff, EnqueueResult, JobInfo, JobRequest, JobResult, debounced
from shardq.jobs.options import JobOptions, takes_job_options
from shardq.limits import Limit
from shardq.names import Priority
from shardq.plans import Plan, drive, drive_async, twin_of
from shardq.plans import producer as producer_plans
from shardq.plans import schedules as schedule_plans
from shardq.plans import workflows as workflow_plans
from shardq.plans.producer import BulkRun as BulkRun
from shardq.plans.producer import not_durable as not_durable
from shardq.runtime import redis_config
from shardq.schedules import (
    DEFAULT_CATCH_UP,
    DEFAULT_GRACE,
    MisfirePolicy,
    ScheduleInfo,
    make_definition,
)
from shardq.store import producer
from shardq.store.channels import AsyncChannel, SyncChannel
from shardq.store.layout import Layout
from shardq.store.meta import QueueCache
from shardq.store.retry import AsyncRunner, SyncRunner
from shardq.store.transport import AsyncTransport, SyncTransport
from shardq.workflows import DEFAULT_RETENTION, BatchCancel, BatchInfo, Child, Policy

T = TypeVar("T")


def _eviction_refused(found: list[redis_config.Finding]) -> None:
    error = redis_config.refusal(found, allow_eviction=False)
    if error is not None:
        raise error


class Client:
    """Sync producer.  Works unchanged against a cluster URL and a standalone URL.

    ``Client(url)``, ``Client(RedisSettings(...), ProducerSettings(...))`` or ``Client(redis)``
    with a redis-py client of shardq's (``shardq.connect``).

    >>> client = Client.from_url("redis://127.0.0.1:7000")
    >>> job_id = client.enqueue("emails", "send", {"to": "a@example.com"}, delay=3600)
    """

    def __init__(
        self,
        redis: SyncRedis | RedisSettings | str,
        settings: ProducerSettings | None = None,
    ) -> None:
        if isinstance(redis, str):
            redis = RedisSettings.from_url(redis)
        self.redis: SyncRedis = connect(redis) if isinstance(redis, RedisSettings) else redis
        self.settings = settings or ProducerSettings()
        #: What this client knows of its queues (partition count, layout, lanes), read once and
        #: kept; the plans it runs read and fill it (:meth:`forget` drops a queue's).
        self.cache = QueueCache()
        #: Sends calls to the primaries (:class:`~shardq.store.transport.SyncTransport`).
        self.transport = SyncTransport(self.redis)
        self._runner = SyncRunner(self.transport, self.settings.retry_timeout)
        #: Periodic jobs: add/list/get/pause/resume/remove/next (see shardq.schedules).
        self.schedules = Schedules(self)
        #: Batches and chains: create/open/add/seal/chain/get/list/cancel (shardq.workflows).
        self.batches = Batches(self)

    @classmethod
    def from_url(cls, url: str | RedisSettings, settings: ProducerSettings | None = None) -> Client:
        """A client of the Redis at ``url`` (cluster or standalone: detected), connected now."""
        return cls(RedisSettings.from_url(url) if isinstance(url, str) else url, settings)

    def close(self) -> None:
        """Close the client's connections."""
        self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, plan: Plan[T], what: str) -> T:
        """Run one operation: a plan of :mod:`shardq.plans` (built with this client's
        :attr:`cache`), driven through this client's runner: every batch of calls it yields is
        sent, the calls that met a failover, slot move or restart are resent within one
        ``retry_timeout`` window for the whole operation, and what is left is raised as a typed
        :mod:`shardq.errors` exception naming ``what`` ("reading job j-1").  Returns the plan's
        value.  Every method of the facades is one such call; the inspector, the schedules and
        batches facades and the admin tools run theirs the same way.

        >>> from shardq.plans import producer
        >>> client.run(producer.get(client.cache, "emails", job_id), f"reading job {job_id}")
        """
        return drive(plan, self._runner.batches(what))

    # queues -------------------------------------------------------------------------------

    def create_queue(
        self,
        queue: str,
        partitions: int = 64,
        *,
        ack_retention: float = 0.0,
        dead_letter_cap: int = producer.DEFAULT_DEAD_CAP,
        allow_evicting_redis: bool = False,
        lanes: bool = False,
    ) -> bool:
        """Create a queue with ``partitions`` partitions; True if new.  Safe to repeat.

        ``ack_retention`` keeps acknowledged ready entries this many seconds (for inspection)
        before trimming; ``dead_letter_cap`` bounds each partition's dead-letter stream (the
        oldest are dropped and counted in ``dead_dropped``).  Both are fixed at creation.
        ``lanes=True`` turns lanes on (see :meth:`set_lanes`).

        Raises QueueConfigConflictError when the queue exists with another partition count,
        and MisconfiguredRedisError when a primary's maxmemory-policy evicts keys (unless
        ``allow_evicting_redis``).
        """
        plan = producer_plans.create_queue(
            self.cache, queue, partitions, ack_retention, dead_letter_cap, lanes
        )
        if not allow_evicting_redis:
            _eviction_refused(self.check_redis())
        return self.run(plan, f"creating queue {queue!r}")

    def set_lanes(self, queue: str, on: bool) -> int:
        """Turn the queue's lanes on or off; returns how many partitions changed.

        With lanes on, due jobs wait in each partition's lane and are delivered by priority
        (high, default, low shared 6:3:1) and round-robin between tenants, instead of in due
        order; it costs every job a few more Redis commands (docs/capacity.md).  Jobs already
        in a ready stream when lanes are turned on are delivered first; jobs in a lane when
        they are turned off are still delivered.  Needs the operator's Redis user.
        """
        word = "on" if on else "off"
        return self.run(producer_plans.set_lanes(self.cache, queue, on), f"lanes {word}")

    def lanes(self, queue: str) -> bool:
        """Whether the queue has lanes on (read from Redis, not cached)."""
        return self.run(producer_plans.lanes(self.cache, queue), f"reading lanes of {queue!r}")

    def require_lanes(self, queue: str) -> None:
        """LanesOffError unless the queue has lanes on (seen on within the last
        ``shardq.store.meta.LANES_RECHECK`` seconds, so lanes turned off reach every producer
        soon)."""
        self.run(producer_plans.require_lanes(self.cache, queue), f"reading lanes of {queue!r}")

    def check_redis(self, require_appendonly: bool = False) -> list[redis_config.Finding]:
        """Settings of the primaries that would lose jobs silently (an evicting
        maxmemory-policy; appendonly off, when ``require_appendonly``); empty when none."""
        found = self._runner.plain(
            lambda: redis_config.read_sync(self.redis), "checking Redis settings"
        )
        return redis_config.findings(found, require_appendonly)

    def forget(self, queue: str) -> None:
        """Drop what is cached about ``queue`` (it was deleted or re-created)."""
        self.cache.forget(queue)

    def layout(self, queue: str) -> Layout:
        """Where the queue's partitions live now (read, not cached: a resize may be running):
        the active generation, and the one a resize empties."""
        self.forget(queue)
        return self.run(producer_plans.layout(self.cache, queue), f"reading queue {queue!r}")

    def partitions(self, queue: str) -> int:
        """The queue's partition count (cached after the first lookup)."""
        return self.run(producer_plans.partitions(self.cache, queue), f"reading queue {queue!r}")

    def upgrade_queue(self, queue: str) -> int:
        """Raise the queue's stored layout to this version's; returns the layout it had.

        From layout 3 on, producers keep waiting jobs compactly (one due-set member each,
        ~60 B less per job; lua/includes/compact.lua).  From layout 4 on, each partition's
        flags (paused, lanes) live in its control hash, which only the operator and admin
        users may write, rather than in the stats hash every role writes (the upgrade moves
        them).  Upgrade once no process of an older shardq serves the queue: an older
        dispatcher would promote a compact member as an id, and older processes read the
        flags in the stats hash only.
        Jobs already stored keep their layout; both are read alike.  Producers running now
        pick the new layout up when they next read the queue (a restart, or :meth:`forget`).
        """
        return self.run(producer_plans.upgrade(self.cache, queue), f"upgrading queue {queue!r}")

    def compact(self, queue: str) -> bool:
        """Whether the queue keeps waiting jobs compactly (layout 3: one due-set member per
        job, lua/includes/compact.lua); read with the partition count, cached alike."""
        return self.run(producer_plans.meta(self.cache, queue), f"reading queue {queue!r}").compact

    def queues(self) -> list[str]:
        """Names of every queue created on this Redis."""
        return self.run(producer_plans.registered(), "listing queues")

    # rate limits ---------------------------------------------------------------------------

    def set_limit(self, queue: str, limit: Limit) -> None:
        """Create or replace a rate limit of ``queue`` (see shardq.limits); workers apply it
        within ``limits_refresh`` seconds."""
        self.run(producer_plans.set_limit(self.cache, queue, limit), "setting a limit")

    def limits(self, queue: str) -> list[Limit]:
        """The rate limits of ``queue``, by name."""
        return self.run(producer_plans.limits(self.cache, queue), f"reading limits of {queue!r}")

    def remove_limit(self, queue: str, name: str) -> bool:
        """Remove the limit ``type:<job type>``, ``key:<limit key>`` or ``tenant:<tenant>``;
        False if there was none."""
        return self.run(producer_plans.remove_limit(self.cache, queue, name), "removing a limit")

    # jobs ---------------------------------------------------------------------------------

    @takes_job_options
    def enqueue(
        self,
        queue: str,
        job_type: str,
        payload: Any = None,
        *,
        durable: bool = False,
        debounce: timedelta | float | None = None,
        **options: Unpack[JobOptions],
    ) -> str:
        """Enqueue one job to run now, at ``run_at`` or after ``delay`` seconds; return its id.

        With ``durable=True`` it returns only once ``durable_replicas`` replicas hold the job
        (WAIT on the connection that wrote), else raises NotDurableError.
        ``debounce=<seconds>`` (with ``idempotency_key``, instead of ``delay``/``run_at``): the
        job runs that long after the last enqueue of a burst: a repeat while the job still waits
        replaces its payload and moves its due time, keeping its id (``created`` False).
        """
        request = debounced(JobRequest(job_type, payload, **options), debounce)
        return self.enqueue_detailed(queue, request, durable=durable).job_id

    def enqueue_detailed(
        self, queue: str, request: JobRequest, *, durable: bool = False
    ) -> EnqueueResult:
        """Enqueue one job and say whether it was new and when it is due."""
        plan = producer_plans.enqueue(self.cache, queue, request, self.settings, durable)
        return self.run(plan, f"enqueue into {queue!r}")

    def enqueue_many(
        self,
        queue: str,
        requests: Iterable[JobRequest],
        *,
        chunk: int = 5000,
        durable: bool = False,
    ) -> list[EnqueueResult]:
        """Enqueue many jobs in pipelines grouped by node; results in request order.

        Every job is validated before any is sent, so a bad one writes nothing.  Each job is
        its own atomic script; calls that meet a failover or slot move are resent (same ids)
        until ``retry_timeout``, one window for the whole call.  If some jobs still could not
        be stored (or were refused, e.g. a duplicate job id), BulkEnqueueError says exactly
        which were stored and gives the rest back as requests with their ids, safe to resend.
        """
        plan = producer_plans.enqueue_many(
            self.cache, queue, requests, self.settings, chunk, durable
        )
        return self.run(plan, f"enqueue into {queue!r}")

    def cancel(self, queue: str, job_id: str, *, running: bool = False) -> bool:
        """Cancel a job that has not started: True if cancelled, False if there is no such job.

        Raises JobRunningError when a worker holds it, unless ``running=True``: then it is
        cancelled too, and the worker holding it is told within a second (sharded pub/sub,
        checked again by its heartbeat): an async handler's task is cancelled, a sync handler
        sees ``job.cancelled`` (``job.check_cancelled()`` raises JobCancelledError); the job
        ends as cancelled (never retried), even if its worker dies meanwhile.  Raises
        JobNotScheduledError when it is dead.
        """
        plan = producer_plans.cancel(self.cache, queue, job_id, running)
        return self.run(plan, f"cancel of job {job_id}")

    def reschedule(
        self,
        queue: str,
        job_id: str,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
        priority: Priority | None = None,
    ) -> int:
        """Move a waiting job to a new due time, or give it a new ``priority``, or both;
        returns its due time in ms on the Redis clock.  Only a job still scheduled (in the due
        set) can change: JobNotScheduledError once it is due.  A priority other than
        ``'default'`` needs lanes on (LanesOffError)."""
        plan = producer_plans.reschedule(
            self.cache, queue, job_id, run_at, delay, priority, self.settings
        )
        return self.run(plan, f"reschedule of job {job_id}")

    def get(self, queue: str, job_id: str) -> JobInfo | None:
        """A snapshot of a job, or None once it completed, was cancelled, or never existed."""
        return self.run(producer_plans.get(self.cache, queue, job_id), f"reading job {job_id}")

    def result(self, queue: str, job_id: str, *, timeout: float | None = None) -> Any:
        """The return value of a job enqueued with ``keep_result``: at once if it completed,
        else once it does, waiting up to ``timeout`` seconds (None: until it ends; 0: no
        wait).  The wait listens on the job's result channel (sharded pub/sub in its
        partition's slot) and reads again at least every few seconds, so a missed message
        costs seconds, never the answer.

        Raises JobFailedError when the job ended dead (``.error``: its last error),
        ResultNotStoredError when it completed but its value could not be kept (over
        ``max_result_bytes``, or not JSON), ResultNotKeptError when it was enqueued without
        ``keep_result``, ResultNotFoundError when there is no such job and no result (never
        existed, cancelled, or expired after the retention), ResultTimeoutError when it has
        not ended within ``timeout``."""
        deadline = producer_plans.result_deadline(timeout)
        what = f"reading the result of job {job_id}"
        read = self.run(producer_plans.read_result(self.cache, queue, job_id), what)
        done, value, _ = producer_plans.result_wait(read, job_id, queue, deadline)
        if done:
            return value
        with SyncChannel(self.redis, read.channel) as channel:
            while True:  # subscribed first, then read: an end between the two is not missed
                read = self.run(producer_plans.read_result(self.cache, queue, job_id), what)
                done, value, sleep = producer_plans.result_wait(read, job_id, queue, deadline)
                if done:
                    return value
                channel.wait(sleep)

    def result_info(self, queue: str, job_id: str) -> JobResult | None:
        """A completed job's kept result (value, attempt, when it finished), or None when
        there is none (not ended yet, ended dead, kept none, or expired); never waits."""
        plan = producer_plans.result_info(self.cache, queue, job_id)
        return self.run(plan, f"reading the result of job {job_id}")


@twin_of(Client)
class AsyncClient:
    """Asyncio producer: the same methods as :class:`Client`, awaited.

    ``await AsyncClient.from_url(url)`` connects at once; ``AsyncClient(url)`` and
    ``AsyncClient(RedisSettings(...), ProducerSettings(...))`` connect on first use;
    ``AsyncClient(redis)`` takes an asyncio client of shardq's (``shardq.connect_async``).
    """

    def __init__(
        self,
        redis: AsyncRedis | RedisSettings | str,
        settings: ProducerSettings | None = None,
    ) -> None:
        if isinstance(redis, str):
            redis = RedisSettings.from_url(redis)
        self.settings = settings or ProducerSettings()
        #: As :attr:`Client.cache`.
        self.cache = QueueCache()
        self._pending: RedisSettings | None = None
        self._connecting = asyncio.Lock()
        if isinstance(redis, RedisSettings):
            self._pending = redis
        else:
            self._bind(redis)
        #: Periodic jobs, as ``Client.schedules`` (see shardq.schedules).
        self.schedules = AsyncSchedules(self)
        #: Batches and chains, as ``Client.batches`` (see shardq.workflows).
        self.batches = AsyncBatches(self)

    def _bind(self, redis: AsyncRedis) -> None:
        self._redis = redis
        self._transport = AsyncTransport(redis)
        self._runner = AsyncRunner(self._transport, self.settings.retry_timeout)

    @property
    def redis(self) -> AsyncRedis:
        """The redis-py asyncio client (connected on first use when made from settings)."""
        if self._pending is not None:
            raise ShardqError(
                "this AsyncClient connects on its first call: await one (or build it with "
                "`await AsyncClient.from_url(url)`) before using .redis"
            )
        return self._redis

    @property
    def transport(self) -> AsyncTransport:
        """Sends calls to the primaries (:class:`~shardq.store.transport.AsyncTransport`)."""
        self.redis  # noqa: B018 - the same refusal before the first connection
        return self._transport

    async def _connected(self) -> None:
        if self._pending is None:
            return
        async with self._connecting:
            if self._pending is not None:
                self._bind(await connect_async(self._pending))
                self._pending = None

    @classmethod
    async def from_url(
        cls, url: str | RedisSettings, settings: ProducerSettings | None = None
    ) -> AsyncClient:
        redis_settings = RedisSettings.from_url(url) if isinstance(url, str) else url
        return cls(await connect_async(redis_settings), settings)

    async def close(self) -> None:
        if self._pending is not None:
            return
        await self._transport.aclose()
        await self._redis.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def run(self, plan: Plan[T], what: str) -> T:
        await self._connected()
        return await drive_async(plan, self._runner.batches(what))

    # queues -------------------------------------------------------------------------------

    async def create_queue(
        self,
        queue: str,
        partitions: int = 64,
        *,
        ack_retention: float = 0.0,
        dead_letter_cap: int = producer.DEFAULT_DEAD_CAP,
        allow_evicting_redis: bool = False,
        lanes: bool = False,
    ) -> bool:
        plan = producer_plans.create_queue(
            self.cache, queue, partitions, ack_retention, dead_letter_cap, lanes
        )
        if not allow_evicting_redis:
            _eviction_refused(await self.check_redis())
        return await self.run(plan, f"creating queue {queue!r}")

    async def set_lanes(self, queue: str, on: bool) -> int:
        word = "on" if on else "off"
        return await self.run(producer_plans.set_lanes(self.cache, queue, on), f"lanes {word}")

    async def lanes(self, queue: str) -> bool:
        return await self.run(
            producer_plans.lanes(self.cache, queue), f"reading lanes of {queue!r}"
        )

    async def require_lanes(self, queue: str) -> None:
        plan = producer_plans.require_lanes(self.cache, queue)
        await self.run(plan, f"reading lanes of {queue!r}")

    async def check_redis(self, require_appendonly: bool = False) -> list[redis_config.Finding]:
        await self._connected()
        found = await self._runner.plain(
            lambda: redis_config.read_async_client(self._redis), "checking Redis settings"
        )
        return redis_config.findings(found, require_appendonly)

    def forget(self, queue: str) -> None:
        self.cache.forget(queue)

    async def layout(self, queue: str) -> Layout:
        self.forget(queue)
        return await self.run(producer_plans.layout(self.cache, queue), f"reading queue {queue!r}")

    async def partitions(self, queue: str) -> int:
        plan = producer_plans.partitions(self.cache, queue)
        return await self.run(plan, f"reading queue {queue!r}")

    async def upgrade_queue(self, queue: str) -> int:
        plan = producer_plans.upgrade(self.cache, queue)
        return await self.run(plan, f"upgrading queue {queue!r}")

    async def compact(self, queue: str) -> bool:
        meta = await self.run(producer_plans.meta(self.cache, queue), f"reading queue {queue!r}")
        return meta.compact

    async def queues(self) -> list[str]:
        return await self.run(producer_plans.registered(), "listing queues")

    # rate limits ---------------------------------------------------------------------------

    async def set_limit(self, queue: str, limit: Limit) -> None:
        await self.run(producer_plans.set_limit(self.cache, queue, limit), "setting a limit")

    async def limits(self, queue: str) -> list[Limit]:
        plan = producer_plans.limits(self.cache, queue)
        return await self.run(plan, f"reading limits of {queue!r}")

    async def remove_limit(self, queue: str, name: str) -> bool:
        plan = producer_plans.remove_limit(self.cache, queue, name)
        return await self.run(plan, "removing a limit")

    # jobs ---------------------------------------------------------------------------------

    @takes_job_options
    async def enqueue(
        self,
        queue: str,
        job_type: str,
        payload: Any = None,
        *,
        durable: bool = False,
        debounce: timedelta | float | None = None,
        **options: Unpack[JobOptions],
    ) -> str:
        request = debounced(JobRequest(job_type, payload, **options), debounce)
        return (await self.enqueue_detailed(queue, request, durable=durable)).job_id

    async def enqueue_detailed(
        self, queue: str, request: JobRequest, *, durable: bool = False
    ) -> EnqueueResult:
        plan = producer_plans.enqueue(self.cache, queue, request, self.settings, durable)
        return await self.run(plan, f"enqueue into {queue!r}")

    async def enqueue_many(
        self,
        queue: str,
        requests: Iterable[JobRequest],
        *,
        chunk: int = 5000,
        durable: bool = False,
    ) -> list[EnqueueResult]:
        plan = producer_plans.enqueue_many(
            self.cache, queue, requests, self.settings, chunk, durable
        )
        return await self.run(plan, f"enqueue into {queue!r}")

    async def cancel(self, queue: str, job_id: str, *, running: bool = False) -> bool:
        plan = producer_plans.cancel(self.cache, queue, job_id, running)
        return await self.run(plan, f"cancel of job {job_id}")

    async def reschedule(
        self,
        queue: str,
        job_id: str,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
        priority: Priority | None = None,
    ) -> int:
        plan = producer_plans.reschedule(
            self.cache, queue, job_id, run_at, delay, priority, self.settings
        )
        return await self.run(plan, f"reschedule of job {job_id}")

    async def result(self, queue: str, job_id: str, *, timeout: float | None = None) -> Any:
        deadline = producer_plans.result_deadline(timeout)
        what = f"reading the result of job {job_id}"
        read = await self.run(producer_plans.read_result(self.cache, queue, job_id), what)
        done, value, _ = producer_plans.result_wait(read, job_id, queue, deadline)
        if done:
            return value
        async with AsyncChannel(self.redis, read.channel) as channel:
            while True:  # subscribed first, then read: an end between the two is not missed
                read = await self.run(producer_plans.read_result(self.cache, queue, job_id), what)
                done, value, sleep = producer_plans.result_wait(read, job_id, queue, deadline)
                if done:
                    return value
                await channel.wait(sleep)

    async def result_info(self, queue: str, job_id: str) -> JobResult | None:
        plan = producer_plans.result_info(self.cache, queue, job_id)
        return await self.run(plan, f"reading the result of job {job_id}")

    async def get(self, queue: str, job_id: str) -> JobInfo | None:
        return await self.run(
            producer_plans.get(self.cache, queue, job_id), f"reading job {job_id}"
        )


# Periodic schedules: ``client.schedules`` --------------------------------------------------------


class Schedules:
    """``client.schedules``: periodic jobs of the sync :class:`Client` (see
    :mod:`shardq.schedules`); each method drives a plan of :mod:`shardq.plans.schedules`
    through the client's runner.

    >>> client.schedules.add("emails", "digest", "send_digest", cron="0 2 * * 1-5",
    ...                      tz="Europe/Berlin")
    """

    def __init__(self, client: Client) -> None:
        self._client = client

    def add(
        self,
        queue: str,
        name: str,
        job_type: str,
        payload: Any = None,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str = "UTC",
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        headers: dict[str, str] | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        misfire: MisfirePolicy = "run_once",
        catch_up_limit: int = DEFAULT_CATCH_UP,
        misfire_grace: float = DEFAULT_GRACE,
    ) -> ScheduleInfo:
        """Add schedule ``name`` (or update it: same name) enqueueing ``job_type`` with
        ``payload`` at every tick of ``cron`` (in time zone ``tz``) or ``every`` seconds.
        Raises InvalidPeriodicScheduleError before anything is written when it is invalid."""
        d = make_definition(
            name, job_type, payload, cron=cron, every=every, tz=tz, max_attempts=max_attempts,
            backoff=backoff, headers=headers, start=start, end=end, misfire=misfire,
            catch_up_limit=catch_up_limit, misfire_grace=misfire_grace,
            settings=self._client.settings,
        )  # fmt: skip
        plan = schedule_plans.add(self._client.cache, queue, d)
        return self._client.run(plan, f"adding schedule {name!r}")

    update = add

    def get(self, queue: str, name: str) -> ScheduleInfo:
        """One schedule with its state; ScheduleNotFoundError when there is none."""
        plan = schedule_plans.get(self._client.cache, queue, name)
        return self._client.run(plan, f"reading schedule {name!r}")

    show = get

    def list(self, queue: str) -> builtins.list[ScheduleInfo]:
        """Every schedule of the queue, by name."""
        plan = schedule_plans.list_all(self._client.cache, queue)
        return self._client.run(plan, f"listing the schedules of {queue!r}")

    def pause(self, queue: str, name: str) -> ScheduleInfo:
        """Stop firing (from the next tick on) until :meth:`resume`."""
        plan = schedule_plans.pause(self._client.cache, queue, name)
        return self._client.run(plan, f"pausing schedule {name!r}")

    def resume(self, queue: str, name: str) -> ScheduleInfo:
        """Fire again from the first tick after now (ticks while paused are not misfires)."""
        plan = schedule_plans.resume(self._client.cache, queue, name)
        return self._client.run(plan, f"resuming schedule {name!r}")

    def remove(self, queue: str, name: str) -> bool:
        """Delete the schedule; True when it existed.  Jobs it already enqueued stay."""
        plan = schedule_plans.remove(self._client.cache, queue, name)
        return self._client.run(plan, f"removing schedule {name!r}")

    def next(self, queue: str, name: str, n: int = 5) -> builtins.list[datetime]:
        """The next ``n`` tick times, in the schedule's time zone."""
        plan = schedule_plans.upcoming(self._client.cache, queue, name, n)
        return self._client.run(plan, f"reading schedule {name!r}")


@twin_of(Schedules)
class AsyncSchedules:
    """``AsyncClient.schedules``: the same methods as :class:`Schedules`, awaited."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def add(
        self,
        queue: str,
        name: str,
        job_type: str,
        payload: Any = None,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str = "UTC",
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        headers: dict[str, str] | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        misfire: MisfirePolicy = "run_once",
        catch_up_limit: int = DEFAULT_CATCH_UP,
        misfire_grace: float = DEFAULT_GRACE,
    ) -> ScheduleInfo:
        d = make_definition(
            name, job_type, payload, cron=cron, every=every, tz=tz, max_attempts=max_attempts,
            backoff=backoff, headers=headers, start=start, end=end, misfire=misfire,
            catch_up_limit=catch_up_limit, misfire_grace=misfire_grace,
            settings=self._client.settings,
        )  # fmt: skip
        plan = schedule_plans.add(self._client.cache, queue, d)
        return await self._client.run(plan, f"adding schedule {name!r}")

    update = add

    async def get(self, queue: str, name: str) -> ScheduleInfo:
        plan = schedule_plans.get(self._client.cache, queue, name)
        return await self._client.run(plan, f"reading schedule {name!r}")

    show = get

    async def list(self, queue: str) -> builtins.list[ScheduleInfo]:
        plan = schedule_plans.list_all(self._client.cache, queue)
        return await self._client.run(plan, f"listing the schedules of {queue!r}")

    async def pause(self, queue: str, name: str) -> ScheduleInfo:
        plan = schedule_plans.pause(self._client.cache, queue, name)
        return await self._client.run(plan, f"pausing schedule {name!r}")

    async def resume(self, queue: str, name: str) -> ScheduleInfo:
        plan = schedule_plans.resume(self._client.cache, queue, name)
        return await self._client.run(plan, f"resuming schedule {name!r}")

    async def remove(self, queue: str, name: str) -> bool:
        plan = schedule_plans.remove(self._client.cache, queue, name)
        return await self._client.run(plan, f"removing schedule {name!r}")

    async def next(self, queue: str, name: str, n: int = 5) -> builtins.list[datetime]:
        plan = schedule_plans.upcoming(self._client.cache, queue, name, n)
        return await self._client.run(plan, f"reading schedule {name!r}")


# Batches and chains: ``client.batches`` ------------------------------------------------------


class Batches:
    """``client.batches``: workflows of the sync :class:`Client` (see :mod:`shardq.workflows`
    and docs/workflows.md); each method drives a plan of :mod:`shardq.plans.workflows`.

    >>> bid = client.batches.create("images", [JobRequest("resize", {"n": i}) for i in range(100)],
    ...                             on_success=JobRequest("album", {"id": 7}))
    >>> client.batches.get("images", bid).pending
    """

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(
        self,
        queue: str,
        children: Iterable[Child],
        *,
        batch_id: str | None = None,
        on_success: JobRequest | None = None,
        on_complete: JobRequest | None = None,
        on_failure: JobRequest | None = None,
        policy: Policy = "fail",
        retention: timedelta | float = DEFAULT_RETENTION,
        durable: bool = False,
    ) -> str:
        """Enqueue ``children`` (jobs, or nested :class:`~shardq.workflows.Batch` and
        :class:`~shardq.workflows.Chain`) as one batch, sealed; its id.  Each callback fires
        exactly once: ``on_success`` when every child completed, ``on_failure`` when the batch
        failed (``policy``: ``"fail"`` at the first dead child, ``"continue"`` once all ended,
        ``"ignore"``: never for a dead child), ``on_complete`` once every child ended.
        Calling it again with the same ``batch_id`` and children after a crash finishes what
        the first call began: a child already stored, or whose end was recorded, is not
        enqueued again (one that was running and ends in the milliseconds of the resend's
        check may run twice; it is counted once: docs/workflows.md).  With ``durable``, the
        batch's record, its children and its seal are each confirmed by
        ``ProducerSettings.durable_replicas`` replicas (NotDurableError otherwise; calling
        again with the same ``batch_id`` is safe), as a durable enqueue is."""
        plan = workflow_plans.create_batch(
            self._client.cache, queue, list(children), settings=self._client.settings,
            batch_id=batch_id, on_success=on_success, on_complete=on_complete,
            on_failure=on_failure, policy=policy, retention=retention, durable=durable,
        )  # fmt: skip
        return self._client.run(plan, f"creating a batch in {queue!r}")

    def open(
        self,
        queue: str,
        *,
        batch_id: str | None = None,
        on_success: JobRequest | None = None,
        on_complete: JobRequest | None = None,
        on_failure: JobRequest | None = None,
        policy: Policy = "fail",
        retention: timedelta | float = DEFAULT_RETENTION,
        durable: bool = False,
    ) -> str:
        """Create an open batch with no children yet; add them with :meth:`add` and
        :meth:`seal` it (it cannot end before)."""
        plan = workflow_plans.create_batch(
            self._client.cache, queue, [], settings=self._client.settings, batch_id=batch_id,
            on_success=on_success, on_complete=on_complete, on_failure=on_failure,
            policy=policy, retention=retention, seal=False, durable=durable,
        )  # fmt: skip
        return self._client.run(plan, f"opening a batch in {queue!r}")

    def add(
        self,
        queue: str,
        batch_id: str,
        children: Iterable[Child],
        *,
        add_id: str | None = None,
        durable: bool = False,
    ) -> int:
        """Add children to an open batch; the index of the first.  BatchClosedError once it
        was sealed, BatchNotFoundError for an unknown id.  Pass ``add_id`` (your name for
        this part, e.g. ``"part-7"``) to make the call safe to repeat: called again with the
        same add id and children after a crash, it fills what the first call did not, even
        once the batch was sealed.  Without one, a call that dies half-way leaves indexes no
        child fills, and the batch can only end by being cancelled."""
        plan = workflow_plans.add_children(
            self._client.cache, queue, batch_id, list(children),
            settings=self._client.settings, add_id=add_id, durable=durable,
        )  # fmt: skip
        return self._client.run(plan, f"adding to batch {batch_id!r}")

    def seal(self, queue: str, batch_id: str, *, durable: bool = False) -> None:
        """Close an open batch to new children (safe to repeat)."""
        plan = workflow_plans.seal_batch(
            self._client.cache,
            queue,
            batch_id,
            settings=self._client.settings,
            durable=durable,
        )
        self._client.run(plan, f"sealing batch {batch_id!r}")

    def chain(
        self,
        queue: str,
        steps: Iterable[JobRequest],
        *,
        chain_id: str | None = None,
        on_success: JobRequest | None = None,
        on_complete: JobRequest | None = None,
        on_failure: JobRequest | None = None,
        retention: timedelta | float = DEFAULT_RETENTION,
        durable: bool = False,
    ) -> str:
        """Run ``steps`` one after another, each getting the previous one's return value as
        ``job.previous``; a step that ends dead stops the chain (``on_failure``).  Its id."""
        plan = workflow_plans.create_chain(
            self._client.cache, queue, list(steps), settings=self._client.settings,
            chain_id=chain_id, on_success=on_success, on_complete=on_complete,
            on_failure=on_failure, retention=retention, durable=durable,
        )  # fmt: skip
        return self._client.run(plan, f"creating a chain in {queue!r}")

    def get(self, queue: str, batch_id: str) -> BatchInfo | None:
        """A batch or chain with its counts, or None (unknown, or expired)."""
        plan = workflow_plans.get_batch(self._client.cache, queue, batch_id)
        return self._client.run(plan, f"reading batch {batch_id!r}")

    def list(self, queue: str, limit: int = 50) -> builtins.list[BatchInfo]:
        """The newest batches and chains of the queue."""
        plan = workflow_plans.list_batches(self._client.cache, queue, limit)
        return self._client.run(plan, f"listing the batches of {queue!r}")

    def cancel(self, queue: str, batch_id: str) -> BatchCancel:
        """Cancel a batch or chain: no callback fires; waiting children are cancelled
        (running ones end as they will).  Safe to repeat."""
        plan = workflow_plans.cancel_batch(
            self._client.cache, queue, batch_id, settings=self._client.settings
        )
        return self._client.run(plan, f"cancelling batch {batch_id!r}")


@twin_of(Batches)
class AsyncBatches:
    """``AsyncClient.batches``: the same methods as :class:`Batches`, awaited."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(
        self,
        queue: str,
        children: Iterable[Child],
        *,
        batch_id: str | None = None,
        on_success: JobRequest | None = None,
        on_complete: JobRequest | None = None,
        on_failure: JobRequest | None = None,
        policy: Policy = "fail",
        retention: timedelta | float = DEFAULT_RETENTION,
        durable: bool = False,
    ) -> str:
        plan = workflow_plans.create_batch(
            self._client.cache, queue, list(children), settings=self._client.settings,
            batch_id=batch_id, on_success=on_success, on_complete=on_complete,
            on_failure=on_failure, policy=policy, retention=retention, durable=durable,
        )  # fmt: skip
        return await self._client.run(plan, f"creating a batch in {queue!r}")

    async def open(
        self,
        queue: str,
        *,
        batch_id: str | None = None,
        on_success: JobRequest | None = None,
        on_complete: JobRequest | None = None,
        on_failure: JobRequest | None = None,
        policy: Policy = "fail",
        retention: timedelta | float = DEFAULT_RETENTION,
        durable: bool = False,
    ) -> str:
        plan = workflow_plans.create_batch(
            self._client.cache, queue, [], settings=self._client.settings, batch_id=batch_id,
            on_success=on_success, on_complete=on_complete, on_failure=on_failure,
            policy=policy, retention=retention, seal=False, durable=durable,
        )  # fmt: skip
        return await self._client.run(plan, f"opening a batch in {queue!r}")

    async def add(
        self,
        queue: str,
        batch_id: str,
        children: Iterable[Child],
        *,
        add_id: str | None = None,
        durable: bool = False,
    ) -> int:
        plan = workflow_plans.add_children(
            self._client.cache, queue, batch_id, list(children),
            settings=self._client.settings, add_id=add_id, durable=durable,
        )  # fmt: skip
        return await self._client.run(plan, f"adding to batch {batch_id!r}")

    async def seal(self, queue: str, batch_id: str, *, durable: bool = False) -> None:
        plan = workflow_plans.seal_batch(
            self._client.cache,
            queue,
            batch_id,
            settings=self._client.settings,
            durable=durable,
        )
        await self._client.run(plan, f"sealing batch {batch_id!r}")

    async def chain(
        self,
        queue: str,
        steps: Iterable[JobRequest],
        *,
        chain_id: str | None = None,
        on_success: JobRequest | None = None,
        on_complete: JobRequest | None = None,
        on_failure: JobRequest | None = None,
        retention: timedelta | float = DEFAULT_RETENTION,
        durable: bool = False,
    ) -> str:
        plan = workflow_plans.create_chain(
            self._client.cache, queue, list(steps), settings=self._client.settings,
            chain_id=chain_id, on_success=on_success, on_complete=on_complete,
            on_failure=on_failure, retention=retention, durable=durable,
        )  # fmt: skip
        return await self._client.run(plan, f"creating a chain in {queue!r}")

    async def get(self, queue: str, batch_id: str) -> BatchInfo | None:
        plan = workflow_plans.get_batch(self._client.cache, queue, batch_id)
        return await self._client.run(plan, f"reading batch {batch_id!r}")

    async def list(self, queue: str, limit: int = 50) -> builtins.list[BatchInfo]:
        plan = workflow_plans.list_batches(self._client.cache, queue, limit)
        return await self._client.run(plan, f"listing the batches of {queue!r}")

    async def cancel(self, queue: str, batch_id: str) -> BatchCancel:
        plan = workflow_plans.cancel_batch(
            self._client.cache, queue, batch_id, settings=self._client.settings
        )
        return await self._client.run(plan, f"cancelling batch {batch_id!r}")
