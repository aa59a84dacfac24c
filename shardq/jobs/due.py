"""When a job is due, as the enqueue and reschedule scripts take it (:class:`Schedule`), from
the ``run_at`` or ``delay`` a caller gives (:func:`make_schedule`)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from shardq.config import ProducerSettings
from shardq.errors import InvalidScheduleError, shown
from shardq.jobs.options import MAX_RUN_AT


class Schedule(NamedTuple):
    """When a job is due, as the scripts take it: absolute ms ('at') or a delay in ms ('in').

    A named tuple, not a frozen dataclass: it is built for every job of an ``enqueue_many``
    and a tuple is several times cheaper to build."""

    mode: Literal["at", "in", "keep", "tat", "tin"]
    ms: int


def make_schedule(
    run_at: datetime | float | None, delay: timedelta | float | None, settings: ProducerSettings
) -> Schedule:
    """Validate ``run_at``/``delay``.  A delay is applied on the Redis clock, not this one."""
    # The common case first, with the same checks (bool is not int here: type() is exact).
    if (
        run_at is None
        and type(delay) in (int, float)
        and -settings.past_tolerance <= delay <= settings.max_horizon  # type: ignore[operator]
    ):
        return Schedule("in", max(0, round(delay * 1000)))  # type: ignore[operator, arg-type]
    if run_at is not None and delay is not None:
        raise InvalidScheduleError("pass run_at or delay, not both")
    if run_at is None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if seconds is None:
            return Schedule("in", 0)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise InvalidScheduleError(f"delay must be seconds or a timedelta, got {delay!r:.40}")
        # Comparisons, not math.isfinite: they refuse nan and inf, and huge ints (10**400)
        # without an OverflowError.
        if seconds != seconds or seconds in (math.inf, -math.inf):
            raise InvalidScheduleError(f"delay must be a finite number of seconds, got {seconds}")
        if seconds < -settings.past_tolerance:
            raise InvalidScheduleError(
                f"delay {shown(seconds)} s is further in the past than past_tolerance "
                f"({settings.past_tolerance} s): use delay=0 to run now"
            )
        if seconds > settings.max_horizon:
            raise InvalidScheduleError(
                f"delay {shown(seconds)} s is beyond max_horizon "
                f"({settings.max_horizon} s): schedule closer to now or raise max_horizon"
            )
        return Schedule("in", max(0, round(seconds * 1000)))
    if isinstance(run_at, datetime):
        if run_at.tzinfo is None:
            raise InvalidScheduleError(
                "run_at is a naive datetime: pass a timezone-aware one, e.g. "
                "datetime.now(timezone.utc) + timedelta(minutes=5)"
            )
        epoch: float = run_at.timestamp()
    elif isinstance(run_at, int | float) and not isinstance(run_at, bool):
        epoch = run_at
    else:
        raise InvalidScheduleError(
            f"run_at must be a datetime or epoch seconds, got {run_at!r:.40}"
        )
    if epoch != epoch or epoch in (math.inf, -math.inf):
        raise InvalidScheduleError(f"run_at must be a finite time, got {epoch}")
    if not 0 < epoch <= MAX_RUN_AT:
        raise InvalidScheduleError(
            f"run_at {shown(epoch)} is not a time after 1970 and before the year 10000: "
            f"pass epoch seconds 0..{int(MAX_RUN_AT)} or a datetime"
        )
    return Schedule("at", round(epoch * 1000))
