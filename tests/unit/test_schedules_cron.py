"""Tick computation of periodic schedules (shardq.schedules), no Redis: daylight-saving gaps and
repeats, seconds fields and intervals, misfire policies, start and end bounds, tick job ids.
The API against Redis and the dispatcher fleet firing ticks: tests/integration/test_schedules.py.
"""

from __future__ import annotations

import binascii
import dataclasses
import itertools
from datetime import datetime
from zoneinfo import ZoneInfo

from shardq.schedules import Definition, firing, make_definition
from shardq.store import keys

BERLIN = ZoneInfo("Europe/Berlin")


def _ms(*args: int, tz: ZoneInfo = BERLIN, fold: int = 0) -> int:
    return round(datetime(*args, tzinfo=tz, fold=fold).timestamp() * 1000)  # type: ignore[misc]


def _local(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, BERLIN).isoformat()


def cron(expr: str, **kw: object) -> Definition:
    return make_definition("s", "t", None, cron=expr, tz="Europe/Berlin", **kw)  # type: ignore[arg-type]


def test_spring_gap_runs_a_skipped_daily_time_once_at_the_end_of_the_gap() -> None:
    d = cron("30 2 * * *")
    ticks = d.upcoming(_ms(2026, 3, 28, 12, 0), 3)
    assert [_local(t) for t in ticks] == [
        "2026-03-29T03:00:00+02:00",  # 02:30 does not exist that night
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]


def test_spring_gap_hourly_has_no_tick_in_the_gap_and_none_twice() -> None:
    d = cron("0 * * * *")
    ticks = d.upcoming(_ms(2026, 3, 29, 0, 30), 4)
    assert [_local(t) for t in ticks] == [
        "2026-03-29T01:00:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T04:00:00+02:00",
        "2026-03-29T05:00:00+02:00",
    ]
    assert [b - a for a, b in itertools.pairwise(ticks)] == [3600_000] * 3


def test_autumn_repeat_runs_a_daily_time_once() -> None:
    d = cron("30 2 * * *")
    ticks = d.upcoming(_ms(2026, 10, 24, 12, 0), 3)
    assert [_local(t) for t in ticks] == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
        "2026-10-27T02:30:00+01:00",
    ]


def test_autumn_repeat_runs_frequent_ticks_in_both_passes() -> None:
    d = cron("*/30 * * * *")
    ticks = d.upcoming(_ms(2026, 10, 25, 1, 50), 5)
    assert [_local(t) for t in ticks] == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T02:30:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]
    assert len(set(ticks)) == 5 and ticks == sorted(ticks)


def test_firing_across_the_autumn_repeat_fires_each_tick_once() -> None:
    """A dispatcher down over the whole repeated hour catches up each real tick exactly once."""
    d = cron("*/30 * * * *", misfire="catch_up", catch_up_limit=10)
    first = _ms(2026, 10, 25, 2, 0)
    now = _ms(2026, 10, 25, 3, 10)
    p = firing(d, first, now)
    assert [_local(t) for t in p.ticks] == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T02:30:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]
    assert p.misfires == 0
    assert _local(p.next_ms) == "2026-10-25T03:30:00+01:00"


def test_seconds_field_and_interval() -> None:
    d = cron("*/15 * * * * *")
    base = _ms(2026, 1, 1, 0, 0)
    assert [t - base for t in d.upcoming(base, 3)] == [15_000, 30_000, 45_000]
    every = dataclasses.replace(make_definition("s", "t", every=2.5), anchor_ms=1000)
    assert every.upcoming(1000, 3) == [3500, 6000, 8500]


def test_misfire_policies() -> None:
    now = 10_500  # ticks 1000 .. 10000 are due (10 of them), anchor 0

    def with_policy(policy: str, **kw: int) -> Definition:
        return make_definition("s", "t", every=1, misfire=policy, **kw)  # type: ignore[arg-type]

    run_once = firing(with_policy("run_once"), 1000, now)
    assert (run_once.ticks, run_once.misfires, run_once.next_ms) == ([10_000], 9, 11_000)
    catch_up = firing(with_policy("catch_up", catch_up_limit=4), 1000, now)
    assert (catch_up.ticks, catch_up.misfires) == ([7000, 8000, 9000, 10_000], 6)
    skip = firing(make_definition("s", "t", every=1, misfire="skip", misfire_grace=0.2), 1000, now)
    assert (skip.ticks, skip.misfires, skip.next_ms) == ([], 10, 11_000)
    on_time = firing(make_definition("s", "t", every=1, misfire="skip"), 10_000, now)
    assert (on_time.ticks, on_time.misfires) == ([10_000], 0)


def test_start_and_end_bound_the_ticks() -> None:
    d = make_definition("s", "t", every=1, start=10.0, end=12.5)
    assert d.upcoming(0, 10) == [10_000, 11_000, 12_000]
    assert d.next_after(12_000) is None
    assert firing(d, 12_000, 20_000).next_ms == -1


def test_tick_job_ids_route_to_the_schedules_partition() -> None:
    for partitions in (1, 7, 64):
        for name in ("nightly", "a.b-c_1"):
            p = keys.partition_for(name, partitions)
            assert (
                keys.partition_for(keys.schedule_job_id(name, 1_700_000_000_000), partitions) == p
            )
    # Other ids keep their routing (their own CRC32), including look-alikes that are not ticks.
    for job_id in ("job-1", "sq-sched:x@", "sq-sched:x@12a", "sq-sched:a b@1", "x@1"):
        assert keys.partition_for(job_id, 64) == binascii.crc32(job_id.encode()) % 64


def test_tick_time_is_the_redis_clock_not_the_callers() -> None:
    """Ticks come from calendar arithmetic on the Redis time a read returned: the firing for a
    given Redis time is the same whatever this machine's clock says."""
    d = make_definition("s", "t", cron="0 * * * *")
    now = _ms(2026, 6, 1, 12, 30, tz=ZoneInfo("UTC"))
    first = _ms(2026, 6, 1, 12, 0, tz=ZoneInfo("UTC"))
    assert firing(d, first, now).ticks == [first]
    assert firing(d, first, now).next_ms == first + 3600_000
