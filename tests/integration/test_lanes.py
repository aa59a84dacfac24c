"""Lanes (lua/includes/lanes.lua): priorities and fair sharing between tenants inside each
partition, through the real scripts on the cluster; bad input; the worker's view; the CLI."""

from __future__ import annotations

import dataclasses
import json
import random
import signal
import time
from collections import Counter

import pytest
from click.testing import CliRunner
from support.helpers import (
    FAST_DISPATCHER,
    FAST_WORKER,
    Runner,
    queue_settled,
    start_log,
    text,
    wait_for,
)
from support.procs import Proc
from support.reruns import classify, worker_report

from shardq import JobRequest
from shardq.cli import main as cli
from shardq.client import Client
from shardq.errors import InvalidJobError, JobNotScheduledError, LanesOffError
from shardq.jobs import Job
from shardq.store import delivery, inspection, keys, meta


def _lanes_queue(client: Client, queue: str, partitions: int = 1) -> None:
    client.create_queue(queue, partitions, lanes=True)
    assert client.lanes(queue)


def _fetch_ids(client: Client, queue: str, n: int, consumer: str = "c") -> list[str]:
    """Job ids of the next n deliveries of partition 0, in delivery order."""
    pk = keys.partition_keys(queue, 0, 1)
    batch = client.transport.run(delivery.fetch(pk, consumer, n))
    return [text(j.raw_id) for j in batch.jobs]


def _enqueue(client: Client, queue: str, prefix: str, n: int, **kw: object) -> list[str]:
    reqs = [JobRequest("t", i, job_id=f"{prefix}{i:04d}", **kw) for i in range(n)]  # type: ignore[arg-type]
    return [r.job_id for r in client.enqueue_many(queue, reqs)]


def test_bad_priority_tenant_and_lanes_off_are_refused_before_writing(
    client: Client, queue: str
) -> None:
    client.create_queue(queue, 2)
    pks = keys.all_partition_keys(queue, 2)
    with pytest.raises(InvalidJobError, match="'high', 'default' or 'low'"):
        client.enqueue(queue, "t", 1, priority="urgent")  # type: ignore[arg-type]
    with pytest.raises(InvalidJobError, match="tenant"):
        client.enqueue(queue, "t", 1, tenant="has space")
    with pytest.raises(InvalidJobError, match="tenant"):
        client.enqueue(queue, "t", 1, tenant="x" * 65)
    with pytest.raises(LanesOffError, match="shardq queue lanes"):
        client.enqueue(queue, "t", 1, priority="high")
    with pytest.raises(LanesOffError):
        client.enqueue_many(queue, [JobRequest("t", 1), JobRequest("t", 2, tenant="a")])
    assert sum(client.redis.hlen(pk.jobs) for pk in pks) == 0
    # The default level without a tenant needs no lanes.
    client.enqueue(queue, "t", 1, priority="default")
    job = client.enqueue(queue, "t", 1, delay=60)
    with pytest.raises(InvalidJobError, match="'high', 'default' or 'low'"):
        client.reschedule(queue, job, priority="top")  # type: ignore[arg-type]
    with pytest.raises(InvalidJobError, match="run_at, delay or priority"):
        client.reschedule(queue, job)
    # A new level on a queue without lanes would be ignored: refused, the job untouched.
    before = client.redis.hget(pks[keys.partition_for(job, 2)].jobs, job)
    with pytest.raises(LanesOffError):
        client.reschedule(queue, job, priority="low")
    assert client.redis.hget(pks[keys.partition_for(job, 2)].jobs, job) == before
    client.reschedule(queue, job, priority="default")


