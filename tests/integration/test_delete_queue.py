"""Deleting a queue leaves no key of it behind, on both topologies: jobs in every state (compact
ones included), lanes, periodic schedules, limits and their state (a removed limit's too),
idempotency keys, the registries; and a queue created again under the name starts empty.

Every key of a queue is named by shardq/store/keys.py (``PartitionKeys.all``, ``queue_keys``);
what only SCAN finds (idempotency keys, limit state) is found on every primary.  Before the
deletion the test checks that it really made a key of every kind, so it cannot pass on a queue
that was never filled.
"""

from __future__ import annotations

from typing import Any

import orjson
from support.helpers import job_id_in, one_by_one, primaries, text

from shardq import JobRequest, limits
from shardq.client import Client
from shardq.inspector import LIST_STATES, Inspector
from shardq.plans import one
from shardq.store import delivery, fleet, keys, resize, results
from shardq.store import limits as store_limits
from shardq.store import progress as store_progress
from shardq.store import workflows as workflow_ops

PARTITIONS = 4


def queue_keys_on_every_primary(client: Client, queue: str) -> list[str]:
    """Every key whose name holds ``sq:<queue>``, on every primary (SCAN, whole keyspace)."""
    found = set()
    for node in primaries(client.redis):
        found |= {text(k) for k in node.scan_iter(match=f"*sq:{queue}*", count=1000)}
    return sorted(found)


def kind_of(queue: str, key: str) -> str:
    """``due``, ``idem``, ``limit``, ``meta``, ... : what follows the key's hash tag."""
    rest = key[key.index("}") + 2 :]
    for kind in keys.PER_ITEM_KINDS:
        if rest.startswith(kind + ":"):
            return kind
    return rest


def fill(client: Client, queue: str) -> dict[str, Any]:
    """A queue with something in every key shardq keeps for it."""
    client.create_queue(queue, PARTITIONS)
    pks = keys.all_partition_keys(queue, PARTITIONS)
    # ready: due now, in the ready streams; then some fetched (running), failed with a retry
    # (retrying: due set and errors hash) or for good (dead)
    one_by_one(client).enqueue_many(queue, [JobRequest("t", i) for i in range(40)])
    fetched = [
        (pk, d) for pk in pks for d in client.transport.run(delivery.fetch(pk, "w-1", 4)).jobs
    ]
    assert len(fetched) >= 12, fetched
    for pk, d in fetched[:4]:
        client.transport.run(delivery.fail(pk, d.entry_id, d.raw_id, 600_000, "later"))
    for pk, d in fetched[4:8]:
        client.transport.run(delivery.fail(pk, d.entry_id, d.raw_id, -1, "for good"))
    # a running job's progress, a running job cancelled (the cancels record) and a kept result
    pk, d = fetched[8]
    assert client.transport.run(store_progress.write(pk, d.raw_id.decode(), b"50"))
    pk, d = fetched[9]
    assert client.cancel(queue, d.raw_id.decode(), running=True)
    pk, d = fetched[10]
    record = orjson.dumps({"t": 1, "a": 1, "v": "done"})
    # kept with a result, and as a batch's child: its end waits in the outbox (the batch's
    # record and bitmap, and the queue's batch listing, come from a batch of its own)
    done = results.Completion(d.entry_id, d.raw_id, 600_000, record, "b-old|0", b"")
    assert client.transport.run(results.complete(pk, [done]))
    bid = client.batches.create(queue, [JobRequest("t", delay=600)] * 2, batch_id="b-old")
    client.run(
        one(
            workflow_ops.report(
                keys.batch_keys(queue, bid), [workflow_ops.ChildEnd(1, "ok", f"{bid}#1")]
            )
        ),
        "test",
    )
    # a seal whose producer died before doing the batch's fires (the relay's sweep's list)
    client.run(one(workflow_ops.firing_add(queue, bid, 1)), "test")
    # scheduled: a plain id, and compact waiting jobs (layout 3+: one due-set member each)
    client.enqueue(queue, "t", delay=600, job_id=job_id_in(0, PARTITIONS, "plain"))
    client.enqueue_many(queue, [JobRequest("t", {"n": i}, delay=600) for i in range(8)])
    assert client.compact(queue)
    assert any(b" " in m for pk in pks for m in client.redis.zrange(pk.due, 0, -1)), (
        "no compact waiting job"
    )
    # idempotency keys, one per partition
    idem = [job_id_in(p, PARTITIONS, "order") for p in range(PARTITIONS)]
    old = {k: client.enqueue(queue, "t", delay=600, idempotency_key=k) for k in idem}
    # lanes on, with a due job waiting in a lane
    client.set_lanes(queue, True)
    client.enqueue(queue, "t", priority="high", tenant="acme")
    # periodic schedules (cron and interval)
    client.schedules.add(queue, "nightly", "t", cron="0 3 * * *")
    client.schedules.add(queue, "often", "t", every=60)
    client.schedules.pause(queue, "often")  # (its state: paused)
    # limits with state: a rate limit and a concurrency limit in use, and a limit removed
    # while its state lives on (found only by SCAN)
    rate = limits.for_type("t", "1/m")
    conc = limits.for_key("api", concurrency=2)
    gone = limits.for_type("old", "1/m")
    for lim in (rate, conc, gone):
        client.set_limit(queue, lim)
    client.transport.run(store_limits.take(queue, rate, 3))
    client.transport.run(store_limits.take(queue, gone, 3))
    client.transport.run(store_limits.acquire(queue, conc, [b"j-1"], 600_000))
    assert client.remove_limit(queue, gone.name)
    # the registries and the owners hash: a member whose heartbeat expired long ago (not live,
    # so the deletion is not refused), a drain request, an owner record
    client.redis.zadd(keys.dispatchers_key(queue), {"dispatcher:old#1": 1})
    client.redis.zadd(keys.workers_key(queue), {"worker:old#1": 1})
    client.redis.sadd(keys.drain_key(queue), "dispatcher:old#1")
    client.redis.sadd(keys.workers_drain_key(queue), "worker:old#1")
    client.redis.hset(keys.owners_key(queue), "0", "dispatcher:old#1 7")
    # a lease and its fencing counter, as a dispatcher leaves them
    client.transport.run(fleet.lease_acquire(pks[0], "dispatcher:old#1", 600_000))
    # what a resize keeps: a batch taken out, a batch id stored, its record and driver's lease
    client.redis.hset(pks[0].moving, "", "batch-1")
    client.redis.sadd(pks[0].inbound, "batch-1")
    client.redis.hset(keys.resize_key(queue), "phase", "done")
    client.transport.run(fleet.lease_acquire(resize.lease_keys(queue), "r", 600_000))
    return old


