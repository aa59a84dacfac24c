"""Resizing a queue under a fleet of processes of their own, killed with SIGKILL during the
resize at random moments over several rounds (a grow, then a shrink), counting every job: none
lost, and a job run twice only where a killed worker's delivery was reclaimed.  The resizing
process killed with SIGKILL: tests/integration/test_resize.py; a primary killed during a
resize: tests/fleet/test_failover.py."""

from __future__ import annotations

import random
import threading
import time

from support.helpers import wait_for
from support.procs import Proc

from shardq import Client, JobRequest
from shardq.admin.resize import Resizer


def _fleet(url: str, queue: str, record: str, procs: list[Proc], role: str) -> Proc:
    if role == "dispatcher":
        p = Proc.helper("dispatcher", url, queue, "100", "2.0", "0.5")
    else:
        p = Proc.helper("worker", url, queue, record, "0.01", "2.0")
    procs.append(p)
    return p


def _drive(admin: Client, queue: str, to: int, outcome: list[object]) -> None:
    outcome.append(Resizer(admin, queue, batch=50).run(to))


def test_dispatchers_and_workers_killed_during_resizes_lose_nothing(
    cluster_url: str, cluster_client: Client, queue: str, procs: list[Proc]
) -> None:
    client = cluster_client
    client.create_queue(queue, partitions=8)
    record = f"rec:{queue}"
    rng = random.Random()
    fleet = {
        "dispatcher": [_fleet(cluster_url, queue, record, procs, "dispatcher") for _ in range(2)],
        "worker": [_fleet(cluster_url, queue, record, procs, "worker") for _ in range(2)],
    }
    ids: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    errors: list[str] = []

    def produce() -> None:
        try:
            with Client.from_url(cluster_url) as c:
                i = 0
                while not stop.is_set():
                    job_id = c.enqueue(queue, "t", i, delay=rng.uniform(0.0, 1.0))
                    with lock:
                        ids.append(job_id)
                    i += 1
                    time.sleep(0.004)
        except Exception as exc:  # a producer refused during a resize is a failure
            errors.append(f"{type(exc).__name__}: {exc}")

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    killed: dict[str, int] = {"dispatcher": 0, "worker": 0}
    for to in (16, 8):
        # Waiting jobs due during and after this round's resize: the resize moves them.
        seeded = client.enqueue_many(
            queue, [JobRequest("t", i, delay=rng.uniform(1.0, 12.0)) for i in range(1500)]
        )
        with lock:
            ids.extend(r.job_id for r in seeded)
        admin = Client.from_url(cluster_url)
        outcome: list[object] = []
        driver = threading.Thread(target=_drive, args=(admin, queue, to, outcome), daemon=True)
        started = time.monotonic()
        driver.start()
        # One dispatcher and one worker each killed at a random moment of the resize (it
        # takes ~4-8 s: the fleet taking up the new partitions, the moves, the settle).
        kills = sorted(
            (rng.uniform(0.5, 5.0), role)
            for role in ("dispatcher", "worker", rng.choice(["dispatcher", "worker"]))
        )
        for at, role in kills:
            time.sleep(max(0.0, started + at - time.monotonic()))
            victim = rng.randrange(len(fleet[role]))
            fleet[role][victim].kill9()
            killed[role] += 1
            fleet[role][victim] = _fleet(cluster_url, queue, record, procs, role)
        driver.join(120)
        admin.close()
        assert outcome and getattr(outcome[0], "phase", None) == "done", outcome
        assert client.layout(queue).partitions == to
    stop.set()
    producer.join(30)
    assert not errors, errors
    r = client.redis

    def started_ids() -> dict[str, int]:
        raw = r.hgetall(f"{record}:start_count")  # type: ignore[union-attr]
        return {k.decode(): int(v) for k, v in raw.items()}

    wait_for(
        lambda: set(ids) <= set(started_ids()),
        90,
        lambda: f"{len(set(ids) - set(started_ids()))} of {len(ids)} jobs never ran",
    )
    time.sleep(3.0)  # a reclaimed delivery runs again after the visibility timeout: let it
    counts = started_ids()
    starts = {k.decode(): v.decode() for k, v in r.hgetall(f"{record}:starts").items()}  # type: ignore[union-attr]
    assert not set(counts) - set(ids), "jobs ran that no producer enqueued"
    twice = {j: n for j, n in counts.items() if n > 1}
    # "attempt:deliveries:pid" of the last start: a job run again after a crash was delivered
    # again (deliveries > 1); one stored twice by the resize would run twice as a first delivery.
    not_reclaimed = {j: starts[j] for j in twice if int(starts[j].split(":")[1]) <= 1}
    assert not not_reclaimed, f"ran twice without a crash: {list(not_reclaimed.items())[:5]}"
    assert killed["dispatcher"] >= 2 and killed["worker"] >= 2
    print(f"fleet kills during resizes: {killed}, {len(ids)} jobs, {len(twice)} ran again")
