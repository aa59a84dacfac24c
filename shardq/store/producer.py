"""Producer operations: queue creation, enqueue (single and batched), cancel, reschedule, get.

Each function validates its input fully (raising a typed error before anything is sent) and
returns an :class:`~shardq.store.op.Op` whose parser turns the script's reply into a named
type.  The sync and asyncio clients run the same ops, so both have the same semantics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from shardq import names
from shardq.config import ProducerSettings
from shardq.connection import as_text
from shardq.errors import (
    InvalidJobError,
    InvalidScheduleError,
    LanesOffError,
    MalformedRecordError,
    ShardqError,
)
from shardq.jobs.body import request_body, stored_options
from shardq.jobs.due import Schedule, make_schedule
from shardq.jobs.models import EnqueueResult, JobInfo, JobRequest, JobState
from shardq.jobs.options import check_unique_until
from shardq.store import envelope as envelope_codec
from shardq.store import keys, routing
from shardq.store import progress as progress_codec
from shardq.store.clock import REDIS_CLOCK
from shardq.store.codes import Code, check, error_for, is_code
from shardq.store.layout import Layout
from shardq.store.meta import DEFAULT_DEAD_CAP as DEFAULT_DEAD_CAP
from shardq.store.meta import MAX_DEAD_CAP
from shardq.store.numbers import Checked
from shardq.store.op import Op, op

T = TypeVar("T")

# Most jobs per enqueue-batch call: keeps one call well under a millisecond of Redis time.
BATCH_JOBS = 100


@dataclass(slots=True)  # not frozen: one is built per job of enqueue_many, and frozen costs
class PreparedEnqueue:
    """One validated job with its id chosen: sent alone (:meth:`op`) or in a partition batch.

    Resending it is safe: the script recognises the same id with the same body as done.
    """

    request: JobRequest
    job_id: str
    partition: int
    pk: keys.PartitionKeys
    body: bytes
    schedule: Schedule
    settings: ProducerSettings

    @property
    def idempotency_key(self) -> str | None:
        return self.request.idempotency_key

    def op(self) -> Op[EnqueueResult]:
        s, pk, idem = self.settings, self.pk, self.idempotency_key
        return op(
            "enqueue",
            [
                pk.jobs,
                pk.due,
                pk.ready,
                pk.idem(idem) if idem else pk.idem_placeholder,
                pk.stats,
                pk.lane,
                pk.vtime,
                pk.ctl,
            ],
            [
                self.job_id,
                self.body,
                self.schedule.mode,
                self.schedule.ms,
                round(s.past_tolerance * 1000),
                round(s.max_horizon * 1000),
                round(self._retention() * 1000),
                "1" if idem else "0",
                pk.due_hint,
                pk.ready_hint,
                self.request.unique_until or "",
            ],
            self.parse,
        )

    def _retention(self) -> float:
        """How long after the due time the idempotency key lives: a debounce key only until
        its job is due (and a second for a late enqueue), a unique one unique_retention."""
        mode = self.request.unique_until
        if mode == "debounce":
            return 1.0
        return self.settings.unique_retention if mode else self.settings.idempotency_retention

    def parse(self, reply: Any) -> EnqueueResult:
        r = check(reply)
        REDIS_CLOCK.saw(int(r[3]))
        due = int(r[2]) if r[0] in (1, 3) else None  # 3: debounced, the job's new due time
        return EnqueueResult(as_text(r[1]), r[0] in (1, 2), due, self.pk.fleet_id)

    def with_id(self) -> JobRequest:
        """The request with its chosen id filled in: resending it cannot duplicate the job."""
        req = self.request
        if req.job_id is not None or req.idempotency_key is not None:
            return req
        return dataclasses.replace(req, job_id=self.job_id)


def _layout(queue: str, partitions: int | Layout) -> Layout:
    """The layout jobs go to: given, or generation 0 of ``partitions`` (a queue never
    resized)."""
    if isinstance(partitions, Layout):
        return partitions
    return Layout(queue, partitions)


def prepare_enqueue(
    queue: str,
    partitions: int | Layout,
    req: JobRequest,
    settings: ProducerSettings,
    compact: bool = False,
) -> PreparedEnqueue:
    """Validate one job fully; raises before anything is sent.  ``partitions``: the queue's
    layout (:attr:`shardq.store.meta.QueueMeta.key_layout`), or the count of a queue never
    resized.  ``compact``: the queue has layout 3 (:meth:`shardq.Client.compact`), so a
    waiting job gets a timed id."""
    layout = _layout(queue, partitions)
    if not isinstance(req, JobRequest):
        raise InvalidJobError(f"enqueue_many takes shardq.JobRequest items, got {req!r}")
    schedule = make_schedule(req.run_at, req.delay, settings)
    # The key and id first: a bad one is reported as such, not as the body it would be part of.
    routing.check_ids(req.job_id, req.idempotency_key)
    if req.unique_until is not None:
        check_unique_until(req.unique_until)
        if req.idempotency_key is None:
            raise InvalidJobError(
                f"unique_until={req.unique_until!r} works on the idempotency key: pass "
                "idempotency_key too"
            )
    body = request_body(req, settings)
    job_id, partition, schedule = routing.place(
        queue, layout.partitions, req.job_id, req.idempotency_key, schedule, body, settings, compact
    )
    pk = layout.pk(partition)
    return PreparedEnqueue(req, job_id, partition, pk, body, schedule, settings)


def priority_needs_lanes(priority: str | None) -> bool:
    """Whether a reschedule to ``priority`` needs lanes on (any level but the default);
    InvalidJobError for an unknown priority, before anything else is checked."""
    default = names.PRIORITY_LEVELS["default"]
    return priority is not None and names.check_priority(priority) != default


def needs_lanes(prepared: Iterable[PreparedEnqueue]) -> bool:
    """Whether any of the jobs has a priority other than the default or a tenant."""
    return any(p.body[:1] == b"@" for p in prepared)


def lanes_off(queue: str) -> LanesOffError:
    return LanesOffError(
        f"queue {queue!r} has lanes off, so it would deliver jobs in due order and ignore their "
        f"priority and tenant: turn lanes on with `shardq queue lanes --queue {queue} --on` or "
        "client.set_lanes(queue, True)"
    )


def prepare_many(
    queue: str,
    partitions: int | Layout,
    requests: Iterable[JobRequest],
    settings: ProducerSettings,
    compact: bool = False,
) -> list[PreparedEnqueue]:
    """:func:`prepare_enqueue` for every request (all validated before any is sent).

    The same checks; a request with neither a job id nor an idempotency key (most of a bulk
    enqueue) takes a shorter path to its id and partition, with the partition keys looked up
    once per call rather than once per job."""
    layout = _layout(queue, partitions)
    pks = layout.active()
    new_jobs = routing.NewJobs(queue, layout.partitions, settings, compact)
    out: list[PreparedEnqueue] = []
    append = out.append
    for req in requests:
        if (
            type(req) is not JobRequest
            or req.job_id is not None
            or req.idempotency_key is not None
            or req.unique_until is not None
        ):
            append(prepare_enqueue(queue, layout, req, settings, compact))
            continue
        schedule = make_schedule(req.run_at, req.delay, settings)
        body = request_body(req, settings)
        job_id, partition, schedule = new_jobs.place(schedule, body)
        append(PreparedEnqueue(req, job_id, partition, pks[partition], body, schedule, settings))
    return out


Outcome = EnqueueResult | ShardqError


@dataclass(slots=True)
class BulkCall:
    """One script call of a bulk enqueue and the requests (indexes) it carries."""

    op: Op[list[Outcome]]
    members: list[int]


def _single(prepared: PreparedEnqueue) -> Op[list[Outcome]]:
    one = prepared.op()

    def parse(reply: Any) -> list[Outcome]:
        try:
            return [one.parse(reply)]
        except ShardqError as exc:  # a rejected job (duplicate id, schedule): per job
            return [exc]

    return Op(one.script, one.keys, one.argv, parse)


def _batch(chunk: list[PreparedEnqueue]) -> Op[list[Outcome]]:
    first = chunk[0]
    s, pk = first.settings, first.pk
    argv: list[Any] = [
        round(s.past_tolerance * 1000),
        round(s.max_horizon * 1000),
        pk.due_hint,
        pk.ready_hint,
    ]
    for p in chunk:
        argv += (p.job_id, p.body, p.schedule.mode, p.schedule.ms)

    def parse(reply: Any) -> list[Outcome]:
        r = check(reply)
        REDIS_CLOCK.saw(int(r[0]))
        now = str(r[0])
        out: list[Outcome] = []
        for n, p in enumerate(chunk):
            status, detail = int(r[1 + 2 * n]), int(r[2 + 2 * n])
            if status in (1, 2):
                out.append(
                    EnqueueResult(p.job_id, True, detail if status == 1 else None, p.pk.fleet_id)
                )
            elif status == Code.DUPLICATE_JOB_ID:
                out.append(error_for(status, [p.job_id]))
            else:
                limit = s.past_tolerance if status == Code.DUE_IN_PAST else s.max_horizon
                out.append(error_for(status, [str(detail), now, str(round(limit * 1000))]))
        return out

    return op(
        "enqueue-batch",
        [pk.jobs, pk.due, pk.ready, pk.stats, pk.lane, pk.vtime, pk.ctl],
        argv,
        parse,
    )


def plan_bulk(prepared: list[PreparedEnqueue]) -> list[BulkCall]:
    """Group jobs without an idempotency key into per-partition batches (one script call each);
    jobs with one go through the single enqueue script, which owns the key's dedupe."""
    calls: list[BulkCall] = []
    by_partition: dict[int, list[int]] = {}
    for i, p in enumerate(prepared):
        if p.idempotency_key is not None:
            calls.append(BulkCall(_single(p), [i]))
        else:
            by_partition.setdefault(p.pk.fleet_id, []).append(i)
    for indexes in by_partition.values():
        for start in range(0, len(indexes), BATCH_JOBS):
            chunk = indexes[start : start + BATCH_JOBS]
            calls.append(BulkCall(_batch([prepared[i] for i in chunk]), chunk))
    return calls


