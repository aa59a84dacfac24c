"""The producer's operations, written once: queues, lanes, limits, enqueue (one, many, durable),
cancel, reschedule, get.

Each is a plan (:mod:`shardq.plans`) over the store's calls; :class:`shardq.Client` and
:class:`shardq.AsyncClient` only drive them.  What a producer remembers about a queue (its
meta, when lanes were last seen on) is a :class:`~shardq.store.meta.QueueCache` the plans
read and fill: a plan that needs the partition count yields a meta read only when it is not
cached.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from shardq import names, tracing
from shardq.config import ProducerSettings
from shardq.errors import (
    BulkEnqueueError,
    InvalidJobError,
    InvalidLimitError,
    JobMovingError,
    LayoutMovedError,
    MalformedRecordError,
    NotDurableError,
    ResultTimeoutError,
    ShardqError,
)
from shardq.jobs import EnqueueResult, JobInfo, JobRequest, JobResult
from shardq.limits import Limit
from shardq.names import Priority, check_limit_name, check_queue_name
from shardq.plans import Plan, each, one
from shardq.store import inspection, keys, producer, queues, results
from shardq.store.layout import Layout
from shardq.store.meta import QueueCache, QueueMeta
from shardq.store.op import Call, Pause, Rounds, Waiting
from shardq.store.producer import BulkCall, Outcome, PreparedEnqueue

# queues ----------------------------------------------------------------------------------------


def meta(cache: QueueCache, queue: str) -> Plan[QueueMeta]:
    """The queue's meta, from the cache or read now (and cached); UnknownQueueError when the
    queue does not exist."""
    cached = cache.get(queue)
    if cached is not None:
        return cached.meta
    return (yield from read_meta(cache, queue))


def read_meta(cache: QueueCache, queue: str) -> Plan[QueueMeta]:
    """The queue's meta read now, and cached."""
    check_queue_name(queue)
    read = yield from one(queues.read_meta(queue))
    cache.keep(read)
    return read


def partitions(cache: QueueCache, queue: str) -> Plan[int]:
    """The count of the generation new jobs go to."""
    return (yield from meta(cache, queue)).partitions


def layout(cache: QueueCache, queue: str) -> Plan[Layout]:
    """Where the queue's partitions live (cached with the meta)."""
    return (yield from meta(cache, queue)).key_layout


T = TypeVar("T")

#: A by-id call follows at most this many sealed partitions' redirects (one per resize since
#: its cached meta was read), and waits out a job a resize is moving for up to MOVING_WAIT.
MAX_REDIRECTS = 8
MOVING_WAIT = 5.0
MOVING_PAUSE = 0.01


def at_home(
    cache: QueueCache,
    queue: str,
    routing_keys: list[str],
    make: Callable[[keys.PartitionKeys, str], Call[T]],
) -> Plan[list[T | BaseException]]:
    """Run ``make(pk, key)`` for each job id (or schedule name) where its job is: first in
    its partition of the oldest live generation this process knows (a resize moves jobs only
    from there to the new one), following a sealed partition's redirect to the generation it
    names (E_LAYOUT_MOVED: the cached meta is forgotten, as it is out of date) and asking
    again while a resize is moving the job (E_JOB_MOVING, up to MOVING_WAIT seconds).  Per
    key its result or the exception it ended with."""
    here = yield from layout(cache, queue)
    homes = [here.homes(k)[0] for k in routing_keys]
    out: list[T | BaseException] = [JobMovingError("not asked")] * len(routing_keys)
    todo = list(range(len(routing_keys)))
    hops, waited = 0, 0.0
    while todo:
        results = yield [make(homes[i], routing_keys[i]) for i in todo]
        again: list[int] = []
        moving = False
        fresh: QueueMeta | None = None  # the meta read again, once per round of redirects
        for i, r in zip(todo, results, strict=True):
            out[i] = r
            if isinstance(r, LayoutMovedError) and hops < MAX_REDIRECTS:
                if fresh is None:
                    cache.forget(queue)
                    fresh = yield from read_meta(cache, queue)
                try:
                    homes[i] = redirected_home(fresh, homes[i], r, routing_keys[i])
                except MalformedRecordError as exc:
                    out[i] = exc
                    continue
                again.append(i)
            elif isinstance(r, JobMovingError) and waited < MOVING_WAIT:
                moving = True
                again.append(i)
        if any(isinstance(out[i], LayoutMovedError) for i in again):
            hops += 1
        if moving:
            yield Pause(MOVING_PAUSE)
            waited += MOVING_PAUSE
        todo = again
    return out


