"""Producer operations as data: each builds one script call and parses its reply.

The sync :class:`shardq.client.Client` and the asyncio :class:`shardq.aio.AsyncClient` run the
same calls, so both have the same semantics by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shardq import jobs as jobmod
from shardq import keys
from shardq.config import ProducerSettings
from shardq.connection import as_text
from shardq.errors import InvalidJobError, NotDurableError, ScriptError, error_from_reply
from shardq.scripts import Call, script


def check_reply(reply: Any) -> list[Any]:
    """Raise the typed error for a negative script code; return the reply as a list."""
    if isinstance(reply, list) and reply and isinstance(reply[0], int) and reply[0] < 0:
        raise error_from_reply(reply[0], [as_text(x) for x in reply[1:]])
    if isinstance(reply, Exception):
        raise reply
    if not isinstance(reply, list):
        return [reply]
    return reply


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What enqueue did: the job id, whether it was new, and its due time on the Redis clock."""

    job_id: str
    created: bool
    due_ms: int | None
    partition: int


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One job to enqueue, as given to :meth:`Client.enqueue_many`."""

    job_type: str
    payload: Any = None
    run_at: datetime | float | None = None
    delay: timedelta | float | None = None
    job_id: str | None = None
    idempotency_key: str | None = None
    max_attempts: int | None = None
    backoff: jobmod.Backoff | None = None
    headers: dict[str, str] | None = None


def route(partitions: int, job_id: str | None, idempotency_key: str | None) -> tuple[str, int]:
    """Pick the job id and partition.

    A job's partition is a hash of its id, so cancel/get/reschedule find it from the id alone.
    With an idempotency key the partition is a hash of the key, so duplicates meet in one
    script; the generated id is drawn until it hashes to that same partition (P tries on
    average, a few microseconds).
    """
    if idempotency_key is not None:
        jobmod.check_idempotency_key(idempotency_key)
        partition = keys.partition_for(idempotency_key, partitions)
        if job_id is not None:
            jobmod.check_job_id(job_id)
            if keys.partition_for(job_id, partitions) != partition:
                raise InvalidJobError(
                    "job_id and idempotency_key map to different partitions: pass only one "
                    "(a custom job_id is itself deduplicated)"
                )
            return job_id, partition
        base = jobmod.new_job_id()
        n = 0
        while True:
            candidate = f"{base}{n:x}" if n else base
            if keys.partition_for(candidate, partitions) == partition:
                return candidate, partition
            n += 1
    if job_id is None:
        job_id = jobmod.new_job_id()
    else:
        jobmod.check_job_id(job_id)
    return job_id, keys.partition_for(job_id, partitions)


@dataclass(frozen=True, slots=True)
class PreparedEnqueue:
    """One validated job, ready to send alone (:meth:`call`) or in a partition batch."""

    job_id: str
    partition: int
    pk: keys.PartitionKeys
    body: bytes
    schedule: jobmod.Schedule
    idempotency_key: str | None
    settings: ProducerSettings

    def call(self) -> Call:
        s, pk = self.settings, self.pk
        idem_key = pk.idem(self.idempotency_key) if self.idempotency_key else pk.idem_placeholder
        return (
            script("enqueue"),
            [pk.jobs, pk.due, pk.ready, idem_key, pk.stats],
            [
                self.job_id,
                self.body,
                self.schedule.mode,
                self.schedule.ms,
                round(s.past_tolerance * 1000),
                round(s.max_horizon * 1000),
                round(s.idempotency_retention * 1000),
                "1" if self.idempotency_key else "0",
                pk.due_hint,
                pk.ready_hint,
            ],
        )

    def parse(self, reply: Any) -> EnqueueResult:
        r = check_reply(reply)
        created = r[0] in (1, 2)
        due = int(r[2]) if r[0] == 1 else None
        return EnqueueResult(as_text(r[1]), created, due, self.partition)


def prepare_enqueue(
    queue: str, partitions: int, req: JobRequest, settings: ProducerSettings
) -> PreparedEnqueue:
    """Validate one job fully; raises before anything is sent."""
    schedule = jobmod.make_schedule(req.run_at, req.delay, settings)
    job_id, partition = route(partitions, req.job_id, req.idempotency_key)
    body = jobmod.encode_body(
        req.job_type,
        req.payload,
        max_attempts=req.max_attempts,
        backoff=req.backoff,
        idempotency_key=req.idempotency_key,
        headers=req.headers,
        settings=settings,
    )
    pk = keys.partition_keys(queue, partition, partitions)
    return PreparedEnqueue(job_id, partition, pk, body, schedule, req.idempotency_key, settings)


# Most jobs per enqueue-batch call: keeps one call well under a millisecond of Redis time.
BATCH_JOBS = 100


@dataclass(slots=True)
class BulkPlan:
    """Script calls for a bulk enqueue and how to map their replies back to the jobs."""

    calls: list[Call]
    members: list[list[int]]  # per call: indexes into the prepared list
    batched: list[bool]

    def results(self, prepared: list[PreparedEnqueue], replies: list[Any]) -> list[EnqueueResult]:
        out: list[EnqueueResult | None] = [None] * len(prepared)
        for members, batched, reply in zip(self.members, self.batched, replies, strict=True):
            if not batched:
                out[members[0]] = prepared[members[0]].parse(reply)
                continue
            r = check_reply(reply)
            for n, i in enumerate(members):
                status, detail = int(r[1 + 2 * n]), int(r[2 + 2 * n])
                p = prepared[i]
                if status == -4:
                    raise error_from_reply(status, [p.job_id])
                if status < 0:
                    limit = p.settings.past_tolerance if status == -2 else p.settings.max_horizon
                    raise error_from_reply(
                        status, [str(detail), str(r[0]), str(round(limit * 1000))]
                    )
                out[i] = EnqueueResult(p.job_id, True, detail if status == 1 else None, p.partition)
        return [r for r in out if r is not None]


def plan_bulk(prepared: list[PreparedEnqueue]) -> BulkPlan:
    """Group jobs without an idempotency key into per-partition batches (one script call each);
    jobs with one go through the single enqueue script, which owns the key's dedupe."""
    plan = BulkPlan([], [], [])
    by_partition: dict[int, list[int]] = {}
    for i, p in enumerate(prepared):
        if p.idempotency_key is not None:
            plan.calls.append(p.call())
            plan.members.append([i])
            plan.batched.append(False)
        else:
            by_partition.setdefault(p.partition, []).append(i)
    lua = script("enqueue-batch")
    for indexes in by_partition.values():
        for start in range(0, len(indexes), BATCH_JOBS):
            chunk = indexes[start : start + BATCH_JOBS]
            first = prepared[chunk[0]]
            s, pk = first.settings, first.pk
            argv: list[Any] = [
                round(s.past_tolerance * 1000),
                round(s.max_horizon * 1000),
                pk.due_hint,
                pk.ready_hint,
            ]
            for i in chunk:
                p = prepared[i]
                argv += (p.job_id, p.body, p.schedule.mode, p.schedule.ms)
            plan.calls.append((lua, [pk.jobs, pk.due, pk.ready, pk.stats], argv))
            plan.members.append(chunk)
            plan.batched.append(True)
    return plan


