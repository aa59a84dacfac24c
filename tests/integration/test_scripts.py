"""The Lua loader (one Functions library), the scripts' headers, and transparent recovery from a
node that lost the library (without Redis: tests/unit/test_scripts_loader.py)."""

from __future__ import annotations

import time

import pytest
import redis
from support.helpers import Runner, primaries, wait_for

from shardq import JobRequest
from shardq.client import Client
from shardq.errors import ScriptArgumentError
from shardq.jobs import Job
from shardq.store import keys, loader
from shardq.store.codes import check
from shardq.store.op import op, raw
from shardq.store.transport import SyncTransport


def test_the_library_loads_and_registers_every_function(client: Client) -> None:
    node = primaries(client.redis)[0]
    lib = loader.library()
    try:
        node.execute_command("FUNCTION", "LOAD", lib.code)
    except redis.ResponseError as exc:
        assert "already exists" in str(exc)
    [info] = node.execute_command("FUNCTION", "LIST", "LIBRARYNAME", lib.name)
    assert info[b"library_name"] == lib.name.encode()
    registered = {
        f[b"name"].decode(): {flag.decode() for flag in f[b"flags"]} for f in info[b"functions"]
    }
    assert registered == {s.function: set(s.flags) for s in loader.scripts().values()}
    # What runs at maxmemory and what is refused there is declared, not left to chance.
    refused = {s.name for s in loader.scripts().values() if not s.flags}
    # (jobs that come back or come new: they add memory, like an enqueue)
    assert refused == {
        "enqueue",
        "enqueue-batch",
        "dlq-replay",
        "queue-create",
        "run-now",
        "schedule-fire",
        "schedule-put",
        "resize-put",  # (a resize's put adds memory where it lands)
        "progress",  # (advisory: a report adds a key; a full Redis drops it, the job runs on)
        "batch-open",  # (a new batch, and children added to one: new work)
        "batch-add",
    }


def _flush_scripts(client: Client) -> None:
    for node in primaries(client.redis):
        node.execute_command("FUNCTION", "FLUSH")  # a running dispatcher/worker reloads it


def test_a_flushed_library_is_loaded_again_by_run_and_run_many(
    url: str, client: Client, queue: str
) -> None:
    partitions = 8
    client.create_queue(queue, partitions)
    ran: list[str] = []

    def handler(job: Job) -> None:
        ran.append(job.id)

    with Runner(url, queue, {"t": handler}):
        first = client.enqueue(queue, "t", {"n": 0})
        wait_for(lambda: first in ran, 10, "warm-up job did not run")

        # The dispatcher and worker have their scripts cached; the cache goes away under them.
        _flush_scripts(client)
        single = client.enqueue(queue, "t", {"n": 1}, delay=0.2)  # one call
        assert client.get(queue, single) is not None

        _flush_scripts(client)
        bulk = client.enqueue_many(  # one pipeline per node
            queue, [JobRequest("t", {"n": i}, delay=0.2) for i in range(40)]
        )
        assert all(r.created for r in bulk)
        assert all(client.get(queue, r.job_id) is not None or r.job_id in ran for r in bulk)

        expected = {single, *(r.job_id for r in bulk)}
        wait_for(lambda: expected <= set(ran), 15, lambda: f"{len(expected - set(ran))} not run")

        _flush_scripts(client)  # and once more while the worker is idle and the queue empty
        last = client.enqueue(queue, "t", delay=0.1)
        wait_for(lambda: last in ran, 10, "job after the last flush did not run")
    assert sorted(ran) == sorted({first, last, *expected})
    for pk in keys.all_partition_keys(queue, partitions):
        assert client.redis.hlen(pk.jobs) == 0


@pytest.mark.parametrize("name", sorted(loader.scripts()))
def test_every_function_refuses_more_arguments_than_its_cap_before_anything(
    standalone_client: Client, name: str
) -> None:
    """The cap (the header's ARGV count, or its Max ARGV line) and the KEYS count are checked
    first of all, by the loader's guard: a longer call writes nothing, whatever the script."""
    from shardq.store import functions

    r = standalone_client.redis
    functions.load_everywhere(r)
    lua = loader.script(name)
    tag = "{caps-" + name + "}:"
    names = [f"{tag}k{i}" for i in range(lua.num_keys)]
    over = ["1"] * (lua.max_argv + 1)
    reply = r.execute_command("FCALL", lua.function, lua.num_keys, *names, *over)
    assert reply == [-15, b"ARGV", lua.max_argv + 1, lua.max_argv], reply
    extra = [*names, *(f"{tag}extra{i}" for i in range(lua.max_keys - lua.num_keys + 1))]
    reply = r.execute_command("FCALL", lua.function, len(extra), *extra, *over[:1])
    assert reply == [-15, b"KEYS", lua.max_keys + 1, lua.max_keys], reply
    assert not list(r.scan_iter(match=tag + "*"))
    with pytest.raises(ScriptArgumentError, match="at most"):
        check(reply)
    with pytest.raises(ValueError, match=f"at most {lua.max_argv} arguments"):
        op(name, names, over, raw)