def _live(read: QueueMeta) -> list[tuple[int, int]]:
    """The generations the meta names, ``(generation, partitions)``: the draining one, the
    active one, the coming one."""
    gens = [read.draining, (read.generation, read.partitions), read.coming]
    return [g for g in gens if g is not None]


def unknown_redirect(
    read: QueueMeta, asked: keys.PartitionKeys, moved: LayoutMovedError
) -> MalformedRecordError:
    """A sealed partition's redirect that the meta does not back: only a resize seals a
    partition, toward a generation the meta names (so no job is sent where no process reads)."""
    live = ", ".join(f"{g} ({n} partitions)" for g, n in _live(read))
    return MalformedRecordError(
        f"partition {asked.label} of queue {read.queue!r} is sealed toward generation "
        f"{moved.generation} ({moved.partitions} partitions), which the queue's meta does not "
        f"name (its generations: {live}): nothing was written. Only a resize seals a "
        f"partition: if one was cut short, `shardq queue resize --queue {read.queue} --resume`; "
        f"else the field was written by hand (HGET {asked.ctl} sealed): set it back, or delete "
        "it from a partition of the active generation"
    )


def redirected_home(
    read: QueueMeta, asked: keys.PartitionKeys, moved: LayoutMovedError, routing_key: str
) -> keys.PartitionKeys:
    """Where a by-id call goes after ``asked`` answered a redirect, on the meta ``read`` again:
    the partition of the generation it names when the meta names it too; the meta's oldest
    live home when ``asked`` is of a generation retired since (its redirect names another
    retired one, or a live one); MalformedRecordError for any other (a generation the queue
    never had: the field was forged)."""
    target = (moved.generation, moved.partitions)
    live = _live(read)
    if target in live and moved.generation != asked.generation:
        p = keys.partition_for(routing_key, moved.partitions)
        return keys.partition_keys(read.queue, p, moved.partitions, moved.generation)
    retired = asked.generation not in {g for g, _ in live}
    if retired and moved.generation <= max(g for g, _ in live):
        return read.key_layout.homes(routing_key)[0]
    raise unknown_redirect(read, asked, moved)


def one_at_home(
    cache: QueueCache,
    queue: str,
    routing_key: str,
    make: Callable[[keys.PartitionKeys, str], Call[T]],
) -> Plan[T]:
    """:func:`at_home` of one key: its result, or its exception raised."""
    (r,) = yield from at_home(cache, queue, [routing_key], make)
    if isinstance(r, BaseException):
        raise r
    return r


def create_queue(
    cache: QueueCache,
    queue: str,
    partition_count: int,
    ack_retention: float,
    dead_letter_cap: int,
    lanes: bool,
) -> Plan[bool]:
    """Create the queue (the script refuses another partition count), then its consumer groups
    and its registry entry, idempotent follow-ups: running it again finishes a creation that
    was interrupted between steps.  The arguments are checked now, before any plan runs."""
    call = producer.queue_create(queue, partition_count, ack_retention, dead_letter_cap)
    return _create_queue(cache, queue, partition_count, call, lanes)


def _create_queue(
    cache: QueueCache, queue: str, partition_count: int, call: Call[Any], lanes: bool
) -> Plan[bool]:
    created = bool((yield from one(call)))
    pks = keys.all_partition_keys(queue, partition_count)
    queues.groups_made((yield [queues.group_create(pk) for pk in pks]))
    yield from one(queues.register(queue))
    cache.forget(queue)
    read = yield from read_meta(cache, queue)  # with its layout (an existing queue keeps its own)
    if read.layout >= keys.CONTROL_LAYOUT:
        yield from control(read.key_layout.every())
    if lanes:
        yield from set_lanes(cache, queue, True)
    return created


def control(pks: list[keys.PartitionKeys]) -> Plan[int]:
    """Start using each partition's control hash (lua/control-init-2.lua); returns how many
    partitions started now."""
    return sum((yield from each([inspection.control_init(pk) for pk in pks])))


