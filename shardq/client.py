"""The sync producer client: create queues, enqueue, cancel, reschedule and inspect jobs."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from redis.exceptions import ResponseError

from shardq import keys, ops, scripts
from shardq.config import ProducerSettings, RedisSettings
from shardq.connection import SyncRedis, connect
from shardq.durable import run_durable
from shardq.errors import UnknownQueueError
from shardq.jobs import Backoff, JobInfo, check_queue_name


def unknown_queue(queue: str) -> UnknownQueueError:
    return UnknownQueueError(
        f"queue {queue!r} does not exist: create it first with "
        f"`shardq queue create {queue} --partitions 64` or client.create_queue({queue!r})"
    )


def group_create_args(queue: str, partitions: int) -> list[tuple[str, ...]]:
    """XGROUP CREATE commands for every partition's ready stream (MKSTREAM, from the start)."""
    return [
        ("XGROUP", "CREATE", pk.ready, keys.WORKER_GROUP, "0", "MKSTREAM")
        for pk in keys.all_partition_keys(queue, partitions)
    ]


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
        self._partitions: dict[str, int] = {}

    @classmethod
    def from_url(cls, url: str, settings: ProducerSettings | None = None) -> Client:
        return cls(RedisSettings.from_url(url), settings)

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # queues -------------------------------------------------------------------------------

    def create_queue(
        self,
        queue: str,
        partitions: int = 64,
        *,
        ack_retention: float = 0.0,
        dead_letter_cap: int = ops.DEFAULT_DEAD_CAP,
    ) -> bool:
        """Create a queue with ``partitions`` partitions; True if new.  Safe to repeat.

        ``ack_retention`` keeps acknowledged ready entries this many seconds (for inspection)
        before trimming; ``dead_letter_cap`` bounds each partition's dead-letter stream (the
        oldest are dropped and counted in ``dead_dropped``).  Both are fixed at creation.

        Raises QueueConfigConflictError when the queue exists with another partition count.
        """
        reply = scripts.run(
            self.redis, *ops.queue_create_call(queue, partitions, ack_retention, dead_letter_cap)
        )
        created = bool(ops.check_reply(reply)[0] == 1)
        # Groups and the registry are idempotent follow-ups: re-running create_queue finishes a
        # creation that was interrupted between steps.
        pipe = self.redis.pipeline(transaction=False)
        for args in group_create_args(queue, partitions):
            pipe.execute_command(*args)
        for result in pipe.execute(raise_on_error=False):
            if isinstance(result, ResponseError) and "BUSYGROUP" not in str(result):
                raise result
        self.redis.sadd(keys.QUEUES_KEY, queue)
        self._partitions[queue] = partitions
        return created

    def partitions(self, queue: str) -> int:
        """The queue's partition count (cached after the first lookup)."""
        cached = self._partitions.get(queue)
        if cached is not None:
            return cached
        check_queue_name(queue)
        raw = self.redis.hget(keys.queue_meta_key(queue), "partitions")
        if raw is None:
            raise unknown_queue(queue)
        self._partitions[queue] = int(raw)
        return int(raw)

    def queues(self) -> list[str]:
        """Names of every queue created on this Redis."""
        members = self.redis.smembers(keys.QUEUES_KEY)
        return sorted(q.decode() if isinstance(q, bytes) else str(q) for q in members)

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
    ) -> str:
        """Enqueue one job to run now, at ``run_at`` or after ``delay`` seconds; return its id.

        With ``idempotency_key``, a repeat returns the first job's id and writes nothing.
        With ``durable=True`` it returns only once ``durable_replicas`` replicas hold the job
        (WAIT on the connection that wrote), else raises NotDurableError.
        """
        return self.enqueue_detailed(
            queue,
            ops.JobRequest(
                job_type,
                payload,
                run_at,
                delay,
                job_id,
                idempotency_key,
                max_attempts,
                backoff,
                headers,
            ),
            durable=durable,
        ).job_id

    def enqueue_detailed(
        self, queue: str, request: ops.JobRequest, *, durable: bool = False
    ) -> ops.EnqueueResult:
        """Enqueue one job and say whether it was new and when it is due."""
        prepared = ops.prepare_enqueue(queue, self.partitions(queue), request, self.settings)
        if not durable:
            return prepared.parse(scripts.run(self.redis, *prepared.call()))
        s = self.settings
        reply, acked = run_durable(
            self.redis, prepared.call(), s.durable_replicas, round(s.durable_timeout * 1000)
        )
        result = prepared.parse(reply)
        ops.check_durable([result.job_id], acked, s)
        return result

    def enqueue_many(
        self,
        queue: str,
        requests: Iterable[ops.JobRequest],
        *,
        chunk: int = 5000,
        durable: bool = False,
    ) -> list[ops.EnqueueResult]:
        """Enqueue many jobs in pipelines grouped by node; results in request order.

        Every job is validated before any is sent, so a bad one writes nothing.  Each job is
        still its own atomic script: a failure of one (e.g. a duplicate id) raises after the
        others were written, and its result names it.
        """
        partitions = self.partitions(queue)
        prepared = [ops.prepare_enqueue(queue, partitions, r, self.settings) for r in requests]
        results: list[ops.EnqueueResult] = []
        not_durable: list[str] = []
        for start in range(0, len(prepared), chunk):
            part = prepared[start : start + chunk]
            plan = ops.plan_bulk(part)
            if durable:
                replies, short = self._run_many_durable(plan.calls)
                not_durable += [part[j].job_id for i in short for j in plan.members[i]]
            else:
                replies = scripts.run_many(self.redis, plan.calls)
            results.extend(plan.results(part, replies))
        if not_durable:
            ops.check_durable(not_durable, 0, self.settings)
        return results

    def _run_many_durable(self, calls: list[scripts.Call]) -> tuple[list[Any], list[int]]:
        """Run calls with WAIT per node; returns the replies and the calls short of replicas."""
        s = self.settings
        timeout_ms = round(s.durable_timeout * 1000)
        replies, acked = scripts.run_many_waiting(self.redis, calls, s.durable_replicas, timeout_ms)
        short: list[int] = []
        for i, reply in enumerate(replies):
            if acked[i] is None and isinstance(reply, Exception):
                # Not written (NOSCRIPT, moved slot, broken connection): send it again alone.
                replies[i], acked[i] = run_durable(
                    self.redis, calls[i], s.durable_replicas, timeout_ms
                )
            if acked[i] is not None and acked[i] < s.durable_replicas:  # type: ignore[operator]
                short.append(i)
        return replies, short

    def cancel(self, queue: str, job_id: str) -> bool:
        """Cancel a job that has not started: True if cancelled, False if there is no such job.

        Raises JobRunningError when a worker holds it and JobNotScheduledError when it is dead.
        """
        call = ops.cancel_call(queue, self.partitions(queue), job_id)
        return ops.parse_cancel(scripts.run(self.redis, *call))

    def reschedule(
        self,
        queue: str,
        job_id: str,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
    ) -> int:
        """Move a waiting job to a new due time; returns it in ms on the Redis clock."""
        call = ops.reschedule_call(
            queue, self.partitions(queue), job_id, run_at, delay, self.settings
        )
        return ops.parse_reschedule(scripts.run(self.redis, *call))

    def get(self, queue: str, job_id: str) -> JobInfo | None:
        """A snapshot of a job, or None once it completed, was cancelled, or never existed."""
        partitions = self.partitions(queue)
        reply = scripts.run(self.redis, *ops.get_call(queue, partitions, job_id))
        return ops.parse_get(queue, partitions, job_id, reply)