def check_durable(job_ids: list[str], acked: int, settings: ProducerSettings) -> None:
    """Raise NotDurableError when fewer replicas than asked confirmed a durable write."""
    if acked >= settings.durable_replicas:
        return
    raise NotDurableError(
        f"{', '.join(job_ids[:5])}{' ...' if len(job_ids) > 5 else ''}: stored on the primary "
        f"but only {acked} of {settings.durable_replicas} replica(s) confirmed within "
        f"{settings.durable_timeout} s. The job runs unless that primary fails before "
        "replicating it; resending with the same idempotency_key or job_id is safe. Check that "
        "the partition's primary has a replica in sync (after a failover it may have none).",
        job_ids,
    )


def cancel_call(queue: str, partitions: int, job_id: str) -> Call:
    jobmod.check_job_id(job_id)
    pk = keys.partition_keys(queue, keys.partition_for(job_id, partitions), partitions)
    return script("cancel"), [pk.jobs, pk.due, pk.errors, pk.stats], [job_id]


def parse_cancel(reply: Any) -> bool:
    """True when cancelled; False when there was no such job.  Running/dead jobs raise."""
    if isinstance(reply, list) and reply and reply[0] == -6:
        return False
    check_reply(reply)
    return True


def reschedule_call(
    queue: str,
    partitions: int,
    job_id: str,
    run_at: datetime | float | None,
    delay: timedelta | float | None,
    settings: ProducerSettings,
) -> Call:
    jobmod.check_job_id(job_id)
    schedule = jobmod.make_schedule(run_at, delay, settings)
    pk = keys.partition_keys(queue, keys.partition_for(job_id, partitions), partitions)
    return (
        script("reschedule"),
        [pk.due, pk.jobs],
        [
            job_id,
            schedule.mode,
            schedule.ms,
            round(settings.past_tolerance * 1000),
            round(settings.max_horizon * 1000),
            pk.due_hint,
        ],
    )


