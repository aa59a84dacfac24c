"""Kept results (keep_result): stored with the ack in the job's partition, expiring after the
retention, waited for over sharded pub/sub, on both topologies, against the raw Redis state."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from support.helpers import (
    FAST_WORKER,
    Runner,
    primaries,
    queue_state,
    scaled,
    text,
    wait_for,
)

from shardq import PermanentError
from shardq.client import AsyncClient, Client
from shardq.errors import (
    InvalidJobError,
    JobFailedError,
    ResultNotFoundError,
    ResultNotKeptError,
    ResultNotStoredError,
    ResultTimeoutError,
)
from shardq.jobs import Job
from shardq.plans import producer as producer_plans
from shardq.store import keys


def result_key(client: Client, queue: str, job_id: str) -> str:
    partitions = client.partitions(queue)
    pk = keys.partition_keys(queue, keys.partition_for(job_id, partitions), partitions)
    return pk.result(job_id)


def queue_snapshot(client: Client, queue: str, partitions: int) -> tuple[list[str], list[Any]]:
    """Every key of the queue (on every primary) and every partition's raw content."""
    found = sorted(
        text(k)
        for node in primaries(client.redis)
        for pattern in keys.key_patterns(queue)
        for k in node.scan_iter(match=pattern, count=1000)
    )
    return found, queue_state(client.redis, queue, partitions)


def result_keys(client: Client, queue: str) -> list[str]:
    """Every result key of the queue, on every primary."""
    pattern = keys.partition_pattern(queue, keys.RESULT_KIND)
    r: Any = client.redis
    if hasattr(r, "get_primaries"):
        found: list[str] = []
        for node in r.get_primaries():
            conn = r.get_redis_connection(node)
            found += [k.decode() for k in conn.scan_iter(match=pattern, count=1000)]
        return found
    return [k.decode() for k in r.scan_iter(match=pattern, count=1000)]


