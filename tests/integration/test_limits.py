"""Rate limits (shardq.limits): definitions and bad input, the limit-take and defer scripts, the
worker's gate under several workers, and the CLI."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from typing import Any

import pytest
from click.testing import CliRunner
from support.helpers import Runner, Runs, text, wait_for
from support.procs import Proc

from shardq import JobRequest, limits
from shardq.cli import main as cli
from shardq.client import Client
from shardq.errors import InvalidJobError, InvalidLimitError, UnknownQueueError
from shardq.jobs import Job
from shardq.store import delivery, keys, producer
from shardq.store import limits as store_limits
from shardq.store.transport import SyncTransport


def test_bad_limit_key_and_unknown_queue_write_nothing(cluster_client: Client, queue: str) -> None:
    with pytest.raises(UnknownQueueError):
        cluster_client.set_limit(queue, limits.for_type("t", 5))
    assert not cluster_client.redis.exists(keys.limits_key(queue))
    cluster_client.create_queue(queue, 4)
    with pytest.raises(InvalidLimitError, match=r"takes a shardq\.Limit"):
        cluster_client.set_limit(queue, "5/s")  # type: ignore[arg-type]
    requests = [JobRequest("t", 1), JobRequest("t", 2, limit_key="no spaces please")]
    with pytest.raises(InvalidJobError, match="limit key"):
        cluster_client.enqueue_many(queue, requests)
    assert sum(cluster_client.redis.hlen(pk.jobs) for pk in keys.all_partition_keys(queue, 4)) == 0


def test_limits_are_kept_in_redis_by_name(cluster_client: Client, queue: str) -> None:
    cluster_client.create_queue(queue, 4)
    cluster_client.set_limit(queue, limits.for_type("send", "100/s"))
    cluster_client.set_limit(queue, limits.for_key("api.example.com", "10/min", burst=2))
    cluster_client.set_limit(queue, limits.for_type("send", "50/s"))  # replaces
    got = cluster_client.limits(queue)
    assert [(x.name, x.rate, x.per, x.burst) for x in got] == [
        ("key:api.example.com", 10, 60.0, 2),
        ("type:send", 50, 1.0, None),
    ]
    assert cluster_client.remove_limit(queue, "type:send")
    assert not cluster_client.remove_limit(queue, "type:send")
    assert [x.name for x in cluster_client.limits(queue)] == ["key:api.example.com"]


def test_limit_take_reserves_one_start_per_interval(cluster_client: Client, queue: str) -> None:
    """10 per second with a burst of 2: two start now, the next ones 100 ms apart, and a second
    call continues the same schedule (reservations count at once)."""
    limit = limits.for_type("t", 10, 1.0, burst=2)
    first = cluster_client.transport.run(store_limits.take(queue, limit, 5))
    assert first.times[:2] == [0, 0]
    later = first.times[2:]
    assert all(t > first.now_ms for t in later)
    gaps = [b - a for a, b in itertools.pairwise(later)]
    assert all(g in (99, 100, 101) for g in gaps), gaps
    second = cluster_client.transport.run(store_limits.take(queue, limit, 1))
    assert second.times[0] - later[-1] in (99, 100, 101)
    key = keys.limit_state_key(queue, limit.name)
    assert 0 < cluster_client.redis.pttl(key) <= 2000 + 1000  # gone once its reservations pass


def test_a_deferred_job_waits_in_due_keeps_its_attempt_and_runs_on_its_reservation(
    cluster_client: Client, queue: str
) -> None:
    r = cluster_client.redis
    cluster_client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    settings = cluster_client.settings
    job_id = (
        SyncTransport(r)
        .run(producer.prepare_enqueue(queue, 1, JobRequest("t", 1), settings).op())
        .job_id
    )
    got = SyncTransport(r).run(delivery.fetch(pk, "c1", 10)).jobs
    assert [(j.attempt, j.reserved) for j in got] == [(1, False)]
    at = got and SyncTransport(r).run(store_limits.take(queue, limits.for_type("t", 1), 1)).now_ms
    deferred = SyncTransport(r).run(store_limits.defer(pk, [(got[0].entry_id, got[0].raw_id, at)]))
    assert deferred == 1
    assert r.xpending(pk.ready, keys.WORKER_GROUP)["pending"] == 0 and r.xlen(pk.ready) == 0
    assert r.zscore(pk.due, job_id) == at
    assert r.hget(pk.jobs, job_id).startswith(b"L0|")  # attempt given back, start reserved
    info = cluster_client.get(queue, job_id)
    assert info is not None and info.state == "scheduled" and info.attempt == 0
    # Deferring again what is no longer pending does nothing.
    assert SyncTransport(r).run(store_limits.defer(pk, [(got[0].entry_id, got[0].raw_id, at)])) == 0
    # Back in ready (as the dispatcher would move it), the fetch says its start is reserved.
    r.zrem(pk.due, job_id)
    r.xadd(pk.ready, {"j": job_id, "d": at})
    again = SyncTransport(r).run(delivery.fetch(pk, "c1", 10)).jobs
    assert [(j.attempt, j.reserved) for j in again] == [(1, True)]


def test_rescheduling_a_deferred_job_drops_its_reservation(
    cluster_client: Client, queue: str
) -> None:
    r = cluster_client.redis
    cluster_client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    job_id = cluster_client.enqueue(queue, "t", None)
    got = SyncTransport(r).run(delivery.fetch(pk, "c1", 10)).jobs[0]
    SyncTransport(r).run(store_limits.defer(pk, [(got.entry_id, got.raw_id, 10**13)]))
    cluster_client.reschedule(queue, job_id, delay=60)
    assert r.hget(pk.jobs, job_id).startswith(b"S0|")  # asks the limit again at the new time


def test_workers_keep_a_rate_limit_together_without_using_attempts(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """3 workers, 60 jobs due now under 20/s with a burst of 1 (and 20 unlimited jobs): the
    k-th limited start is no earlier than (k - 1) x 50 ms after the first fetch, every job runs
    once on its first attempt, and the unlimited jobs are not held behind the limited ones."""
    cluster_client.create_queue(queue, 8)
    cluster_client.set_limit(queue, limits.for_type("limited", 20, 1.0, burst=1))
    starts: list[tuple[str, float, int]] = []
    fetched: list[int] = []
    lock = threading.Lock()

    def handler(job: Job) -> None:
        now = job.redis_now_ms(time.monotonic())
        with lock:
            starts.append((job.type, now, job.attempt))
            fetched.append(job.fetched_redis_ms)

    handlers: dict[str, Any] = {"limited": handler, "free": handler}
    with Runner(cluster_url, queue, handlers, workers=3):
        requests = [JobRequest("limited", i) for i in range(60)]
        requests += [JobRequest("free", i) for i in range(20)]
        cluster_client.enqueue_many(queue, requests)
        wait_for(lambda: len(starts) >= 80, 60, lambda: f"{len(starts)} of 80 jobs ran")
        time.sleep(0.3)
    assert len(starts) == 80, "a job ran twice"
    assert all(attempt == 1 for _, _, attempt in starts), "a deferral used an attempt"
    limited = sorted(t for kind, t, _ in starts if kind == "limited")
    free = sorted(t for kind, t, _ in starts if kind == "free")
    first = min(fetched)
    for k, t in enumerate(limited):
        assert t >= first + k * 50 - 5, f"start {k} at +{t - first:.0f} ms: over the limit"
    # The limited jobs need about 3 s; the free ones are not queued behind them.
    assert free[-1] < limited[-1]
    stats = [
        cluster_client.redis.hget(pk.stats, "deferred") for pk in keys.all_partition_keys(queue, 8)
    ]
    assert sum(int(x or 0) for x in stats) >= 40  # most limited jobs waited in due


def test_cli_limit_set_list_remove_and_enqueue_with_a_limit_key(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    env = {"SHARDQ_REDIS_URL": cluster_url}

    def cli_run(*args: str) -> Any:
        return CliRunner().invoke(cli, list(args), env=env)

    refused = cli_run("limit", "set", "-q", queue, "--type", "send", "--rate", "5/s")
    assert refused.exit_code == 1 and "queue create" in refused.output, refused.output
    cluster_client.create_queue(queue, 4)
    bad = cli_run("limit", "set", "-q", queue, "--type", "send", "--rate", "0/s")
    assert bad.exit_code == 1 and "pause the queue instead" in bad.output
    assert not cluster_client.redis.exists(keys.limits_key(queue))
    both = cli_run("limit", "set", "-q", queue, "--type", "a", "--key", "b", "--rate", "1/s")
    assert both.exit_code == 2 and "one of them" in both.output
    out = cli_run("limit", "set", "-q", queue, "--key", "api.example.com", "--rate", "10/min")
    assert out.exit_code == 0 and "key:api.example.com: 10/60s" in out.output, out.output
    listed = cli_run("limit", "list", "-q", queue)
    assert "key:api.example.com" in listed.output and "1 per 6000 ms" in listed.output
    as_json = cli_run("limit", "list", "-q", queue, "--json")
    assert '"rate":10' in as_json.output.replace(" ", "")
    made = cli_run("job", "enqueue", "-q", queue, "t", "--limit-key", "api.example.com", "--json")
    assert made.exit_code == 0, made.output
    job_id = json.loads(made.output)["job_id"]
    shown = cli_run("job", "get", "-q", queue, job_id)
    assert "limit key:" in shown.output and "api.example.com" in shown.output
    conc = cli_run("limit", "set", "-q", queue, "--type", "call", "--concurrency", "3")
    assert conc.exit_code == 0 and "type:call: 3 at once" in conc.output, conc.output
    neither = cli_run("limit", "set", "-q", queue, "--type", "call")
    assert neither.exit_code == 1 and "neither a rate nor a concurrency" in neither.output
    rows = json.loads(cli_run("limit", "list", "-q", queue, "--json").output)
    assert {r["name"]: r["concurrency"] for r in rows} == {
        "key:api.example.com": None,
        "type:call": 3,
    }
    gone = cli_run("limit", "remove", "-q", queue, "--key", "api.example.com")
    assert gone.exit_code == 0 and "removed" in gone.output
    again = cli_run("limit", "remove", "-q", queue, "--key", "api.example.com")
    assert again.exit_code == 1 and "shardq limit list" in again.output


def test_limit_acquire_gives_at_most_n_slots_renews_holders_and_expires_the_dead(
    cluster_client: Client, queue: str
) -> None:
    r = cluster_client.redis
    limit = limits.for_type("call", concurrency=2)

    def acquire(*ids: bytes, hold: int = 60_000) -> list[bool]:
        return SyncTransport(r).run(store_limits.acquire(queue, limit, list(ids), hold)).held

    assert acquire(b"a", b"b", b"c") == [True, True, False]
    assert acquire(b"a") == [True]  # a holder asking again renews its slot
    assert SyncTransport(r).run(store_limits.release(queue, limit, [b"a", b"zz"])) == 1
    assert acquire(b"c", b"d") == [True, False]
    # b's holder stops renewing (a worker that died): its slot comes back after the hold.
    assert acquire(b"b", hold=100) == [True]
    wait_for(lambda: acquire(b"d") == [True], 5, "an expired hold did not free its slot")
    key = keys.limit_holders_key(queue, limit.name)
    assert {m for m, _ in r.zrange(key, 0, -1, withscores=True)} == {b"c", b"d"}


def test_workers_keep_a_concurrency_limit_together(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """3 workers, 30 jobs due now that take 100 ms each, at most 3 running at once: never more
    than 3 run at the same time, every job runs once on its first attempt, and the slots are
    all given back at the end."""
    import asyncio

    cluster_client.create_queue(queue, 8)
    cluster_client.set_limit(queue, limits.for_type("slow", concurrency=3))
    running, peak, done = [0], [0], []
    lock = threading.Lock()

    async def slow(job: Job) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.1)
        with lock:
            running[0] -= 1
            done.append((job.id, job.attempt))

    with Runner(cluster_url, queue, {"slow": slow}, workers=3):
        cluster_client.enqueue_many(queue, [JobRequest("slow", i) for i in range(30)])
        wait_for(lambda: len(done) >= 30, 60, lambda: f"{len(done)} of 30 jobs ran")
        holders = keys.limit_holders_key(queue, "type:slow")
        wait_for(lambda: cluster_client.redis.zcard(holders) == 0, 10, "slots not given back")
    assert peak[0] <= 3, f"{peak[0]} ran at once"
    assert sorted(done) == sorted({(i, 1) for i, _ in done}) and len(done) == 30


def test_a_killed_worker_gives_its_slots_back_within_the_visibility_timeout(
    cluster_url: str, cluster_client: Client, queue: str, procs: list[Proc]
) -> None:
    """kill -9 of a worker holding both slots of a concurrency limit of 2: its holds expire
    like its deliveries (visibility timeout 2 s), and another worker then runs every job, the
    two it took over on their second attempt."""
    client, r = cluster_client, cluster_client.redis
    client.create_queue(queue, 4)
    client.set_limit(queue, limits.for_type("t", concurrency=2))
    record = f"rec:{queue}"
    ids = [client.enqueue(queue, "t", {"i": i}) for i in range(8)]
    doomed = Proc.helper("worker", cluster_url, queue, record, "60", "2")
    procs.append(doomed)
    wait_for(lambda: r.hlen(f"{record}:starts") == 2 or doomed.check_alive(), 20, "not started")
    time.sleep(0.5)  # the other six are refused and wait in due
    assert r.hlen(f"{record}:starts") == 2, "more than 2 ran at once"
    holders = keys.limit_holders_key(queue, "type:t")
    assert r.zcard(holders) == 2
    doomed.kill9()
    killed_at = time.monotonic()
    took_over = {text(k) for k in r.hkeys(f"{record}:starts")}

    runs, starts = Runs(), []

    def handler(job: Job) -> None:
        starts.append(time.monotonic())
        runs.add(job)

    with Runner(cluster_url, queue, {"t": handler}):
        wait_for(lambda: set(runs.count()) == set(ids), 30, lambda: f"{len(runs.count())} ran")
    assert runs.count() == Counter(dict.fromkeys(ids, 1))
    # Nothing ran before the dead worker's holds expired (2 s after its last renewal, which
    # came at most a heartbeat, 1 s, before the kill).
    assert min(starts) - killed_at >= 0.9
    for job in runs.jobs:
        assert job.attempt == (2 if job.id in took_over else 1), job
