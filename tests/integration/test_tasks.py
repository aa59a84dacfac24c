"""Task declarations (shardq.tasks): per-type defaults carried to producers and workers."""

from __future__ import annotations

import asyncio
import re

import pytest
from support.helpers import FAST_WORKER, Runner, scaled

from shardq import Backoff, Tasks
from shardq.client import AsyncClient, Client
from shardq.errors import InvalidJobError, JobFailedError
from shardq.jobs import Job


def test_a_declared_task_needs_only_its_payload(url: str, client: Client, queue: str) -> None:
    tasks = Tasks()

    @tasks.task("render", queue=queue, max_attempts=7, keep_result=120,
                backoff=Backoff("fixed", base=2.0))  # fmt: skip
    def render(job: Job) -> dict[str, int]:
        return {"page": job.payload["page"], "attempt": job.attempt}

    client.create_queue(queue, partitions=4)
    job_id = render.enqueue(client, {"page": 3}, delay=60)
    info = client.get(queue, job_id)
    assert info is not None
    assert (info.type, info.max_attempts, info.keep_result) == ("render", 7, 120.0)
    # A per-call option wins over the declared one.
    other = render.enqueue(client, {"page": 4}, max_attempts=2)
    assert render({"x": 1} and Job("i", queue, 0, "render", {"page": 9}, 1, 1, None)) == {
        "page": 9,
        "attempt": 1,
    }
    with Runner(url, queue, tasks):
        assert client.result(queue, other, timeout=scaled(15)) == {"page": 4, "attempt": 1}
    assert dict(tasks) == {"render": render.fn}


def test_a_task_timeout_bounds_one_attempt_of_its_jobs(
    url: str, client: Client, queue: str
) -> None:
    tasks = Tasks(default_queue=queue)

    @tasks.task(timeout=0.3, max_attempts=1, keep_result=60)
    async def slow(job: Job) -> None:
        await asyncio.sleep(30)

    @tasks.task(keep_result=60)
    async def quick(job: Job) -> str:
        await asyncio.sleep(0.5)  # longer than slow's timeout: the worker's applies here
        return "done"

    client.create_queue(queue, partitions=2)
    with Runner(url, queue, tasks, worker_settings=FAST_WORKER):
        s = slow.enqueue(client)
        q = quick.enqueue(client)
        # Failed while its handler was still asleep (30 s): cut at its task's timeout.
        with pytest.raises(JobFailedError) as failed:
            client.result(queue, s, timeout=scaled(15))
        assert client.result(queue, q, timeout=scaled(15)) == "done"
    assert re.search(r"ran over its task's timeout \(0\.3 s\)", failed.value.error or "")


def test_the_async_client_enqueues_declared_tasks(url: str, client: Client, queue: str) -> None:
    tasks = Tasks()

    @tasks.task("ping", queue=queue, max_attempts=3)
    async def ping(job: Job) -> None: ...

    client.create_queue(queue, partitions=2)

    async def main() -> str:
        async with await AsyncClient.from_url(url) as aclient:
            return await ping.enqueue_async(aclient, {"n": 1}, delay=60)

    info = client.get(queue, asyncio.run(main()))
    assert info is not None and info.max_attempts == 3 and info.payload == {"n": 1}


def test_bad_declarations_fail_when_made() -> None:
    tasks = Tasks()
    with pytest.raises(InvalidJobError, match="no queue"):
        tasks.task("a")(lambda job: None)
    with pytest.raises(InvalidJobError, match="max_attempts"):
        tasks.task("b", queue="q", max_attempts=0)(lambda job: None)
    with pytest.raises(InvalidJobError, match="keep_result"):
        tasks.task("c", queue="q", keep_result=10**9)(lambda job: None)
    with pytest.raises(InvalidJobError, match="timeout"):
        tasks.task("d", queue="q", timeout=-1)(lambda job: None)
    with pytest.raises(InvalidJobError):
        tasks.task("bad type!", queue="q")(lambda job: None)
    ok = tasks.task("e", queue="q")(lambda job: None)
    with pytest.raises(InvalidJobError, match="declared twice"):
        tasks.task("e", queue="q")(lambda job: None)
    with pytest.raises(InvalidJobError, match="unknown enqueue option"):
        ok.request(None, max_atempts=3)
    assert ok.request({"a": 1}, delay=5).delay == 5