def _parse_cancel(reply: Any) -> bool:
    if is_code(reply, Code.JOB_NOT_FOUND):
        return False
    check(reply)
    return True


def cancel(pk: keys.PartitionKeys, job_id: str, running: bool = False) -> Op[bool]:
    """Cancel a job that has not started (with ``running``, one that is running too: its worker
    is told to stop it): True if cancelled, False if there is no such job (in the partition
    ``pk``, its home: :meth:`shardq.store.layout.Layout.homes`)."""
    # Not resent after an ambiguous fault: a resend would answer "not found" for the job the
    # first call cancelled.
    return op(
        "cancel", [pk.jobs, pk.due, pk.errors, pk.stats, pk.ctl, pk.moving, pk.cancels],
        [job_id, "1" if running else "0", pk.ready_hint], _parse_cancel, safe_to_repeat=False,
    )  # fmt: skip


def cancel_running(pk: keys.PartitionKeys, job_id: str) -> Op[bool]:
    """:func:`cancel` of a job whether or not it runs."""
    return cancel(pk, job_id, running=True)


def reschedule(
    pk: keys.PartitionKeys,
    job_id: str,
    run_at: datetime | float | None,
    delay: timedelta | float | None,
    settings: ProducerSettings,
    priority: str | None = None,
) -> Op[int]:
    """Move a waiting job to a new due time, or give it a new priority (``run_at`` and
    ``delay`` both None: the due time stays); the op returns the due time in ms on the Redis
    clock."""
    level = names.check_priority(priority) if priority is not None else ""
    if run_at is None and delay is None:
        if not level:
            raise InvalidScheduleError("reschedule needs run_at, delay or priority")
        schedule = Schedule("keep", 0)
    else:
        schedule = make_schedule(run_at, delay, settings)
    return op(
        "reschedule",
        [pk.due, pk.jobs, pk.ctl, pk.moving],
        [
            job_id,
            schedule.mode,
            schedule.ms,
            round(settings.past_tolerance * 1000),
            round(settings.max_horizon * 1000),
            pk.due_hint,
            level,
        ],
        lambda reply: int(check(reply)[1]),
    )


