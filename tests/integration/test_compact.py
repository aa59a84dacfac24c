"""Compact waiting jobs (queue layout 3, lua/includes/compact.lua): a job with a timed id waits
as one due-set member '<id> <body>' with no jobs-hash entry.  Every operation that takes a job
id finds it, also among thousands of jobs due the same millisecond (the binary-search path);
resends and duplicate ids are told apart; promotion gives it a normal envelope; a queue of
layout 2 keeps the plain layout until upgraded; a producer whose clock estimate is off stores
plain jobs at the exact time rather than misplacing them."""

from __future__ import annotations

import random
import time

import pytest
from click.testing import CliRunner
from support.helpers import Runner, Runs, queue_settled, stored_envelope, text, wait_for

from shardq import Inspector, JobRequest
from shardq.cli import main as cli
from shardq.client import Client
from shardq.errors import BulkEnqueueError, DuplicateJobError, JobNotScheduledError
from shardq.jobs import ids, timed_id_due
from shardq.store import fleet, keys, producer
from shardq.store.clock import REDIS_CLOCK


def _members(client: Client, pk: keys.PartitionKeys) -> list[tuple[bytes, float]]:
    return list(client.redis.zrange(pk.due, 0, -1, withscores=True))


def _compact_ids(client: Client, queue: str, partitions: int) -> set[str]:
    out = set()
    for pk in keys.all_partition_keys(queue, partitions):
        for member, _ in _members(client, pk):
            if b" " in member:
                out.add(text(member.split(b" ", 1)[0]))
    return out


@pytest.mark.parametrize("same_instant", [3, 300], ids=["few-at-once", "many-at-once"])
def test_every_operation_by_id_finds_a_compact_job(
    client: Client, queue: str, same_instant: int
) -> None:
    """``same_instant`` jobs share each due ms: 3 takes the scan path, 300 the binary search
    (more than 8 members of one score)."""
    client.create_queue(queue, 1)
    assert client.compact(queue)
    at = time.time() + 3600
    reqs = [JobRequest("t", {"n": i}, run_at=at + (i % 2)) for i in range(2 * same_instant)]
    ids = [r.job_id for r in client.enqueue_many(queue, reqs)]
    pk = keys.partition_keys(queue, 0, 1)
    assert client.redis.hlen(pk.jobs) == 0 and _compact_ids(client, queue, 1) == set(ids)
    assert {timed_id_due(i) for i in ids} == {round(at * 1000), round(at * 1000) + 1000}
    picked = random.sample(ids, 5)
    for job_id in ids:
        info = client.get(queue, job_id)
        assert (
            info is not None and info.state == "scheduled" and info.due_ms == timed_id_due(job_id)
        )
        assert info.payload == {"n": ids.index(job_id)}
    # An id that looks timed but was never stored, at a busy instant: a miss, not a neighbour.
    ghost = ids[0][:8] + "z" * 12
    assert client.get(queue, ghost) is None and client.cancel(queue, ghost) is False
    cancelled, moved, forced = picked[0], picked[1], picked[2]
    assert client.cancel(queue, cancelled) is True
    assert client.get(queue, cancelled) is None and client.cancel(queue, cancelled) is False
    new_due = client.reschedule(queue, moved, delay=7200)
    info = client.get(queue, moved)
    assert info is not None and info.due_ms == new_due and info.payload == {"n": ids.index(moved)}
    assert client.redis.zscore(pk.due, moved) == new_due  # plain now: the id no longer tells
    assert Inspector(client).run_now(queue, forced) == "scheduled"
    assert client.redis.zscore(pk.due, forced) is not None
    # Listing pages through compact and plain members alike, in (due, id) order, each once.
    seen: list[tuple[int, str]] = []
    cursor = None
    while True:
        page = Inspector(client).list_jobs(queue, "scheduled", limit=7, cursor=cursor)
        seen += [(j.due_ms or 0, j.id) for j in page.jobs]
        for j in page.jobs:
            assert j.type == "t" and j.payload is not None
        cursor = page.cursor
        if cursor is None:
            break
    assert sorted(seen) == seen and {i for _, i in seen} == set(ids) - {cancelled}
    assert len(seen) == len(ids) - 1
    # Emptying the scheduled state takes compact members too, and leaves nothing behind.
    assert Inspector(client).empty(queue, "scheduled") == len(ids) - 1
    assert client.redis.zcard(pk.due) == 0 and client.redis.hlen(pk.jobs) == 0


