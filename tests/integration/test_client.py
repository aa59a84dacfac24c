"""The producer client against both topologies, asserting the raw Redis state it leaves."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import redis
import redis.cluster
from support.helpers import (
    FAST_WORKER,
    Runner,
    Runs,
    job_id_in,
    partition_state,
    pending_total,
    queue_settled,
    queue_state,
    text,
    total,
    wait_for,
)

from shardq import JobRequest
from shardq.client import Client
from shardq.errors import (
    DuplicateJobError,
    JobNotFoundError,
    JobNotScheduledError,
    JobRunningError,
    QueueConfigConflictError,
    UnknownQueueError,
)
from shardq.jobs import Backoff, Job, timed_id_due
from shardq.store import keys, producer, routing


def redis_now_ms(client: Client) -> int:
    seconds, micros = client.redis.time()
    return seconds * 1000 + micros // 1000


def pk_of(client: Client, queue: str, job_id: str) -> keys.PartitionKeys:
    partitions = client.partitions(queue)
    return keys.partition_keys(queue, keys.partition_for(job_id, partitions), partitions)


def assert_queue_empty(client: Client, queue: str, partitions: int) -> None:
    r = client.redis
    assert total(r, queue, partitions, "jobs") == 0
    assert total(r, queue, partitions, "due") == 0
    assert pending_total(r, queue, partitions) == 0


# queues ---------------------------------------------------------------------------------------


def test_create_queue_is_idempotent_and_guards_the_partition_count(
    client: Client, queue: str
) -> None:
    assert client.create_queue(queue, 8) is True
    assert client.create_queue(queue, 8) is False
    meta = client.redis.hgetall(keys.queue_meta_key(queue))
    assert meta[b"partitions"] == b"8"
    assert int(meta[b"layout"]) == keys.LAYOUT_VERSION

    with pytest.raises(QueueConfigConflictError, match="exists with 8 partitions, not 16"):
        client.create_queue(queue, 16)
    assert client.redis.hgetall(keys.queue_meta_key(queue)) == meta
    assert Client(client.redis).partitions(queue) == 8  # fresh client: read from Redis

    for pk in keys.all_partition_keys(queue, 8):
        groups = client.redis.xinfo_groups(pk.ready)
        assert [g["name"] for g in groups] == [keys.WORKER_GROUP.encode()]
    eight = {pk.ready for pk in keys.all_partition_keys(queue, 8)}
    sixteen = {pk.ready for pk in keys.all_partition_keys(queue, 16)}
    assert not any(client.redis.exists(k) for k in sixteen - eight)  # refused: nothing made
    assert queue in client.queues()
    assert client.enqueue_many(queue, []) == []


def test_unknown_queue_is_reported_with_the_fix(client: Client, queue: str) -> None:
    for call in (
        lambda: client.enqueue(queue, "t"),
        lambda: client.enqueue_many(queue, [JobRequest("t")]),
        lambda: client.get(queue, "x"),
        lambda: client.cancel(queue, "x"),
        lambda: client.reschedule(queue, "x", delay=1),
    ):
        with pytest.raises(UnknownQueueError, match=rf"create_queue\('{queue}'\)"):
            call()
    assert not client.redis.exists(keys.queue_meta_key(queue))
    assert queue not in client.queues()


# single jobs ----------------------------------------------------------------------------------


def test_round_trip_enqueue_get_reschedule_cancel(client: Client, queue: str) -> None:
    client.create_queue(queue, 8)
    before = redis_now_ms(client)
    job_id = client.enqueue(
        queue,
        "email.send",
        {"to": "a@example.com", "n": [1, 2]},
        delay=60,
        max_attempts=3,
        backoff=Backoff("exponential", 2.0),
        headers={"traceparent": "00-abc-def-01"},
    )
    after = redis_now_ms(client)
    pk = pk_of(client, queue, job_id)

    info = client.get(queue, job_id)
    assert info is not None
    assert (info.id, info.queue, info.state, info.type) == (
        job_id,
        queue,
        "scheduled",
        "email.send",
    )
    assert info.payload == {"to": "a@example.com", "n": [1, 2]}
    assert (info.attempt, info.max_attempts, info.last_error) == (0, 3, None)
    assert info.partition == pk.partition
    # A delay counts from the producer's estimate of the Redis clock, within TIMED_SLACK_MS.
    slack = routing.TIMED_SLACK_MS
    assert before + 60_000 - slack <= info.due_ms <= after + 60_000 + slack
    # raw: a timed id waits compactly (layout 3): one due-set member '<id> <body>' scored by
    # the due time its id carries, no jobs-hash entry; nothing in ready
    assert timed_id_due(job_id) == info.due_ms
    assert client.redis.hget(pk.jobs, job_id) is None
    [(member, score)] = client.redis.zrange(pk.due, 0, -1, withscores=True)
    assert member.startswith(job_id.encode() + b' ["email.send",') and score == info.due_ms
    assert client.redis.xlen(pk.ready) == 0
    assert client.redis.hget(pk.stats, "enqueued") == b"1"

    new_due = client.reschedule(queue, job_id, delay=120)
    assert new_due >= after + 120_000
    # rescheduled: the id no longer tells the time, so the job takes the plain layout
    assert client.redis.hget(pk.jobs, job_id).startswith(b"S0|")
    assert client.redis.zscore(pk.due, job_id) == new_due
    assert client.get(queue, job_id).due_ms == new_due  # type: ignore[union-attr]

    at = datetime.now(UTC) + timedelta(minutes=5)
    assert client.reschedule(queue, job_id, run_at=at) == round(at.timestamp() * 1000)
    assert client.redis.zcard(pk.due) == 1

    assert client.cancel(queue, job_id) is True
    assert client.get(queue, job_id) is None
    assert not client.redis.hexists(pk.jobs, job_id)
    assert client.redis.zscore(pk.due, job_id) is None
    assert client.redis.hget(pk.stats, "cancelled") == b"1"
    assert client.cancel(queue, job_id) is False
    with pytest.raises(JobNotFoundError, match="completed, was cancelled, or never existed"):
        client.reschedule(queue, job_id, delay=1)


def test_due_job_goes_straight_to_ready(client: Client, queue: str) -> None:
    client.create_queue(queue, 4)
    job_id = client.enqueue(queue, "t", "now")
    pk = pk_of(client, queue, job_id)
    info = client.get(queue, job_id)
    assert info is not None and info.state == "ready" and info.due_ms is None
    [(_, fields)] = client.redis.xrange(pk.ready)
    assert fields[b"j"] == job_id.encode()
    assert client.redis.zcard(pk.due) == 0
    with pytest.raises(JobNotScheduledError, match="already due"):
        client.reschedule(queue, job_id, delay=10)
    # a promoted job that no worker started yet can still be cancelled
    assert client.cancel(queue, job_id) is True
    assert not client.redis.hexists(pk.jobs, job_id)


def test_duplicate_job_id_is_rejected_and_writes_nothing(client: Client, queue: str) -> None:
    client.create_queue(queue, 4)
    job_id = client.enqueue(queue, "t", {"v": 1}, job_id="order-42", delay=30)
    pk = pk_of(client, queue, job_id)
    before = partition_state(client.redis, pk)
    with pytest.raises(DuplicateJobError, match="pass idempotency_key"):
        client.enqueue(queue, "t", {"v": 2}, job_id="order-42", delay=10)
    assert partition_state(client.redis, pk) == before


def test_idempotency_key_returns_the_same_job(url: str, client: Client, queue: str) -> None:
    partitions = 8
    client.create_queue(queue, partitions)
    first = client.enqueue_detailed(
        queue, JobRequest("t", {"v": 1}, delay=0.3, idempotency_key="order-7")
    )
    assert first.created
    pk = keys.partition_keys(queue, keys.partition_for("order-7", partitions), partitions)
    assert first.partition == pk.partition == keys.partition_for(first.job_id, partitions)
    assert client.redis.get(pk.idem("order-7")) == first.job_id.encode()
    ttl = client.redis.pttl(pk.idem("order-7"))
    assert 24 * 3600 * 1000 - 5000 < ttl <= 24 * 3600 * 1000 + 300

    def again() -> str:
        before = queue_state(client.redis, queue, partitions, ["order-7"])
        repeat = client.enqueue_detailed(
            queue, JobRequest("t", {"v": 2}, delay=5, idempotency_key="order-7")
        )
        assert not repeat.created
        assert queue_state(client.redis, queue, partitions, ["order-7"]) == before
        return repeat.job_id

    assert again() == first.job_id  # while scheduled
    runs = Runs()
    with Runner(url, queue, {}, workers=0):  # dispatcher only: the job gets promoted
        wait_for(lambda: client.redis.xlen(pk.ready) == 1, 10, "job was not promoted")
    assert client.get(queue, first.job_id).state == "ready"  # type: ignore[union-attr]
    assert again() == first.job_id  # after promotion

    with Runner(url, queue, {"t": runs.add}):
        wait_for(lambda: client.get(queue, first.job_id) is None, 10, "job did not complete")
        assert again() == first.job_id  # after it completed, within retention
        wait_for(lambda: queue_settled(client.redis, queue, partitions), 10, "not settled")
    assert list(runs.count().items()) == [(first.job_id, 1)]
    assert runs.jobs[0].idempotency_key == "order-7" and runs.jobs[0].payload == {"v": 1}


def test_concurrent_enqueues_with_one_idempotency_key_make_one_job(
    client: Client, queue: str
) -> None:
    partitions = 16
    client.create_queue(queue, partitions)
    barrier = threading.Barrier(20)
    ids: list[str] = []
    errors: list[BaseException] = []

    def produce(n: int) -> None:
        try:
            barrier.wait(5)
            ids.append(client.enqueue(queue, "t", {"from": n}, delay=60, idempotency_key="k1"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors
    assert len(ids) == 20 and len(set(ids)) == 1
    assert total(client.redis, queue, partitions, "jobs") == 1
    assert total(client.redis, queue, partitions, "due") == 1
    pk = keys.partition_keys(queue, keys.partition_for("k1", partitions), partitions)
    assert client.redis.get(pk.idem("k1")) == ids[0].encode()
    assert client.redis.hget(pk.stats, "enqueued") == b"1"


def test_enqueue_many_returns_ids_in_order_and_writes_every_job(client: Client, queue: str) -> None:
    partitions = 16
    client.create_queue(queue, partitions)
    requests = []
    for i in range(1500):
        if i % 3 == 0:
            requests.append(JobRequest("t", {"i": i}, job_id=f"bulk-{i}", delay=100 + i))
        elif i % 3 == 1:
            requests.append(JobRequest("t", {"i": i}, delay=200))
        else:
            requests.append(JobRequest("t", {"i": i}))  # due now: straight to ready
    results = client.enqueue_many(queue, requests, chunk=400)

    assert len(results) == len(requests)
    assert len({r.job_id for r in results}) == len(requests)
    for i, (req, res) in enumerate(zip(requests, results, strict=True)):
        if req.job_id is not None:
            assert res.job_id == req.job_id
        assert res.created
        assert res.partition == keys.partition_for(res.job_id, partitions)
        info = client.get(queue, res.job_id)
        assert info is not None and info.payload == {"i": i}
        assert info.state == ("ready" if i % 3 == 2 else "scheduled")
    assert total(client.redis, queue, partitions, "jobs") == 1500
    assert total(client.redis, queue, partitions, "due") == 1000
    assert total(client.redis, queue, partitions, "ready") == 500
    used = {r.partition for r in results}
    assert used == set(range(partitions))


def test_enqueue_many_dedupes_idempotency_keys_within_and_across_calls(
    client: Client, queue: str
) -> None:
    partitions = 8
    client.create_queue(queue, partitions)
    first = client.enqueue_many(
        queue,
        [
            JobRequest("t", {"n": 1}, delay=60, idempotency_key="a"),
            JobRequest("t", {"n": 2}, delay=60),
            JobRequest("t", {"n": 3}, delay=60, idempotency_key="a"),
            JobRequest("t", {"n": 4}, delay=60, idempotency_key="b"),
        ],
    )
    assert [r.created for r in first] == [True, True, False, True]
    assert first[0].job_id == first[2].job_id != first[3].job_id
    again = client.enqueue_many(queue, [JobRequest("t", idempotency_key=k) for k in "ba"])
    assert [r.job_id for r in again] == [first[3].job_id, first[0].job_id]
    assert not any(r.created for r in again)
    assert total(client.redis, queue, partitions, "jobs") == 3
    assert client.get(queue, first[0].job_id).payload == {"n": 1}  # type: ignore[union-attr]


# races with a running dispatcher and worker ---------------------------------------------------


def _spread(ids: list[str], threads: int, action: object, span: float) -> None:
    """Run ``action(job_id)`` for every id from ``threads`` threads, spread over ``span`` s."""
    order = ids[:]
    random.shuffle(order)
    chunks = [order[i::threads] for i in range(threads)]
    errors: list[BaseException] = []

    def work(chunk: list[str]) -> None:
        try:
            for job_id in chunk:
                time.sleep(random.uniform(0, 2 * span / max(len(chunk), 1)))
                action(job_id)  # type: ignore[operator]
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=work, args=(c,)) for c in chunks]
    for t in pool:
        t.start()
    for t in pool:
        t.join(30)
    assert not errors, errors


def test_cancel_races_promotion(url: str, client: Client, queue: str) -> None:
    """Every job either ran or was cancelled: never both, never neither."""
    partitions = 8
    client.create_queue(queue, partitions)
    runs = Runs()

    def handler(job: Job) -> None:
        runs.add(job)
        time.sleep(0.02)

    outcome: dict[str, str] = {}

    def cancel(job_id: str) -> None:
        try:
            outcome[job_id] = "cancelled" if client.cancel(queue, job_id) else "not found"
        except JobRunningError:
            outcome[job_id] = "running"

    settings = replace(FAST_WORKER, concurrency=16)
    with Runner(url, queue, {"t": handler}, worker_settings=settings) as runner:
        results = client.enqueue_many(
            queue, [JobRequest("t", delay=random.uniform(0, 0.6)) for _ in range(300)]
        )
        ids = [r.job_id for r in results]
        _spread(ids, 8, cancel, 0.4)
        cancelled = {j for j, o in outcome.items() if o == "cancelled"}
        must_run = set(ids) - cancelled
        wait_for(lambda: must_run <= set(runs.count()), 20, lambda: f"{outcome}")
        # Settled: nothing stored, due or pending, so a cancelled job that would still run
        # cannot: it would have had to be one of those.
        wait_for(lambda: queue_settled(client.redis, queue, partitions), 20, "not settled")
        runner.check()

    counts = runs.count()
    assert set(counts) == must_run
    assert cancelled.isdisjoint(counts)
    assert all(n == 1 for n in counts.values())
    assert {o for j, o in outcome.items() if j in counts} <= {"running", "not found"}
    assert cancelled and must_run, "the race was not exercised"
    assert_queue_empty(client, queue, partitions)


def test_reschedule_races_promotion(url: str, client: Client, queue: str) -> None:
    """A rescheduled job runs once, at its new time; one that was too late runs once, as is."""
    partitions = 8
    client.create_queue(queue, partitions)
    runs = Runs()
    original: dict[str, int] = {}
    moved: dict[str, int] = {}
    late: dict[str, str] = {}

    def reschedule(job_id: str) -> None:
        try:
            moved[job_id] = client.reschedule(queue, job_id, delay=1.0)
        except (JobNotScheduledError, JobRunningError, JobNotFoundError) as exc:
            late[job_id] = type(exc).__name__

    with Runner(url, queue, {"t": runs.add}) as runner:
        # Enqueued once the fleet runs, so the reschedules race its promotes however long
        # the processes took to start (under `make test-stress`'s CPU hogs, jobs enqueued
        # before were all due, and promoted, by the time the first reschedule went).
        results = client.enqueue_many(
            queue, [JobRequest("t", delay=random.uniform(0.2, 0.6)) for _ in range(200)]
        )
        original.update({r.job_id: r.due_ms for r in results})
        _spread(list(original), 8, reschedule, 0.5)
        wait_for(lambda: len(runs.count()) == len(original), 20, "not every job ran")
        wait_for(lambda: queue_settled(client.redis, queue, partitions), 20, "not settled")
        runner.check()

    assert set(moved) | set(late) == set(original) and not set(moved) & set(late)
    assert moved and late, "the race was not exercised"
    counts = runs.count()
    assert set(counts) == set(original) and all(n == 1 for n in counts.values())
    for job in runs.jobs:
        due = moved.get(job.id, original[job.id])
        assert job.due_ms == due, (job.id, job.id in moved)
        assert job.fetched_redis_ms >= due
    assert_queue_empty(client, queue, partitions)
    for pk in keys.all_partition_keys(queue, partitions):
        assert text(client.redis.hget(pk.stats, "completed") or 0) == str(
            sum(1 for j in original if keys.partition_for(j, partitions) == pk.partition)
        )


def test_job_id_routing_is_stable(client: Client, queue: str) -> None:
    client.create_queue(queue, 32)
    for p in (0, 7, 31):
        job_id = job_id_in(p, 32)
        assert client.enqueue_detailed(queue, JobRequest("t", job_id=job_id)).partition == p
        assert client.get(queue, job_id).partition == p  # type: ignore[union-attr]


def test_a_burst_larger_than_the_pool_waits_for_connections(url: str, queue: str) -> None:
    """300 concurrent asyncio calls, and 16 threads on one sync client, through pools of 4
    connections: every call waits for a free connection.  redis-py's default pools fail such a
    burst at once ("Too many connections"): a worker settling a few hundred failures together
    met that, and only its resends hid it.  Calls go through the transport, which does not
    retry, so any such error shows; the connections opened stay within the limit."""
    import asyncio

    from shardq.aio import AsyncClient
    from shardq.config import ProducerSettings, RedisSettings

    settings = RedisSettings.from_url(url, max_connections=4, client_name=queue)
    with Client(settings) as sync:
        sync.create_queue(queue, 8)
        errors: list[BaseException] = []

        def produce(k: int) -> None:
            for i in range(20):
                request = JobRequest("t", i, job_id=f"s-{k}-{i}")
                op = producer.prepare_enqueue(queue, 8, request, ProducerSettings()).op()
                try:
                    sync.transport.run(op)
                except Exception as exc:
                    errors.append(exc)

        threads = [threading.Thread(target=produce, args=(k,)) for k in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], errors[:3]

    async def burst() -> tuple[list[object], int]:
        async with await AsyncClient.from_url(settings) as client:
            ops = [
                producer.prepare_enqueue(
                    queue, 8, JobRequest("t", i, job_id=f"a-{i}"), ProducerSettings()
                ).op()
                for i in range(300)
            ]
            results = await asyncio.gather(
                *(client.transport.run(op) for op in ops), return_exceptions=True
            )
            peak = 0
            for node in _primaries(url):
                with node:
                    names = [c.get("name") for c in node.client_list()]
                peak = max(peak, names.count(queue))
            return results, peak

    results, peak = asyncio.run(burst())
    assert [r for r in results if isinstance(r, BaseException)] == []
    # 4 per node for the transport's per-primary pools, a few for the cluster client's own.
    assert 0 < peak <= 4 + 4, f"{peak} connections on one node"
    with Client.from_url(url) as check:
        for name in [f"s-{k}-{i}" for k in range(16) for i in range(20)] + [
            f"a-{i}" for i in range(300)
        ]:
            assert check.get(queue, name) is not None, name


def _primaries(url: str) -> list[redis.Redis]:
    from shardq.config import RedisSettings
    from shardq.connection import connect

    probe = connect(RedisSettings.from_url(url))
    try:
        if isinstance(probe, redis.cluster.RedisCluster):
            return [redis.Redis(host=n.host, port=n.port) for n in probe.get_primaries()]
        host, port = RedisSettings.from_url(url).host_port()
        return [redis.Redis(host=host, port=port)]
    finally:
        probe.close()


def test_enqueue_many_reports_every_chunk_when_one_fails(url: str, queue: str) -> None:
    """A refusal in the first chunk of a call split in chunks: the error covers every chunk
    (stored results in request order, the failed index, retry requests), and the later chunks
    are sent and stored, not dropped with the first chunk's error (sync and asyncio)."""
    import asyncio

    from shardq.aio import AsyncClient
    from shardq.errors import BulkEnqueueError

    with Client.from_url(url) as client:
        client.create_queue(queue, 8)
        client.enqueue(queue, "t", None, job_id="taken-sync")
        client.enqueue(queue, "t", None, job_id="taken-async")

        def requests(taken: str) -> list[JobRequest]:
            reqs = [JobRequest("t", i, delay=60) for i in range(9)]
            reqs[1] = JobRequest("t", 1, job_id=taken, delay=60)
            return reqs

        with pytest.raises(BulkEnqueueError) as sync_error:
            client.enqueue_many(queue, requests("taken-sync"), chunk=3)

        async def go() -> BulkEnqueueError:
            async with await AsyncClient.from_url(url) as producer:
                try:
                    await producer.enqueue_many(queue, requests("taken-async"), chunk=3)
                except BulkEnqueueError as exc:
                    return exc
            raise AssertionError("no BulkEnqueueError")

        for exc in (sync_error.value, asyncio.run(go())):
            assert len(exc.results) == 9 and list(exc.failed) == [1]
            assert isinstance(exc.failed[1], DuplicateJobError), exc.failed
            assert exc.results[1] is None and len(exc.stored) == 8
            for job_id in exc.stored:
                assert client.get(queue, job_id) is not None


