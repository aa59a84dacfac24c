"""Periodic schedules (shardq.schedules) against Redis (tick computation, DST and misfire
policies are in tests/unit/test_schedules_cron.py): the API with typed errors before any write,
and the dispatcher fleet firing every tick exactly once while dispatchers are SIGKILLed and
SIGSTOPped.

Ticks are counted by the tick jobs' ids (``sq-sched:<name>@<tick ms>``) in the ready streams:
the queue keeps acknowledged entries and no worker runs, so every enqueued tick is there once.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from datetime import timedelta

import pytest
from click.testing import CliRunner
from support.helpers import ready_job_ids, wait_for
from support.procs import Proc

from bench.fleet import lease_owners
from shardq.aio import AsyncClient
from shardq.cli import main as cli
from shardq.client import Client
from shardq.errors import InvalidPeriodicScheduleError, ScheduleNotFoundError
from shardq.store import keys

LEASE = 2.0


# The API against Redis -----------------------------------------------------------------------


def _schedule_keys_exist(client: Client, queue: str, partitions: int) -> list[str]:
    found = []
    for pk in keys.all_partition_keys(queue, partitions):
        for key in (pk.schedules, pk.schedule_next, pk.schedule_state):
            if client.redis.exists(key):
                found.append(key)
    return found


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cron": "61 * * * *"}, "cron expression"),
        ({"cron": "* * *"}, "5 fields"),
        ({"cron": "0 2 * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "0 2 * * *", "tz": "../etc/passwd"}, "IANA"),
        ({"every": 0.5}, "interval"),
        ({"every": float("nan")}, "interval"),
        ({}, "exactly one"),
        ({"cron": "* * * * *", "every": 5}, "exactly one"),
        ({"every": 5, "misfire": "sometimes"}, "misfire policy"),
        ({"every": 5, "catch_up_limit": 0}, "catch_up_limit"),
        ({"every": 5, "end": 1.0}, "no tick after now"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    cluster_client: Client, queue: str, kwargs: dict[str, object], match: str
) -> None:
    cluster_client.create_queue(queue, 4)
    with pytest.raises(InvalidPeriodicScheduleError, match=match):
        cluster_client.schedules.add(queue, "bad", "t", {"x": 1}, **kwargs)  # type: ignore[arg-type]
    assert _schedule_keys_exist(cluster_client, queue, 4) == []


def test_bad_name_and_payload_are_typed_errors(cluster_client: Client, queue: str) -> None:
    cluster_client.create_queue(queue, 4)
    with pytest.raises(InvalidPeriodicScheduleError, match="name"):
        cluster_client.schedules.add(queue, "has space", "t", every=5)
    with pytest.raises(InvalidPeriodicScheduleError, match="JSON"):
        cluster_client.schedules.add(queue, "ok", "t", {1, 2}, every=5)
    with pytest.raises(InvalidPeriodicScheduleError, match="job type"):
        cluster_client.schedules.add(queue, "ok", "bad type!", every=5)
    with pytest.raises(ScheduleNotFoundError):
        cluster_client.schedules.pause(queue, "nope")
    assert cluster_client.schedules.remove(queue, "nope") is False
    assert _schedule_keys_exist(cluster_client, queue, 4) == []


def test_add_update_list_pause_resume_remove(cluster_client: Client, queue: str) -> None:
    c = cluster_client
    c.create_queue(queue, 8)
    s = c.schedules.add(
        queue, "report", "build", {"k": 1}, cron="0 2 * * 1-5", tz="Europe/Berlin", max_attempts=3
    )
    assert s.partition == keys.partition_for("report", 8)
    assert (s.cron, s.tz, s.payload, s.max_attempts, s.paused) == (
        "0 2 * * 1-5",
        "Europe/Berlin",
        {"k": 1},
        3,
        False,
    )
    assert s.next_fire_ms is not None and (s.fires, s.misfires, s.last_fire_ms) == (0, 0, None)
    nxt = c.schedules.next(queue, "report", 3)
    assert [t.hour for t in nxt] == [2, 2, 2] and all(t.weekday() < 5 for t in nxt)
    assert int(nxt[0].timestamp() * 1000) == s.next_fire_ms
    c.schedules.add(queue, "tick", "t", every=60, headers={"a": "b"})
    updated = c.schedules.add(queue, "report", "build", {"k": 2}, cron="0 3 * * *", tz="UTC")
    assert (updated.payload, updated.cron, updated.tz) == ({"k": 2}, "0 3 * * *", "UTC")
    assert [x.name for x in c.schedules.list(queue)] == ["report", "tick"]
    paused = c.schedules.pause(queue, "report")
    assert paused.paused and paused.next_fire_ms is None
    kept = c.schedules.add(queue, "report", "build", {"k": 3}, cron="0 3 * * *")
    assert kept.paused, "an update keeps the schedule paused"
    resumed = c.schedules.resume(queue, "report")
    assert not resumed.paused and resumed.next_fire_ms is not None
    assert c.schedules.remove(queue, "report") is True
    with pytest.raises(ScheduleNotFoundError):
        c.schedules.get(queue, "report")
    assert [x.name for x in c.schedules.list(queue)] == ["tick"]


def test_async_client_has_the_same_methods(cluster_url: str, queue: str) -> None:
    async def main() -> None:
        client = await AsyncClient.from_url(cluster_url)
        try:
            await client.create_queue(queue, 4)
            s = await client.schedules.add(queue, "a", "t", {"x": 1}, every=30)
            assert s.every == 30.0
            assert [x.name for x in await client.schedules.list(queue)] == ["a"]
            assert (await client.schedules.pause(queue, "a")).paused
            assert not (await client.schedules.resume(queue, "a")).paused
            ticks = await client.schedules.next(queue, "a", 2)
            assert (ticks[1] - ticks[0]) == timedelta(seconds=30)
            assert (await client.schedules.get(queue, "a")).name == "a"
            assert await client.schedules.remove(queue, "a")
            with pytest.raises(InvalidPeriodicScheduleError):
                await client.schedules.add(queue, "b", "t", every=0.1)
        finally:
            await client.close()

    asyncio.run(main())


def test_cli_schedule_commands(cluster_client: Client, cluster_url: str, queue: str) -> None:
    cluster_client.create_queue(queue, 4)

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, ["schedule", *args, "--url", cluster_url, "-q", queue])
        return result.exit_code, result.output

    code, out = run(
        "add",
        "nightly",
        "report",
        "--cron",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--payload",
        '{"a": 1}',
        "--json",
    )
    assert code == 0, out
    added = json.loads(out)
    assert added["name"] == "nightly" and added["next_fire"].endswith("Z") and added["fires"] == 0
    assert run("add", "beat", "t", "--every", "5m")[0] == 0
    code, out = run("list", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["name"] for r in rows] == ["beat", "nightly"] and rows[0]["every"] == 300.0
    code, out = run("list")
    assert code == 0 and "nightly" in out and "30 2 * * *" in out and "every 5m" in out
    code, out = run("show", "nightly")
    assert code == 0 and "Europe/Berlin" in out and "misfires" in out
    code, out = run("next", "nightly", "-n", "2", "--json")
    assert code == 0 and all(t.startswith("20") and "T02:30:00+0" in t for t in json.loads(out))
    assert "paused" in run("pause", "nightly")[1]
    assert json.loads(run("show", "nightly", "--json")[1])["paused"] is True
    assert "resumed" in run("resume", "nightly")[1]
    code, out = run("remove", "nightly")
    assert code == 0 and "--yes" in out
    assert run("remove", "nightly", "--yes")[0] == 0
    code, out = run("show", "nightly")
    assert code == 1 and len(out.strip().splitlines()) == 1 and "nightly" in out
    code, out = run("add", "bad", "t", "--cron", "* * * * 9")
    assert code == 1 and len(out.strip().splitlines()) == 1, out
    code, out = run("add", "bad", "t", "--every", "1", "--tz", "Nowhere/Land", "--cron", "x")
    assert code != 0


# The dispatcher fires them -------------------------------------------------------------------


def start_dispatcher(url: str, queue: str, instance: str) -> Proc:
    return Proc.dispatcher(
        url,
        queue,
        "--lease-time",
        str(LEASE),
        "--renew-interval",
        "0.5",
        "--membership-timeout",
        str(LEASE),
        "--max-sleep",
        "0.5",
        env={"SHARDQ_INSTANCE": instance},
    )


def tick_jobs(client: Client, queue: str, partitions: int, name: str) -> dict[int, int]:
    """Tick ms -> how many ready entries the schedule's tick job has."""
    prefix = keys.schedule_job_id(name, 0)[:-1]
    return {
        int(job_id[len(prefix) :]): n
        for job_id, n in ready_job_ids(client.redis, queue, partitions).items()
        if job_id.startswith(prefix)
    }


