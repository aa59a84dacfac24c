"""Per-job timeouts and deadlines: ``timeout=`` bounds one attempt, ``deadline=`` means "do not
start after this" (dead-lettered with the reason, never run), on both topologies."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from support.helpers import FAST_WORKER, Runner, scaled, total, wait_for

from shardq.client import Client
from shardq.errors import InvalidJobError, JobFailedError
from shardq.jobs import Job


def test_a_job_past_its_absolute_deadline_is_dead_lettered_unrun(
    url: str, client: Client, queue: str
) -> None:
    client.create_queue(queue, partitions=2)
    ran: list[str] = []
    # Due in 1.5 s, but its deadline is in 0.5 s: it comes due too late to start.
    soon = datetime.now(UTC) + timedelta(seconds=0.5)
    late = client.enqueue(queue, "t", 1, delay=1.5, deadline=soon, keep_result=60)
    fine = client.enqueue(queue, "t", 2, deadline=datetime.now(UTC) + timedelta(minutes=5),
                          keep_result=60)  # fmt: skip
    info = client.get(queue, late)
    assert info is not None and info.deadline_ms == round(soon.timestamp() * 1000)
    with Runner(url, queue, {"t": lambda job: ran.append(job.id)}):
        with pytest.raises(JobFailedError) as failed:
            client.result(queue, late, timeout=scaled(15))
        assert client.result(queue, fine, timeout=scaled(15)) is None
    assert ran == [fine]
    reason = failed.value.error or ""
    assert re.search(r"DeadlineExceededError: not started: its deadline passed", reason)
    # Dead, its payload kept for a replay (the delivery that found it late counts as its
    # attempt 1: the fetch script counts deliveries; the handler never ran).
    dead = client.get(queue, late)
    assert dead is not None and dead.state == "dead" and dead.payload == 1


def test_a_relative_deadline_counts_from_the_due_time_of_each_attempt(
    url: str, client: Client, queue: str
) -> None:
    """``deadline=timedelta``: how late after its due time it may start.  A worker busy past it
    dead-letters the waiting job instead of starting it late."""
    client.create_queue(queue, partitions=1)
    gate = threading.Event()
    ran: list[int] = []

    blocking: list[str] = []

    async def blocker(job: Job) -> None:
        blocking.append(job.id)
        await asyncio.to_thread(gate.wait, 10)

    def t(job: Job) -> None:
        ran.append(job.payload)

    from dataclasses import replace

    from support.helpers import FAST_WORKER

    one = replace(FAST_WORKER, concurrency=1)
    with Runner(url, queue, {"block": blocker, "t": t}, worker_settings=one):
        client.enqueue(queue, "block", None)
        wait_for(lambda: bool(blocking), 10, "the blocker did not start")
        tight = client.enqueue(queue, "t", 1, deadline=timedelta(milliseconds=200), keep_result=60)
        loose = client.enqueue(queue, "t", 2, deadline=timedelta(seconds=60), keep_result=60)
        time.sleep(0.8)  # both wait behind the blocker, past the tight one's window
        gate.set()
        with pytest.raises(JobFailedError, match="later than its deadline allows"):
            client.result(queue, tight, timeout=scaled(15))
        assert client.result(queue, loose, timeout=scaled(15)) is None
    assert ran == [2]


def test_a_job_timeout_bounds_one_attempt_then_it_is_retried(
    url: str, client: Client, queue: str
) -> None:
    client.create_queue(queue, partitions=2)
    attempts: list[int] = []

    async def slow_first(job: Job) -> str:
        attempts.append(job.attempt)
        if job.attempt == 1:
            await asyncio.sleep(30)
        return f"attempt {job.attempt}"

    from shardq.jobs import Backoff

    with Runner(url, queue, {"s": slow_first}):
        job_id = client.enqueue(queue, "s", None, timeout=0.3, keep_result=60,
                                backoff=Backoff("fixed", base=0.0))  # fmt: skip
        assert client.result(queue, job_id, timeout=scaled(20)) == "attempt 2"
    assert attempts == [1, 2]


def test_bad_timeouts_and_deadlines_are_refused_before_anything_is_written(
    client: Client, queue: str
) -> None:
    client.create_queue(queue, partitions=2)
    for bad in (0, -1, 31 * 86400, float("nan"), "5", True):
        with pytest.raises(InvalidJobError, match="timeout"):
            client.enqueue(queue, "t", None, timeout=bad)  # type: ignore[arg-type]
    for bad_deadline in (datetime(2030, 1, 1), -5, float("inf"), "soon", timedelta(days=-1)):
        with pytest.raises(InvalidJobError, match="deadline"):
            client.enqueue(queue, "t", None, deadline=bad_deadline)  # type: ignore[arg-type]
    r = client.redis
    assert total(r, queue, 2, "jobs") == 0 and total(r, queue, 2, "due") == 0


def test_a_sync_handler_over_its_timeout_fails_at_once_and_its_overrun_is_logged(
    url: str, client: Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A thread cannot be stopped: the job fails at its timeout (retried, here dead at one
    attempt), and the overrun is logged once the handler returns.  It fails on a timer of its
    own, not at the heartbeat's next watchdog round: here the heartbeat runs every 10 s and the
    handler blocks until the test lets it go, yet the job fails (the events themselves, not
    how long they took, tell these apart)."""
    import logging

    client.create_queue(queue, partitions=2)
    release = threading.Event()

    def stuck(job: Job) -> None:
        release.wait(scaled(60))

    slow_heartbeat = dataclasses.replace(
        FAST_WORKER, heartbeat_interval=10.0, visibility_timeout=60.0, membership_timeout=60.0
    )
    caplog.set_level(logging.WARNING, logger="shardq.worker")
    with Runner(url, queue, {"stuck": stuck}, worker_settings=slow_heartbeat):
        job_id = client.enqueue(queue, "stuck", None, timeout=0.3, max_attempts=1, keep_result=60)
        # Failed while its thread still blocks (not when it ended), on its own timer (the
        # watchdog looks every 10 s: only a round falling in the instant between the timeout
        # and the timer could have failed it first).
        with pytest.raises(JobFailedError, match=r"ran over its timeout \(0\.3 s\)"):
            client.result(queue, job_id, timeout=scaled(10))
        release.set()
        wait_for(lambda: "job.overran" in caplog.text, 10, "the overrun was not logged")
    assert job_id in caplog.text


def test_a_sync_handlers_own_timeout_error_is_its_failure_not_a_timeout(
    url: str, client: Client, queue: str
) -> None:
    """A sync handler with a timeout that raises TimeoutError itself (a socket's, say) fails
    with that error and its message, not as having run over its timeout."""
    client.create_queue(queue, partitions=2)

    def calls_out(job: Job) -> None:
        raise TimeoutError("upstream did not answer")

    with Runner(url, queue, {"c": calls_out}):
        job_id = client.enqueue(queue, "c", None, timeout=5.0, max_attempts=1, keep_result=60)
        with pytest.raises(JobFailedError, match="upstream did not answer") as failed:
            client.result(queue, job_id, timeout=scaled(10))
    assert "ran over" not in str(failed.value)
