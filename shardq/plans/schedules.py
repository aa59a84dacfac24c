"""Periodic schedules' operations, written once: add (or update), get, list, pause, resume,
remove, next ticks.

Each is a plan (:mod:`shardq.plans`) over the schedule store's calls
(:mod:`shardq.store.schedules`); ``client.schedules`` of :class:`shardq.Client` and of
:class:`shardq.AsyncClient` (:class:`~shardq.client.Schedules`,
:class:`~shardq.client.AsyncSchedules`) only drive them.  What a definition means and how its
ticks fall is :mod:`shardq.schedules`' business; a plan reads the Redis clock with the stored
definition and computes from there, never from this process's clock.  A plan's arguments are
checked when it is built, before anything is sent.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from shardq.errors import InvalidPeriodicScheduleError, ScheduleNotFoundError
from shardq.jobs.body import decode_body, stored_options
from shardq.names import check_schedule_name as check_name
from shardq.plans import Plan, one
from shardq.plans import producer as producer_plans
from shardq.schedules import (
    DEFAULT_CATCH_UP,
    DEFAULT_GRACE,
    MAX_NEXT,
    Definition,
    ScheduleInfo,
)
from shardq.store import keys, numbers
from shardq.store import schedules as ops
from shardq.store.meta import QueueCache
from shardq.store.numbers import Checked

# What users see ------------------------------------------------------------------------------


def _state(
    raw: str | None, bad: dict[str, str] | None = None
) -> tuple[int | None, int | None, int, int, bool]:
    """``last fire ms|last tick ms|fires|misfires|paused`` (lua/includes/periodic.lua); a
    part that is not a number in range reads as unset (and is named in ``bad``)."""
    parts = (raw or "").split("|") + [""] * 5
    c = Checked()
    times = [
        None if parts[i] in ("", "-1") else c.time_ms(name, parts[i])
        for i, name in ((0, "last_fire_ms"), (1, "last_tick_ms"))
    ]
    fires, misfires = (c.count(name, parts[i] or 0) for i, name in ((2, "fires"), (3, "misfires")))
    paused = c.integer("paused", parts[4] or 0, 0, 0, 1)
    if bad is not None:
        bad.update(c.bad)
    return times[0], times[1], fires, misfires, paused == 1


def info(queue: str, partition: int, row: ops.StoredSchedule) -> ScheduleInfo:
    """A stored schedule as users see it.  One that cannot be read (written by hand, or by a
    newer shardq) is still listed, as type ``?`` with its definition under ``malformed``:
    `shardq schedule add` with its name repairs it, `shardq schedule remove` drops it."""
    assert row.definition is not None
    bad = dict(row.malformed)
    last_fire, last_tick, fires, misfires, paused = _state(row.state, bad)
    try:
        d = Definition.from_json(row.name, row.definition)
        body = decode_body(d.body)
    except (InvalidPeriodicScheduleError, ValueError) as exc:
        bad["definition"] = f"{numbers.shown(row.definition)} ({exc})"
        return ScheduleInfo(
            name=row.name, queue=queue, partition=partition, job_type="?", payload=None,
            cron=None, every=None, tz="UTC", max_attempts=None, backoff=None, headers=None,
            start_ms=None, end_ms=None, misfire="run_once", catch_up_limit=DEFAULT_CATCH_UP,
            misfire_grace=DEFAULT_GRACE, paused=paused, next_fire_ms=row.next_ms,
            last_fire_ms=last_fire, last_tick_ms=last_tick, fires=fires, misfires=misfires,
            malformed=bad,
        )  # fmt: skip
    options = stored_options(body, bad)
    backoff = None
    if options.backoff is not None:
        b = options.backoff
        backoff = {"kind": b.kind, "base": b.base, "cap": b.cap}
    job_ids = {}
    if last_tick is not None:
        job_ids["last"] = keys.schedule_job_id(d.name, last_tick)
    return ScheduleInfo(
        name=d.name,
        queue=queue,
        partition=partition,
        job_type=d.job_type,
        payload=body.get("p"),
        cron=d.cron,
        every=d.every_ms / 1000 if d.every_ms is not None else None,
        tz=d.tz,
        max_attempts=options.max_attempts,
        backoff=backoff,
        headers=options.headers or None,
        start_ms=d.start_ms,
        end_ms=d.end_ms,
        misfire=d.misfire,
        catch_up_limit=d.catch_up_limit,
        misfire_grace=d.grace_ms / 1000,
        paused=paused,
        next_fire_ms=row.next_ms,
        last_fire_ms=last_fire,
        last_tick_ms=last_tick,
        fires=fires,
        misfires=misfires,
        job_ids=job_ids,
        malformed=bad,
    )


# Plans ---------------------------------------------------------------------------------------


def _keys(cache: QueueCache, queue: str, name: str) -> Plan[keys.PartitionKeys]:
    """The keys of the partition schedule ``name`` lives in (its name's partition).  While a
    resize runs, that is its partition in the generation being emptied as long as it is still
    there (a resize moves schedules first, in its first round), else in the new one."""
    cache.forget(queue)  # a resize may have begun: schedules are read and written rarely
    layout = yield from producer_plans.layout(cache, queue)
    homes = layout.homes(name)
    if len(homes) > 1:
        got = yield from _read(homes[0], name)
        if got.schedules and got.schedules[0].definition is not None:
            return homes[0]
    return homes[-1]


def _found(queue: str, pk: keys.PartitionKeys, name: str, got: ops.ReadResult) -> ScheduleInfo:
    if not got.schedules or got.schedules[0].definition is None:
        raise ScheduleNotFoundError(
            f"no periodic schedule {name!r} on queue {queue!r}: see `shardq schedule list`"
        )
    return info(queue, pk.fleet_id, got.schedules[0])


def _read(pk: keys.PartitionKeys, name: str) -> Plan[ops.ReadResult]:
    return (yield from one(ops.read(pk, "get", name)))


def add(cache: QueueCache, queue: str, d: Definition) -> Plan[ScheduleInfo]:
    """Store ``d`` (validated by :func:`shardq.schedules.make_definition`) with its first tick
    after now on the Redis clock; an interval schedule keeps its phase when only its other
    fields change."""
    pk = yield from _keys(cache, queue, d.name)
    current = yield from _read(pk, d.name)
    now = current.now_ms
    if d.every_ms is not None and d.start_ms is None:
        # Keep the phase of an unchanged interval; a new one starts counting now.
        anchor = -(-now // 1000) * 1000
        if current.schedules and current.schedules[0].definition is not None:
            try:
                old = Definition.from_json(d.name, current.schedules[0].definition)
            except InvalidPeriodicScheduleError:
                old = None
            if old is not None and old.every_ms == d.every_ms and old.start_ms is None:
                anchor = old.anchor_ms
        d = dataclasses.replace(d, anchor_ms=anchor)
    nxt = d.next_after(now)
    if nxt is None:
        raise InvalidPeriodicScheduleError(
            f"schedule {d.name!r} has no tick after now (Redis clock): check its end time "
            "and cron expression"
        )
    yield from one(ops.put(pk, "put", d.name, d.to_json(), nxt))
    return _found(queue, pk, d.name, (yield from _read(pk, d.name)))


def get(cache: QueueCache, queue: str, name: str) -> Plan[ScheduleInfo]:
    """One schedule with its state; ScheduleNotFoundError when there is none."""
    check_name(name)
    return _get(cache, queue, name)


def _get(cache: QueueCache, queue: str, name: str) -> Plan[ScheduleInfo]:
    pk = yield from _keys(cache, queue, name)
    return _found(queue, pk, name, (yield from _read(pk, name)))


def list_all(cache: QueueCache, queue: str, page: int = 200) -> Plan[list[ScheduleInfo]]:
    """Every schedule of the queue, by name: an HSCAN page at a time, partition by partition."""
    cache.forget(queue)
    out: list[ScheduleInfo] = []
    for pk in (yield from producer_plans.layout(cache, queue)).every():
        cursor = "0"
        while True:
            got = yield from one(ops.read(pk, "scan", cursor, page))
            out.extend(info(queue, pk.fleet_id, row) for row in got.schedules)
            cursor = got.cursor
            if cursor == "0":
                break
    return sorted(out, key=lambda s: s.name)


def pause(cache: QueueCache, queue: str, name: str) -> Plan[ScheduleInfo]:
    """Stop firing (from the next tick on) until resumed."""
    check_name(name)
    return _pause(cache, queue, name)


def _pause(cache: QueueCache, queue: str, name: str) -> Plan[ScheduleInfo]:
    pk = yield from _keys(cache, queue, name)
    yield from one(ops.put(pk, "pause", name))
    return _found(queue, pk, name, (yield from _read(pk, name)))


def resume(cache: QueueCache, queue: str, name: str) -> Plan[ScheduleInfo]:
    """Fire again from the first tick after now (ticks while paused are not misfires)."""
    check_name(name)
    return _resume(cache, queue, name)


def _resume(cache: QueueCache, queue: str, name: str) -> Plan[ScheduleInfo]:
    pk = yield from _keys(cache, queue, name)
    got = yield from _read(pk, name)
    _found(queue, pk, name, got)  # raises when there is no such schedule
    definition = got.schedules[0].definition
    assert definition is not None
    nxt = Definition.from_json(name, definition).next_after(got.now_ms)
    sha = ops.definition_sha(definition)
    yield from one(ops.put(pk, "resume", name, sha, -1 if nxt is None else nxt))
    return _found(queue, pk, name, (yield from _read(pk, name)))


def remove(cache: QueueCache, queue: str, name: str) -> Plan[bool]:
    """Delete the schedule; True when it existed.  Jobs it already enqueued stay."""
    check_name(name)
    return _remove(cache, queue, name)


def _remove(cache: QueueCache, queue: str, name: str) -> Plan[bool]:
    pk = yield from _keys(cache, queue, name)
    return (yield from one(ops.put(pk, "remove", name))).created


def upcoming(cache: QueueCache, queue: str, name: str, n: int) -> Plan[list[datetime]]:
    """The next ``n`` tick times, in the schedule's time zone."""
    check_name(name)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_NEXT:
        raise InvalidPeriodicScheduleError(f"n must be an integer 1..{MAX_NEXT}")
    return _upcoming(cache, queue, name, n)


def _upcoming(cache: QueueCache, queue: str, name: str, n: int) -> Plan[list[datetime]]:
    pk = yield from _keys(cache, queue, name)
    got = yield from _read(pk, name)
    _found(queue, pk, name, got)
    row = got.schedules[0]
    assert row.definition is not None
    d = Definition.from_json(name, row.definition)
    zone = d.zone()
    after = got.now_ms if row.next_ms is None else row.next_ms - 1
    return [datetime.fromtimestamp(t / 1000, UTC).astimezone(zone) for t in d.upcoming(after, n)]