def get(pk: keys.PartitionKeys, job_id: str) -> Op[JobInfo | None]:
    """A snapshot of one job, or None once it completed, was cancelled, or never existed."""

    def parse(reply: Any) -> JobInfo | None:
        envelope, due, error, *more = check(reply)
        return job_info(pk, job_id, envelope, due, error, more[0] if more else None)

    return _get(pk, job_id, parse)


def job_info(
    pk: keys.PartitionKeys,
    job_id: str,
    envelope: Any,
    due: Any,
    error: Any,
    progress: Any = None,
) -> JobInfo | None:
    """A job's snapshot from the get script's reply (lua/includes/snapshot.lua), or None;
    ``progress``: its last reported progress while it runs (lua/progress-2.lua)."""
    queue = pk.queue
    if envelope is None:
        return None
    env = envelope_codec.read(envelope)
    if env.body_error is not None:
        raise MalformedRecordError(
            f"job {job_id!r} of {queue} has a malformed body ({env.body_error}): "
            "`shardq job cancel` removes it"
        )
    body = env.body
    # Numbers that are not what a producer writes are shown as they are (malformed), not
    # fatal to the read: the job can still be looked at, cancelled or run again.
    c = Checked()
    c.bad.update(env.malformed)
    attempt = env.attempt if env.attempt is not None else 0
    options = stored_options(body, c.bad)
    shown_progress = progress_codec.parse(progress, c.bad) if progress is not None else None
    # The same rules as the inspector's listings (lua/list-due, list-retrying): in the due
    # set with a last error is retrying, without one scheduled.
    if due is not None:
        state: JobState = "scheduled" if error is None else "retrying"
    elif env.state == envelope_codec.RUNNING:
        state = "running"
    elif env.state == envelope_codec.DEAD:
        state = "dead"
    else:
        state = "ready"
    return JobInfo(
        id=job_id,
        queue=queue,
        partition=pk.fleet_id,
        state=state,
        type=body["t"],
        payload=body.get("p"),
        attempt=attempt,
        max_attempts=options.max_attempts,
        due_ms=c.time_ms("due_ms", due) if due is not None else None,
        last_error=as_text(error) if error is not None else None,
        idempotency_key=options.idempotency_key,
        priority=body.get("priority", "default"),
        tenant=body.get("tenant"),
        limit_key=options.limit_key,
        keep_result=options.keep_result,
        timeout=options.timeout,
        deadline_ms=options.deadline_ms,
        start_within=options.start_within,
        progress=shown_progress.value if shown_progress is not None else None,
        progress_ms=shown_progress.at_ms if shown_progress is not None else None,
        malformed=c.bad,
    )


