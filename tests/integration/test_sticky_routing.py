"""Sticky routing on real Redis (shardq.store.sticky): jobs due together share a partition, up
to a run of sticky_jobs, and every by-id operation still finds them (routing is crc32(id) % P)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from support.helpers import Runner, Runs, wait_for

from shardq import JobRequest
from shardq.aio import AsyncClient
from shardq.client import Client
from shardq.store import keys

PARTITIONS = 64


def test_a_bulk_due_together_fills_runs_and_every_job_is_found_by_id(
    client: Client, queue: str
) -> None:
    client.create_queue(queue, PARTITIONS)
    made = client.enqueue_many(queue, [JobRequest("t", i, delay=3600) for i in range(160)])
    per_partition = Counter(r.partition for r in made)
    # One window of due times: runs of 16 (two runs may pick one partition).
    assert len(per_partition) <= 10 and all(n % 16 == 0 for n in per_partition.values())
    for r in made:
        assert keys.partition_for(r.job_id, PARTITIONS) == r.partition
    ids = [r.job_id for r in made]
    found = [client.get(queue, j) for j in ids]
    assert all(i is not None and i.state == "scheduled" for i in found)
    assert client.cancel(queue, ids[0]) and client.get(queue, ids[0]) is None
    # Due an hour apart: one by one, as before.
    apart = client.enqueue_many(
        queue, [JobRequest("t", i, delay=3600 * (i + 2)) for i in range(64)]
    )
    assert len({r.partition for r in apart}) > 16


def test_the_asyncio_client_joins_the_same_runs(url: str, queue: str) -> None:
    at = time.time() + 3600  # one instant for all 40

    async def main() -> list[int]:
        async with await AsyncClient.from_url(url) as producer:
            await producer.create_queue(queue, PARTITIONS)
            jobs = [JobRequest("t", i, run_at=at) for i in range(32)]
            made = await producer.enqueue_many(queue, jobs)
            one = [await producer.enqueue(queue, "t", i, run_at=at) for i in range(8)]
            got = [await producer.get(queue, j) for j in one]
            assert all(g is not None for g in got)
            return [r.partition for r in made] + [g.partition for g in got if g is not None]

    parts = asyncio.run(main())
    # 40 jobs due at one instant: runs of 16, so 3 partitions at most.
    assert len(set(parts)) <= 3, parts


def test_jobs_due_together_run_once_each(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, 8)
    runs = Runs()
    with Runner(url, queue, {"t": runs.add}):
        ids = {
            r.job_id
            for r in client.enqueue_many(queue, [JobRequest("t", i, delay=0.5) for i in range(200)])
        }
        wait_for(lambda: ids <= set(runs.count()), 30, "jobs did not run")
    assert all(n == 1 for n in runs.count().values())