def upgrade(cache: QueueCache, queue: str) -> Plan[int]:
    """Raise the queue's stored layout to this version's; returns the layout it had."""
    read = yield from read_meta(cache, queue)
    # Every time, not only below layout 4: it finishes an upgrade or creation cut short.
    yield from control(read.key_layout.every())
    if read.layout < keys.LAYOUT_VERSION:
        yield from one(queues.set_meta_field(queue, "layout", keys.LAYOUT_VERSION))
    cache.forget(queue)
    return read.layout


def registered() -> Plan[list[str]]:
    return (yield from one(queues.registered()))


# lanes -----------------------------------------------------------------------------------------


def set_lanes(cache: QueueCache, queue: str, on: bool) -> Plan[int]:
    """Turn lanes on or off in every partition; returns how many changed.  Producers read the
    meta's flag: it is on only while every partition is (set after them, cleared before)."""
    cache.forget(queue)
    pks = (yield from layout(cache, queue)).every()
    if not on:
        yield from one(queues.set_meta_field(queue, "lanes", "0"))
    changed = sum((yield from each([inspection.lanes(pk, on) for pk in pks])))
    if on:
        yield from one(queues.set_meta_field(queue, "lanes", "1"))
    cache.saw_lanes(queue, on)
    return changed


def lanes(cache: QueueCache, queue: str) -> Plan[bool]:
    """Whether the queue has lanes on (read from Redis, not cached)."""
    yield from meta(cache, queue)
    return (yield from one(queues.meta_field(queue, "lanes"))) == "1"


def require_lanes(cache: QueueCache, queue: str) -> Plan[None]:
    """LanesOffError unless the queue has lanes on (seen on within the last
    ``shardq.store.meta.LANES_RECHECK`` seconds, so lanes turned off reach every producer soon)."""
    if cache.lanes_trusted(queue):
        return
    on = yield from lanes(cache, queue)
    cache.saw_lanes(queue, on)
    if not on:
        raise producer.lanes_off(queue)


# limits ----------------------------------------------------------------------------------------


def set_limit(cache: QueueCache, queue: str, limit: Limit) -> Plan[None]:
    if not isinstance(limit, Limit):
        raise InvalidLimitError(
            "set_limit takes a shardq.Limit: limits.for_type(), for_key() or for_tenant()"
        )
    yield from meta(cache, queue)  # an unknown queue is refused before anything is written
    yield from one(queues.set_limit(queue, limit))


def limits(cache: QueueCache, queue: str) -> Plan[list[Limit]]:
    yield from meta(cache, queue)
    return (yield from one(queues.limits_table(queue)))


def remove_limit(cache: QueueCache, queue: str, name: str) -> Plan[bool]:
    check_limit_name(name)
    yield from meta(cache, queue)
    return (yield from one(queues.remove_limit(queue, name)))


# enqueue ---------------------------------------------------------------------------------------


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
    """The outcome of one bulk enqueue: which jobs were stored, which were refused or not known
    to be stored, and which were stored but not confirmed by enough replicas."""

    def __init__(self, prepared: list[PreparedEnqueue], settings: ProducerSettings) -> None:
        self.prepared = prepared
        self.settings = settings
        self.results: list[EnqueueResult | None] = [None] * len(prepared)
        self.failed: dict[int, BaseException] = {}
        self.short: list[str] = []  # stored, but fewer replicas confirmed than asked
        self.fewest_acked: int | None = None  # the fewest replicas a short call got
        self.calls: list[BulkCall] = producer.plan_bulk(prepared)

    def settle(
        self, replies: list[list[Outcome] | BaseException], acked: list[int | None] | None = None
    ) -> None:
        """Record each call's final reply (the retry layer resent what it could)."""
        for n, (call, reply) in enumerate(zip(self.calls, replies, strict=True)):
            if isinstance(reply, BaseException):
                for i in call.members:
                    self.failed[i] = reply
                continue
            for i, outcome in zip(call.members, reply, strict=True):
                if isinstance(outcome, ShardqError):
                    self.failed[i] = outcome
                else:
                    self.results[i] = outcome
                    if acked is not None and (acked[n] or 0) < self.settings.durable_replicas:
                        self.short.append(outcome.job_id)
                        self.short_by(acked[n] or 0)

    def short_by(self, acked: int | None) -> None:
        """Note a call that ``acked`` replicas confirmed, too few: the error says the fewest."""
        if acked is not None:
            self.fewest_acked = (
                acked if self.fewest_acked is None else min(self.fewest_acked, acked)
            )

    @property
    def ops(self) -> list[Call[list[Outcome]]]:
        return [c.op for c in self.calls]

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