def _get(pk: keys.PartitionKeys, job_id: str, parse: Callable[[Any], T]) -> Op[T]:
    get_keys = [pk.jobs, pk.due, pk.errors, pk.ctl, pk.moving, pk.progress(job_id)]
    return op("get", get_keys, [job_id], parse)


def duplicate(job_id: str) -> ShardqError:
    """The error of an enqueue whose id another job holds (as the enqueue script reports it)."""
    return error_for(Code.DUPLICATE_JOB_ID, [job_id])


def stored_body(pk: keys.PartitionKeys, job_id: str) -> Op[bytes | None]:
    """The body a job is stored with in partition ``pk`` (any state), or None when it is not
    there; E_LAYOUT_MOVED / E_JOB_MOVING as :func:`get` (the get script).  An enqueue with
    a given id asks the generation a resize empties with it first (shardq.plans.producer)."""

    def parse(reply: Any) -> bytes | None:
        envelope = check(reply)[0]
        if envelope is None:
            return None
        raw = envelope if isinstance(envelope, bytes) else str(envelope).encode()
        return raw.partition(b"|")[2]

    return _get(pk, job_id, parse)


def queue_create(
    queue: str,
    partitions: int,
    ack_retention: float = 0.0,
    dead_letter_cap: int = DEFAULT_DEAD_CAP,
) -> Op[bool]:
    """Record a queue's settings once; the op returns True when the queue is new."""
    names.check_new_queue_name(queue)
    if (
        isinstance(partitions, bool)
        or not isinstance(partitions, int)
        or not (1 <= partitions <= keys.MAX_PARTITIONS)
    ):
        raise InvalidJobError(
            f"partitions must be an integer 1..{keys.MAX_PARTITIONS}, got {partitions!r}"
        )
    if (
        isinstance(ack_retention, bool)
        or not isinstance(ack_retention, int | float)
        or not 0 <= ack_retention <= 7 * 86400
    ):
        raise InvalidJobError("ack_retention must be 0..604800 seconds")
    if (
        isinstance(dead_letter_cap, bool)
        or not isinstance(dead_letter_cap, int)
        or not 1 <= dead_letter_cap <= MAX_DEAD_CAP
    ):
        raise InvalidJobError(f"dead_letter_cap must be an integer 1..{MAX_DEAD_CAP}")
    return op(
        "queue-create",
        [keys.queue_meta_key(queue)],
        [partitions, keys.LAYOUT_VERSION, round(ack_retention * 1000), dead_letter_cap],
        lambda reply: check(reply)[0] == 1,
    )
