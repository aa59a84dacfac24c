"""Crashes: kill -9 of workers and dispatchers, hung handlers, poison jobs, stale lease owners."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import replace

import pytest
from support.helpers import (
    FAST_DISPATCHER,
    FAST_WORKER,
    Runner,
    Runs,
    dead_entries,
    job_id_in,
    pending_total,
    queue_settled,
    ready_job_ids,
    scaled,
    settled,
    text,
    total,
    wait_for,
)
from support.procs import Proc

from shardq import JobRequest
from shardq.client import Client
from shardq.dev.demo import queue_counters
from shardq.errors import FencedError
from shardq.jobs import Job
from shardq.store import delivery, fleet, keys
from shardq.store.transport import SyncTransport


def redis_now_ms(client: Client) -> int:
    seconds, micros = client.redis.time()
    return seconds * 1000 + micros // 1000


# workers ---------------------------------------------------------------------------------------


def test_worker_killed_mid_handler_is_reclaimed_by_another(
    cluster_url: str, cluster_client: Client, queue: str, procs: list[Proc]
) -> None:
    client, r = cluster_client, cluster_client.redis
    partitions = 4
    client.create_queue(queue, partitions)
    record = f"rec:{queue}"
    running = [client.enqueue(queue, "t", {"i": i}) for i in range(20)]  # due now: ready

    doomed = Proc.helper("worker", cluster_url, queue, record, "60")
    procs.append(doomed)
    wait_for(
        lambda: r.hlen(f"{record}:starts") >= 20 or doomed.check_alive(),
        20,
        lambda: f"{r.hlen(f'{record}:starts')} of 20 started; log:\n{doomed.log()}",
    )
    # Enqueued only once the doomed worker runs, so they come due after its death however long
    # a loaded box takes to start it (enqueued before, with a 1 s delay, a slow start let the
    # doomed worker run them too).
    later = [client.enqueue(queue, "t", {"i": i}, delay=2.0) for i in range(10)]
    doomed.kill9()
    killed_at = time.monotonic()

    assert r.hlen(f"{record}:finishes") == 0
    starts = {text(k): text(v) for k, v in r.hgetall(f"{record}:starts").items()}
    assert set(starts) == set(running)
    assert all(v.startswith("1:1:") for v in starts.values())
    assert pending_total(r, queue, partitions) == 20  # held by the dead consumer
    for job_id in running:
        pk = keys.partition_keys(queue, keys.partition_for(job_id, partitions), partitions)
        assert r.hget(pk.jobs, job_id).startswith(b"A1|")

    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}) as runner:
        everything = set(running) | set(later)
        wait_for(lambda: set(runs.count()) == everything, 20, lambda: f"{len(runs.count())} ran")
        wait_for(lambda: queue_settled(r, queue, partitions), 20, "queue did not settle")
        runner.check()
        assert runner.workers[0].stats.reclaimed == 20

    assert runs.count() == Counter(dict.fromkeys(everything, 1))
    for job, started in zip(runs.jobs, runs.times, strict=True):
        if job.id in running:
            assert job.attempt == 2 and job.deliveries >= 2, job
            # reclaimed only once idle past the visibility timeout (2 s, counted from the
            # dead worker's last heartbeat, 0.5 s or so before the kill)
            assert started - killed_at >= 1.0
        else:
            assert job.attempt == 1 and job.deliveries == 1, job
    assert total(r, queue, partitions, "jobs") == 0
    assert pending_total(r, queue, partitions) == 0
    assert total(r, queue, partitions, "dead") == 0


@pytest.mark.parametrize("stop_one", [False, True], ids=["running", "one-stopping"])
def test_live_worker_with_long_handler_is_not_reclaimed(
    cluster_url: str, cluster_client: Client, queue: str, stop_one: bool
) -> None:
    """Handlers running three visibility timeouts are never reclaimed from a live worker.  Nor
    from one that is stopping (SIGTERM): its running handlers get shutdown_grace, and all that
    time its heartbeat keeps their deliveries claimed and its membership keeps it live (the
    shutdown order of docs/architecture-processes.md)."""
    client, r = cluster_client, cluster_client.redis
    partitions = 2
    client.create_queue(queue, partitions)
    runs = Runs()
    finished: list[str] = []

    async def long_handler(job: Job) -> None:
        runs.add(job)
        await asyncio.sleep(6.0)  # three visibility timeouts, three membership timeouts
        finished.append(job.id)

    settings = replace(FAST_WORKER, visibility_timeout=2.0, shutdown_grace=15.0)
    with Runner(cluster_url, queue, {"t": long_handler}, workers=2, worker_settings=settings) as rn:
        ids = [client.enqueue(queue, "t", {"i": i}) for i in range(4)]
        wait_for(lambda: len(runs.jobs) == 4, 10, "handlers did not start")
        if stop_one:
            stopping = max(rn.workers, key=lambda w: w.inflight)
            assert rn.loop is not None and stopping.inflight > 0
            rn.loop.call_soon_threadsafe(stopping.stop)
        # Both workers reclaim every 0.5 s meanwhile.  A reclaim would show as a second
        # delivery in Redis and a second run.
        wait_for(lambda: len(finished) == 4, 20, "handlers did not finish")
        wait_for(lambda: queue_settled(r, queue, partitions), 20, "queue did not settle")
        for worker in rn.workers:
            assert worker.stats.reclaimed == 0 and worker.stats.lost_deliveries == 0

    assert runs.count() == Counter(dict.fromkeys(ids, 1))
    assert all(j.attempt == 1 and j.deliveries == 1 for j in runs.jobs)
    assert total(r, queue, partitions, "jobs") == 0
    assert pending_total(r, queue, partitions) == 0


def test_poison_job_goes_dead_after_max_deliveries(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """Each crashed delivery is simulated by a throwaway consumer that takes the job with the
    real fetch/reclaim scripts (as a worker would) and then never acknowledges it."""
    client, r = cluster_client, cluster_client.redis
    client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    poison = client.enqueue(queue, "t", {"boom": True})
    fetched = SyncTransport(r).run(delivery.fetch(pk, "crash-1", 10))
    assert [text(j.raw_id) for j in fetched.jobs] == [poison]
    for n in (2, 3):
        batch = SyncTransport(r).run(
            delivery.reclaim(
                pk,
                f"crash-{n}",
                visibility_ms=0,
                orphan_idle_ms=0,
                live=[],
                count=10,
                max_deliveries=100,
            ),
        )
        [job] = batch.jobs
        assert text(job.raw_id) == poison and job.deliveries == n
    assert r.hget(pk.jobs, poison).startswith(b"A3|")

    runs = Runs()
    settings = replace(FAST_WORKER, max_deliveries=3)
    with Runner(cluster_url, queue, {"t": runs.add}, worker_settings=settings) as runner:
        healthy = client.enqueue(queue, "t", {"boom": False})
        wait_for(lambda: (i := client.get(queue, poison)) and i.state == "dead", 10, "not dead")
        wait_for(lambda: healthy in runs.count(), 5, "healthy job did not run")
        # Settled entries leave the stream with the dispatcher's next trim.
        wait_for(lambda: r.xlen(pk.ready) == 0, 10, lambda: f"ready: {r.xlen(pk.ready)}")
        runner.check()
    assert list(runs.count()) == [healthy]
    info = client.get(queue, poison)
    assert info is not None and info.attempt == 3
    assert "delivery limit: delivered 3 times without an ack" in (info.last_error or "")
    [entry] = dead_entries(r, pk)
    assert entry["j"] == poison and entry["a"] == "3" and "delivery limit" in entry["e"]
    assert r.xpending(pk.ready, keys.WORKER_GROUP)["pending"] == 0


# dispatchers -----------------------------------------------------------------------------------


def test_dispatcher_killed_mid_drain_loses_and_repeats_nothing(
    cluster_url: str, cluster_client: Client, queue: str, procs: list[Proc]
) -> None:
    client, r = cluster_client, cluster_client.redis
    partitions = 4
    n = 20_000
    client.create_queue(queue, partitions)
    results = client.enqueue_many(queue, [JobRequest("t", delay=0.5) for _ in range(n)])
    ids = {res.job_id for res in results}
    last_due = max(res.due_ms or 0 for res in results)
    wait_for(lambda: redis_now_ms(client) > last_due, 10, "backlog never became overdue")
    assert total(r, queue, partitions, "due") == n

    def moved() -> int:
        return total(r, queue, partitions, "ready")

    doomed = Proc.helper("dispatcher", cluster_url, queue, "100", "2.0", "0.5")
    procs.append(doomed)
    wait_for(lambda: moved() > 0 or doomed.check_alive(), 20, "dispatcher never promoted")
    doomed.kill9()
    at_kill = settled(moved)
    assert 0 < at_kill < n, f"killed after {at_kill} of {n}: not mid-drain"
    assert total(r, queue, partitions, "due") == n - at_kill  # every move was whole
    leases = [r.get(pk.lease) for pk in keys.all_partition_keys(queue, partitions)]
    assert all(lease and b":doomed:" in lease for lease in leases), leases

    with Runner(cluster_url, queue, workers=0, wait_leases=False) as runner:
        wait_for(lambda: moved() == n, 30, lambda: f"{moved()} of {n} promoted")
        d = runner.dispatcher
        assert d is not None
        # The dispatcher's own count can fall short of what it moved: when redis-py re-sends
        # a pipeline command after a timeout or dropped connection, the first run's reply is
        # never seen (seen once in ~10 full-suite runs: 11 of 18,800 uncounted). The scripts'
        # counters in Redis are exact, so those are what must add up.
        assert 0 < d.stats.promoted <= n - at_kill
        assert d.stats.leases_acquired == partitions and d.stats.fenced == 0
    assert queue_counters(r, queue, partitions)["promoted"] == n  # each job promoted once
    assert total(r, queue, partitions, "due") == 0
    in_ready = ready_job_ids(r, queue, partitions)
    assert set(in_ready) == ids, f"lost {len(ids - set(in_ready))}"
    assert max(in_ready.values()) == 1, "promoted twice"

    counts: Counter[str] = Counter()

    async def handler(job: Job) -> None:
        counts[job.id] += 1

    with Runner(cluster_url, queue, {"t": handler}):
        wait_for(lambda: len(counts) == n, 60, lambda: f"{len(counts)} of {n} ran")
        wait_for(lambda: queue_settled(r, queue, partitions), 30, "queue did not settle")
    assert set(counts) == ids and max(counts.values()) == 1


def test_promote_with_a_stale_fencing_token_is_rejected(cluster_client: Client, queue: str) -> None:
    client, r = cluster_client, cluster_client.redis
    partitions = 2
    client.create_queue(queue, partitions)
    pk = keys.partition_keys(queue, 0, partitions)
    ids = [
        client.enqueue(queue, "t", job_id=job_id_in(0, partitions, f"f{i}"), delay=0.05)
        for i in range(5)
    ]
    wait_for(lambda: redis_now_ms(client) > max(r.zscore(pk.due, j) for j in ids), 5, "due")

    def acquire(owner: str, ttl_ms: int) -> str:
        grant = SyncTransport(r).run(fleet.lease_acquire(pk, owner, ttl_ms))
        assert grant.won, grant
        return grant.token

    def promote(token: str) -> fleet.Promoted:
        return SyncTransport(r).run(fleet.promote(pk, token, 100, 10_000))

    old = acquire("paused-dispatcher", 100)
    wait_for(lambda: r.get(pk.lease) is None, 5, "lease did not expire")
    new = acquire("new-owner", 10_000)
    assert int(new) > int(old)
    before = (r.zrange(pk.due, 0, -1, withscores=True), r.xlen(pk.ready), r.hgetall(pk.stats))

    with pytest.raises(FencedError, match=f"fencing token {old} is stale"):
        promote(old)
    assert (
        r.zrange(pk.due, 0, -1, withscores=True),
        r.xlen(pk.ready),
        r.hgetall(pk.stats),
    ) == before
    assert SyncTransport(r).run(fleet.lease_renew(pk, old, 10_000)) is False
    assert SyncTransport(r).run(fleet.lease_release(pk, old)) is False
    assert text(r.get(pk.lease)).startswith(f"{new}:new-owner")

    moved = promote(new)
    assert moved.moved == 5 and r.zcard(pk.due) == 0 and r.xlen(pk.ready) == 5


def test_paused_dispatcher_whose_leases_were_taken_moves_nothing(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """A dispatcher frozen past its membership timeout (a GC pause, SIGSTOP) wakes up fenced:
    a peer displaced it while it was gone from the fleet, and every write it then tries with
    its old tokens is refused inside the scripts."""
    client, r = cluster_client, cluster_client.redis
    partitions = 4
    client.create_queue(queue, partitions)
    pks = keys.all_partition_keys(queue, partitions)
    members_key, drain = keys.dispatchers_key(queue), keys.drain_key(queue)
    timeout_ms = int(FAST_DISPATCHER.membership_timeout * 1000)
    stop = threading.Event()

    def intruder_beats() -> None:  # a live member of the fleet, as a dispatcher is
        while not stop.wait(FAST_DISPATCHER.renew_interval / 2):
            SyncTransport(r).run(fleet.members(members_key, drain, "intruder", timeout_ms))

    with Runner(cluster_url, queue, workers=0) as runner:
        d, loop = runner.dispatcher, runner.loop
        assert d is not None and loop is not None
        held = dict(d.tokens)
        frozen = threading.Event()
        freeze = scaled(3 * FAST_DISPATCHER.membership_timeout)
        loop.call_soon_threadsafe(lambda: (frozen.set(), time.sleep(freeze)))  # freeze its loop
        wait_for(frozen.is_set, 5, "dispatcher loop did not freeze")
        ids = [client.enqueue(queue, "t", delay=1.0) for _ in range(20)]
        beats = threading.Thread(target=intruder_beats, daemon=True)
        beats.start()
        try:
            # Its membership expires while it is frozen; the intruder displaces it.
            live = lambda: fleet.members(members_key, drain, "intruder", timeout_ms)  # noqa: E731
            wait_for(
                lambda: d.owner not in SyncTransport(r).run(live()).live,
                freeze,
                "the frozen dispatcher's membership did not expire",
            )
            ttl_ms = int(FAST_DISPATCHER.lease_ttl * 1000)
            for pk in pks:
                grant = SyncTransport(r).run(fleet.lease_acquire(pk, "intruder", ttl_ms, [d.owner]))
                assert grant.won and grant.takeover, grant
                assert int(grant.token) > int(held[pk.partition])
            wait_for(lambda: d.stats.leases_lost == partitions, 10, "stale leases were kept")
            wait_for(lambda: not d.tokens, 10, "fenced partitions were kept")
            assert d.stats.promoted == 0
            runner.check()
        finally:
            stop.set()
            beats.join(10)
    assert total(r, queue, partitions, "due") == len(ids)  # all overdue, none moved
    assert total(r, queue, partitions, "ready") == 0
    for pk in pks:
        assert text(r.get(pk.lease)).endswith(":intruder")


def test_consumers_of_crashed_workers_are_pruned(
    cluster_client: Client, cluster_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crashed worker's consumer name is removed once it holds nothing; one that still holds
    a delivery is kept until reclaim has taken it."""
    import shardq.worker.worker

    cluster_client.create_queue(queue, 1)
    r = cluster_client.redis
    pk = keys.partition_keys(queue, 0, 1)
    cluster_client.enqueue(queue, "t", None)
    SyncTransport(r).run(delivery.fetch(pk, "ghost-busy", 1))
    r.execute_command("XGROUP", "CREATECONSUMER", pk.ready, keys.WORKER_GROUP, "ghost-idle")
    names = {text(c["name"]) for c in r.xinfo_consumers(pk.ready, keys.WORKER_GROUP)}
    assert names == {"ghost-busy", "ghost-idle"}
    assert SyncTransport(r).run(delivery.prune_consumers(pk, 0)) == 1  # only the empty one
    assert {text(c["name"]) for c in r.xinfo_consumers(pk.ready, keys.WORKER_GROUP)} == {
        "ghost-busy"
    }
    # A worker reclaims ghost-busy's delivery and then prunes the ghost itself.
    monkeypatch.setattr(shardq.worker.worker, "PRUNE_EVERY", 0.2)
    settings = replace(FAST_WORKER, prune_consumers_after=0.5)
    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}, worker_settings=settings):
        wait_for(lambda: len(runs.jobs) == 1, 15, "ghost's job not reclaimed")
        wait_for(
            lambda: (
                "ghost-busy"
                not in {text(c["name"]) for c in r.xinfo_consumers(pk.ready, keys.WORKER_GROUP)}
            ),
            10,
            "crashed consumer not pruned",
        )