def test_a_producer_learns_that_lanes_were_turned_off(
    url: str, client: Client, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process turns lanes off: forget() or LANES_RECHECK later, this producer's
    priorities are refused instead of silently delivered in due order."""
    _lanes_queue(client, queue)
    client.enqueue(queue, "t", 1, priority="high")  # seen on: cached
    with Client(url) as operator:
        operator.set_lanes(queue, False)
    client.enqueue(queue, "t", 2, priority="high")  # still trusted within LANES_RECHECK
    client.forget(queue)
    with pytest.raises(LanesOffError):
        client.enqueue(queue, "t", 3, priority="high")
    with Client(url) as operator:
        operator.set_lanes(queue, True)
    monkeypatch.setattr(meta, "LANES_RECHECK", 0.05)
    client.enqueue(queue, "t", 4, tenant="a")
    with Client(url) as operator:
        operator.set_lanes(queue, False)
    time.sleep(0.1)
    with pytest.raises(LanesOffError):
        client.enqueue(queue, "t", 5, tenant="a")


def test_levels_share_deliveries_6_3_1_and_a_high_job_jumps_the_backlog(
    client: Client, queue: str
) -> None:
    _lanes_queue(client, queue)
    _enqueue(client, queue, "n", 300)
    assert _fetch_ids(client, queue, 10) == [f"n{i:04d}" for i in range(10)]
    # A high job enqueued now is among the next two, ahead of 290 waiting default jobs.
    [late] = _enqueue(client, queue, "H", 1, priority="high")
    assert late in _fetch_ids(client, queue, 2)
    _enqueue(client, queue, "l", 300, priority="low")
    _enqueue(client, queue, "h", 300, priority="high")
    first = _fetch_ids(client, queue, 100)
    shares = Counter(i[0] for i in first)
    # Start-time fair queueing with costs 10/20/60: 6:3:1 while all three have a backlog.
    assert shares == {"h": 60, "n": 30, "l": 10}, shares
    # Within a level, due order (here: enqueue order).
    n_first = int(next(i for i in first if i[0] == "n")[1:])
    assert [i for i in first if i[0] == "n"] == [f"n{i:04d}" for i in range(n_first, n_first + 30)]
    # Lane jobs count as ready (undelivered) in the partition's stats.
    pk = keys.partition_keys(queue, 0, 1)
    snap = client.transport.run(inspection.partition_stats(pk, "n"))
    assert snap.ready == 901 - 112 and snap.lanes
    # Nothing of the ready stream is undelivered: the lane feeds it on demand.
    assert client.redis.xlen(pk.ready) == 112


def test_tenants_take_turns_and_a_late_tenant_is_not_behind_a_burst(
    client: Client, queue: str
) -> None:
    _lanes_queue(client, queue)
    _enqueue(client, queue, "a", 400, tenant="A")
    _enqueue(client, queue, "b", 5, tenant="B")
    first = _fetch_ids(client, queue, 10)
    assert Counter(i[0] for i in first) == {"a": 5, "b": 5}
    _fetch_ids(client, queue, 100)  # A alone for a while: V moves on
    _enqueue(client, queue, "c", 3, tenant="C")
    nxt = _fetch_ids(client, queue, 6)
    assert Counter(i[0] for i in nxt) == {"a": 3, "c": 3}, nxt
    # Flows with nothing left lose their virtual-time field; only A's and V remain.
    pk = keys.partition_keys(queue, 0, 1)
    assert set(map(text, client.redis.hkeys(pk.vtime))) == {"V", "nA"}
    rest = _fetch_ids(client, queue, 1000)
    assert len(rest) == 400 - 5 - 100 - 3
    assert set(map(text, client.redis.hkeys(pk.vtime))) == {"V"}
    assert client.redis.zcard(pk.lane) == 0


def test_promoted_jobs_keep_their_level_and_reschedule_changes_it(
    url: str, client: Client, queue: str
) -> None:
    _lanes_queue(client, queue, 4)
    ran: list[Job] = []
    scheduled = client.enqueue(queue, "t", "x", delay=60, priority="low", tenant="acme")
    info = client.get(queue, scheduled)
    assert info is not None and (info.priority, info.tenant) == ("low", "acme")
    due = info.due_ms
    assert client.reschedule(queue, scheduled, priority="high") == due
    info = client.get(queue, scheduled)
    assert info is not None and (info.priority, info.tenant, info.due_ms) == ("high", "acme", due)
    assert client.reschedule(queue, scheduled, delay=0.2, priority="default") < due
    # Backlog of default jobs and a few high ones, all in the due set, promoted together.
    at = time.time() + 1.5  # one due time for all: one promote call per partition moves them
    reqs = [JobRequest("t", i, run_at=at) for i in range(400)]
    reqs += [JobRequest("t", i, run_at=at, priority="high", tenant="vip") for i in range(8)]
    client.enqueue_many(queue, reqs)

    def handler(job: Job) -> None:
        ran.append(job)

    one_at_a_time = dataclasses.replace(FAST_WORKER, concurrency=1)
    one_promote = dataclasses.replace(FAST_DISPATCHER, batch=1000)
    with Runner(
        url, queue, {"t": handler}, worker_settings=one_at_a_time, dispatcher_settings=one_promote
    ):
        wait_for(lambda: len(ran) == 409, 30, "not every job ran")
    assert sum(j.priority == "high" for j in ran) == 8
    assert all(j.tenant == "vip" for j in ran if j.priority == "high")
    # Each partition delivered its high jobs ahead of its default backlog promoted with them,
    # at 6:3 (the k-th high job after at most k // 2 default ones).
    for p in range(4):
        mine = [j.priority for j in ran if j.partition == p and j.id != scheduled]
        highs = mine.count("high")
        assert "high" not in mine[highs + highs // 2 :], (p, mine[:20])
    moved = next(j for j in ran if j.id == scheduled)
    assert (moved.priority, moved.tenant) == ("default", "acme")


def test_a_laned_job_is_due_and_cannot_be_rescheduled_and_lanes_off_still_delivers(
    client: Client, queue: str
) -> None:
    _lanes_queue(client, queue)
    [job] = _enqueue(client, queue, "j", 1, priority="high")
    with pytest.raises(JobNotScheduledError):
        client.reschedule(queue, job, priority="low")
    _enqueue(client, queue, "k", 3)
    assert client.set_lanes(queue, False) == 1
    assert not client.lanes(queue)
    with pytest.raises(LanesOffError):
        client.enqueue(queue, "t", 1, tenant="x")
    _enqueue(client, queue, "m", 2)  # straight to the stream again
    got = _fetch_ids(client, queue, 10)
    # The stream first (jobs appended directly go first), then what was left in the lane.
    assert got == ["m0000", "m0001", "j0000", "k0000", "k0001", "k0002"]
    # Drained, but only the operator writes the flag: the worker leaves it ('2': fetch looks
    # whether the lane exists), and turning lanes off again drops it, so the partition's calls
    # no longer touch the lane keys at all.
    pk = keys.partition_keys(queue, 0, 1)
    assert client.redis.hget(pk.ctl, "lanes") == b"2" and not client.redis.exists(pk.lane)
    assert _fetch_ids(client, queue, 10) == []
    assert client.redis.hget(pk.ctl, "lanes") == b"2"
    assert client.set_lanes(queue, False) == 0  # no partition changed state (all were off)
    assert client.redis.hget(pk.ctl, "lanes") == b"0"
    # Lanes turned off with nothing in the lane are off at once.
    assert client.set_lanes(queue, True) == 1
    assert client.set_lanes(queue, False) == 1
    assert client.redis.hget(pk.ctl, "lanes") == b"0"


def test_cancelled_lane_jobs_are_dropped_and_async_client_agrees(
    url: str, client: Client, queue: str
) -> None:
    import asyncio

    from shardq.aio import AsyncClient

    _lanes_queue(client, queue)
    ids = _enqueue(client, queue, "x", 4, tenant="t1")
    assert client.cancel(queue, ids[1])
    assert _fetch_ids(client, queue, 10) == [ids[0], ids[2], ids[3]]

    async def go() -> tuple[bool, str | None]:
        async with await AsyncClient.from_url(url) as c:
            job = await c.enqueue(queue, "t", 1, priority="low", tenant="t2")
            info = await c.get(queue, job)
            assert info is not None
            return await c.lanes(queue), info.tenant

    assert asyncio.run(go()) == (True, "t2")


def test_cli_turns_lanes_on_and_enqueues_and_shows_priority_and_tenant(
    url: str, client: Client, queue: str
) -> None:
    runner = CliRunner()
    client.create_queue(queue, 2)
    base = ["--url", url]
    r = runner.invoke(cli, [*base, "job", "enqueue", "-q", queue, "t", "--priority", "high"])
    assert r.exit_code == 1 and "lanes off" in r.output, r.output
    r = runner.invoke(cli, [*base, "queue", "lanes", "-q", queue, "--on"])
    assert r.exit_code == 0 and "2 of 2" in r.output, r.output
    r = runner.invoke(
        cli,
        [
            *base,
            "job",
            "enqueue",
            "-q",
            queue,
            "t",
            "--priority",
            "low",
            "--tenant",
            "acme",
            "--delay",
            "60",
        ],
    )
    assert r.exit_code == 0, r.output
    job = r.output.split()[0]
    r = runner.invoke(cli, [*base, "job", "reschedule", "-q", queue, job, "--priority", "high"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, [*base, "job", "get", "-q", queue, job])
    assert r.exit_code == 0 and "high" in r.output and "acme" in r.output, r.output
    r = runner.invoke(cli, [*base, "queue", "info", "-q", queue])
    assert r.exit_code == 0 and "lanes on in 2 of 2 partitions" in r.output, r.output
    r = runner.invoke(cli, [*base, "queue", "lanes", "-q", queue])
    assert r.exit_code == 0 and "lanes on" in r.output, r.output
    r = runner.invoke(cli, [*base, "queue", "stats", "-q", queue, "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)["queue"]
    assert summary["lanes_partitions"] == 2 and "lanes" not in summary["counters"], summary
    r = runner.invoke(cli, [*base, "queue", "lanes", "-q", queue, "--off"])
    assert r.exit_code == 0, r.output
    assert not client.lanes(queue)


def test_each_tenant_gets_its_own_concurrency_cap(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """``tenant:*`` with a concurrency of 2: two workers never run more than 2 jobs of one tenant
    at once, while the three tenants run side by side (up to 6 at once); every job runs once."""
    import asyncio
    import threading

    from shardq import limits

    with pytest.raises(Exception, match="tenant"):
        limits.for_tenant("has space", concurrency=2)
    _lanes_queue(cluster_client, queue, 8)
    cluster_client.set_limit(queue, limits.for_tenant("*", concurrency=2))
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    peak_all = [0]
    done: list[tuple[str, int]] = []
    lock = threading.Lock()

    async def slow(job: Job) -> None:
        assert job.tenant is not None
        with lock:
            running[job.tenant] += 1
            peak[job.tenant] = max(peak[job.tenant], running[job.tenant])
            peak_all[0] = max(peak_all[0], sum(running.values()))
        await asyncio.sleep(0.1)
        with lock:
            running[job.tenant] -= 1
            done.append((job.id, job.attempt))

    with Runner(cluster_url, queue, {"slow": slow}, workers=2):
        reqs = [JobRequest("slow", i, tenant=t) for t in ("a", "b", "c") for i in range(12)]
        cluster_client.enqueue_many(queue, reqs)
        wait_for(lambda: len(done) >= 36, 60, lambda: f"{len(done)} of 36 jobs ran")
    assert max(peak.values()) <= 2, peak
    assert peak_all[0] >= 3, f"tenants did not run side by side: at most {peak_all[0]} at once"
    assert len({i for i, _ in done}) == 36 and len(done) == 36
    for t in ("a", "b", "c"):
        holders = keys.limit_holders_key(queue, f"tenant:{t}")
        wait_for(lambda h=holders: cluster_client.redis.zcard(h) == 0, 10, "slots not given back")


def test_lanes_ride_out_workers_killed_and_stopped_at_random_times(
    cluster_url: str, cluster_client: Client, queue: str, procs: list[Proc]
) -> None:
    """Three rounds of kill -9 or SIGSTOP (past the visibility timeout) of a worker at a random
    moment, while two workers and a dispatcher drain a lanes queue of three tenants and three
    levels, half due now and half promoted later: every job runs, the lanes and the pending
    lists empty out, and only jobs a stopped or killed worker held run twice."""
    r = cluster_client.redis
    partitions = 8
    _lanes_queue(cluster_client, queue, partitions)
    record = f"rec:{queue}"
    reqs = [
        JobRequest(
            "t",
            i,
            delay=(0 if i % 2 else random.uniform(0.5, 4.0)),
            priority=("high", "default", "low")[i % 3],
            tenant=f"ten{i % 3 + (i // 7) % 2}",
        )
        for i in range(3000)
    ]
    ids = {res.job_id for res in cluster_client.enqueue_many(queue, reqs)}

    def worker() -> Proc:
        p = Proc.helper("worker", cluster_url, queue, record, "0.002", "2.0")
        procs.append(p)
        return p

    workers = [worker(), worker()]
    dispatcher = Proc.helper("dispatcher", cluster_url, queue, "100", "2.0", "0.5")
    procs.append(dispatcher)
    kills: dict[int, int] = {}  # pid -> wall ms when it was dead
    stops: dict[int, list[int]] = {}  # pid -> wall ms of each SIGSTOP
    for _round in range(3):
        time.sleep(random.uniform(0.3, 1.5))
        victim = random.randrange(len(workers))
        if random.random() < 0.5:
            workers[victim].kill9()
            kills[workers[victim].pid] = int(time.time() * 1000)
            workers[victim] = worker()
        else:
            stops.setdefault(workers[victim].pid, []).append(int(time.time() * 1000))
            workers[victim].signal(signal.SIGSTOP)
            time.sleep(3.0)  # past the 2 s visibility timeout: its deliveries are reclaimed
            workers[victim].signal(signal.SIGCONT)
        for p in (*workers, dispatcher):
            p.check_alive()

    def finished() -> set[str]:
        return {text(k) for k in r.hkeys(f"{record}:finishes")}

    wait_for(lambda: finished() >= ids, 90, lambda: f"{len(finished() & ids)} of 3000 ran")
    wait_for(lambda: queue_settled(r, queue, partitions), 30, "queue did not settle")
    pks = keys.all_partition_keys(queue, partitions)
    assert sum(r.zcard(pk.lane) for pk in pks) == 0
    assert all(set(map(text, r.hkeys(pk.vtime))) <= {"V"} for pk in pks)
    # A job runs again only where a worker holding it was killed or stopped (every start of
    # every job, tests/support/reruns.py).
    reruns = classify(
        start_log(r, record), kills, {p.pid: worker_report(p.log()) for p in procs}, stops
    )
    unexplained = list(reruns.unexplained.items())
    assert not unexplained, f"{len(unexplained)} ran again otherwise: {unexplained[:5]}"
    assert sum(reruns.counts().values()) < 600, reruns.counts()


def test_listing_ready_jobs_shows_the_lane_and_cancelling_them_empties_it(
    client: Client, queue: str
) -> None:
    from shardq.inspector import Inspector

    client.create_queue(queue, 2)
    streamed = _enqueue(client, queue, "s", 5)  # lanes off: in the ready streams
    client.set_lanes(queue, True)
    laned = _enqueue(client, queue, "l", 7, tenant="t")
    inspector = Inspector(client)
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = inspector.list_jobs(queue, "ready", limit=4, cursor=cursor)
        seen += [j.id for j in page.jobs]
        pages += 1
        cursor = page.cursor
        if cursor is None or pages > 10:
            break
    assert sorted(seen) == sorted(streamed + laned), seen
    # the stream's entries first (what fetch delivers first), then the lanes'
    assert set(seen[:5]) == set(streamed)
    assert all(j.entry_id is None for j in page.jobs if j.id in laned)
    assert inspector.cancel(queue, "ready") == 12
    pks = keys.all_partition_keys(queue, 2)
    assert sum(client.redis.hlen(pk.jobs) for pk in pks) == 0
    for pk in pks:
        assert client.transport.run(delivery.fetch(pk, "c", 100)).jobs == []
        assert client.redis.zcard(pk.lane) == 0
