"""Periodic jobs: named schedules (cron or fixed interval) fired once per tick by the fleet.

This module is the model: a schedule's definition, its ticks and what one fire does (misfires
included: :func:`firing`).  The operations on stored schedules are plans in
:mod:`shardq.plans.schedules`, driven by ``client.schedules`` (:class:`shardq.client.Schedules`
and :class:`shardq.client.AsyncSchedules`).

Design
------
**Storage.**  A schedule lives in the partition its name hashes to
(:func:`shardq.store.keys.partition_for`), in three keys of that partition's hash tag, owned by
:mod:`shardq.store.keys`: ``sched`` (hash: name -> definition JSON), ``sched:next`` (sorted
set: name scored by its next tick in ms; a paused or finished schedule has no entry) and
``sched:state`` (hash: name -> ``last fire ms|last tick ms|fires|misfires|paused``).  So
schedules spread over the queue's partitions like jobs, and the dispatcher holding a
partition's lease is the only one that fires its schedules.

**Ticks on the Redis clock.**  Whether a tick is due is judged on the Redis primary's clock
only.  The client reads the Redis time (with the current definition, lua/schedule-read-3.lua)
and computes the first tick after it before storing (lua/schedule-put-3.lua).  The dispatcher
(:mod:`shardq.dispatcher.ticker`) reads the schedules whose next tick is at or before Redis
``TIME``, computes in Python each one's ticks up to that time and its following tick (calendar
arithmetic from the cron expression or interval, never the dispatcher's clock), applies the
misfire policy, and sends them to lua/schedule-fire-7.lua, fenced by its lease token like
promote.  That script checks, per schedule, that the stored next tick and definition are still
the ones read, then atomically stores each tick's job exactly as enqueue stores a job that is
due now (envelope ``S0|body`` in ``jobs``, entry in ``ready``), advances the next tick and
updates the state.  A resent or duplicate fire finds the next tick moved and writes nothing;
the tick's job id ``sq-sched:<name>@<tick ms>`` (:func:`shardq.store.keys.schedule_job_id`)
is a second guard and routes to the schedule's partition, so ``client.get``/``cancel`` find a
tick's job by id.  The dispatcher sleeps until the earliest next tick of its partitions
(bounded by ``max_sleep``); adding a schedule whose tick is earlier wakes it (the due hint).

**Misfires** are ticks that passed while no dispatcher could fire them (all down, a lease
handover, a paused primary).  When the dispatcher finds ticks t1 < ... < tn all due:
``run_once`` (default) enqueues tn only; ``skip`` enqueues tn only if it is at most
``misfire_grace`` seconds old, else nothing; ``catch_up`` enqueues the latest
``catch_up_limit`` ticks (each its own job).  The others are counted in the schedule's
``misfires`` (exactly up to 10,000 per fire, at least that many beyond).  Ticks that pass while
a schedule is paused are not misfires: resuming starts at the next tick after now.

**Cron and time zones.**  Expressions have 5 fields, or 6 with seconds first
(``*/15 * * * * *``), plus ``L``, ``LW``, ``#`` and names.  Ticks are computed in the
schedule's IANA time zone (:mod:`zoneinfo`) like Debian's cron: a time in a spring-forward gap
runs at the end of the gap (02:30 Europe/Berlin on the last Sunday of March runs at 03:00),
and a fixed time in the autumn repeat runs once, while jobs more frequent than hourly run in
both passes of the repeated hour.  Fixed intervals (at least :data:`MIN_INTERVAL` seconds)
count elapsed time from ``start`` (or from when the schedule was added): no time zone applies.

**Library**: cronsim (https://github.com/cuu508/cronsim) rather than croniter.  cronsim has no
dependencies, is typed, is maintained for Healthchecks.io (releases in 2026) and matches
Debian cron's DST behaviour on purpose (its test suite has DST transition cases), with a
seconds field.  croniter pulls in python-dateutil, has a long record of DST bugs, and its
original maintainer announced the end of its maintenance; it lives on under pallets-eco, but
its DST rules are its own rather than cron's.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson

from shardq import jobs as jobmod
from shardq.config import ProducerSettings
from shardq.errors import InvalidJobError, InvalidPeriodicScheduleError
from shardq.jobs import Backoff
from shardq.names import check_schedule_name as check_name
from shardq.store import numbers

MisfirePolicy = Literal["skip", "run_once", "catch_up"]
MISFIRE_POLICIES: tuple[MisfirePolicy, ...] = ("skip", "run_once", "catch_up")
MIN_INTERVAL = 1.0
MAX_INTERVAL = 366 * 86400.0
# Most ticks one fire call enqueues (lua/schedule-fire-7.lua refuses more: well under a
# millisecond), hence the most a schedule may catch up at once.
FIRE_TICKS = 1000
MAX_CATCH_UP = FIRE_TICKS
DEFAULT_CATCH_UP = 100
DEFAULT_GRACE = 60.0
MAX_GRACE_MS = 366 * 86_400_000
# Ticks counted one by one per fire; past this, misfires are counted as this many.
# (cron: about 10 ms per 1,000 ticks, so a fire after a long outage stays short).
COUNT_LIMIT = 10_000
MAX_NEXT = 1000
FORMAT_VERSION = 1


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidPeriodicScheduleError(f"{what} {value!r:.40} is not a string")
    return value


def _zone(tz: str) -> ZoneInfo:
    if not isinstance(tz, str) or not tz or tz.startswith(("/", ".")) or ".." in tz:
        raise InvalidPeriodicScheduleError(f"time zone {tz!r} is not an IANA name")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidPeriodicScheduleError(
            f"unknown time zone {tz!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'"
        ) from None


def _ms(value: datetime | float | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidPeriodicScheduleError(f"{what} must be timezone-aware")
        value = value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidPeriodicScheduleError(f"{what} must be a datetime or epoch seconds")
    # A comparison, not math.isfinite: it refuses nan, inf and huge ints alike.
    if not 0 < value <= numbers.MAX_TIME_MS / 1000:
        raise InvalidPeriodicScheduleError(
            f"{what} {numbers.shown(value)} is not a time after 1970 and before the year 10000"
        )
    return round(value * 1000)


@dataclass(frozen=True, slots=True)
class Definition:
    """A validated schedule as stored (the JSON in the ``sched`` hash)."""

    name: str
    job_type: str
    body: str  # the tick job's stored body (jobs.encode_body), JSON text
    cron: str | None = None
    every_ms: int | None = None
    tz: str = "UTC"
    start_ms: int | None = None
    end_ms: int | None = None
    misfire: MisfirePolicy = "run_once"
    catch_up_limit: int = DEFAULT_CATCH_UP
    grace_ms: int = round(DEFAULT_GRACE * 1000)
    anchor_ms: int = 0  # interval schedules: ticks at anchor + k * every

    # encoding ------------------------------------------------------------------------------

    def to_json(self) -> str:
        raw = {
            "v": FORMAT_VERSION,
            "type": self.job_type,
            "body": self.body,
            "cron": self.cron,
            "every": self.every_ms,
            "tz": self.tz,
            "start": self.start_ms,
            "end": self.end_ms,
            "misfire": self.misfire,
            "catch_up": self.catch_up_limit,
            "grace": self.grace_ms,
            "anchor": self.anchor_ms,
        }
        return orjson.dumps({k: v for k, v in raw.items() if v is not None}).decode()

    @classmethod
    def from_json(cls, name: str, text: str) -> Definition:
        """Parse a stored definition; InvalidPeriodicScheduleError when it is not one."""
        try:
            raw = orjson.loads(text)
            every = raw.get("every")
            start, end = raw.get("start"), raw.get("end")
            top = round(MAX_INTERVAL * 1000)
            d = cls(
                name=name,
                job_type=_text(raw["type"], "type"),
                body=_text(raw["body"], "body"),
                cron=_text(raw["cron"], "cron") if raw.get("cron") is not None else None,
                # Every number as make_definition lets it be: a zero interval would divide by
                # zero, a string start would fail the dispatcher's every pass.
                every_ms=None
                if every is None
                else numbers.integer(every, round(MIN_INTERVAL * 1000), top, what="every"),
                tz=_text(raw.get("tz", "UTC"), "tz"),
                start_ms=None if start is None else numbers.time_ms(start, what="start"),
                end_ms=None if end is None else numbers.time_ms(end, what="end"),
                misfire=raw.get("misfire", "run_once"),
                catch_up_limit=numbers.integer(
                    raw.get("catch_up", DEFAULT_CATCH_UP), 1, MAX_CATCH_UP, what="catch_up"
                ),
                grace_ms=numbers.integer(
                    raw.get("grace", round(DEFAULT_GRACE * 1000)), 0, MAX_GRACE_MS, what="grace"
                ),
                anchor_ms=numbers.time_ms(raw.get("anchor", 0), what="anchor"),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidPeriodicScheduleError(
                f"schedule {name!r} is not readable: {exc}"
            ) from None
        d.validate()
        return d

    def validate(self) -> None:
        if (self.cron is None) == (self.every_ms is None):
            raise InvalidPeriodicScheduleError("give exactly one of cron= and every=")
        if self.misfire not in MISFIRE_POLICIES:
            raise InvalidPeriodicScheduleError(
                f"misfire policy {self.misfire!r}: use one of {', '.join(MISFIRE_POLICIES)}"
            )
        self.zone()
        if self.cron is not None:
            if not isinstance(self.cron, str) or len(self.cron.split()) not in (5, 6):
                raise InvalidPeriodicScheduleError(
                    f"cron expression {self.cron!r}: use 5 fields (minute hour day month "
                    "weekday), or 6 with seconds first"
                )
            from cronsim import CronSim, CronSimError  # here: only cron schedules load it

            try:
                CronSim(self.cron, datetime(2000, 1, 1, tzinfo=self.zone()))
            except (CronSimError, ValueError, KeyError, IndexError) as exc:
                raise InvalidPeriodicScheduleError(
                    f"cron expression {self.cron!r} is invalid: {exc}"
                ) from None

    def zone(self) -> ZoneInfo:
        return _zone(self.tz)

    @property
    def sha(self) -> str:
        return definition_sha(self.to_json())

    # ticks ---------------------------------------------------------------------------------

    def _forward(self, after_ms: int) -> Iterator[int]:
        """Ticks strictly after ``after_ms`` (ignoring start/end), in order."""
        if self.every_ms is not None:
            every, anchor = self.every_ms, self.anchor_ms
            k = 0 if after_ms < anchor else (after_ms - anchor) // every + 1
            while True:
                yield anchor + k * every
                k += 1
        assert self.cron is not None
        from cronsim import CronSim

        start = datetime.fromtimestamp(max(after_ms, 0) // 1000, self.zone())
        try:
            for dt in CronSim(self.cron, start):
                yield int(dt.timestamp()) * 1000
        except StopIteration:  # cronsim found no match within 50 years
            return

    def _backward(self, at_or_before_ms: int) -> Iterator[int]:
        """Ticks at or before ``at_or_before_ms``, latest first (ignoring start/end)."""
        if self.every_ms is not None:
            every, anchor = self.every_ms, self.anchor_ms
            if at_or_before_ms < anchor:
                return
            k = (at_or_before_ms - anchor) // every
            while k >= 0:
                yield anchor + k * every
                k -= 1
            return
        assert self.cron is not None
        from cronsim import CronSim

        start = datetime.fromtimestamp(at_or_before_ms // 1000 + 1, self.zone())
        try:
            for dt in CronSim(self.cron, start, reverse=True):
                yield int(dt.timestamp()) * 1000
        except StopIteration:
            return

    def next_after(self, ms: int) -> int | None:
        """The first tick strictly after ``ms`` within start/end, or None when there is none."""
        if self.start_ms is not None:
            ms = max(ms, self.start_ms - 1)
        for tick in self._forward(ms):
            if self.end_ms is not None and tick > self.end_ms:
                return None
            return tick
        return None

    def upcoming(self, after_ms: int, n: int) -> list[int]:
        out: list[int] = []
        tick = self.next_after(after_ms)
        while tick is not None and len(out) < n:
            out.append(tick)
            tick = self.next_after(tick)
        return out

    def due(self, first_ms: int, now_ms: int, keep: int) -> tuple[int, list[int]]:
        """How many ticks lie in [first_ms, now_ms] (within start/end; counted up to
        :data:`COUNT_LIMIT`), and the latest ``keep`` of them in order."""
        hi = now_ms if self.end_ms is None else min(now_ms, self.end_ms)
        lo = first_ms if self.start_ms is None else max(first_ms, self.start_ms)
        if hi < lo:
            return 0, []
        if self.every_ms is not None:
            first = self.next_after(lo - 1)
            if first is None or first > hi:
                return 0, []
            count = (hi - first) // self.every_ms + 1
            last = first + (count - 1) * self.every_ms
            kept = [last - i * self.every_ms for i in range(min(keep, count))]
            return count, kept[::-1]
        latest: deque[int] = deque(maxlen=keep)
        count = 0
        for tick in self._forward(lo - 1):
            if tick > hi:
                return count, list(latest)
            count += 1
            latest.append(tick)
            if count >= COUNT_LIMIT:
                break
        # Too many to count one by one: take the latest ones counting back from now.
        back: list[int] = []
        for tick in self._backward(hi):
            if tick < lo or len(back) >= keep:
                break
            back.append(tick)
        return count, back[::-1]


@dataclass(frozen=True, slots=True)
class Firing:
    ticks: list[int]
    misfires: int
    next_ms: int  # -1: none left


def firing(d: Definition, expected_ms: int, now_ms: int) -> Firing:
    """What one fire does for a schedule whose stored next tick ``expected_ms`` is due at
    ``now_ms`` (Redis clock): the ticks to enqueue, misfires to count, and the next tick."""
    keep = d.catch_up_limit if d.misfire == "catch_up" else 1
    count, latest = d.due(expected_ms, now_ms, keep)
    if d.misfire == "skip" and latest and now_ms - latest[-1] > d.grace_ms:
        latest = []
    nxt = d.next_after(now_ms)
    return Firing(latest, max(count - len(latest), 0), -1 if nxt is None else nxt)


def make_definition(
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
    settings: ProducerSettings | None = None,
) -> Definition:
    """Validate a schedule fully (typed errors, nothing written); the anchor is set later."""
    check_name(name)
    if (cron is None) == (every is None):
        raise InvalidPeriodicScheduleError("give exactly one of cron= and every=")
    every_ms = None
    if every is not None:
        seconds = every.total_seconds() if isinstance(every, timedelta) else every
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not MIN_INTERVAL <= seconds <= MAX_INTERVAL
        ):
            raise InvalidPeriodicScheduleError(
                f"interval {every!r}: use {MIN_INTERVAL:g} s to {MAX_INTERVAL:g} s"
            )
        every_ms = round(seconds * 1000)
    if (
        isinstance(catch_up_limit, bool)
        or not isinstance(catch_up_limit, int)
        or not 1 <= catch_up_limit <= MAX_CATCH_UP
    ):
        raise InvalidPeriodicScheduleError(f"catch_up_limit must be an integer 1..{MAX_CATCH_UP}")
    if (
        isinstance(misfire_grace, bool)
        or not isinstance(misfire_grace, int | float)
        or not 0 <= misfire_grace <= 86400 * 366
    ):
        raise InvalidPeriodicScheduleError("misfire_grace must be 0..31622400 seconds")
    start_ms, end_ms = _ms(start, "start"), _ms(end, "end")
    if start_ms is not None and end_ms is not None and end_ms < start_ms:
        raise InvalidPeriodicScheduleError("end is before start")
    try:
        body = jobmod.encode_body(
            job_type,
            payload,
            max_attempts=max_attempts,
            backoff=backoff,
            idempotency_key=None,
            headers=headers,
            settings=settings or ProducerSettings(),
        )
    except InvalidJobError as exc:
        if isinstance(exc, InvalidPeriodicScheduleError):
            raise
        raise InvalidPeriodicScheduleError(str(exc)) from None
    d = Definition(
        name=name,
        job_type=job_type,
        body=body.decode(),
        cron=" ".join(cron.split()) if isinstance(cron, str) else cron,
        every_ms=every_ms,
        tz=tz,
        start_ms=start_ms,
        end_ms=end_ms,
        misfire=misfire,
        catch_up_limit=catch_up_limit,
        grace_ms=round(misfire_grace * 1000),
        anchor_ms=start_ms or 0,
    )
    d.validate()
    return d


# What users see ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule with its state; times in ms on the Redis clock (None: never / none)."""

    name: str
    queue: str
    partition: int  # fleet id (keys.fleet_id); shown as shardq.format.partition
    job_type: str
    payload: Any
    cron: str | None
    every: float | None
    tz: str
    max_attempts: int | None
    backoff: dict[str, Any] | None
    headers: dict[str, str] | None
    start_ms: int | None
    end_ms: int | None
    misfire: MisfirePolicy
    catch_up_limit: int
    misfire_grace: float
    paused: bool
    next_fire_ms: int | None
    last_fire_ms: int | None
    last_tick_ms: int | None
    fires: int
    misfires: int
    job_ids: dict[str, str] = field(default_factory=dict)
    malformed: dict[str, str] = field(default_factory=dict)
    """Stored fields that are not what shardq writes (name -> raw value), read as unset; a
    definition that cannot be read at all shows here as ``definition`` (type ``?``)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def definition_sha(definition: str | bytes) -> str:
    """The sha1 the fire and resume scripts compare the stored definition with."""
    raw = definition.encode() if isinstance(definition, str) else definition
    return hashlib.sha1(raw).hexdigest()