# the seam: running an operation ---------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_both_runners_pipeline_rounds(url: str, flavour: str) -> None:
    """A plan's ``Rounds`` go out pipelined from both facades' runners, through the public
    ``run``: each round is written before the previous one's replies are read.  Seen on the
    server, without MONITOR: round 1 is a BLPOP on a list only round 2 fills.  Pipelined, round
    2's LPUSH reaches the server while the BLPOP waits and wakes it with the value; rounds sent
    one after another would leave the BLPOP to time out (nil) before round 2 was written."""
    import asyncio
    import uuid

    from shardq.aio import AsyncClient
    from shardq.plans import Plan
    from shardq.store.op import Rounds, cmd, raw

    key = f"{{sq-test-rounds}}:{uuid.uuid4().hex}"
    block_s = 2  # how long round 1 would wait if round 2 were not already on its way

    def plan() -> Plan[list[list[object]]]:
        rounds = [
            [cmd("BLPOP", key, block_s, parse=raw)],
            [cmd("LPUSH", key, "woken", parse=raw)],
        ]
        got: list[list[object]] = yield Rounds(rounds)
        return got

    if flavour == "sync":
        with Client.from_url(url) as client:
            results = client.run(plan(), "pipelined rounds")
    else:

        async def go() -> list[list[object]]:
            async with await AsyncClient.from_url(url) as client:
                return await client.run(plan(), "pipelined rounds")

        results = asyncio.run(go())
    # Woken with the value: round 1 met round 2's push (sent one after another: [[None], [1]]).
    assert results == [[[key.encode(), b"woken"]], [1]], results
