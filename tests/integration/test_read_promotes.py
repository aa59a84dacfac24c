"""Workers promote what they read (lua/fetch-9.lua): a worker reads its assigned partition
when the head comes due and the read moves the due jobs to the ready stream first, so the
dispatcher's promote is left to what no worker reads in time (shardq/dispatcher/promoter.py)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from support.helpers import Runner, wait_for

from shardq import JobRequest
from shardq.client import Client
from shardq.jobs import Job
from shardq.store import keys
from shardq.store.transport import SyncTransport


def test_workers_promote_what_they_read_and_the_dispatcher_backs_them_up(
    url: str, client: Client, queue: str
) -> None:
    """Jobs coming due over 2 s on 4 partitions run, each once, promoted by the worker's reads
    (the partitions' 'promoted' counters count every job, the dispatcher's own count almost
    none: its promotes wait a budget after the head and yield while reads take the jobs)."""
    client.create_queue(queue, partitions=4)
    ran: Counter[str] = Counter()

    def handler(job: Job) -> None:
        ran[job.id] += 1

    with Runner(url, queue, {"t": handler}) as runner:
        now = time.time()
        ids = [
            r.job_id
            for r in client.enqueue_many(
                queue, [JobRequest("t", i, run_at=now + 0.5 + i * 0.01) for i in range(200)]
            )
        ]
        wait_for(lambda: len(ran) == 200, 20, "not every job ran")
        promoter = runner.dispatcher.promoter  # type: ignore[union-attr]
        assert promoter is not None
        by_dispatcher = promoter.promoted
    assert set(ran) == set(ids) and set(ran.values()) == {1}
    layout = client.layout(queue)
    promoted = sum(int(client.redis.hget(pk.stats, "promoted") or 0) for pk in layout.active())
    assert promoted == 200
    # Most by the reads (without them the dispatcher promotes all 200).  Not "almost none":
    # on a loaded box a read can come after the dispatcher's budget (20-29 of 200 seen at a
    # load average of 8 on the 2 cores, before and after a change to the fetcher alike).
    assert by_dispatcher < 100, f"the dispatcher promoted {by_dispatcher} of 200"


def test_a_partition_no_worker_reads_is_promoted_by_the_dispatcher(
    url: str, client: Client, queue: str
) -> None:
    """No worker runs: the dispatcher promotes due jobs itself, a budget (plus at most its
    yield) after they are due, and hints them."""
    client.create_queue(queue, partitions=2)
    with Runner(url, queue, {}, workers=0) as runner:
        client.enqueue_many(queue, [JobRequest("t", i, delay=0.2) for i in range(10)])
        layout = client.layout(queue)

        def ready() -> int:
            return sum(client.redis.xlen(pk.ready) for pk in layout.active())

        wait_for(lambda: ready() == 10, 10, "the dispatcher did not promote them")
        promoter: Any = runner.dispatcher.promoter  # type: ignore[union-attr]
        # Counted when its replies are read, a moment after Redis made the entries.
        wait_for(lambda: promoter.promoted == 10, 5, lambda: f"promoted {promoter.promoted}")
    assert all(client.redis.zcard(pk.due) == 0 for pk in keys.all_partition_keys(queue, 2))


def test_a_read_writes_the_envelopes_of_what_it_promotes_once(client: Client, queue: str) -> None:
    """A read that promotes (as many as it reads) writes a compact job's envelope once: running
    (attempt 1) for the jobs it hands out, waiting (attempt 0) for one it promoted but did not
    reach because an older ready entry came first; that one runs later as attempt 1, its body
    whole."""
    from shardq.store import delivery

    client.create_queue(queue, partitions=1)
    pk = keys.partition_keys(queue, 0, 1)
    older = client.enqueue(queue, "t", "older")  # due at once: straight to the ready stream
    now = time.time()
    reqs = [JobRequest("t", f"job {i}", run_at=now + 0.3 + i * 0.01) for i in range(3)]
    ids = [r.job_id for r in client.enqueue_many(queue, reqs)]
    time.sleep(0.45)
    r = client.redis
    first = SyncTransport(r).run(delivery.fetch(pk, "w1", 2, promote=True))
    assert [j.raw_id.decode() for j in first.jobs] == [older, ids[0]]
    assert [j.attempt for j in first.jobs] == [1, 1]
    assert first.jobs[1].body == r.hget(pk.jobs, ids[0]).split(b"|", 1)[1]
    assert r.hget(pk.jobs, ids[0]).startswith(b"A1|")
    # ids[1] was promoted (the read promotes as many as it reads) but not read: waiting.
    assert r.hget(pk.jobs, ids[1]).startswith(b"S0|")
    assert [client.get(queue, i).state for i in ids] == ["running", "ready", "scheduled"]
    second = SyncTransport(r).run(delivery.fetch(pk, "w1", 10, promote=True))
    assert [j.raw_id.decode() for j in second.jobs] == ids[1:]
    assert [j.attempt for j in second.jobs] == [1, 1]
    assert [j.body for j in second.jobs] == [r.hget(pk.jobs, i).split(b"|", 1)[1] for i in ids[1:]]
    assert b"job 1" in second.jobs[0].body and b"job 2" in second.jobs[1].body
    assert r.zcard(pk.due) == 0


def test_a_read_refused_for_want_of_a_group_keeps_what_it_promoted(
    client: Client, queue: str
) -> None:
    """The ready stream deleted by hand (its group with it): a read that promotes re-creates the
    stream by its XADDs, then its XREADGROUP is refused (NOGROUP). The jobs it promoted wait
    there with their envelopes, and run, bodies whole, once the worker has made the group
    again (from the start)."""
    import pytest
    from redis.exceptions import ResponseError

    from shardq.store import delivery, queues

    client.create_queue(queue, partitions=1)
    pk = keys.partition_keys(queue, 0, 1)
    now = time.time()
    reqs = [JobRequest("t", f"job {i}", run_at=now + 0.2 + i * 0.01) for i in range(2)]
    ids = [r.job_id for r in client.enqueue_many(queue, reqs)]
    time.sleep(0.35)
    r = client.redis
    r.delete(pk.ready)
    with pytest.raises(ResponseError, match="NOGROUP"):
        SyncTransport(r).run(delivery.fetch(pk, "w1", 10, promote=True))
    assert r.zcard(pk.due) == 0 and r.xlen(pk.ready) == 2
    assert [r.hget(pk.jobs, i)[:3] for i in ids] == [b"S0|", b"S0|"]
    SyncTransport(r).run(queues.group_create(pk))
    got = SyncTransport(r).run(delivery.fetch(pk, "w1", 10, promote=True))
    assert [j.raw_id.decode() for j in got.jobs] == ids
    assert [j.attempt for j in got.jobs] == [1, 1]
    assert [b"job 0" in j.body for j in got.jobs] == [True, False]
    assert b"job 1" in got.jobs[1].body


def test_a_worker_reads_a_run_due_within_its_share_in_one_call(
    url: str, client: Client, queue: str
) -> None:
    """Runs of 2 and of 16 jobs, each due within 3 ms (less than the worker's 5 ms share of the
    default budget), alternate 300 ms apart on one partition: each run costs one read.  The
    reply of a read counts the jobs due by the next one (fetch-9's ARGV[5]), so the read
    after a run of 2 asks for 16 and more, not for twice the 2 it last brought (then the
    rest at once: two reads for every run of 16, as before)."""
    from dataclasses import replace

    from support.helpers import FAST_WORKER

    client.create_queue(queue, partitions=1)
    ran: Counter[str] = Counter()

    def handler(job: Job) -> None:
        ran[job.id] += 1

    # No idle polls between runs: every read is a run's.
    settings = replace(FAST_WORKER, idle_poll=10.0)
    runs = [2, 16] * 4
    with Runner(url, queue, {"t": handler}, worker_settings=settings) as runner:
        worker = runner.workers[0]
        wait_for(lambda: worker.stats.fetches > 0, 10, "the worker never read")
        start = time.time() + 1.0
        reqs = [
            JobRequest("t", f"{i}-{j}", run_at=start + 0.3 * i + 0.003 * j / max(1, n - 1))
            for i, n in enumerate(runs)
            for j in range(n)
        ]
        client.enqueue_many(queue, reqs)
        # Reads made before the first run is due (the one that saw the enqueue) don't count.
        time.sleep(max(0.0, start - 0.05 - time.time()))
        before = worker.stats.fetches
        wait_for(lambda: len(ran) == len(reqs), 20, lambda: f"{len(ran)} of {len(reqs)} ran")
        reads = worker.stats.fetches - before
    assert set(ran.values()) == {1}
    # One read per run; one more may come from a run's acks or a slow box.
    assert reads <= len(runs) + 2, f"{reads} reads for {len(runs)} runs"