def redis_now_ms(client: Client) -> int:
    seconds, micros = client.redis.time()  # type: ignore[misc]
    return int(seconds) * 1000 + int(micros) // 1000


def test_pause_resume_remove_take_effect_by_the_next_tick(
    cluster_client: Client, cluster_url: str, queue: str, procs: list[Proc]
) -> None:
    c, partitions = cluster_client, 4
    c.create_queue(queue, partitions, ack_retention=3600)
    procs.append(start_dispatcher(cluster_url, queue, "p0"))
    c.schedules.add(queue, "beat", "t", every=1)
    wait_for(lambda: len(tick_jobs(c, queue, partitions, "beat")) >= 2, 15, "no ticks fired")
    # A fired tick's job is found by id (it routes to the schedule's partition).
    first = min(tick_jobs(c, queue, partitions, "beat"))
    job = c.get(queue, keys.schedule_job_id("beat", first))
    assert job is not None and job.type == "t"
    misfires_before = c.schedules.pause(queue, "beat").misfires
    paused_at = redis_now_ms(c)
    time.sleep(2.5)
    fired = tick_jobs(c, queue, partitions, "beat")
    assert max(fired) <= paused_at, "a tick fired after pause returned"
    resumed = c.schedules.resume(queue, "beat")
    assert resumed.next_fire_ms is not None and resumed.next_fire_ms > paused_at + 2000
    wait_for(
        lambda: max(tick_jobs(c, queue, partitions, "beat")) >= resumed.next_fire_ms,  # type: ignore[operator]
        10,
        "no tick after resume",
    )
    info = c.schedules.get(queue, "beat")
    assert info.misfires == misfires_before, "ticks while paused are not misfires"
    assert info.fires == len(tick_jobs(c, queue, partitions, "beat"))
    assert c.schedules.remove(queue, "beat")
    removed_at = redis_now_ms(c)
    time.sleep(2.0)
    assert max(tick_jobs(c, queue, partitions, "beat")) <= removed_at