def _durable(settings: ProducerSettings, ops: list[Call[list[Outcome]]]) -> Waiting:
    return Waiting(list(ops), settings.durable_replicas, round(settings.durable_timeout * 1000))


def enqueue(
    cache: QueueCache,
    queue: str,
    request: JobRequest,
    settings: ProducerSettings,
    durable: bool,
) -> Plan[EnqueueResult]:
    """Enqueue one job; with ``durable``, confirmed by ``durable_replicas`` replicas (WAIT on
    the connection that wrote) or NotDurableError."""
    if tracing.active():
        with tracing.producer_span(queue) as span:
            request = tracing.with_headers(request, tracing.trace_headers())
            done = yield from enqueue_untraced(cache, queue, request, settings, durable)
            tracing.sent(span, done.job_id, done.partition)
            return done
    return (yield from enqueue_untraced(cache, queue, request, settings, durable))


def enqueue_untraced(
    cache: QueueCache,
    queue: str,
    request: JobRequest,
    settings: ProducerSettings,
    durable: bool,
) -> Plan[EnqueueResult]:
    """:func:`enqueue` without its producer span, whose headers would change the body (the
    wire vectors compare bodies byte for byte)."""
    read = yield from meta(cache, queue)
    prepared = producer.prepare_enqueue(queue, read.key_layout, request, settings, read.compact)
    if prepared.body[:1] == b"@":
        yield from require_lanes(cache, queue)
    hops = 0
    while True:
        found = yield from _stored_before(read.key_layout, prepared)
        if found is not None:
            return found
        try:
            return (yield from _send_one(prepared, settings, durable))
        except LayoutMovedError as moved:
            # A resize sealed the partition before this process saw it begin: nothing was
            # written.  The job goes to the new generation with the id already chosen, so a
            # first attempt that did land (a resend after a lost reply) is recognised.
            hops += 1
            if hops > MAX_REDIRECTS:
                raise
            read = yield from moved_meta(cache, queue, moved, prepared.pk)
            request = prepared.with_id()
            prepared = producer.prepare_enqueue(
                queue, read.key_layout, request, settings, read.compact
            )


def _send_one(
    prepared: PreparedEnqueue, settings: ProducerSettings, durable: bool
) -> Plan[EnqueueResult]:
    if not durable:
        return (yield from one(prepared.op()))
    run = BulkRun([prepared], settings)
    results, acked = yield _durable(settings, run.ops)
    run.settle(results, acked)
    try:
        return run.outcome()[0]
    except BulkEnqueueError as exc:
        raise next(iter(exc.failed.values())) from None


def moved_meta(
    cache: QueueCache, queue: str, moved: LayoutMovedError, asked: keys.PartitionKeys
) -> Plan[QueueMeta]:
    """The meta after the sealed partition ``asked`` refused a new job: read again, when
    ``asked`` is of a generation the meta no longer routes to; while the resize has sealed the
    active generation but not yet switched the meta (a few milliseconds), the layout of the
    coming generation the redirect names, with the meta's generation draining.  A redirect the
    meta does not back (a generation the queue never had, or the active generation sealed
    toward anything but the coming one) is MalformedRecordError: no job is sent there."""
    cache.forget(queue)
    read = yield from read_meta(cache, queue)
    return routed_meta(cache, read, asked, moved)


def routed_meta(
    cache: QueueCache, read: QueueMeta, asked: keys.PartitionKeys, moved: LayoutMovedError
) -> QueueMeta:
    """:func:`moved_meta` on the meta ``read`` just now."""
    if (moved.generation, moved.partitions) == read.coming:
        cache.forget(read.queue)
        return dataclasses.replace(
            read,
            partitions=moved.partitions,
            generation=moved.generation,
            draining=(read.generation, read.partitions),
        )
    if asked.generation != read.generation and moved.generation <= read.generation:
        return read  # this process's meta was older: the one read now routes the job
    raise unknown_redirect(read, asked, moved)


