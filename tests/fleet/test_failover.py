"""Riding out cluster events on fresh clusters of the tests' own: a primary killed and its
replica promoted, a partition moved, every node stopped for 15 s; all under producer load of
every kind (single, bulk, durable; sync and asyncio) with a dispatcher and a worker running.

Counted in every test: 0 lost beyond what the guarantee allows (durable writes: none; other
writes: only those acknowledged by a primary in the instant before it was killed, Redis'
asynchronous replication window), and 0 duplicated by retries (every job that exists was
returned to its producer by exactly one call).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from support.fresh import FreshCluster, Ledger, check, drain, failover_reruns, kill_primary
from support.helpers import Runner, Runs, job_id_in, wait_for

from shardq import AsyncClient, Client, JobRequest, ProducerSettings, RedisSettings
from shardq.admin import slots as slot_moves
from shardq.admin.resize import Resizer
from shardq.dev.devcluster import node_pid, restart_node
from shardq.errors import BulkEnqueueError, NotDurableError, RedisUnavailableError
from shardq.store import keys

PARTITIONS = 12


def producers(
    url: str, queue: str, ledger: Ledger, stop: threading.Event, settings: ProducerSettings
) -> list[threading.Thread]:
    """Single, bulk and durable producers (sync), and single + bulk asyncio ones."""

    # Each call's start goes in the ledger: only a call begun before a kill can have been lost.
    def single() -> None:
        with Client.from_url(url, settings) as c:
            while not stop.is_set():
                t0 = time.monotonic()
                ledger.add([c.enqueue(queue, "t", None, delay=random.uniform(0, 1))], started=t0)

    def bulk() -> None:
        with Client.from_url(url, settings) as c:
            while not stop.is_set():
                reqs = [JobRequest("t", i, delay=random.uniform(0, 1)) for i in range(40)]
                t0 = time.monotonic()
                ledger.add([r.job_id for r in c.enqueue_many(queue, reqs)], started=t0)

    def durable() -> None:
        with Client.from_url(url, settings) as c:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    ids = [c.enqueue(queue, "t", None, durable=True)]
                    ledger.add(ids, durable=True, started=t0)
                except NotDurableError as exc:  # stored on the primary, replica not confirmed
                    ledger.add(exc.job_ids, started=t0)
                    time.sleep(0.05)

    def asyncio_producers() -> None:
        async def go() -> None:
            c = await AsyncClient.from_url(url, settings)
            try:
                while not stop.is_set():
                    t0 = time.monotonic()
                    ledger.add([await c.enqueue(queue, "t", None, delay=0.2)], started=t0)
                    reqs = [JobRequest("t", i, delay=0.3) for i in range(20)]
                    t0 = time.monotonic()
                    ids = [r.job_id for r in await c.enqueue_many(queue, reqs)]
                    ledger.add(ids, started=t0)
            finally:
                await c.close()

        asyncio.run(go())

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except Exception as exc:  # a producer that fails is a test failure: recorded
                ledger.errors.append(f"{fn.__name__}: {type(exc).__name__}: {exc}")

        return run

    return [
        threading.Thread(target=guarded(f), name=f.__name__, daemon=True)
        for f in (single, bulk, durable, asyncio_producers)
    ]


def test_producers_and_fleet_ride_out_a_killed_primary(fresh: FreshCluster, queue: str) -> None:
    client = Client.from_url(fresh.url)
    client.create_queue(queue, PARTITIONS)
    ledger, runs, stop = Ledger(), Runs(), threading.Event()
    settings = ProducerSettings(retry_timeout=30, durable_timeout=1.0)
    victim_port = fresh.primary_port(client, keys.partition_keys(queue, 0, PARTITIONS).due)
    threads = producers(fresh.url, queue, ledger, stop, settings)
    with Runner(fresh.url, queue, {"t": runs.add}):
        for t in threads:
            t.start()
        time.sleep(random.uniform(1.0, 2.5))
        kill = kill_primary(fresh, client, victim_port, queue, [(0, PARTITIONS)])
        wait_for(
            lambda: (
                fresh.primary_port(client, keys.partition_keys(queue, 0, PARTITIONS).due)
                != victim_port
            ),
            30,
            "no failover",
        )
        failed_over_at = time.monotonic()
        calls_at_failover = ledger.calls
        time.sleep(random.uniform(1.0, 3.0))
        restart_node(fresh.base, victim_port, root=fresh.root)  # back as a replica
        wait_for(lambda: ledger.calls > calls_at_failover + 50, 30, "producers stalled")
        stop.set()
        for t in threads:
            t.join(60)
        drain(client, queue, runs)
    figures = check(ledger, runs, kill)
    allowed, other = failover_reruns(runs, kill, failed_over_at)
    assert not other, f"{len(other)} ran again beyond the failover: {other[:5]}"
    figures["ran_again_in_failover"] = allowed
    print(f"killed primary: {figures}")
    client.close()


def test_bulk_producer_rides_out_a_partition_move(fresh: FreshCluster, queue: str) -> None:
    client = Client.from_url(fresh.url)
    mover = Client.from_url(fresh.url)
    client.create_queue(queue, PARTITIONS)
    ledger, runs, stop = Ledger(), Runs(), threading.Event()
    settings = ProducerSettings(retry_timeout=30)
    threads = producers(fresh.url, queue, ledger, stop, settings)
    with Runner(fresh.url, queue, {"t": runs.add}):
        for t in threads:
            t.start()
        time.sleep(random.uniform(0.5, 2.0))
        source = slot_moves.prepare_move(mover, queue, 0, slot_moves.primary_addresses(mover)[0])
        target = next(a for a in slot_moves.primary_addresses(mover) if a != source.source)
        result = slot_moves.move(mover, slot_moves.prepare_move(mover, queue, 0, target))
        assert result.keys_moved > 0
        calls_at_move = ledger.calls
        wait_for(lambda: ledger.calls > calls_at_move + 50, 30, "producers stalled")
        stop.set()
        for t in threads:
            t.join(60)
        drain(client, queue, runs)
    figures = check(ledger, runs, None)
    assert max(runs.count().values()) == 1, "a job ran twice across the move"
    print(f"moved partition: {figures}")
    client.close()
    mover.close()


def test_fleet_rides_out_every_node_stopped_for_15_s(fresh: FreshCluster, queue: str) -> None:
    """All six nodes SIGSTOPped for 15 s: dispatcher and worker keep running (not ready), and
    resume by themselves; a durable producer whose calls time out resends the same ids."""
    client = Client.from_url(fresh.url)
    client.create_queue(queue, PARTITIONS)
    ledger, runs, stop = Ledger(), Runs(), threading.Event()
    unsure: list[JobRequest] = []

    def producer() -> None:
        settings = ProducerSettings(retry_timeout=5, durable_timeout=1.0)
        with Client.from_url(fresh.url, settings) as c:
            while not stop.is_set():
                reqs = unsure[:] or [JobRequest("t", i, delay=0.3) for i in range(10)]
                unsure.clear()
                try:
                    ledger.add([r.job_id for r in c.enqueue_many(queue, reqs, durable=True)], True)
                except BulkEnqueueError as exc:
                    ledger.add(exc.stored, True)
                    unsure.extend(exc.retry_requests)  # same ids: a resend cannot duplicate
                except NotDurableError as exc:  # stored, replicas not confirmed in time
                    ledger.add([r.job_id for r in exc.results])
                    time.sleep(0.1)
                except RedisUnavailableError:  # before anything was sent (the queue lookup)
                    time.sleep(0.1)

    thread = threading.Thread(target=producer, daemon=True)
    pids = [node_pid(fresh.base, p, root=fresh.root) for p in fresh.ports()]
    with Runner(fresh.url, queue, {"t": runs.add}) as runner:
        thread.start()
        wait_for(lambda: len(runs.jobs) > 100, 30, "no jobs ran before the outage")
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)  # type: ignore[arg-type]
        try:
            stopped_at = time.monotonic()
            wait_for(
                lambda: (
                    runner.workers[0].supervisor.failing()
                    and runner.dispatcher is not None
                    and runner.dispatcher.supervisor.failing()
                ),
                30,
                "the fleet did not notice the outage",
            )
            time.sleep(max(0.0, 15 - (time.monotonic() - stopped_at)))
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)  # type: ignore[arg-type]
        resumed_at = time.monotonic()
        ran_before = len(runs.jobs)
        wait_for(lambda: len(runs.jobs) > ran_before + 100, 60, "the fleet did not resume")
        resume_s = runs.times[ran_before] - resumed_at
        runner.check()  # neither dispatcher nor worker exited
        stop.set()
        thread.join(60)
        while unsure:  # what was left unconfirmed when the producer stopped
            try:
                ledger.add([r.job_id for r in client.enqueue_many(queue, unsure)])
                unsure.clear()
            except BulkEnqueueError as exc:
                ledger.add(exc.stored)
                unsure[:] = exc.retry_requests
        drain(client, queue, runs)
    figures = check(ledger, runs, None)
    print(f"all nodes stopped 15 s: {figures}, first job after resume {resume_s:.2f} s")
    client.close()


def test_a_killed_primary_is_followed_by_every_producer_path(
    fresh: FreshCluster, queue: str
) -> None:
    """Right after a failover each producer path reaches the new primary: single, bulk and
    durable, sync and asyncio, for a partition of the failed primary."""
    client = Client.from_url(fresh.url, ProducerSettings(retry_timeout=30))
    client.create_queue(queue, PARTITIONS)
    pk = keys.partition_keys(queue, 0, PARTITIONS)
    victim = fresh.primary_port(client, pk.due)
    ids = [job_id_in(0, PARTITIONS, f"warm{i}") for i in range(3)]
    client.enqueue(queue, "t", job_id=ids[0], delay=60)  # warm every path's connections
    os.kill(node_pid(fresh.base, victim, root=fresh.root), signal.SIGKILL)  # type: ignore[arg-type]
    assert client.enqueue(queue, "t", job_id=ids[1], delay=60) == ids[1]
    bulk = client.enqueue_many(
        queue,
        [JobRequest("t", job_id=job_id_in(0, PARTITIONS, f"b{i}"), delay=60) for i in range(5)],
    )
    assert all(r.created for r in bulk)
    with pytest.raises(NotDurableError):  # the new primary has no replica yet: said so
        client.enqueue(queue, "t", job_id=ids[2], delay=60, durable=True)
    assert client.get(queue, ids[2]) is not None

    # A new client needs a live seed node (the URL's node may be the one that was killed).
    live = next(p for p in fresh.ports() if p != victim)

    async def via_asyncio() -> None:
        a = await AsyncClient.from_url(
            f"redis://127.0.0.1:{live}", ProducerSettings(retry_timeout=30)
        )
        try:
            jid = job_id_in(0, PARTITIONS, "async")
            assert await a.enqueue(queue, "t", job_id=jid, delay=60) == jid
            assert (await a.get(queue, jid)) is not None
        finally:
            await a.close()

    asyncio.run(via_asyncio())
    restart_node(fresh.base, victim, root=fresh.root)
    # Once the old primary is back as a replica, durable enqueues are confirmed again.
    wait_for(
        lambda: _durable_ok(client, queue, job_id_in(0, PARTITIONS, "after")),
        60,
        "durable enqueue never confirmed after the replica came back",
    )
    client.close()


def _durable_ok(client: Client, queue: str, job_id: str) -> bool:
    try:
        client.enqueue(queue, "t", job_id=job_id, delay=60, durable=True)
    except NotDurableError:
        return False
    except redis.RedisError:
        return False
    return True


def test_the_inspector_and_the_operator_tools_ride_out_a_killed_primary_like_client_get(
    fresh: FreshCluster, queue: str
) -> None:
    """Inspector.list_jobs, `shardq queue info` and `shardq queue owners` go through the same
    retry layer as Client.get: started right after a primary is killed (its replica not promoted
    yet), each waits the failover out and answers in full within retry_timeout; with a retry
    window shorter than the failover, the library calls give up with the same typed error."""
    from shardq.admin import owners
    from shardq.inspector import Inspector

    client = Client.from_url(fresh.url, ProducerSettings(retry_timeout=30))
    watcher = Client.from_url(fresh.url)  # its own slot map: refreshing it helps no one else
    client.create_queue(queue, PARTITIONS)
    ids = {client.enqueue(queue, "t", job_id=job_id_in(p, PARTITIONS, "j"), delay=600)
           for p in range(PARTITIONS)}  # fmt: skip
    pk = keys.partition_keys(queue, 0, PARTITIONS)
    victim = fresh.primary_port(watcher, pk.due)
    ins = Inspector(client)
    assert {j.id for j in ins.list_jobs(queue, "scheduled", limit=100).jobs} == ids  # warm
    live = next(p for p in fresh.ports() if p != victim)
    env = {**os.environ, "SHARDQ_REDIS_URL": f"redis://127.0.0.1:{live}"}
    cli = [sys.executable, "-m", "shardq.cli"]
    started: dict[str, float] = {}
    results: dict[str, Any] = {}

    def timed(name: str, fn: Callable[[], Any]) -> threading.Thread:
        def run() -> None:
            started[name] = time.monotonic()
            try:
                results[name] = fn()
            except Exception as exc:  # reported below, with the others
                results[name] = exc

        return threading.Thread(target=run, name=name)

    calls = [
        timed("list_jobs", lambda: ins.list_jobs(queue, "scheduled", limit=100)),
        timed("get", lambda: client.get(queue, job_id_in(0, PARTITIONS, "j"))),
        timed("queue info", lambda: subprocess.run(
            [*cli, "queue", "info", "-q", queue, "--json"], env=env, capture_output=True,
            text=True, timeout=60,
        )),
        timed("owners", lambda: subprocess.run(
            [*cli, "queue", "owners", "-q", queue, "--json"], env=env, capture_output=True,
            text=True, timeout=60,
        )),
    ]  # fmt: skip
    os.kill(node_pid(fresh.base, victim, root=fresh.root), signal.SIGKILL)  # type: ignore[arg-type]
    killed_at = time.monotonic()
    for t in calls:
        t.start()
    wait_for(lambda: fresh.primary_port(watcher, pk.due) != victim, 30, "no failover")
    promoted_at = time.monotonic()
    for t in calls:
        t.join(90)
    # Each call began while partition 0's primary was dead and its replica not promoted.
    assert all(at < promoted_at for at in started.values()), (started, promoted_at)
    assert promoted_at - killed_at > 1.0
    page = results["list_jobs"]
    assert not isinstance(page, BaseException), page
    assert {j.id for j in page.jobs} == ids and page.cursor is None
    got = results["get"]
    assert not isinstance(got, BaseException) and got is not None and got.partition == 0, got
    for name in ("queue info", "owners"):
        done = results[name]
        assert not isinstance(done, BaseException), done
        assert done.returncode == 0, (name, done.stderr)
        rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        names = {str(p) for p in range(PARTITIONS)}  # partition names (g1.0 once resized)
        assert {r["partition"] for r in rows} == names and len(rows) == PARTITIONS, (name, rows)
    info = {json.loads(x)["partition"]: json.loads(x) for x in results["queue info"].stdout.split()}
    assert sum(r["scheduled"] for r in info.values()) == len(ids)

    # A window shorter than a failover: the same typed error from every library entry point.
    other = next(
        pk_other.due
        for pk_other in keys.all_partition_keys(queue, PARTITIONS)
        if fresh.primary_port(watcher, pk_other.due) not in (victim, live)
        and fresh.primary_port(watcher, pk_other.due) != fresh.primary_port(watcher, pk.due)
    )
    second = fresh.primary_port(watcher, other)
    hasty = Client(RedisSettings.from_url(f"redis://127.0.0.1:{live}"),
                   ProducerSettings(retry_timeout=0.3))  # fmt: skip
    partition = next(
        p for p in range(PARTITIONS) if keys.partition_keys(queue, p, PARTITIONS).due == other
    )
    assert hasty.get(queue, job_id_in(partition, PARTITIONS, "j")) is not None  # warm
    os.kill(node_pid(fresh.base, second, root=fresh.root), signal.SIGKILL)  # type: ignore[arg-type]
    with pytest.raises(RedisUnavailableError):
        hasty.get(queue, job_id_in(partition, PARTITIONS, "j"))
    with pytest.raises(RedisUnavailableError):
        Inspector(hasty).list_jobs(queue, "scheduled")
    with pytest.raises(RedisUnavailableError):
        owners(hasty, queue)
    hasty.close()
    watcher.close()
    client.close()


def test_a_resize_rides_out_a_killed_primary(fresh: FreshCluster, queue: str) -> None:
    """A primary killed (SIGKILL, its replica promoted, then back as a replica) at a random
    moment of a resize 12 -> 24, under producers of every kind and a fleet: the resize
    finishes (resumed if the failover stopped it, as an operator would), waiting jobs stored
    long before the kill all run (a move waits for a replica before it drops a batch), and
    only writes acknowledged in the instant before the kill may be lost."""
    client = Client.from_url(fresh.url)
    client.create_queue(queue, PARTITIONS)
    ledger, runs, stop = Ledger(), Runs(), threading.Event()
    # Waiting jobs the resize moves: due from 2 s to 25 s on, stored long before the kill.
    seeded = client.enqueue_many(
        queue, [JobRequest("t", i, delay=random.uniform(2.0, 25.0)) for i in range(3000)]
    )
    ledger.add([r.job_id for r in seeded])
    settings = ProducerSettings(retry_timeout=30, durable_timeout=1.0)
    threads = producers(fresh.url, queue, ledger, stop, settings)
    victim_port = random.choice(
        [fresh.primary_port(client, keys.partition_keys(queue, p, PARTITIONS).due) for p in (0, 5)]
    )
    outcome: list[str] = []
    resumes: list[str] = []

    def drive() -> None:
        admin = Client.from_url(fresh.url, settings)
        deadline = time.monotonic() + 120
        try:
            resizer = Resizer(admin, queue, batch=50)
            final = None
            while final is None:
                try:
                    state = resizer.status()
                    final = resizer.run(None if state.running else 24)
                except Exception as exc:  # the operator's answer: run it again (--resume)
                    if time.monotonic() > deadline:
                        raise
                    resumes.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(1.0)
            outcome.append(final.phase)
        finally:
            admin.close()

    with Runner(fresh.url, queue, {"t": runs.add}):
        for t in threads:
            t.start()
        time.sleep(1.0)
        driver = threading.Thread(target=drive, daemon=True)
        driver.start()
        time.sleep(random.uniform(0.5, 6.0))  # preparing, moving or settling
        # A job lives in its partition of generation 0 or of the resize's generation 1.
        kill = kill_primary(fresh, client, victim_port, queue, [(0, PARTITIONS), (1, 24)])
        wait_for(
            lambda: not _pings(victim_port) and _failed_over(client, victim_port), 30, "no failover"
        )
        time.sleep(random.uniform(1.0, 3.0))
        restart_node(fresh.base, victim_port, root=fresh.root)  # back as a replica
        # Load through the kill and the failover, then no more than one worker can run.
        time.sleep(2.0)
        stop.set()
        for t in threads:
            t.join(60)
        driver.join(150)
        assert outcome == ["done"], (outcome, resumes, _left(client, queue))
        assert client.layout(queue).partitions == 24
        assert client.layout(queue).generation == 1
        drain(client, queue, runs)
    figures = check(ledger, runs, kill)
    waiting = {r.job_id for r in seeded}
    assert waiting <= set(runs.count()), f"{len(waiting - set(runs.count()))} moved jobs lost"
    print(f"resize through a killed primary: {figures}, resumed {len(resumes)}: {resumes[:2]}")
    client.close()


def _left(client: Client, queue: str) -> list[object]:
    """What the old partitions of a resize still hold (the message of a resize that hangs)."""
    from shardq.plans import resize as resize_plans

    was = client.run(resize_plans.state(queue), "reading the resize")
    if not was.running:
        return [was.raw]
    lefts = client.run(resize_plans.left(queue, was), "reading the old partitions")
    return [was.raw, *[(i, lf) for i, lf in enumerate(lefts) if not lf.empty]]


def _pings(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_timeout=0.5).ping())
    except redis.RedisError:
        return False


def _failed_over(client: Client, dead_port: int) -> bool:
    manager = client.redis.nodes_manager  # type: ignore[union-attr]
    try:
        manager.initialize()
    except redis.RedisError:
        return False
    return all(nodes[0].port != dead_port for nodes in manager.slots_cache.values() if nodes)
