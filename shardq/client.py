"""The sync producer client: create queues, enqueue, cancel, reschedule and inspect jobs.

Every call rides out failovers, slot moves and restarts for up to
``ProducerSettings.retry_timeout`` (see :mod:`shardq.store.retry`): enqueue resends the same job
id and body, which the script recognises, so a resend never duplicates a job.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from redis.exceptions import ResponseError

from shardq import tracing
from shardq.config import ProducerSettings, RedisSettings
from shardq.connection import SyncRedis, as_text, connect
from shardq.errors import (
    BulkEnqueueError,
    InvalidLimitError,
    NotDurableError,
    ShardqError,
)
from shardq.jobs import (
    Backoff,
    EnqueueResult,
    JobInfo,
    JobRequest,
)
from shardq.limits import Limit
from shardq.names import Priority, check_limit_name, check_queue_name
from shardq.runtime import redis_config
from shardq.schedules import Schedules
from shardq.store import faults, keys, producer, retry, transport
from shardq.store import limits as store_limits
from shardq.store.meta import QueueMeta
from shardq.store.op import Op, result
from shardq.store.producer import BulkCall, Outcome, PreparedEnqueue


def not_durable(
    job_ids: list[str],
    acked: int,
    settings: ProducerSettings,
    results: list[EnqueueResult] | None = None,
) -> NotDurableError:
    return NotDurableError(
        f"{', '.join(job_ids[:5])}{' ...' if len(job_ids) > 5 else ''}: stored on the primary "
        f"but only {acked} of {settings.durable_replicas} replica(s) confirmed within "
        f"{settings.durable_timeout} s. The job runs unless that primary fails before "
        "replicating it; resending with the same idempotency_key or job_id is safe. Check that "
        "the partition's primary has a replica in sync (after a failover it may have none).",
        job_ids,
        list(results or []),
    )


class BulkRun:
    """The state of one bulk enqueue: which calls are done, which must be sent again.

    Shared by the sync and asyncio clients: they only differ in how a round is sent.
    """

    def __init__(self, prepared: list[PreparedEnqueue], settings: ProducerSettings) -> None:
        self.prepared = prepared
        self.settings = settings
        self.results: list[EnqueueResult | None] = [None] * len(prepared)
        self.failed: dict[int, BaseException] = {}
        self.short: list[str] = []  # stored, but fewer replicas confirmed than asked
        self.fewest_acked: int | None = None  # the fewest replicas a short call got
        self.pending: list[BulkCall] = producer.plan_bulk(prepared)
        self.last_error: dict[int, BaseException] = {}

    @classmethod
    def merged(cls, runs: list[BulkRun], settings: ProducerSettings) -> BulkRun:
        """One run holding several chunks' outcomes, request indexes in call order: a call
        split into chunks reports every chunk in one error, not just the first that failed."""
        if len(runs) == 1:
            return runs[0]
        whole = cls([], settings)
        for run in runs:
            offset = len(whole.prepared)
            whole.prepared.extend(run.prepared)
            whole.results.extend(run.results)
            whole.failed.update({offset + i: exc for i, exc in run.failed.items()})
            whole.short.extend(run.short)
            whole.short_by(run.fewest_acked)
        return whole

    def settle(
        self,
        calls: list[BulkCall],
        replies: list[list[Outcome] | BaseException],
        acked: list[int | None] | None = None,
    ) -> None:
        """Record a round's replies; calls that met a fault worth a resend stay pending."""
        again: list[BulkCall] = []
        for n, (call, reply) in enumerate(zip(calls, replies, strict=True)):
            if isinstance(reply, BaseException):
                if retry.should_retry(reply, safe_to_repeat=True):
                    again.append(call)
                    for i in call.members:
                        self.last_error[i] = reply
                else:
                    for i in call.members:
                        self.failed[i] = faults.translate(reply, "enqueue")
                continue
            for i, outcome in zip(call.members, reply, strict=True):
                if isinstance(outcome, ShardqError):
                    self.failed[i] = outcome
                else:
                    self.results[i] = outcome
                    self.last_error.pop(i, None)
                    if acked is not None and (acked[n] or 0) < self.settings.durable_replicas:
                        self.short.append(outcome.job_id)
                        self.short_by(acked[n] or 0)
        self.pending = again

    def short_by(self, acked: int | None) -> None:
        """Note a call that ``acked`` replicas confirmed, too few: the error says the fewest."""
        if acked is not None:
            self.fewest_acked = (
                acked if self.fewest_acked is None else min(self.fewest_acked, acked)
            )

    def give_up(self) -> None:
        """The retry window ran out: what is still pending is not known to be stored."""
        for call in self.pending:
            for i in call.members:
                self.failed[i] = faults.translate(self.last_error[i], "enqueue")
        self.pending = []

    def outcome(self) -> list[EnqueueResult]:
        if self.failed:
            first = next(iter(self.failed.values()))
            stored = sum(1 for r in self.results if r is not None)
            raise BulkEnqueueError(
                f"{len(self.failed)} of {len(self.prepared)} jobs were not stored ({stored} "
                f"were), e.g. {type(first).__name__}: {first}. Resend error.retry_requests: "
                "they carry the job ids chosen for this call, so a job that was stored after "
                "all is recognised, not duplicated.",
                list(self.results),
                dict(self.failed),
                [self.prepared[i].with_id() for i in sorted(self.failed)],
            )
        done = [r for r in self.results if r is not None]
        if self.short:
            raise not_durable(self.short, self.fewest_acked or 0, self.settings, done)
        return done


