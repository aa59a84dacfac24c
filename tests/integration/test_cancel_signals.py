"""Running cancels are told, not trusted (issue 50: item 11 and security finding M6).

A cancel of a running job (lua/cancel-7.lua) removes its envelope, records it in the
partition's cancels set and publishes 'cancel:<id>' on the ready-hint channel.  The message
alone stops the job (heartbeats far apart here); but a message or a set member is no proof:
any role may publish there and a producer may write the set, so the worker stops a job only
once a touch has read that its envelope is gone (lua/touch-3.lua).  Each forgery below runs
as a shipped role (shardq.admin.acl, the users of tests/integration/test_acl.py) against a
worker running as the worker role, and leaves the job unharmed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import pytest
from support.helpers import FAST_WORKER, Runner, counter_total, pending_total, scaled, wait_for
from test_acl import USERS, role_clients  # noqa: F401 - the fixture: one client per role

from shardq.client import Client
from shardq.jobs import Backoff, Job
from shardq.store import keys
from shardq.store.op import op

# The message alone: heartbeats (and the touches that look for cancels) far apart, the first
# a whole interval after the start, far past the wait for the stop.
SLOW_BEATS = replace(
    FAST_WORKER,
    heartbeat_interval=scaled(60.0),
    visibility_timeout=scaled(180.0),
    membership_timeout=scaled(180.0),
)


def role_url(cluster_url: str, role: str) -> str:
    """``cluster_url`` logged in as the role's user of the role_clients fixture."""
    name, password = USERS[role]
    return f"redis://{name}:{password}@{urlsplit(cluster_url).netloc}"


class Held:
    """An async handler that holds its job until released; records how each run ended."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.runs: list[tuple[str, int]] = []
        self.ends: list[str] = []

    async def __call__(self, job: Job) -> str:
        self.runs.append((job.id, job.attempt))
        self.started.set()
        try:
            while not self.release.is_set():
                await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            self.ends.append("cancelled")
            raise
        self.ends.append("finished")
        return "ok"


@pytest.fixture
def one_partition(cluster_client: Client, queue: str) -> Iterator[keys.PartitionKeys]:
    cluster_client.create_queue(queue, 1)
    yield keys.partition_keys(queue, 0, 1)


@dataclass
class Roles:
    """A queue of one partition, a client per shipped role, the worker role's URL, and the
    admin's raw connection (for reading what Redis holds)."""

    queue: str
    pk: keys.PartitionKeys
    clients: dict[str, Client]
    worker_url: str
    r: Any


@pytest.fixture
def roles(
    cluster_url: str,
    cluster_client: Client,
    queue: str,
    one_partition: keys.PartitionKeys,
    role_clients: dict[str, Client],  # noqa: F811
) -> Roles:
    return Roles(
        queue, one_partition, role_clients, role_url(cluster_url, "worker"), cluster_client.redis
    )


def _touched_since(r: Any, pk: keys.PartitionKeys, since: float) -> bool:
    """A heartbeat touched the partition's one delivery after ``since`` (time.time()): its idle
    time started after it."""
    [entry] = r.xpending_range(pk.ready, keys.WORKER_GROUP, "-", "+", 1)
    return bool(entry["time_since_delivered"] < (time.time() - since) * 1000)


def _two_heartbeats(r: Any, pk: keys.PartitionKeys) -> None:
    """Wait for two heartbeats of the running delivery from now: the first has acted on what
    its touch answered once the second comes."""
    for _ in range(2):
        since = time.time()
        time.sleep(0.01)
        wait_for(lambda t=since: _touched_since(r, pk, t), 5, "no heartbeat touched it")


def test_the_cancel_message_alone_stops_a_running_job(
    cluster_url: str, cluster_client: Client, queue: str, one_partition: keys.PartitionKeys
) -> None:
    """Item 11: with heartbeats a minute apart, the publish alone (and the one touch it makes
    to read that the envelope is gone) stops the handler, well within a heartbeat."""
    client = cluster_client
    held = Held()
    with Runner(cluster_url, queue, {"hold": held}, worker_settings=SLOW_BEATS):
        job_id = client.enqueue(queue, "hold", None)
        wait_for(held.started.is_set, 10, "the handler did not start")
        assert client.cancel(queue, job_id, running=True)
        wait_for(lambda: held.ends == ["cancelled"], 5, "the message did not stop the job")
        wait_for(lambda: pending_total(client.redis, queue, 1) == 0, 10, "not settled")
    assert counter_total(client.redis, queue, 1, "cancelled") == 1
    assert counter_total(client.redis, queue, 1, "dead") == 0


