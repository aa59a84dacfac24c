"""The inspector against the real cluster: every listing pages through each state whole (no job
missing or repeated, in order, across partitions), filters, find by id and idempotency key,
partition and member views, and the control actions under load with every job counted."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
from support.helpers import Runner, Runs, wait_for

from shardq import JobRequest
from shardq.aio import AsyncClient
from shardq.client import Client
from shardq.errors import JobRunningError
from shardq.inspector import (
    AsyncInspector,
    Inspector,
    InvalidCursorError,
    JobSummary,
    QueueInUseError,
)
from shardq.store import delivery, keys

PARTITIONS = 8


def all_pages(ins: Inspector, queue: str, state: str, limit: int, **kw: Any) -> list[JobSummary]:
    jobs: list[JobSummary] = []
    cursor = None
    for _ in range(10_000):
        page = ins.list_jobs(queue, state, limit=limit, cursor=cursor, **kw)
        assert len(page.jobs) <= limit
        jobs.extend(page.jobs)
        cursor = page.cursor
        if cursor is None:
            return jobs
    raise AssertionError("paging did not end")


def fetch_some(client: Client, queue: str, worker: str, n: int) -> list[tuple[Any, Any]]:
    """Deliver up to n ready jobs of every partition to ``worker`` (as a worker's fetch)."""
    got = []
    for pk in keys.all_partition_keys(queue, PARTITIONS):
        batch = client.transport.run(delivery.fetch(pk, worker, n))
        got += [(pk, d) for d in batch.jobs]
    return got


def test_scheduled_pages_cover_every_job_once_in_due_order(
    cluster_client: Client, queue: str
) -> None:
    cluster_client.create_queue(queue, PARTITIONS)
    base = time.time() + 3600
    # Ties on purpose: many jobs share a due time, across and within partitions.
    requests = [
        JobRequest("a" if i % 3 else "b", i, run_at=base + random.choice([0, 1, 2, 5]) + i // 50)
        for i in range(437)
    ]
    ids = {r.job_id for r in cluster_client.enqueue_many(queue, requests)}
    ins = Inspector(cluster_client)
    for limit in (1, 7, 50, 1000):
        jobs = all_pages(ins, queue, "scheduled", limit)
        assert [j.id for j in jobs if j.id in ids] == [j.id for j in jobs]
        assert len(jobs) == len(ids) and {j.id for j in jobs} == ids, limit
        order = [(j.due_ms, j.id) for j in jobs]
        assert order == sorted(order)
    only_b = all_pages(ins, queue, "scheduled", 20, job_type="b")
    assert {j.type for j in only_b} == {"b"} and len(only_b) == sum(
        1 for r in requests if r.job_type == "b"
    )
    window = all_pages(ins, queue, "scheduled", 30, start=base + 2, end=base + 4.5)
    assert window and all(
        round((base + 2) * 1000) <= j.due_ms <= round((base + 4.5) * 1000)
        for j in window
        if j.due_ms is not None
    )
    one = window[0]
    assert one.payload is not None and one.attempt == 0 and one.queue == queue
    with pytest.raises(InvalidCursorError):
        ins.list_jobs(queue, "scheduled", cursor="bm90IGEgY3Vyc29y")
    with pytest.raises(InvalidCursorError):
        first = ins.list_jobs(queue, "scheduled", limit=1)
        assert first.cursor is not None
        ins.list_jobs(queue, "dead", cursor=first.cursor)


def test_ready_running_retrying_and_dead_listings(cluster_client: Client, queue: str) -> None:
    cluster_client.create_queue(queue, PARTITIONS)
    ins = Inspector(cluster_client)
    # Due now: with no dispatcher running they go straight to the ready streams.
    results = cluster_client.enqueue_many(queue, [JobRequest("r", i) for i in range(120)])
    ids = {r.job_id for r in results}
    ready = all_pages(ins, queue, "ready", 9)
    assert {j.id for j in ready} == ids and len(ready) == len(ids)
    held = fetch_some(cluster_client, queue, "w-test", 3)
    assert held
    running = all_pages(ins, queue, "running", 5)
    assert {j.id for j in running} == {d.raw_id.decode() for _, d in held}
    assert all(j.worker == "w-test" and j.deliveries == 1 for j in running)
    assert all(j.started_ms is not None for j in running)
    assert len(all_pages(ins, queue, "ready", 50)) == len(ids) - len(held)
    # Fail one with a retry, one for good: retrying and dead.
    (pk1, d1), (pk2, d2) = held[0], held[1]
    cluster_client.transport.run(delivery.fail(pk1, d1.entry_id, d1.raw_id, 60_000, "boom"))
    cluster_client.transport.run(delivery.fail(pk2, d2.entry_id, d2.raw_id, -1, "fatal"))
    retrying = all_pages(ins, queue, "retrying", 1)
    assert [(j.id, j.last_error) for j in retrying] == [(d1.raw_id.decode(), "boom")]
    dead = all_pages(ins, queue, "dead", 2)
    assert [(j.id, j.state, j.last_error) for j in dead] == [(d2.raw_id.decode(), "dead", "fatal")]
    assert dead[0].dead_at_ms is not None
    # Run the dead job now: due again with attempt 0, and the listing no longer calls it dead.
    assert ins.run_now(queue, d2.raw_id.decode()) == "dead"
    info = cluster_client.get(queue, d2.raw_id.decode())
    assert info is not None and info.state == "scheduled" and info.attempt == 0
    assert all(j.state != "dead" for j in all_pages(ins, queue, "dead", 10))
    with pytest.raises(JobRunningError):
        ins.run_now(queue, held[2][1].raw_id.decode())


def test_find_partitions_members_and_async_inspector(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    cluster_client.create_queue(queue, PARTITIONS)
    ins = Inspector(cluster_client)
    job_id = cluster_client.enqueue(queue, "t", {"x": 1}, delay=600, idempotency_key="order-17")
    found = ins.find(queue, "order-17")
    assert found is not None and found.id == job_id and found.payload == {"x": 1}
    assert ins.find(queue, "order-18") is None
    infos = ins.partitions(queue)
    assert [i.partition for i in infos] == list(range(PARTITIONS))
    assert sum(i.scheduled for i in infos) == 1 and not any(i.paused for i in infos)
    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}):
        # The runner is up once the dispatcher holds its leases; the worker joins right after.
        members = wait_for(
            lambda: (ms := ins.members(queue)) and len(ms) == 2 and ms,
            10,
            lambda: f"the worker did not join: {ins.members(queue)}",
        )
        roles = sorted(m.role for m in members)
        assert roles == ["dispatcher", "worker"], members
        disp = next(m for m in members if m.role == "dispatcher")
        assert sorted(disp.partitions) == list(range(PARTITIONS))
        assert {i.owner for i in ins.partitions(queue)} == {disp.id}
        with pytest.raises(QueueInUseError):
            ins.delete_queue(queue)

    async def listing() -> list[str]:
        client = await AsyncClient.from_url(cluster_url)
        try:
            page = await AsyncInspector(client).list_jobs(queue, "scheduled", limit=10)
            assert await AsyncInspector(client).find(queue, "order-17") is not None
            return [j.id for j in page.jobs]
        finally:
            await client.close()

    assert asyncio.run(listing()) == [j.id for j in ins.list_jobs(queue, "scheduled").jobs]


def test_pause_holds_every_job_and_resume_runs_each_once(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    cluster_client.create_queue(queue, PARTITIONS)
    ins = Inspector(cluster_client)
    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}) as runner:
        assert ins.pause(queue) == PARTITIONS
        assert ins.pause(queue) == 0  # already paused
        now = time.time()
        # Some due now (straight to ready), some coming due while paused.
        ids = {
            r.job_id
            for r in cluster_client.enqueue_many(
                queue, [JobRequest("t", i, run_at=now + (i % 5) * 0.2) for i in range(400)]
            )
        }
        time.sleep(random.uniform(1.2, 2.0))  # every due time has passed
        runner.check()
        assert not runs.jobs, "a job ran while the queue was paused"
        assert all(i.paused for i in ins.partitions(queue))
        due_before = {j.id: j.due_ms for j in all_pages(ins, queue, "scheduled", 200)}
        assert ins.resume(queue) == PARTITIONS
        wait_for(lambda: len(runs.count()) >= len(ids), 30, "not every job ran after resume")
        time.sleep(0.3)
    counts = runs.count()
    assert set(counts) == ids and max(counts.values()) == 1
    # Paused jobs kept their due times: each ran at or after its own.
    for job in runs.jobs:
        if job.id in due_before:
            assert job.due_ms == due_before[job.id]