class Client:
    """Sync producer.  Works unchanged against a cluster URL and a standalone URL.

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
        self._queues = producer.QueueCache()
        #: Periodic jobs: add/list/get/pause/resume/remove/next (see shardq.schedules).
        self.schedules = Schedules(self)

    @classmethod
    def from_url(cls, url: str, settings: ProducerSettings | None = None) -> Client:
        return cls(RedisSettings.from_url(url), settings)

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, op: Op[Any], *, safe_to_repeat: bool = True, what: str = "the call") -> Any:
        return retry.sync_call(
            self.redis,
            lambda: transport.run(self.redis, op),
            self.settings.retry_timeout,
            safe_to_repeat=safe_to_repeat,
            what=what,
        )

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

        Raises QueueConfigConflictError when the queue exists with another partition count,
        and MisconfiguredRedisError when a primary's maxmemory-policy evicts keys (unless
        ``allow_evicting_redis``).
        """
        op = producer.queue_create(queue, partitions, ack_retention, dead_letter_cap)
        if not allow_evicting_redis:
            found = self._run_plain(lambda: self.check_redis(), "checking Redis settings")
            error = redis_config.refusal(found, allow_eviction=False)
            if error is not None:
                raise error
        created = bool(self._run(op, what=f"creating queue {queue!r}"))
        # Groups and the registry are idempotent follow-ups: re-running create_queue finishes a
        # creation that was interrupted between steps.
        self._run_plain(lambda: self._create_groups(queue, partitions), "creating groups")
        self._run_plain(lambda: self.redis.sadd(keys.QUEUES_KEY, queue), "registering")
        self.forget(queue)  # read back with its layout (an existing queue keeps its own)
        if self._read_meta(queue).layout >= keys.CONTROL_LAYOUT:
            self._control(queue, partitions)
        if lanes:
            self.set_lanes(queue, True)
        return created

    def set_lanes(self, queue: str, on: bool) -> int:
        """Turn the queue's lanes on or off; returns how many partitions changed.

        With lanes on, due jobs wait in each partition's lane and are delivered by priority
        (high, default, low shared 6:3:1) and round-robin between tenants, instead of in due
        order; it costs every job a few more Redis commands (docs/capacity.md).  Jobs already
        in a ready stream when lanes are turned on are delivered first; jobs in a lane when
        they are turned off are still delivered.
        """
        from shardq import inspector

        meta = keys.queue_meta_key(queue)
        n = self.partitions(queue)
        # Producers check the meta flag: it is on only while every partition is.
        if not on:
            self._run_plain(lambda: self.redis.hset(meta, "lanes", "0"), "turning lanes off")
        changed: int = self._run_plain(
            lambda: inspector.drive(
                inspector.lanes_plan(queue, n, on), lambda ops: transport.run_many(self.redis, ops)
            ),
            f"turning lanes of {queue!r} {'on' if on else 'off'}",
        )
        if on:
            self._run_plain(lambda: self.redis.hset(meta, "lanes", "1"), "turning lanes on")
        self._queues.saw_lanes(queue, on)
        return changed

    def lanes(self, queue: str) -> bool:
        """Whether the queue has lanes on (read from Redis, not cached)."""
        self.partitions(queue)
        raw = self._run_plain(
            lambda: self.redis.hget(keys.queue_meta_key(queue), "lanes"), "reading queue lanes"
        )
        return raw is not None and as_text(raw) == "1"

    def require_lanes(self, queue: str) -> None:
        """LanesOffError unless the queue has lanes on (seen on within the last
        ``producer.LANES_RECHECK`` seconds, so lanes turned off reach every producer soon)."""
        if self._queues.lanes_trusted(queue):
            return
        on = self.lanes(queue)
        self._queues.saw_lanes(queue, on)
        if not on:
            raise producer.lanes_off(queue)

    def check_redis(self, require_appendonly: bool = False) -> list[redis_config.Finding]:
        """Settings of the primaries that would lose jobs silently (an evicting
        maxmemory-policy; appendonly off, when ``require_appendonly``); empty when none."""
        return redis_config.findings(redis_config.read_sync(self.redis), require_appendonly)

    def _create_groups(self, queue: str, partitions: int) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for args in producer.group_create_commands(queue, partitions):
            pipe.execute_command(*args)
        for reply in pipe.execute(raise_on_error=False):
            if isinstance(reply, ResponseError) and "BUSYGROUP" not in str(reply):
                raise reply

    def _run_plain(self, fn: Any, what: str) -> Any:
        return retry.sync_call(
            self.redis, fn, self.settings.retry_timeout, safe_to_repeat=True, what=what
        )

    def forget(self, queue: str) -> None:
        """Drop what is cached about ``queue`` (it was deleted or re-created)."""
        self._queues.forget(queue)

    def partitions(self, queue: str) -> int:
        """The queue's partition count (cached after the first lookup)."""
        cached = self._queues.get(queue)
        if cached is not None:
            return cached.meta.partitions
        return self._read_meta(queue).partitions

    def _read_meta(self, queue: str) -> QueueMeta:
        """The queue's meta, read now and cached; UnknownQueueError when it does not exist."""
        check_queue_name(queue)
        raw = self._run_plain(
            lambda: self.redis.hgetall(keys.queue_meta_key(queue)),
            f"reading queue {queue!r}",
        )
        return self._queues.store(queue, raw)

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
        meta = keys.queue_meta_key(queue)
        read = self._read_meta(queue)
        # Every time, not only below layout 4: it finishes an upgrade or creation cut short.
        self._control(queue, read.partitions)
        if read.layout < keys.LAYOUT_VERSION:
            self._run_plain(
                lambda: self.redis.hset(meta, "layout", keys.LAYOUT_VERSION), "upgrading"
            )
        self.forget(queue)
        return read.layout

    def _control(self, queue: str, partitions: int) -> int:
        """Start using every partition's control hash (layout 4); how many started now."""
        from shardq import inspector

        return int(
            self._run_plain(
                lambda: inspector.drive(
                    inspector.control_plan(queue, partitions),
                    lambda ops: transport.run_many(self.redis, ops),
                ),
                f"moving the flags of {queue!r} to the control hashes",
            )
        )

    def compact(self, queue: str) -> bool:
        """Whether the queue keeps waiting jobs compactly (layout 3: one due-set member per
        job, lua/includes/compact.lua); read with the partition count, cached alike."""
        self.partitions(queue)
        return self._queues.compact(queue)

    def queues(self) -> list[str]:
        """Names of every queue created on this Redis."""
        members = self._run_plain(lambda: self.redis.smembers(keys.QUEUES_KEY), "listing")
        return sorted(as_text(q) for q in members)

    # rate limits ---------------------------------------------------------------------------

    def set_limit(self, queue: str, limit: Limit) -> None:
        """Create or replace a rate limit of ``queue`` (see shardq.limits); workers apply it
        within ``limits_refresh`` seconds."""
        if not isinstance(limit, Limit):
            raise InvalidLimitError(
                "set_limit takes a shardq.Limit: limits.for_type(), for_key() or for_tenant()"
            )
        self.partitions(queue)  # an unknown queue is refused before anything is written
        self._run_plain(
            lambda: self.redis.hset(keys.limits_key(queue), limit.name, limit.to_json()),
            f"setting limit {limit.name}",
        )

    def limits(self, queue: str) -> list[Limit]:
        """The rate limits of ``queue``, by name."""
        self.partitions(queue)
        raw = self._run_plain(
            lambda: self.redis.hgetall(keys.limits_key(queue)), f"reading limits of {queue!r}"
        )
        return store_limits.parse_table(raw)

    def remove_limit(self, queue: str, name: str) -> bool:
        """Remove the limit ``type:<job type>``, ``key:<limit key>`` or ``tenant:<tenant>``;
        False if there was none."""
        check_limit_name(name)
        self.partitions(queue)
        removed = self._run_plain(
            lambda: self.redis.hdel(keys.limits_key(queue), name), f"removing limit {name}"
        )
        return bool(removed)

    # jobs ---------------------------------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        job_type: str,
        payload: Any = None,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
        job_id: str | None = None,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        headers: dict[str, str] | None = None,
        durable: bool = False,
        limit_key: str | None = None,
        priority: Priority | None = None,
        tenant: str | None = None,
    ) -> str:
        """Enqueue one job to run now, at ``run_at`` or after ``delay`` seconds; return its id.

        With ``idempotency_key``, a repeat returns the first job's id and writes nothing.
        With ``durable=True`` it returns only once ``durable_replicas`` replicas hold the job
        (WAIT on the connection that wrote), else raises NotDurableError.  With ``limit_key``
        the job is under that key's rate limit (:meth:`set_limit`), as well as its type's.
        ``priority`` ('high', 'default', 'low') and ``tenant`` order delivery in a queue with
        lanes on (:meth:`set_lanes`); LanesOffError on a queue without.
        """
        request = JobRequest(
            job_type,
            payload,
            run_at,
            delay,
            job_id,
            idempotency_key,
            max_attempts,
            backoff,
            headers,
            limit_key,
            priority,
            tenant,
        )
        return self.enqueue_detailed(queue, request, durable=durable).job_id

    def enqueue_detailed(
        self, queue: str, request: JobRequest, *, durable: bool = False
    ) -> EnqueueResult:
        """Enqueue one job and say whether it was new and when it is due."""
        if tracing.active():
            with tracing.producer_span(queue) as span:
                request = tracing.with_headers(request, tracing.trace_headers())
                done = self._enqueue_one(queue, request, durable)
                tracing.sent(span, done.job_id, done.partition)
                return done
        return self._enqueue_one(queue, request, durable)

    def _enqueue_one(self, queue: str, request: JobRequest, durable: bool) -> EnqueueResult:
        prepared = producer.prepare_enqueue(
            queue, self.partitions(queue), request, self.settings, self._queues.compact(queue)
        )
        if prepared.body[:1] == b"@":
            self.require_lanes(queue)
        if not durable:
            return self._run(prepared.op(), what=f"enqueue of job {prepared.job_id}")  # type: ignore[no-any-return]
        try:
            run = BulkRun([prepared], self.settings)
            self._bulk(run, durable=True, deadline=time.monotonic() + self.settings.retry_timeout)
            return run.outcome()[0]
        except BulkEnqueueError as exc:
            raise next(iter(exc.failed.values())) from None

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
        until ``retry_timeout``.  If some jobs still could not be stored (or were refused, e.g.
        a duplicate job id), BulkEnqueueError says exactly which were stored and gives the
        rest back as requests with their ids, safe to resend.
        """
        if tracing.active():
            requests = list(requests)
            with tracing.producer_span(queue, len(requests)):
                stamped = tracing.stamp_all(requests, tracing.trace_headers())
                return self._enqueue_many(queue, stamped, chunk, durable)
        return self._enqueue_many(queue, requests, chunk, durable)

    def _enqueue_many(
        self, queue: str, requests: Iterable[JobRequest], chunk: int, durable: bool
    ) -> list[EnqueueResult]:
        partitions = self.partitions(queue)
        prepared = producer.prepare_many(
            queue, partitions, requests, self.settings, self._queues.compact(queue)
        )
        if producer.needs_lanes(prepared):
            self.require_lanes(queue)
        chunks = [prepared[start : start + chunk] for start in range(0, len(prepared), chunk)]
        # One retry window for the whole call: with Redis down, a call of many chunks gives
        # up after retry_timeout, not once per chunk.
        deadline = time.monotonic() + self.settings.retry_timeout
        if durable:
            runs = [BulkRun(c, self.settings) for c in chunks]
        else:
            runs = self._first_rounds(chunks)
        # Every chunk is finished (or given up) before any error is raised, and the error
        # covers them all: a later chunk is never left unsent or unreported.
        for run in runs:
            self._bulk(run, durable=durable, deadline=deadline)
        return BulkRun.merged(runs, self.settings).outcome()

    def _first_rounds(self, chunks: list[list[PreparedEnqueue]]) -> list[BulkRun]:
        """Each chunk's first round, written before the previous chunk's replies are read: Redis
        works on one chunk while this process plans the next and parses the last."""
        runs: list[BulkRun] = []
        in_flight: tuple[BulkRun, list[BulkCall], transport.Sent] | None = None
        for c in chunks:
            run = BulkRun(c, self.settings)
            runs.append(run)
            calls = run.pending
            sent = transport.send(self.redis, [call.op for call in calls])
            if in_flight is not None:
                self._settle(*in_flight)
            in_flight = (run, calls, sent)
        if in_flight is not None:
            self._settle(*in_flight)
        return runs

    def _settle(self, run: BulkRun, calls: list[BulkCall], sent: transport.Sent) -> None:
        replies, _ = sent.read()
        run.settle(calls, transport.complete(self.redis, [c.op for c in calls], replies))

    def _bulk(self, run: BulkRun, *, durable: bool, deadline: float) -> None:
        """Rounds until every call of ``run`` is settled or ``deadline`` (monotonic) passes;
        ``run.outcome()`` then says what was stored."""
        s = self.settings
        attempt = 0
        while run.pending:
            calls = run.pending
            ops = [c.op for c in calls]
            if durable:
                replies, acked = transport.send_and_read(
                    self.redis, ops, (s.durable_replicas, round(s.durable_timeout * 1000))
                )
                parsed = [result(r, o.parse) for r, o in zip(replies, ops, strict=True)]
                run.settle(calls, parsed, acked)
            else:
                run.settle(calls, transport.run_many(self.redis, ops))
            if not run.pending:
                break
            attempt += 1
            if time.monotonic() >= deadline:
                run.give_up()
                break
            retry.refresh_sync(self.redis)
            time.sleep(retry.pause(attempt))

    def cancel(self, queue: str, job_id: str) -> bool:
        """Cancel a job that has not started: True if cancelled, False if there is no such job.

        Raises JobRunningError when a worker holds it and JobNotScheduledError when it is dead.
        """
        op = producer.cancel(queue, self.partitions(queue), job_id)
        # Not resent after an ambiguous fault: a resend would answer "not found" for a job
        # the first call cancelled.
        return bool(self._run(op, safe_to_repeat=False, what=f"cancel of job {job_id}"))

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
        if producer.priority_needs_lanes(priority):
            self.require_lanes(queue)
        op = producer.reschedule(
            queue, self.partitions(queue), job_id, run_at, delay, self.settings, priority
        )
        return int(self._run(op, what=f"reschedule of job {job_id}"))

    def get(self, queue: str, job_id: str) -> JobInfo | None:
        """A snapshot of a job, or None once it completed, was cancelled, or never existed."""
        op = producer.get(queue, self.partitions(queue), job_id)
        info: JobInfo | None = self._run(op, what=f"reading job {job_id}")
        return info