def test_a_worker_holding_more_than_one_call_carries_acks_them_in_chunks(
    standalone_client: Client, queue: str
) -> None:
    """2,500 finished deliveries of one partition: three ack calls within the cap, all settled."""
    import asyncio
    import logging

    from shardq.config import WorkerSettings
    from shardq.plans import one
    from shardq.runtime.supervisor import Supervisor
    from shardq.store import delivery
    from shardq.store.queues import read_meta
    from shardq.worker.context import WorkerContext
    from shardq.worker.inflight import Delivery, InFlight, WorkerStats
    from shardq.worker.settler import Settler

    client, r = standalone_client, standalone_client.redis
    client.create_queue(queue, 1)
    client.enqueue_many(queue, [JobRequest("t", i) for i in range(2500)])
    pk = keys.partition_keys(queue, 0, 1)
    inflight = InFlight(concurrency=10_000)
    ctx = WorkerContext(
        role="worker",
        queue=queue,
        member="c",
        redis=None,  # type: ignore[arg-type]  # take_acks builds the ops; they are run here
        transport=None,  # type: ignore[arg-type]
        meta=client.run(one(read_meta(queue)), "reading the meta"),
        pks={0: pk},
        pinned=None,
        settings=WorkerSettings(),
        supervisor=Supervisor("worker", queue),
        membership=None,
        stop=asyncio.Event(),
        log=logging.getLogger("test"),
        stats=WorkerStats(),
        inflight=inflight,
        handlers={},
        inline_types=set(),
    )
    settler = Settler(ctx, wake=lambda p: None)
    for _ in range(3):
        for got in SyncTransport(r).run(delivery.fetch(pk, "c", 1000)).jobs:
            d = Delivery(0, got.entry_id, got.raw_id, None)  # type: ignore[arg-type]
            inflight.add(d)
            settler.succeeded(d)
    assert inflight.count == 2500
    taken, ops = settler.take_acks([0])
    assert [len(batch) for _, batch in taken] == [1000, 1000, 500]
    assert all(len(o.argv) <= o.script.max_argv for o in ops)
    assert sum(SyncTransport(r).run_many(ops)) == 2500
    assert r.hlen(pk.jobs) == 0 and int(r.hget(pk.stats, "completed")) == 2500


def test_a_fetch_settles_the_acks_it_carries_first_once_and_even_while_paused(
    standalone_client: Client, queue: str
) -> None:
    """fetch-9's ARGV[6..]: a read carries its partition's acks (one call instead of ack + fetch).
    They settle as ack-4 settles them: envelopes dropped, counted once (a resend changes
    nothing), a paused partition's too; an odd pair count is refused before anything."""
    from shardq.store import delivery

    client, r = standalone_client, standalone_client.redis
    client.create_queue(queue, 1)
    client.enqueue_many(queue, [JobRequest("t", i) for i in range(4)])
    pk = keys.partition_keys(queue, 0, 1)
    first = SyncTransport(r).run(delivery.fetch(pk, "c", 2)).jobs
    acks = [(d.entry_id, d.raw_id) for d in first]
    second = SyncTransport(r).run(delivery.fetch(pk, "c", 2, acks)).jobs
    assert {d.raw_id for d in second}.isdisjoint(d.raw_id for d in first) and len(second) == 2
    assert r.hlen(pk.jobs) == 2 and int(r.hget(pk.stats, "completed")) == 2
    assert r.xpending(pk.ready, keys.WORKER_GROUP)["pending"] == 2
    # Sent again (its reply was lost): nothing more is settled or counted.
    assert SyncTransport(r).run(delivery.fetch(pk, "c", 2, acks)).jobs == []
    assert int(r.hget(pk.stats, "completed")) == 2
    # Paused: the read hands out nothing, the acks it carries still settle.
    r.hset(pk.ctl, "paused", "1")
    later = [(d.entry_id, d.raw_id) for d in second]
    assert SyncTransport(r).run(delivery.fetch(pk, "c", 2, later)).jobs == []
    assert r.hlen(pk.jobs) == 0 and int(r.hget(pk.stats, "completed")) == 4
    assert r.xpending(pk.ready, keys.WORKER_GROUP)["pending"] == 0
    # An entry id without its job id: refused, nothing written.
    r.hdel(pk.ctl, "paused")
    client.enqueue(queue, "t", 9)
    [d] = SyncTransport(r).run(delivery.fetch(pk, "c", 1)).jobs
    bad = op(
        "fetch",
        [*(pk.ready, pk.jobs, pk.dead, pk.errors, pk.stats), pk.lane, pk.vtime, pk.ctl, pk.due],
        [keys.WORKER_GROUP, "c", 1, "0", 0, d.entry_id],
        check,
    )
    with pytest.raises(ScriptArgumentError, match="argument count"):
        SyncTransport(r).run(bad)
    assert r.hlen(pk.jobs) == 1 and int(r.hget(pk.stats, "completed")) == 4
    with pytest.raises(ValueError, match="at most 1000 acks"):
        delivery.fetch(pk, "c", 1, [(b"1-1", b"x")] * 1001)