def _stored_before(layout: Layout, prepared: PreparedEnqueue) -> Plan[EnqueueResult | None]:
    """While a resize runs, what the generation it empties already holds under this job's
    idempotency key or given id (that partition is sealed: nothing new lands there, so asking
    it first and then enqueueing into the new generation cannot race a writer); None when
    nothing, or no resize runs.  A generated id is new, so it is never asked about."""
    request = prepared.request
    if layout.draining is None or (request.job_id is None and request.idempotency_key is None):
        return None
    key = request.idempotency_key
    if key is not None:
        old = layout.homes(key)[0]
        existing = yield from one(queues.idempotent_job(old, key))
        if existing is None:
            return None
        return EnqueueResult(existing, False, None, layout.route(existing).fleet_id)
    job_id = prepared.job_id
    old = layout.homes(job_id)[0]
    waited = 0.0
    while True:
        (body,) = yield [producer.stored_body(old, job_id)]
        if isinstance(body, JobMovingError) and waited < MOVING_WAIT:
            yield Pause(MOVING_PAUSE)
            waited += MOVING_PAUSE
            continue
        if isinstance(body, LayoutMovedError) or body is None:
            return None  # not there (moved on, or never was): the new partition decides
        if isinstance(body, BaseException):
            raise body
        if body == prepared.body:
            return EnqueueResult(job_id, True, None, prepared.pk.fleet_id)
        raise producer.duplicate(job_id)


def enqueue_many(
    cache: QueueCache,
    queue: str,
    requests: Iterable[JobRequest],
    settings: ProducerSettings,
    chunk: int,
    durable: bool,
) -> Plan[list[EnqueueResult]]:
    """Enqueue many jobs, ``chunk`` at a time, in pipelines grouped by node; results in
    request order; BulkEnqueueError (covering every chunk) when some were not stored."""
    if tracing.active():
        requests = list(requests)
        with tracing.producer_span(queue, len(requests)):
            stamped = tracing.stamp_all(requests, tracing.trace_headers())
            plan = enqueue_many_untraced(cache, queue, stamped, settings, chunk, durable)
            return (yield from plan)
    return (yield from enqueue_many_untraced(cache, queue, requests, settings, chunk, durable))


def enqueue_many_untraced(
    cache: QueueCache,
    queue: str,
    requests: Iterable[JobRequest],
    settings: ProducerSettings,
    chunk: int,
    durable: bool,
) -> Plan[list[EnqueueResult]]:
    """:func:`enqueue_many` without its producer span (see :func:`enqueue_untraced`)."""
    read = yield from meta(cache, queue)
    # Every job is validated before any is sent, so a bad one writes nothing.
    prepared = producer.prepare_many(queue, read.key_layout, requests, settings, read.compact)
    if producer.needs_lanes(prepared):
        yield from require_lanes(cache, queue)
    runs = [
        BulkRun(prepared[start : start + chunk], settings)
        for start in range(0, len(prepared), chunk)
    ]
    # Every chunk is finished (or given up, within one retry window for the whole call) before
    # any error is raised, and the error covers them all: no chunk is left unsent or unreported.
    if durable:
        for run in runs:
            results, acked = yield _durable(settings, run.ops)
            run.settle(results, acked)
    else:
        # Each chunk written before the previous one's replies are read.
        for run, results in zip(runs, (yield Rounds([run.ops for run in runs])), strict=True):
            run.settle(results)
    whole = _merged(runs, settings)
    yield from _follow_resize(cache, queue, whole, settings, durable)
    return whole.outcome()


def _follow_resize(
    cache: QueueCache, queue: str, whole: BulkRun, settings: ProducerSettings, durable: bool
) -> Plan[None]:
    """Send again, to the new generation, the jobs a partition sealed by a resize refused
    (nothing of them was written), with the ids already chosen (see :func:`enqueue_untraced`)."""
    for _ in range(MAX_REDIRECTS):
        moved = [i for i, exc in whole.failed.items() if isinstance(exc, LayoutMovedError)]
        if not moved:
            return
        cache.forget(queue)
        fresh = yield from read_meta(cache, queue)
        send: list[int] = []
        for i in moved:
            refused = whole.failed[i]
            assert isinstance(refused, LayoutMovedError)
            try:
                read = routed_meta(cache, fresh, whole.prepared[i].pk, refused)
            except MalformedRecordError as exc:
                whole.failed[i] = exc
                continue
            again = producer.prepare_enqueue(
                queue, read.key_layout, whole.prepared[i].with_id(), settings, read.compact
            )
            whole.prepared[i] = again
            try:
                found = yield from _stored_before(read.key_layout, again)
            except ShardqError as exc:
                whole.failed[i] = exc
                continue
            if found is not None:
                whole.results[i] = found
                del whole.failed[i]
            else:
                send.append(i)
        if not send:
            return
        run = BulkRun([whole.prepared[i] for i in send], settings)
        if durable:
            results, acked = yield _durable(settings, run.ops)
            run.settle(results, acked)
        else:
            run.settle((yield run.ops))
        for j, i in enumerate(send):
            whole.failed.pop(i, None)
            if j in run.failed:
                whole.failed[i] = run.failed[j]
            else:
                whole.results[i] = run.results[j]
        whole.short.extend(run.short)
        whole.short_by(run.fewest_acked)


