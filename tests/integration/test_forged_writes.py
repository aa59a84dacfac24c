"""What the shipped roles can forge with calls no shipped code makes (issue 50, M2 M9 M10 M11),
each as that role's ACL user on real Redis: a forged call is refused with a typed error and
writes nothing, a size past the shared bounds is refused, and a forged record is not believed."""

from __future__ import annotations

from typing import Any

import pytest
from support.roles import add_role_users, role_client

from shardq.client import Client
from shardq.errors import RedisFullError, ScriptArgumentError
from shardq.plans import one
from shardq.store import keys
from shardq.store import workflows as ops

MiB = 1024 * 1024


def _used(client: Client) -> int:
    return int(client.redis.info("memory")["used_memory"])


def _opened(
    bk: keys.BatchKeys,
    total: int,
    fields: list[tuple[str, bytes]] | None = None,
    sealed: bool = True,
) -> Any:
    return ops.open_batch(
        bk, kind="batch", policy="fail", retention_ms=60_000, total=total, sealed=sealed,
        parent="", fields=fields or [],
    )  # fmt: skip


def test_a_producer_cannot_make_a_batch_allocate_past_maxmemory(own_redis: Any, queue: str) -> None:
    """The audit's M2: a batch opened with 2^32 - 1 children, then a report of its last child,
    made a 64 MiB node allocate 512 MiB (batch-report runs at maxmemory: allow-oom).  Now the
    count is bounded as the producer's own check bounds it, the bitmap is allocated where Redis
    may still refuse (open, add), and a report never grows it."""
    server = own_redis("--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
    admin = Client.from_url(server.url)
    admin.create_queue(queue, 2)
    producer = role_client(server.url, add_role_users([admin.redis], ("producer",))["producer"])
    huge = keys.batch_keys(queue, "huge")
    with pytest.raises(ScriptArgumentError, match="1000000"):
        producer.run(one(_opened(huge, 2**32 - 1)), "test")
    # A pair may not set the counts or the bitmap's size either.
    for field in ("total", "bits", "state", "step:7"):
        with pytest.raises(ScriptArgumentError):
            producer.run(one(_opened(huge, 10, [(field, b"4294967296")])), "test")
    assert admin.redis.exists(huge.record, huge.seen) == 0

    small = keys.batch_keys(queue, "small")
    producer.run(one(_opened(small, 10)), "test")
    grown = keys.batch_keys(queue, "grown")
    producer.run(one(_opened(grown, 0, sealed=False)), "test")
    assert producer.run(one(ops.add(grown, 100_000)), "test") == (0, False)
    with pytest.raises(ScriptArgumentError):  # past MAX_ADD
        producer.run(one(ops.add(grown, 100_001)), "test")
    bitmaps = {bk.seen: admin.redis.strlen(bk.seen) for bk in (small, grown)}
    assert bitmaps == {small.seen: 2, grown.seen: 12_500}  # allocated by open and add

    # Redis at maxmemory: what may grow memory is refused whole, the settling scripts run.
    admin.redis.config_set("maxmemory", _used(admin) - MiB)
    try:
        with pytest.raises(RedisFullError):
            producer.run(one(ops.add(grown, 100_000)), "test")
        before = _used(admin)
        for bk, past in ((small, 10), (grown, 100_000)):
            forged = [ops.ChildEnd(i, "ok", f"x#{i}") for i in (2**32 - 2, 10**9, past)]
            reported = producer.run(one(ops.report(bk, forged)), "test")
            assert reported.known and reported.counted == 0 and reported.skipped == [0, 1, 2]
        real = producer.run(
            one(ops.report(grown, [ops.ChildEnd(99_999, "ok", "grown#99999")])), "test"
        )
        assert real.counted == 1
        assert _used(admin) - before < MiB
        assert {bk.seen: admin.redis.strlen(bk.seen) for bk in (small, grown)} == bitmaps
    finally:
        admin.redis.config_set("maxmemory", 0)
    admin.close()
    producer.close()


def test_what_runs_at_maxmemory_keeps_nothing_of_a_callers_size(own_redis: Any, queue: str) -> None:
    """The allow-oom scripts (they run on a full Redis) keep no name, error or result longer
    than the shared bounds, whatever a worker or dispatcher sends: a name over MAX_NAME_BYTES
    is refused, an error is kept to MAX_ERROR_BYTES, a result over MAX_RESULT_BYTES refused."""
    from shardq.config import MAX_ERROR_BYTES, MAX_RESULT_BYTES
    from shardq.names import MAX_MEMBER_BYTES
    from shardq.store import delivery, fleet, results

    server = own_redis("--maxmemory", "256mb", "--maxmemory-policy", "noeviction")
    admin = Client.from_url(server.url)
    admin.create_queue(queue, 1)
    users = add_role_users([admin.redis], ("worker", "dispatcher"))
    worker, dispatcher = (role_client(server.url, users[r]) for r in ("worker", "dispatcher"))
    pk = keys.partition_keys(queue, 0, 1)
    ids = [admin.enqueue(queue, "t", {"n": n}) for n in range(2)]
    long_name = "w" * (MAX_MEMBER_BYTES + 1)
    for call in (
        delivery.fetch(pk, long_name, 10),
        fleet.members(keys.dispatchers_key(queue), keys.drain_key(queue), long_name, 5000),
        fleet.lease_acquire(pk, long_name, 5000),
    ):
        with pytest.raises(ScriptArgumentError, match=str(MAX_MEMBER_BYTES)):
            (dispatcher if call.script.name != "fetch" else worker).run(one(call), "test")
    got = worker.run(one(delivery.fetch(pk, "w-1", 10)), "test").jobs
    assert sorted(j.raw_id.decode() for j in got) == sorted(ids)
    first, second = got
    too_big = results.Completion(
        first.entry_id, first.raw_id, 60_000, b"x" * (MAX_RESULT_BYTES + 1)
    )
    with pytest.raises(ScriptArgumentError, match=str(MAX_RESULT_BYTES)):
        worker.run(one(results.complete(pk, [too_big])), "test")
    admin.redis.config_set("maxmemory", _used(admin) - MiB)
    try:
        error = "e" * (MAX_ERROR_BYTES + 500_000)
        failed = worker.run(
            one(delivery.fail(pk, second.entry_id, second.raw_id, -1, error)), "test"
        )
        assert failed.outcome == "dead"
        assert admin.redis.hstrlen(pk.errors, second.raw_id) == MAX_ERROR_BYTES
    finally:
        admin.redis.config_set("maxmemory", 0)
    assert admin.redis.exists(pk.result(first.raw_id.decode())) == 0
    assert admin.redis.xpending(pk.ready, keys.WORKER_GROUP)["pending"] == 1  # the first, still
    for c in (admin, worker, dispatcher):
        c.close()


def test_a_worker_cannot_end_a_batch_child_by_writing_its_outbox(
    own_redis: Any, queue: str
) -> None:
    """The audit's M10: a worker's raw HSET into an outbox (its right: its scripts write
    children's ends there) decided children's outcomes.  The relay now counts an entry only
    for the child it names, in that child's own partition, once the child's job is gone from
    there; a dead child counts as dead whatever its entry says."""
    from shardq import JobRequest
    from shardq.plans import workflows as workflow_plans
    from shardq.store import delivery

    server = own_redis()
    admin = Client.from_url(server.url)
    admin.create_queue(queue, 2)
    users = add_role_users([admin.redis], ("producer", "worker", "dispatcher"))
    producer, worker, dispatcher = (
        role_client(server.url, users[r]) for r in ("producer", "worker", "dispatcher")
    )
    children = [JobRequest("child", {}, delay=3600) for _ in range(3)] + [JobRequest("child", {})]
    bid = producer.batches.create(queue, children, on_success=JobRequest("cb", {}))
    layout = admin.layout(queue)
    home = [layout.route(f"{bid}#{i}") for i in range(4)]
    away = layout.pk(1 - home[1].partition)

    # The last child runs and dies; its worker then rewrites the entry its death wrote.
    (job,) = worker.run(one(delivery.fetch(home[3], "w-1", 10)), "test").jobs
    worker.run(
        one(delivery.fail(home[3], job.entry_id, job.raw_id, -1, "boom", workflow_ref=f"{bid}|3")),
        "test",
    )
    forged = {
        (home[0], f"{bid}#0"): f"{bid}|0|ok|1|",  # its job still waits
        (away, f"{bid}#1"): f"{bid}|1|ok|1|",  # not the child's partition
        (home[2], "someone-else"): f"{bid}|2|ok|1|",  # not the child it names
        (home[3], f"{bid}#3"): f"{bid}|3|ok|1|",  # dead, said ok
    }
    for (pk, field), value in forged.items():
        worker.redis.hset(pk.outbox, field, value)
    relayed = [
        dispatcher.run(
            workflow_plans.relay_partition(dispatcher.cache, queue, pk, dispatcher.settings),
            "relaying",
        )
        for pk in layout.active()
    ]
    assert sum(r.relayed for r in relayed) == 1 and sum(r.dropped for r in relayed) == 3
    info = admin.batches.get(queue, bid)
    assert info is not None
    assert (info.completed, info.dead, info.state) == (0, 1, "failed")
    assert all(admin.redis.hlen(pk.outbox) == 0 for pk in layout.active())
    for c in (admin, producer, worker, dispatcher):
        c.close()


def test_a_worker_cannot_forge_the_result_of_a_job_that_has_not_ended(
    own_redis: Any, queue: str
) -> None:
    """The audit's M9: a worker's raw SET on a result key (its right: its complete script
    stores results) made ``client.result`` answer for a job still waiting.  A result is now
    final only once its job is done: while the job is stored its state answers."""
    from shardq.errors import ResultTimeoutError
    from shardq.store import delivery, results

    server = own_redis()
    admin = Client.from_url(server.url)
    admin.create_queue(queue, 1)
    users = add_role_users([admin.redis], ("producer", "worker"))
    producer, worker = (role_client(server.url, users[r]) for r in ("producer", "worker"))
    pk = keys.partition_keys(queue, 0, 1)
    running = producer.enqueue(queue, "t", {}, keep_result=60)
    waiting = producer.enqueue(queue, "t", {}, keep_result=60, delay=3600)
    (job,) = worker.run(one(delivery.fetch(pk, "w-1", 10)), "test").jobs
    for job_id in (running, waiting):
        worker.redis.set(pk.result(job_id), b'1|{"t": "t", "a": 1, "v": "forged"}')
        with pytest.raises(ResultTimeoutError):
            producer.result(queue, job_id, timeout=0)
        assert producer.result_info(queue, job_id) is None
    record = b'{"t": "t", "a": 1, "v": "real"}'
    done = results.Completion(job.entry_id, job.raw_id, 60_000, record)
    assert worker.run(one(results.complete(pk, [done])), "test") == 1
    assert producer.result(queue, running, timeout=0) == "real"
    for c in (admin, producer, worker):
        c.close()


def test_progress_and_results_of_any_size_are_refused_or_cut(own_redis: Any, queue: str) -> None:
    """The audit's M11: a 16 MiB progress went through progress-2, and a 48 MiB result
    written by hand was read and printed whole.  progress-2 refuses more than
    MAX_PROGRESS_BYTES; readers read no more than a worker writes (a longer progress is shown
    as malformed, a longer result refused); the console shows 64 KiB of a large result."""
    from starlette.testclient import TestClient

    from shardq.config import MAX_RESULT_BYTES, RedisSettings
    from shardq.errors import ResultNotStoredError
    from shardq.jobs import MAX_PROGRESS_BYTES
    from shardq.store import delivery, progress
    from shardq.web import WebConfig, create_app

    server = own_redis()
    admin = Client.from_url(server.url)
    admin.create_queue(queue, 1)
    users = add_role_users([admin.redis], ("producer", "worker", "viewer"))
    producer, worker = (role_client(server.url, users[r]) for r in ("producer", "worker"))
    pk = keys.partition_keys(queue, 0, 1)
    runs = producer.enqueue(queue, "t", {})
    done = producer.enqueue(queue, "t", {}, keep_result=600)
    assert len(worker.run(one(delivery.fetch(pk, "w-1", 10)), "test").jobs) == 2  # both running
    with pytest.raises(ScriptArgumentError, match=str(MAX_PROGRESS_BYTES)):
        worker.run(one(progress.write(pk, runs, b'"' + b"p" * 16 * MiB + b'"')), "test")
    assert admin.redis.exists(pk.progress(runs)) == 0
    worker.redis.set(pk.progress(runs), b"1|" + b"1" * 16 * MiB)  # by hand
    info = producer.get(queue, runs)
    assert info is not None and info.state == "running" and info.progress is None
    assert "progress" in info.malformed

    # A completed job whose result key holds more than any worker writes (by hand).
    admin.redis.hdel(pk.jobs, *admin.redis.hkeys(pk.jobs))  # both gone: `done` is done
    big = b'1|{"t": "t", "a": 1, "v": "' + b"r" * (MAX_RESULT_BYTES + 1) + b'"}'
    worker.redis.set(pk.result(done), big)
    with pytest.raises(ResultNotStoredError, match="ResultTooLargeError"):
        producer.result(queue, done, timeout=0)
    kept = producer.result_info(queue, done)
    assert kept is not None and not kept.stored and kept.value is None

    # One a worker may write (max_result_bytes up to 16 MiB): the console shows 64 KiB of it.
    worker.redis.set(pk.result(done), b'1|{"t": "t", "a": 1, "v": "' + b"r" * 8 * MiB + b'"}')
    assert len(producer.result(queue, done, timeout=0)) == 8 * MiB
    viewer = WebConfig(redis=RedisSettings.from_url(server.url, username=users["viewer"],
                                                    password=users["viewer"]))  # fmt: skip
    with TestClient(create_app(viewer), base_url="http://127.0.0.1:8080") as http:
        page = http.get(f"/q/{queue}/job/{done}")
    assert page.status_code == 200 and "cut here" in page.text and len(page.text) < MiB
    for c in (admin, producer, worker):
        c.close()