def test_a_promoting_fetch_counts_the_jobs_its_next_read_will_find(
    standalone_client: Client, queue: str
) -> None:
    """fetch-9's ARGV[5]: the reply counts the waiting jobs due by the next due time plus the
    horizon (the worker's share of the budget, when it reads next), so the worker reads a
    sticky run in one call; 0 when none waits, not known (None) when nothing was promoted or
    the partition is paused; a horizon out of range is refused before anything is written."""
    from shardq.store import delivery

    client, r = standalone_client, standalone_client.redis
    client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    head_ms = (int(time.time()) + 60) * 1000
    offsets = [0, 4, 9, 50, 5000]  # ms after the head
    client.enqueue_many(
        queue, [JobRequest("t", i, run_at=(head_ms + o) / 1000) for i, o in enumerate(offsets)]
    )
    for horizon, expected in [(0, 1), (4, 2), (10, 3), (49, 3), (50, 4), (86_400_000, 5)]:
        got = SyncTransport(r).run(delivery.fetch(pk, "c", 10, promote=True, horizon_ms=horizon))
        assert got.jobs == [] and got.next_due_ms == head_ms
        assert got.due_soon == expected, horizon
    plain = SyncTransport(r).run(delivery.fetch(pk, "c", 10, horizon_ms=50))
    assert plain.next_due_ms is None and plain.due_soon is None
    r.hset(pk.ctl, "paused", "1")
    paused = SyncTransport(r).run(delivery.fetch(pk, "c", 10, promote=True, horizon_ms=50))
    assert paused.next_due_ms is None and paused.due_soon is None
    r.hdel(pk.ctl, "paused")
    for bad in (-1, 86_400_001, "nan"):
        with pytest.raises(ScriptArgumentError):
            SyncTransport(r).run(delivery.fetch(pk, "c", 10, promote=True, horizon_ms=bad))  # type: ignore[arg-type]
    assert r.zcard(pk.due) == 5 and r.xlen(pk.ready) == 0
    # Everything due and read: none waits, none due soon.
    r.zadd(pk.due, {m: 0 for m in r.zrange(pk.due, 0, -1)})
    done = SyncTransport(r).run(delivery.fetch(pk, "c", 10, promote=True, horizon_ms=50))
    assert len(done.jobs) == 5 and done.next_due_ms == delivery.NONE_WAITS
    assert done.due_soon == 0


def test_a_fetch_that_promotes_first_moves_what_is_due_and_says_what_comes_next(
    standalone_client: Client, queue: str
) -> None:
    """fetch-9 with ARGV[4] = '1': the partition's due jobs (compact ones too) move to the ready
    stream as promote moves them, at most the read's count, and are read in the same call; the
    reply says when the next waiting job is due.  Not while paused, nor with lanes on (the
    lane is the dispatcher's to fill)."""
    from shardq.store import delivery

    client, r = standalone_client, standalone_client.redis
    client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    now = time.time()
    soon = client.enqueue_many(queue, [JobRequest("t", i, run_at=now + 0.3) for i in range(3)])
    later = client.enqueue(queue, "t", "later", run_at=now + 3600)
    assert r.xlen(pk.ready) == 0 and r.zcard(pk.due) == 4
    time.sleep(0.5)  # the first three are due now
    got = SyncTransport(r).run(delivery.fetch(pk, "c", 2, promote=True))
    assert len(got.jobs) == 2 and {d.raw_id.decode() for d in got.jobs} <= {p.job_id for p in soon}
    assert got.next_due_ms is not None and got.next_due_ms <= time.time() * 1000  # the third
    assert r.zcard(pk.due) == 2 and int(r.hget(pk.stats, "promoted")) == 2
    rest = SyncTransport(r).run(delivery.fetch(pk, "c", 10, promote=True))
    assert len(rest.jobs) == 1 and rest.jobs[0].attempt == 1
    assert rest.next_due_ms is not None and abs(rest.next_due_ms - (now + 3600) * 1000) < 1000
    # Every job read is stored as running, as after a promote and a read.
    info = client.get(queue, rest.jobs[0].raw_id.decode())
    assert info is not None and info.state == "running"
    # Without promote: nothing moves, the next due time is not known.
    plain = SyncTransport(r).run(delivery.fetch(pk, "c", 10))
    assert plain.jobs == [] and plain.next_due_ms is None
    # Paused, or lanes on: a read that asks to promote moves nothing.
    client.reschedule(queue, later, run_at=now - 1)
    r.hset(pk.ctl, "paused", "1")
    assert SyncTransport(r).run(delivery.fetch(pk, "c", 10, promote=True)).next_due_ms is None
    r.hdel(pk.ctl, "paused")
    r.hset(pk.ctl, "lanes", "1")
    assert SyncTransport(r).run(delivery.fetch(pk, "c", 10, promote=True)).jobs == []
    assert r.zcard(pk.due) == 1
    r.hdel(pk.ctl, "lanes")
    done = SyncTransport(r).run(delivery.fetch(pk, "c", 10, promote=True))
    assert [d.raw_id.decode() for d in done.jobs] == [later]
    assert done.next_due_ms == delivery.NONE_WAITS