def _merged(runs: list[BulkRun], settings: ProducerSettings) -> BulkRun:
    """One run holding several chunks' outcomes, request indexes in call order."""
    if len(runs) == 1:
        return runs[0]
    whole = BulkRun([], settings)
    for run in runs:
        offset = len(whole.prepared)
        whole.prepared.extend(run.prepared)
        whole.results.extend(run.results)
        whole.failed.update({offset + i: exc for i, exc in run.failed.items()})
        whole.short.extend(run.short)
        whole.short_by(run.fewest_acked)
    return whole


# jobs by id ------------------------------------------------------------------------------------


def cancel(cache: QueueCache, queue: str, job_id: str, running: bool = False) -> Plan[bool]:
    names.check_job_id(job_id)
    make = producer.cancel_running if running else producer.cancel
    return bool((yield from one_at_home(cache, queue, job_id, make)))


def reschedule(
    cache: QueueCache,
    queue: str,
    job_id: str,
    run_at: datetime | float | None,
    delay: timedelta | float | None,
    priority: Priority | None,
    settings: ProducerSettings,
) -> Plan[int]:
    if producer.priority_needs_lanes(priority):
        yield from require_lanes(cache, queue)
    names.check_job_id(job_id)

    def call(pk: keys.PartitionKeys, job: str) -> Call[int]:
        return producer.reschedule(pk, job, run_at, delay, settings, priority)

    return int((yield from one_at_home(cache, queue, job_id, call)))


def get(cache: QueueCache, queue: str, job_id: str) -> Plan[JobInfo | None]:
    names.check_job_id(job_id)
    return (yield from one_at_home(cache, queue, job_id, producer.get))


def read_result(cache: QueueCache, queue: str, job_id: str) -> Plan[results.ResultRead]:
    """One read of a job and its kept result, where the job is (see :func:`at_home`)."""
    names.check_job_id(job_id)
    return (yield from one_at_home(cache, queue, job_id, results.read))


def result_info(cache: QueueCache, queue: str, job_id: str) -> Plan[JobResult | None]:
    return (yield from read_result(cache, queue, job_id)).result


#: How long a caller waiting for a result sleeps at most between two reads of it: the
#: fallback for a publish it missed (a failover, a slot moved, no subscription allowed).
RESULT_RECHECK = 5.0


def result_deadline(timeout: float | None) -> float | None:
    """The monotonic time a wait for a result ends (None: it does not); InvalidJobError for a
    timeout that is not a number of seconds >= 0."""
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 <= timeout <= MAX_RESULT_WAIT
    ):
        raise InvalidJobError(
            f"timeout must be 0..{MAX_RESULT_WAIT:.0f} seconds (0: do not wait), or None to "
            f"wait until the job ends; got {timeout!r:.40}"
        )
    return time.monotonic() + timeout


#: Longest wait a caller may ask for (a result is kept at most 30 days after the job ends).
MAX_RESULT_WAIT = 366 * 86400.0


def result_wait(
    read: results.ResultRead, job_id: str, queue: str, deadline: float | None
) -> tuple[bool, Any, float]:
    """What to do after a read, for a caller waiting for the result: ``(True, value, 0)``
    done; ``(False, None, seconds)`` sleep that long on the job's channel (at most
    RESULT_RECHECK) and read again; raises the typed error of a job that ended without a
    value (:func:`shardq.store.results.verdict`) or ResultTimeoutError past ``deadline``."""
    done, value = results.verdict(read, job_id, queue)
    if done:
        return True, value, 0.0
    left = RESULT_RECHECK if deadline is None else deadline - time.monotonic()
    if left <= 0:
        state = read.job.state if read.job is not None else "unknown"
        raise ResultTimeoutError(
            f"job {job_id} of {queue} has not ended within the timeout (it is {state}): wait "
            "longer, or look again later with the same call",
            job_id,
        )
    return False, None, min(left, RESULT_RECHECK)