def test_result_is_kept_waited_for_and_expires(
    url: str, client: Client, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.create_queue(queue, partitions=4)
    # No re-read within the test: a waiter that returns before its timeout woke on the publish.
    monkeypatch.setattr(producer_plans, "RESULT_RECHECK", 3600.0)
    started = threading.Event()
    release = threading.Event()

    def slow(job: Job) -> dict[str, Any]:
        started.set()
        release.wait(10)
        return {"sum": sum(job.payload), "by": job.type}

    with Runner(url, queue, {"add": slow}):
        job_id = client.enqueue(queue, "add", [1, 2, 3], keep_result=2)
        wait_for(started.is_set, 10, "the handler did not start")
        with pytest.raises(ResultTimeoutError):
            client.result(queue, job_id, timeout=0.2)
        info = client.get(queue, job_id)
        assert info is not None and info.state == "running" and info.keep_result == 2.0
        # A waiter wakes on the publish (its only wake-up before the timeout, above).
        threading.Timer(0.3, release.set).start()
        t0, wait = time.monotonic(), scaled(10)
        assert client.result(queue, job_id, timeout=wait) == {"sum": 6, "by": "add"}
        assert time.monotonic() - t0 < wait, "woke at its timeout, not on the publish"
    key = result_key(client, queue, job_id)
    raw = client.redis.get(key)
    assert raw is not None and b'"v":{"sum":6' in raw
    ttl = client.redis.pttl(key)
    assert 0 < ttl <= 2000
    kept = client.result_info(queue, job_id)
    assert kept is not None and kept.value == {"sum": 6, "by": "add"} and kept.attempt == 1
    assert kept.finished_ms is not None and kept.stored
    # The envelope is gone as after any ack; the result alone is left.
    assert client.get(queue, job_id) is None
    assert client.result(queue, job_id, timeout=0) == {"sum": 6, "by": "add"}
    wait_for(lambda: client.redis.exists(key) == 0, 5, "the result did not expire")
    with pytest.raises(ResultNotFoundError):
        client.result(queue, job_id, timeout=0)
    assert client.result_info(queue, job_id) is None


def test_a_queue_that_keeps_none_writes_no_result(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=4)
    done: list[str] = []
    with Runner(url, queue, {"t": lambda job: done.append(job.id) or "ignored"}):
        ids = [client.enqueue(queue, "t", i) for i in range(30)]
        wait_for(lambda: len(done) == 30, 15, "jobs did not run")
        wait_for(lambda: all(client.get(queue, j) is None for j in ids), 10, "not acked")
    assert result_keys(client, queue) == []
    with pytest.raises(ResultNotFoundError):
        client.result(queue, ids[0], timeout=0)


def test_waiting_on_a_job_that_keeps_none_fails_at_once(
    url: str, client: Client, queue: str
) -> None:
    client.create_queue(queue, partitions=2)
    job_id = client.enqueue(queue, "t", None, delay=60)
    t0 = time.monotonic()
    with pytest.raises(ResultNotKeptError):
        client.result(queue, job_id, timeout=3600)
    assert time.monotonic() - t0 < scaled(2)


def test_dead_job_raises_its_last_error_and_wakes_the_waiter(
    url: str, client: Client, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.create_queue(queue, partitions=2)
    monkeypatch.setattr(producer_plans, "RESULT_RECHECK", 3600.0)  # the publish wakes it
    gate = threading.Event()

    def broken(job: Job) -> None:
        gate.wait(10)
        raise PermanentError("the card was declined")

    with Runner(url, queue, {"charge": broken}):
        job_id = client.enqueue(queue, "charge", {"n": 1}, keep_result=60)
        threading.Timer(0.3, gate.set).start()
        t0, wait = time.monotonic(), scaled(10)
        with pytest.raises(JobFailedError) as failed:
            client.result(queue, job_id, timeout=wait)
        assert time.monotonic() - t0 < wait, "woke at its timeout, not on the publish"
    assert "the card was declined" in (failed.value.error or "")
    assert failed.value.job_id == job_id
    # Dead jobs keep their envelope and error (the dead-letter stream's): no result record.
    assert client.redis.exists(result_key(client, queue, job_id)) == 0


def test_a_value_that_cannot_be_kept_completes_and_says_why(
    url: str, client: Client, queue: str
) -> None:
    client.create_queue(queue, partitions=2)
    settings = replace(FAST_WORKER, max_result_bytes=100)
    handlers = {"big": lambda job: "x" * 500, "odd": lambda job: {1, 2}}
    with Runner(url, queue, handlers, worker_settings=settings):
        big = client.enqueue(queue, "big", None, keep_result=60)
        odd = client.enqueue(queue, "odd", None, keep_result=60)
        with pytest.raises(ResultNotStoredError) as too_large:
            client.result(queue, big, timeout=scaled(10))
        with pytest.raises(ResultNotStoredError) as not_json:
            client.result(queue, odd, timeout=scaled(10))
    assert too_large.value.reason == "ResultTooLargeError"
    assert "max_result_bytes (100)" in str(too_large.value)
    assert not_json.value.reason == "ResultNotSerializableError"
    # Both completed, neither retried nor dead.
    assert client.get(queue, big) is None and client.get(queue, odd) is None


def test_bad_keep_result_and_timeout_are_refused_before_anything_is_written(
    client: Client, queue: str
) -> None:
    client.create_queue(queue, partitions=2)
    before = queue_snapshot(client, queue, 2)
    for bad in (0, 0.5, -1, 31 * 86400, float("nan"), "60", True):
        with pytest.raises(InvalidJobError, match="keep_result"):
            client.enqueue(queue, "t", None, keep_result=bad)  # type: ignore[arg-type]
    assert queue_snapshot(client, queue, 2) == before  # nothing written
    job_id = client.enqueue(queue, "t", None, delay=60, keep_result=60)
    for bad_timeout in (-1, float("nan"), "5"):
        with pytest.raises(InvalidJobError, match="timeout"):
            client.result(queue, job_id, timeout=bad_timeout)  # type: ignore[arg-type]


def test_async_client_waits_for_results_of_many_jobs(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=8)

    async def main() -> None:
        async with await AsyncClient.from_url(url) as aclient:
            ids = [
                await aclient.enqueue(queue, "square", i, keep_result=60, delay=0.2)
                for i in range(40)
            ]
            waits = (aclient.result(queue, j, timeout=scaled(20)) for j in ids)
            values = await asyncio.gather(*waits)
            assert values == [i * i for i in range(40)]
            info = await aclient.result_info(queue, ids[3])
            assert info is not None and info.value == 9

    async def square(job: Job) -> int:
        await asyncio.sleep(0.01)
        return int(job.payload) ** 2

    with Runner(url, queue, {"square": square}):
        asyncio.run(main())


def test_cli_enqueue_keep_result_job_result_and_job_get(
    url: str, client: Client, queue: str
) -> None:
    import json
    import re

    from support.cli import assert_one_line_error, ok, run

    client.create_queue(queue, partitions=2)
    out = ok("job", "enqueue", "-q", queue, "double", "--payload", "21", "--keep-result", "1m",
             "--json", "--url", url)  # fmt: skip
    job_id = json.loads(out)["job_id"]
    info = json.loads(ok("job", "get", "-q", queue, job_id, "--json", "--url", url))
    assert info["keep_result"] == 60.0 and info["state"] == "ready"
    assert re.search(r"keeps result: +1m", ok("job", "get", "-q", queue, job_id, "--url", url))
    waiting = run("job", "result", "-q", queue, job_id, "--url", url)
    assert "ResultTimeoutError" in assert_one_line_error(waiting)
    with Runner(url, queue, {"double": lambda job: {"n": job.payload * 2}}):
        assert json.loads(
            ok("job", "result", "-q", queue, job_id, "--wait", "10s", "--url", url)
        ) == {"n": 42}
    row = json.loads(ok("job", "result", "-q", queue, job_id, "--json", "--url", url))
    assert row["state"] == "completed" and row["value"] == {"n": 42} and row["attempt"] == 1
    got = json.loads(ok("job", "get", "-q", queue, job_id, "--json", "--url", url))
    assert got["state"] == "completed" and got["value"] == {"n": 42} and got["finished"]
    human = ok("job", "get", "-q", queue, job_id, "--url", url)
    assert re.search(r"state: +completed", human) and re.search(r'result: +\{"n":42\}', human)
    missing = run("job", "result", "-q", queue, "nosuchjob123", "--url", url)
    assert "ResultNotFoundError" in assert_one_line_error(missing)


def test_kept_results_follow_a_resize(cluster_client: Client, cluster_url: str, queue: str) -> None:
    """Results kept in the old generation move with its idempotency records, with their
    remaining retention: after the commit a by-id read finds each in the new generation."""
    from shardq.admin.resize import Resizer

    client = cluster_client
    client.create_queue(queue, partitions=4)
    with Runner(cluster_url, queue, {"echo": lambda job: {"echo": job.payload}}):
        ids = [client.enqueue(queue, "echo", i, keep_result=600) for i in range(30)]
        assert [client.result(queue, j, timeout=scaled(15)) for j in ids] == [
            {"echo": i} for i in range(30)
        ]
    old = set(result_keys(client, queue))
    assert len(old) == 30
    admin = Client.from_url(cluster_url)
    try:
        final = Resizer(admin, queue).run(8)
    finally:
        admin.close()
    assert final.phase == "done"
    fresh = Client.from_url(cluster_url)
    try:
        assert [fresh.result(queue, j, timeout=0) for j in ids] == [{"echo": i} for i in range(30)]
    finally:
        fresh.close()
    now = set(result_keys(client, queue))
    assert len(now) == 30 and not now & old
    for name in now:
        assert 0 < client.redis.pttl(name) <= 600_000