def test_cancel_retry_empty_and_delete(cluster_client: Client, queue: str) -> None:
    cluster_client.create_queue(queue, PARTITIONS)
    ins = Inspector(cluster_client)
    reqs = [JobRequest("keep" if i % 4 else "drop", i, delay=600) for i in range(2_100)]
    cluster_client.enqueue_many(queue, reqs)
    dropped = sum(1 for r in reqs if r.job_type == "drop")
    seen: list[int] = []
    assert ins.cancel(queue, "scheduled", job_type="drop", progress=seen.append) == dropped
    assert seen and seen[-1] == dropped
    left = all_pages(ins, queue, "scheduled", 1000)
    assert {j.type for j in left} == {"keep"} and len(left) == len(reqs) - dropped
    # Dead jobs of two types; retry one type.
    cluster_client.enqueue_many(queue, [JobRequest("x" if i % 2 else "y", i) for i in range(40)])
    for pk, d in fetch_some(cluster_client, queue, "w-dead", 100):
        cluster_client.transport.run(delivery.fail(pk, d.entry_id, d.raw_id, -1, "no"))
    assert len(all_pages(ins, queue, "dead", 7)) == 40
    assert ins.retry_dead(queue, job_type="x") == 20
    assert {j.type for j in all_pages(ins, queue, "dead", 50) if j.state == "dead"} == {"y"}
    assert ins.empty(queue, "dead") == 20
    assert ins.empty(queue, "scheduled") == len(reqs) - dropped + 20
    assert all_pages(ins, queue, "scheduled", 100) == []

    def tagged() -> set[bytes]:
        return set(cluster_client.redis.scan_iter(match="{sq:" + queue + "*", count=1000))

    before = tagged()
    assert ins.delete_queue(queue) == len(before) > 0  # every key of the queue, counted
    assert tagged() == set()
    assert queue not in cluster_client.queues()


def test_a_page_filled_by_one_partition_is_followed(cluster_client: Client, queue: str) -> None:
    """Every job in one partition: each page is exactly one partition's page, and paging must
    still go on (a merge that comes out exactly full does not mean the end)."""
    from support.helpers import job_id_in

    cluster_client.create_queue(queue, 2)
    ins = Inspector(cluster_client)
    ids = [job_id_in(0, 2, f"one-{i}") for i in range(10)]
    cluster_client.enqueue_many(queue, [JobRequest("t", i, job_id=j) for i, j in enumerate(ids)])
    assert {j.id for j in all_pages(ins, queue, "ready", 5)} == set(ids)
    later = [job_id_in(0, 2, f"later-{i}") for i in range(10)]
    cluster_client.enqueue_many(
        queue, [JobRequest("t", i, job_id=j, delay=600) for i, j in enumerate(later)]
    )
    assert {j.id for j in all_pages(ins, queue, "scheduled", 5)} == set(later)
