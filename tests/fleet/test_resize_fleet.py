"""Resizing a queue under a fleet of processes of their own, killed with SIGKILL during the
resize at random moments over several rounds (a grow, then a shrink), counting every start of
every job: none lost, and a job run again only where the guarantees allow it
(tests/support/reruns.py: a killed or paused worker's delivery taken over, or a failed run
retried); any other second start fails the test with the job's every start.  The resizing
process killed with SIGKILL: tests/integration/test_resize.py; a primary killed during a
resize: tests/fleet/test_failover.py."""

from __future__ import annotations

import random
import threading
import time

from support.helpers import queue_settled, scaled, start_log, wait_for
from support.procs import Proc
from support.reruns import classify, worker_report

from shardq import Client, JobRequest
from shardq.admin.resize import Resizer


def _fleet(url: str, queue: str, record: str, procs: list[Proc], role: str) -> Proc:
    if role == "dispatcher":
        p = Proc.helper("dispatcher", url, queue, "100", "2.0", "0.5")
    else:
        # A worker paused past these by the loaded box may lose a delivery (allowed, and
        # reported); scaled, so that stays rare.
        timeout = str(scaled(2.0))
        env = {"SHARDQ_TEST_SETTINGS": f'{{"membership_timeout": {timeout}}}'}
        p = Proc.helper("worker", url, queue, record, "0.01", timeout, env=env)
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
    rng = random.Random(random.getrandbits(64))  # seeded: SHARDQ_TEST_SEED repeats it
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
    worker_kills: dict[int, int] = {}  # pid -> wall ms when it was dead
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
            doomed = fleet[role][victim]
            doomed.kill9()
            if role == "worker":
                worker_kills[doomed.pid] = int(time.time() * 1000)
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
    # Nothing stored, due or pending: no job can start again, so the starts are all there.
    layout = client.layout(queue)
    wait_for(
        lambda: queue_settled(r, queue, layout.partitions, layout.generation),
        60,
        "jobs left in the queue after every job ran",
    )
    assert not set(started_ids()) - set(ids), "jobs ran that no producer enqueued"
    reruns = classify(
        start_log(r, record),
        worker_kills,
        {p.pid: worker_report(p.log()) for p in procs},
    )
    unexplained = list(reruns.unexplained.items())
    assert not unexplained, (
        f"{len(unexplained)} jobs ran again where no worker was killed or paused and no run "
        f"failed (worker kills, pid -> ms: {worker_kills}); every start of each: {unexplained[:5]}"
    )
    assert killed["dispatcher"] >= 2 and killed["worker"] >= 2
    print(f"fleet kills during resizes: {killed}, {len(ids)} jobs, ran again: {reruns.counts()}")
