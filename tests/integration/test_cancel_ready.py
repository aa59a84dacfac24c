"""Cancelling or emptying ready jobs (issue 50, item 1): a job cancelled after promotion leaves
nothing counted (partition-stats: queue info, stats, metrics, console), nothing listed (no
``?`` rows in the ready listing), nothing handed to a handler, and never slows the jobs after
it (lua/cancel-7.lua counts its entry 'voided'; lua/fetch-9.lua reads past such entries).

The repro: a worker with concurrency 2 busy with 1-second jobs, 200 of them enqueued, the ready
ones emptied (or cancelled in bulk, or one by one by id); the ready count read at once, the
listing, and a new job's result."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import pytest
from support.helpers import FAST_WORKER, Runner, pending_total, scaled, wait_for

from shardq import Inspector, JobRequest
from shardq.client import Client
from shardq.config import ProducerSettings
from shardq.errors import JobRunningError
from shardq.jobs import Job
from shardq.store import delivery, inspection, keys, producer
from shardq.store.transport import SyncTransport

PARTITIONS = 2
# The repro's worker: concurrency 2 and the default idle polls (a read that looked empty made
# it wait 1, 2, 4 ... 30 s).
WORKER = replace(FAST_WORKER, concurrency=2, idle_poll=1.0, max_idle_poll=30.0)


def _ready(ins: Inspector, queue: str) -> int:
    return sum(p.ready for p in ins.partitions(queue))


def _listed_ready(ins: Inspector, queue: str) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = ins.list_jobs(queue, "ready", limit=100, cursor=cursor)
        ids += [j.id for j in page.jobs]
        cursor = page.cursor
        if cursor is None:
            return ids


def _voided(client: Client, queue: str) -> int:
    pks = keys.all_partition_keys(queue, PARTITIONS)
    return sum(int(client.redis.hget(pk.stats, "voided") or 0) for pk in pks)


@pytest.mark.parametrize("lanes", [False, True], ids=["lanes-off", "lanes-on"])
@pytest.mark.parametrize(
    "how, delay",
    [("empty", None), ("cancel", None), ("by-id", None), ("by-id", 0.3)],
    ids=["queue-empty", "queue-cancel", "client-cancel", "client-cancel-compact"],
)
def test_cancelled_ready_jobs_leave_nothing_behind(
    cluster_url: str, cluster_client: Client, queue: str, how: str, delay: float | None, lanes: bool
) -> None:
    client = cluster_client
    client.create_queue(queue, PARTITIONS, lanes=lanes)
    ins = Inspector(client)
    ran: list[str] = []

    async def slow(job: Job) -> None:
        ran.append(job.id)
        await asyncio.sleep(1.0)

    async def quick(job: Job) -> str:
        ran.append(job.id)
        return "done"

    with Runner(cluster_url, queue, {"slow": slow, "quick": quick}, worker_settings=WORKER):
        # delay: the jobs wait compactly (one due-set member each) until promoted.
        made = client.enqueue_many(queue, [JobRequest("slow", i, delay=delay) for i in range(200)])
        ids = {m.job_id for m in made}
        wait_for(lambda: len(ran) >= 2, 15, "the worker did not start two jobs")
        wait_for(
            lambda: sum(p.scheduled for p in ins.partitions(queue)) == 0,
            15,
            "the jobs were not all promoted",
        )
        waiting = set(_listed_ready(ins, queue))
        assert len(waiting) >= 150 and waiting <= ids
        cancelled: set[str] = set()
        if how == "empty":
            done = ins.empty(queue, "ready")
        elif how == "cancel":
            done = ins.cancel(queue, "ready")
        else:
            for job_id in waiting:
                with contextlib.suppress(JobRunningError):  # started meanwhile
                    if client.cancel(queue, job_id):
                        cancelled.add(job_id)
            done = len(cancelled)
        # Every listed job but those the worker started meanwhile (the two running ones end
        # within a second, then it reads again).
        assert done >= len(waiting) - 4
        # Counted nowhere and listed nowhere, at once: the worker is busy, nothing was read.
        assert _ready(ins, queue) == 0
        assert _listed_ready(ins, queue) == []
        # A new job runs as soon as the worker has room, not after idle polls.
        new = client.enqueue(queue, "quick", None, keep_result=60)
        assert client.result(queue, new, timeout=scaled(6)) == "done"
        wait_for(
            lambda: _voided(client, queue) == 0, 10, lambda: f"voided {_voided(client, queue)}"
        )
        wait_for(lambda: pending_total(client.redis, queue, PARTITIONS) == 0, 10, "not settled")
        assert _ready(ins, queue) == 0
    # Nothing cancelled was handed to the handler: of the listed jobs, only those not
    # cancelled ran.
    assert not cancelled & set(ran), "a cancelled job was handed to the handler"
    assert len(waiting & set(ran)) <= len(waiting) - done


def test_a_read_goes_past_cancelled_entries_within_its_bound(
    cluster_client: Client, queue: str
) -> None:
    """Raw: 150 ready jobs, the first 149 cancelled.  The ready count is 1 before any read.
    Reads of one job each go past the cancelled entries a bounded number a call (at most 100,
    in at most 16 reads: lua/fetch-9.lua), each saying more waits, until one hands the last
    job over; the count of cancelled entries is gone, and the group's lag still known."""
    client = cluster_client
    client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    r = client.redis
    run = lambda op: SyncTransport(r).run(op)  # noqa: E731
    settings = ProducerSettings()
    ids = [
        run(producer.prepare_enqueue(queue, 1, JobRequest("t", i), settings).op()).job_id
        for i in range(150)
    ]
    for job_id in ids[:-1]:
        assert client.cancel(queue, job_id)
    voided = int(r.hget(pk.stats, "voided"))
    assert voided == 149
    assert run(inspection.partition_stats(pk, "")).ready == 1
    reads = 0
    while True:
        batch = run(delivery.fetch(pk, "c1", 1))
        reads += 1
        if batch.jobs:
            break
        assert batch.more
        left = int(r.hget(pk.stats, "voided"))
        assert 1 <= voided - left <= 100
        voided = left
        assert run(inspection.partition_stats(pk, "")).ready == 1
    assert [j.raw_id.decode() for j in batch.jobs] == [ids[-1]] and not batch.more
    assert 2 <= reads <= 149
    assert int(r.hget(pk.stats, "voided") or 0) == 0
    again = run(delivery.fetch(pk, "c1", 1))
    assert again.jobs == [] and not again.more
    # Dropped entries are acknowledged, not deleted: the group's lag stays known.
    [group] = r.xinfo_groups(pk.ready)
    assert group["lag"] == 0 and group["pending"] == 1
    assert run(inspection.partition_stats(pk, "")).ready == 0