def test_delete_queue_leaves_no_key_and_a_new_queue_starts_empty(
    client: Client, queue: str
) -> None:
    old = fill(client, queue)
    before = queue_keys_on_every_primary(client, queue)
    kinds = {kind_of(queue, k) for k in before}
    # Every kind of key shardq keeps for a queue is there (so "nothing left" means something).
    assert kinds == {
        *keys.PARTITION_KINDS,
        *keys.PER_ITEM_KINDS,
        *keys.QUEUE_KINDS,
        *keys.LIMIT_KINDS,
        *keys.BATCH_KINDS,
    }
    assert any(k.startswith("{" + f"sq:{queue}:limit:type:old" + "}") for k in before)

    deleted = Inspector(client).delete_queue(queue)

    assert queue_keys_on_every_primary(client, queue) == []
    assert deleted == len(before)
    assert queue not in client.queues()

    # The name again: nothing of the old queue answers.
    client.create_queue(queue, PARTITIONS)
    ins = Inspector(client)
    assert client.schedules.list(queue) == []
    assert client.limits(queue) == []
    assert not client.lanes(queue)
    for state in LIST_STATES:
        assert ins.list_jobs(queue, state).jobs == [], state
    infos = ins.partitions(queue)
    assert not any(i.paused or i.lanes for i in infos)
    assert sum(i.scheduled + i.ready + i.running + i.dead for i in infos) == 0
    for key, job_id in old.items():
        assert ins.find(queue, key) is None
        again = client.enqueue_detailed(queue, JobRequest("t", delay=600, idempotency_key=key))
        assert again.created and again.job_id != job_id
    after = {kind_of(queue, k) for k in queue_keys_on_every_primary(client, queue)}
    assert not after & {"sched", "sched:next", "sched:state", "limit", "running", "limits"}


def test_delete_queue_refuses_live_members_and_deletes_nothing(client: Client, queue: str) -> None:
    from shardq.inspector import QueueInUseError

    client.create_queue(queue, PARTITIONS)
    client.enqueue(queue, "t", delay=600, idempotency_key="k")
    now_ms = int(client.redis.time()[0]) * 1000  # type: ignore[index]
    client.redis.zadd(keys.workers_key(queue), {"worker:live#1": now_ms + 60_000})
    before = queue_keys_on_every_primary(client, queue)
    try:
        Inspector(client).delete_queue(queue)
    except QueueInUseError as exc:
        assert "1 live" in str(exc)
    else:
        raise AssertionError("a queue with a live worker was deleted")
    assert queue_keys_on_every_primary(client, queue) == before
    assert Inspector(client).delete_queue(queue, force=True) == len(before)
    assert queue_keys_on_every_primary(client, queue) == []


def test_the_asyncio_inspector_deletes_alike(client: Client, url: str, queue: str) -> None:
    """AsyncInspector.delete_queue drives the same plan: its SCAN finds the idempotency keys
    and limit state through the asyncio transport's routes, one per primary."""
    import asyncio

    from shardq import AsyncClient, AsyncInspector

    client.create_queue(queue, PARTITIONS)
    for p in range(PARTITIONS):
        client.enqueue(queue, "t", delay=600, idempotency_key=job_id_in(p, PARTITIONS, "k"))
    rate = limits.for_type("t", "1/m")
    client.set_limit(queue, rate)
    client.transport.run(store_limits.take(queue, rate, 2))
    before = queue_keys_on_every_primary(client, queue)
    assert {kind_of(queue, k) for k in before} >= {"idem", "limit", "limits", "meta"}

    async def delete() -> int:
        async with AsyncClient(url) as a:  # connects on first use
            return await AsyncInspector(a).delete_queue(queue)

    assert asyncio.run(delete()) == len(before)
    assert queue_keys_on_every_primary(client, queue) == []