def test_run_once_fires_the_latest_missed_tick_and_counts_misfires(
    cluster_client: Client, cluster_url: str, queue: str, procs: list[Proc]
) -> None:
    c, partitions = cluster_client, 2
    c.create_queue(queue, partitions, ack_retention=3600)
    c.schedules.add(queue, "m", "t", every=1)  # run_once is the default
    time.sleep(4.0)  # no dispatcher: ticks are missed
    procs.append(start_dispatcher(cluster_url, queue, "m0"))
    wait_for(lambda: c.schedules.get(queue, "m").fires >= 1, 15, "no fire")
    info = c.schedules.get(queue, "m")
    fired = sorted(tick_jobs(c, queue, partitions, "m"))
    assert info.misfires >= 2, info
    assert fired[0] >= info.last_tick_ms - 1000 * len(fired)  # type: ignore[operator]
    assert len(fired) == info.fires


#: How late the dispatcher may fire a tick before a pause that lands meanwhile holds it.
PAUSE_RACE_MS = 1000


def _fleet_test(c: Client, url: str, queue: str, procs: list[Proc], window: float) -> None:
    """One schedule every second while the dispatcher holding it is SIGKILLed, and then the
    one that took over is SIGSTOPped (and later SIGCONTed): every tick of the window ran
    exactly once (catch_up covers the handover gaps), and none was missed."""
    partitions = 8
    c.create_queue(queue, partitions, ack_retention=3600)
    names = {f"d{i}": start_dispatcher(url, queue, f"d{i}") for i in range(3)}
    procs.extend(names.values())
    s = c.schedules.add(queue, "every-second", "t", every=1, misfire="catch_up")
    p = s.partition
    start = time.monotonic()

    def holder() -> Proc | None:
        owner = lease_owners(c.redis, queue, partitions)[p]
        if owner is None:
            return None
        instance = owner.split(":", 1)[1].split("#", 1)[0]
        return names.get(instance)

    def held_by_live() -> Proc | None:
        h = holder()
        return h if h is not None and h.alive() else None

    wait_for(lambda: held_by_live() is not None, 15, "nobody took the schedule's partition")
    time.sleep(window * 0.25)
    victim = held_by_live()
    assert victim is not None
    victim.kill9()
    wait_for(lambda: held_by_live() not in (None, victim), 6 * LEASE, "no takeover after SIGKILL")
    time.sleep(window * 0.2)
    stopped = held_by_live()
    assert stopped is not None
    stopped.signal(signal.SIGSTOP)
    try:
        wait_for(
            lambda: held_by_live() not in (None, stopped), 6 * LEASE, "no takeover after SIGSTOP"
        )
        time.sleep(window * 0.2)
    finally:
        stopped.signal(signal.SIGCONT)
    remaining = window - (time.monotonic() - start)
    time.sleep(max(remaining, 1.0))
    paused_at = redis_now_ms(c)
    c.schedules.pause(queue, "every-second")
    end = redis_now_ms(c)
    # Every tick due up to the pause ran, but for one due in its last moments: the dispatcher
    # fires a tick a little after it is due (more on a loaded machine), and a pause that lands
    # in between holds it, as a pause should.  It may have run; nothing due later may have.
    expected = list(range(s.next_fire_ms or 0, paused_at - PAUSE_RACE_MS + 1, 1000))
    allowed = set(range(s.next_fire_ms or 0, end + 1, 1000))

    def missing() -> list[int]:
        return sorted(set(expected) - set(tick_jobs(c, queue, partitions, "every-second")))

    # a fire sent just before the pause lands: wait for it rather than a fixed second
    wait_for(
        lambda: not missing(),
        10,
        lambda: f"{len(missing())} ticks never ran, e.g. {missing()[:5]}",
        interval=0.2,
    )
    time.sleep(0.5)  # and a tick enqueued twice would show up now
    ticks = tick_jobs(c, queue, partitions, "every-second")
    twice = {t: n for t, n in ticks.items() if n > 1}
    assert not twice, f"ticks enqueued more than once: {twice}"
    assert set(expected) <= set(ticks) <= allowed, (sorted(ticks), expected, sorted(allowed))
    info = c.schedules.get(queue, "every-second")
    assert info.fires == len(ticks) and info.misfires == 0, info
    for proc in procs:
        if proc.alive():
            proc.check_alive()


def test_fleet_fires_every_tick_once_through_sigkill_and_sigstop(
    cluster_client: Client, cluster_url: str, queue: str, procs: list[Proc]
) -> None:
    _fleet_test(cluster_client, cluster_url, queue, procs, window=20.0)


@pytest.mark.slow
def test_fleet_fires_every_tick_once_for_a_minute(
    cluster_client: Client, cluster_url: str, queue: str, procs: list[Proc]
) -> None:
    _fleet_test(cluster_client, cluster_url, queue, procs, window=60.0)