def test_forged_cancel_messages_and_set_members_harm_no_job(roles: Roles) -> None:
    """M6: a dispatcher publishes 'cancel:<id>' for a running job and a producer adds its id
    to the cancels set, now and at +inf; the job runs to its end, and a later run of the same
    id is not killed by the +inf member either."""
    queue, pk, r = roles.queue, roles.pk, roles.r
    producer, dispatcher = roles.clients["producer"], roles.clients["dispatcher"]
    held = Held()
    with Runner(roles.worker_url, queue, {"hold": held}, dispatcher=False) as runner:
        worker = runner.workers[0]
        job_id = producer.enqueue(queue, "hold", None, keep_result=60)
        wait_for(held.started.is_set, 10, "the handler did not start")
        dispatcher.redis.spublish(pk.ready_hint, f"cancel:{job_id}")
        wait_for(
            lambda: held.ends or getattr(worker.stats, "cancels_ignored", 0) >= 1,
            5,
            "the message was not looked at",
        )
        assert held.ends == []
        producer.redis.zadd(pk.cancels, {job_id: float("inf")})
        forged = time.time()
        producer.redis.zadd(pk.cancels, {job_id: int(forged * 1000)})
        _two_heartbeats(r, pk)
        assert held.ends == []
        held.release.set()
        assert producer.result(queue, job_id, timeout=scaled(10)) == "ok"
        # The same id enqueued again: held through two heartbeats with the +inf member there.
        held.release.clear()
        held.started.clear()
        assert producer.enqueue(queue, "hold", None, job_id=job_id) == job_id
        wait_for(held.started.is_set, 10, "the second run did not start")
        _two_heartbeats(r, pk)
        assert held.ends == ["finished"]
        held.release.set()
        wait_for(lambda: counter_total(r, queue, 1, "completed") == 2, 10, "not completed")
    assert held.ends == ["finished", "finished"]
    assert r.zscore(pk.cancels, job_id) is not None  # the forgeries are still there
    assert counter_total(r, queue, 1, "cancelled") == 0
    assert counter_total(r, queue, 1, "dead") == 0


def test_forged_members_push_no_real_cancel_out_and_the_set_stays_bounded(roles: Roles) -> None:
    """M6: a producer fills the cancels set with 1,000 members scored in the future and 1,500
    of the last hour; then a real running cancel whose publish nobody hears (the cancel
    function called by the producer with a channel no worker listens on) still stops the job
    at the next heartbeat, and the cancel leaves the set clamped to the Redis clock and at most
    1,000 members."""
    queue, pk, r = roles.queue, roles.pk, roles.r
    producer = roles.clients["producer"]
    held = Held()
    now_ms = int(time.time() * 1000)
    with Runner(roles.worker_url, queue, {"hold": held}, dispatcher=False) as runner:
        job_id = producer.enqueue(queue, "hold", None)
        wait_for(held.started.is_set, 10, "the handler did not start")
        future = {f"forged-f{i}": now_ms + 3_600_000 + i for i in range(1000)}
        past = {f"forged-p{i}": now_ms - 3_600_000 + i for i in range(1500)}
        producer.redis.zadd(pk.cancels, future)
        producer.redis.zadd(pk.cancels, past)
        unheard = op(
            "cancel",
            [pk.jobs, pk.due, pk.errors, pk.stats, pk.ctl, pk.moving, pk.cancels],
            [job_id, "1", pk.ready_hint + ":nobody"],
            lambda reply: reply,
        )
        assert producer.transport.run(unheard) == [1, 2]
        wait_for(lambda: held.ends == ["cancelled"], 5, "the heartbeat did not stop the job")
        wait_for(lambda: pending_total(r, queue, 1) == 0, 10, "not settled")
        runner.check()
    assert r.zcard(pk.cancels) == 1000
    assert r.zscore(pk.cancels, job_id) is not None
    assert not r.zrangebyscore(pk.cancels, f"({int(time.time() * 1000)}", "+inf")
    assert counter_total(r, queue, 1, "cancelled") == 1
    assert counter_total(r, queue, 1, "dead") == 0


def test_a_job_cut_short_whose_envelope_remains_is_retried_not_dead(roles: Roles) -> None:
    """M6: the worker cuts a job short only after reading that its envelope is gone; should
    the envelope be there when it settles (the id stored again in between), that job was not
    the one cancelled.  Forced here: the worker's executor stops a job whose envelope stays.
    It is retried (and runs to its end), never dead-lettered."""
    queue, r = roles.queue, roles.r
    producer = roles.clients["producer"]
    held = Held()
    with Runner(roles.worker_url, queue, {"hold": held}, dispatcher=False) as runner:
        worker = runner.workers[0]
        job_id = producer.enqueue(
            queue, "hold", None, keep_result=60, backoff=Backoff("fixed", 0.1)
        )
        wait_for(held.started.is_set, 10, "the handler did not start")
        assert runner.loop is not None and worker.fetcher is not None
        executor = worker.fetcher.executor
        runner.loop.call_soon_threadsafe(executor.cancel_running, 0, job_id)
        wait_for(lambda: len(held.runs) == 2, 10, lambda: f"runs {held.runs}, ends {held.ends}")
        held.release.set()
        assert producer.result(queue, job_id, timeout=scaled(10)) == "ok"
    assert held.runs == [(job_id, 1), (job_id, 2)]
    assert held.ends == ["cancelled", "finished"]
    assert counter_total(r, queue, 1, "dead") == 0
    assert counter_total(r, queue, 1, "retried") == 1