@pytest.mark.parametrize("same_instant", [1, 50], ids=["alone", "crowded"])
def test_resends_and_duplicate_ids_of_compact_jobs(
    client: Client, queue: str, same_instant: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resend of the very call (a lost reply) is recognised by its own member; the job sent
    again with its id filled in (BulkEnqueueError.retry_requests, a caller's own id) is found
    by the id search, also among many jobs of the same ms; another body under it is refused."""
    client.create_queue(queue, 1)
    at = time.time() + 600
    client.enqueue_many(queue, [JobRequest("t", i, run_at=at) for i in range(same_instant - 1)])
    pk = keys.partition_keys(queue, 0, 1)
    sent: list[producer.PreparedEnqueue] = []
    prepare = producer.prepare_enqueue

    def keep(*args: object) -> producer.PreparedEnqueue:
        sent.append(prepare(*args))  # type: ignore[arg-type]
        return sent[-1]

    monkeypatch.setattr(producer, "prepare_enqueue", keep)
    first = client.enqueue_detailed(queue, JobRequest("t", "x", run_at=at))
    job_id = first.job_id
    assert first.created and first.due_ms == round(at * 1000) == timed_id_due(job_id)
    assert stored_envelope(client.redis, pk, job_id) == b'S0|["t","x"]'
    assert client.redis.hget(pk.jobs, job_id) is None
    # The same call sent again, as the retry layer does after a lost reply.
    [op] = [p.op() for p in sent]
    again = client.transport.run(op)
    assert again.created and again.due_ms is None
    assert client.redis.zcard(pk.due) == same_instant
    # Sent again with its id filled in (the plain modes): found by the id, not stored twice.
    resent = client.enqueue_detailed(queue, JobRequest("t", "x", job_id=job_id, run_at=at))
    assert resent.created and resent.due_ms is None
    [bulk] = client.enqueue_many(queue, [JobRequest("t", "x", job_id=job_id, delay=900)])
    assert bulk.created and bulk.due_ms is None
    # Another body under the id: refused, whichever way it is sent; nothing written.
    before = _members(client, pk)
    with pytest.raises(DuplicateJobError):
        client.enqueue(queue, "t", "y", job_id=job_id, run_at=at)
    with pytest.raises(DuplicateJobError):
        client.enqueue(queue, "t", "y", job_id=job_id, delay=900)
    with pytest.raises(BulkEnqueueError):
        client.enqueue_many(queue, [JobRequest("t", "y", job_id=job_id, run_at=at)])
    assert _members(client, pk) == before
    assert client.redis.hlen(pk.jobs) == 0


def test_compact_jobs_run_once_with_their_priority_and_tenant(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """Through a real dispatcher and worker, lanes on: promotion writes the envelope the worker
    reads; every job runs once and keeps its level and tenant."""
    client = cluster_client
    client.create_queue(queue, 4, lanes=True)
    at = time.time() + 1.5
    reqs = [
        JobRequest("t", i, run_at=at + (i % 5) / 10, priority="high" if i % 3 else "low",
                   tenant=f"ten{i % 4}")
        for i in range(400)
    ]  # fmt: skip
    ids = [r.job_id for r in client.enqueue_many(queue, reqs)]
    assert _compact_ids(client, queue, 4) == set(ids)
    assert sum(client.redis.hlen(pk.jobs) for pk in keys.all_partition_keys(queue, 4)) == 0
    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}):
        wait_for(lambda: set(runs.count()) == set(ids), 60, "compact jobs did not all run")
        wait_for(lambda: queue_settled(client.redis, queue, 4), 30, "not settled")
    assert max(runs.count().values()) == 1
    by_id = {j.id: j for j in runs.jobs}
    for i, job_id in enumerate(ids):
        job = by_id[job_id]
        assert (job.payload, job.priority, job.tenant) == (
            i,
            "high" if i % 3 else "low",
            f"ten{i % 4}",
        )


def test_a_layout_2_queue_keeps_the_plain_layout_until_upgraded(
    url: str, client: Client, queue: str
) -> None:
    client.create_queue(queue, 2)
    client.redis.hset(keys.queue_meta_key(queue), "layout", 2)  # as an older shardq made it
    client.forget(queue)
    assert not client.compact(queue)
    plain = client.enqueue(queue, "t", 1, delay=60)
    assert len(plain) == 12 and timed_id_due(plain) is None
    assert _compact_ids(client, queue, 2) == set()
    out = CliRunner().invoke(cli, ["queue", "upgrade", "-q", queue, "--url", url])
    assert out.exit_code == 0 and f"layout 2 -> {keys.LAYOUT_VERSION}" in out.output, out.output
    client.forget(queue)
    assert client.compact(queue) and client.upgrade_queue(queue) == keys.LAYOUT_VERSION
    timed = client.enqueue(queue, "t", 2, delay=60)
    assert _compact_ids(client, queue, 2) == {timed}
    assert client.get(queue, plain) is not None and client.get(queue, timed) is not None


def _redis_ms(client: Client) -> int:
    seconds, micros = client.redis.time()  # type: ignore[misc]
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_producer_clock_far_off_stores_plain_jobs_at_the_redis_time(
    client: Client, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The id carries the producer's estimate of the Redis clock; when it is further than
    TIMED_SLACK_MS from the script's own now + delay, the job is stored plainly at now +
    delay (the id's time would misplace it)."""
    client.create_queue(queue, 1)
    client.enqueue(queue, "t", 0, delay=60)  # learn the offset
    pk = keys.partition_keys(queue, 0, 1)
    close = client.enqueue_detailed(queue, JobRequest("t", 1, delay=60))
    assert close.due_ms == timed_id_due(close.job_id)
    monkeypatch.setattr(REDIS_CLOCK, "offset_ms", REDIS_CLOCK.offset_ms + 5000)
    before_ms = _redis_ms(client)
    far = client.enqueue_detailed(queue, JobRequest("t", 2, delay=60))
    after_ms = _redis_ms(client)
    # at the script's own now + delay: between the Redis clock before and after the call
    assert far.due_ms is not None and before_ms + 60_000 <= far.due_ms <= after_ms + 60_000
    assert timed_id_due(far.job_id) != far.due_ms
    assert client.redis.zscore(pk.due, far.job_id) == far.due_ms  # plain layout
    assert client.get(queue, far.job_id).due_ms == far.due_ms  # type: ignore[union-attr]
    # The next reply corrected the estimate: compact again.
    again = client.enqueue_detailed(queue, JobRequest("t", 3, delay=60))
    assert again.due_ms == timed_id_due(again.job_id)


def test_a_compact_job_due_already_is_not_rescheduled_twice(client: Client, queue: str) -> None:
    """Reschedule of a compact job moves it once; once promoted it is no longer scheduled."""
    client.create_queue(queue, 1)
    job_id = client.enqueue(queue, "t", 1, delay=3600)
    due = client.reschedule(queue, job_id, delay=1800)
    assert client.reschedule(queue, job_id, delay=1800) >= due
    pk = keys.partition_keys(queue, 0, 1)
    assert client.redis.zcard(pk.due) == 1 and _compact_ids(client, queue, 1) == set()
    client.redis.zadd(pk.due, {job_id: 0})  # overdue: the next promote takes it
    grant = client.transport.run(fleet.lease_acquire(pk, "d", 10_000))
    client.transport.run(fleet.promote(pk, grant.token, 10, 10_000))
    with pytest.raises(JobNotScheduledError):
        client.reschedule(queue, job_id, delay=10)


def test_a_body_that_would_cost_more_compact_waits_plain(client: Client, queue: str) -> None:
    """The member string is 18 bytes longer than the plain envelope: where that crosses one of
    jemalloc's allocation classes (a 1,000-byte payload: 1,280 bytes against 1,024) the saved
    hash entry does not pay for it, and the producer picks the plain layout."""
    assert [ids._allocation(n) for n in (8, 9, 100, 129, 161, 257, 1019, 1037)] == [
        8, 16, 112, 160, 192, 320, 1024, 1280,
    ]  # fmt: skip
    client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    small = client.enqueue(queue, "t", "x" * 20, delay=60)
    unlucky = client.enqueue(queue, "t", "x" * 1000, delay=60)
    large = client.enqueue(queue, "t", "x" * 1100, delay=60)
    [bulk_unlucky] = client.enqueue_many(queue, [JobRequest("t", "y" * 1000, delay=60)])
    assert timed_id_due(small) and timed_id_due(large)
    assert len(unlucky) == 12 and len(bulk_unlucky.job_id) == 12
    assert _compact_ids(client, queue, 1) == {small, large}
    assert client.redis.hget(pk.jobs, unlucky).startswith(b"S0|")