def parse_reschedule(reply: Any) -> int:
    """The new due time (ms, Redis clock)."""
    return int(check_reply(reply)[1])


def get_call(queue: str, partitions: int, job_id: str) -> Call:
    jobmod.check_job_id(job_id)
    pk = keys.partition_keys(queue, keys.partition_for(job_id, partitions), partitions)
    return script("get"), [pk.jobs, pk.due, pk.errors], [job_id]


def parse_get(queue: str, partitions: int, job_id: str, reply: Any) -> jobmod.JobInfo | None:
    envelope, due, error = check_reply(reply)
    if envelope is None:
        return None
    raw = envelope if isinstance(envelope, bytes) else str(envelope).encode()
    bar = raw.index(b"|")
    state_char, attempt = raw[:1], int(raw[1:bar])
    try:
        body = jobmod.decode_body(raw[bar + 1 :])
    except ValueError as exc:
        raise ScriptError(f"job {job_id!r} has a malformed body: {exc}") from None
    if due is not None:
        state: jobmod.JobState = "scheduled"
    elif state_char == b"A":
        state = "active"
    elif state_char == b"D":
        state = "dead"
    else:
        state = "ready"
    return jobmod.JobInfo(
        id=job_id,
        queue=queue,
        partition=keys.partition_for(job_id, partitions),
        state=state,
        type=body["t"],
        payload=body.get("p"),
        attempt=attempt,
        max_attempts=body.get("m"),
        due_ms=int(float(due)) if due is not None else None,
        last_error=as_text(error) if error is not None else None,
        idempotency_key=body.get("k"),
    )


DEFAULT_DEAD_CAP = 100_000


def queue_create_call(
    queue: str,
    partitions: int,
    ack_retention: float = 0.0,
    dead_letter_cap: int = DEFAULT_DEAD_CAP,
) -> Call:
    jobmod.check_queue_name(queue)
    if (
        isinstance(partitions, bool)
        or not isinstance(partitions, int)
        or not (1 <= partitions <= keys.MAX_PARTITIONS)
    ):
        raise InvalidJobError(
            f"partitions must be an integer 1..{keys.MAX_PARTITIONS}, got {partitions!r}"
        )
    if not isinstance(ack_retention, int | float) or not 0 <= ack_retention <= 7 * 86400:
        raise InvalidJobError("ack_retention must be 0..604800 seconds")
    if (
        isinstance(dead_letter_cap, bool)
        or not isinstance(dead_letter_cap, int)
        or (dead_letter_cap < 1)
    ):
        raise InvalidJobError("dead_letter_cap must be an integer >= 1")
    return (
        script("queue-create"),
        [keys.queue_meta_key(queue)],
        [partitions, keys.LAYOUT_VERSION, round(ack_retention * 1000), dead_letter_cap],
    )
