"""Progress (job.progress): reported by sync and async handlers, coalesced by the worker,
readable by id and in the running listing while the job runs, gone from view once it ends."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from support.helpers import Runner, wait_for

from shardq import Inspector
from shardq.client import Client
from shardq.errors import ProgressError
from shardq.jobs import Job
from shardq.store import keys


def _progress_of(client: Client, queue: str, job_id: str) -> Any:
    info = client.get(queue, job_id)
    return None if info is None else info.progress


def test_sync_and_async_handlers_report_progress(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=2)
    release = threading.Event()
    calls = {"n": 0}

    def chatty(job: Job) -> None:
        # 20,000 reports: the worker writes the latest at most once a second.
        for i in range(20_000):
            job.progress({"done": i + 1, "of": 20_000})
            calls["n"] += 1
        release.wait(10)

    async def steps(job: Job) -> None:
        job.progress("step 1")
        await asyncio.to_thread(release.wait, 10)

    with Runner(url, queue, {"chatty": chatty, "steps": steps}):
        a = client.enqueue(queue, "chatty", None)
        b = client.enqueue(queue, "steps", None)
        wait_for(lambda: _progress_of(client, queue, a) == {"done": 20_000, "of": 20_000}, 10,
                 "the sync handler's progress did not show")  # fmt: skip
        wait_for(lambda: _progress_of(client, queue, b) == "step 1", 10, "no async progress")
        info = client.get(queue, a)
        assert info is not None and info.state == "running" and info.progress_ms is not None
        page = Inspector(client).list_jobs(queue, "running")
        shown = {j.id: j.progress for j in page.jobs}
        assert shown == {a: {"done": 20_000, "of": 20_000}, b: "step 1"}
        # Coalesced: the worker writes what was reported since its last write, once a second;
        # with nothing new reported, nothing is written.
        partitions = client.partitions(queue)
        pk = keys.partition_keys(queue, keys.partition_for(a, partitions), partitions)
        before = client.redis.get(pk.progress(a))
        time.sleep(1.3)
        assert client.redis.get(pk.progress(a)) == before  # nothing new reported: no write
        release.set()
        wait_for(lambda: client.get(queue, a) is None and client.get(queue, b) is None, 10,
                 "the jobs did not complete")  # fmt: skip
    assert calls["n"] == 20_000
    # The last report is left to expire; nothing shows it for a job no longer running.
    assert 0 < client.redis.pttl(pk.progress(a)) <= 3_600_000


def test_bad_progress_raises_in_the_handler(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=2)
    seen: list[str] = []

    def bad(job: Job) -> None:
        for value in ({1, 2}, "x" * 5000):
            try:
                job.progress(value)
            except ProgressError as exc:
                seen.append(str(exc))

    with Runner(url, queue, {"bad": bad}):
        job_id = client.enqueue(queue, "bad", None)
        wait_for(lambda: len(seen) == 2, 10, "the handler did not run")
        wait_for(lambda: client.get(queue, job_id) is None, 10, "not completed")
    assert "cannot be encoded as JSON" in seen[0] and "over 4096" in seen[1]


def test_a_job_outside_a_worker_cannot_report() -> None:
    job = Job("id", "q", 0, "t", None, 1, 1, None)
    with pytest.raises(ProgressError, match="reported by the worker"):
        job.progress(1)
