"""The code of docs/guides/periodic.md, runnable against a cluster (SHARDQ_REDIS_URL)."""

import time

from fleet import running


def main() -> None:
    # --8<-- [start:add]
    from shardq import Client, RedisSettings

    client = Client(RedisSettings.from_env())
    client.create_queue("digests", partitions=16)

    # 07:00 on weekdays, Berlin time (DST handled as cron does); 6 fields: seconds first.
    client.schedules.add(
        "digests", "daily-digest", "send_digest", {"kind": "daily"},
        cron="0 7 * * 1-5", tz="Europe/Berlin", max_attempts=3,
    )  # fmt: skip
    # Every 30 s; ticks missed while no dispatcher ran are skipped.
    client.schedules.add("digests", "heartbeat", "ping", every=30, misfire="skip")
    # --8<-- [end:add]

    # --8<-- [start:manage]
    print(client.schedules.next("digests", "daily-digest", 3))  # the next 3 tick times
    info = client.schedules.get("digests", "daily-digest")
    print(info.next_fire_ms, info.last_fire_ms, info.fires, info.misfires, info.paused)
    client.schedules.pause("digests", "daily-digest")
    client.schedules.resume("digests", "daily-digest")  # from the next tick after now
    for schedule in client.schedules.list("digests"):
        print(schedule.name, schedule.cron or f"every {schedule.every} s")
    client.schedules.remove("digests", "heartbeat")
    # --8<-- [end:manage]
    assert not info.paused

    # A schedule fires once per tick, with the id sq-sched:<name>@<tick ms>.
    ticks: list[str] = []
    client.schedules.add("digests", "fast", "tick", every=1)
    with running("digests", {"tick": lambda job: ticks.append(job.id)}):
        deadline = time.monotonic() + 30
        while not ticks:
            assert time.monotonic() < deadline, "no tick fired"
            time.sleep(0.1)
    client.schedules.remove("digests", "fast")
    assert ticks[0].startswith("sq-sched:fast@"), ticks
    client.close()


if __name__ == "__main__":
    main()
