"""Every script of the library with a call that succeeds on a prepared partition: the cases
tests/integration/test_script_checks.py breaks one failure point at a time, and
tests/integration/test_acl.py runs as each role's ACL user.  ``prepare`` builds a queue with
one partition holding a bit of everything; ``OPS`` has one case per script (a test checks none
is missing)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardq import limits
from shardq.client import Client
from shardq.config import ProducerSettings
from shardq.jobs import JobRequest
from shardq.schedules import make_definition
from shardq.store import delivery, fleet, inspection, keys, producer, results
from shardq.store import functions as store_functions
from shardq.store import limits as store_limits
from shardq.store import progress as store_progress
from shardq.store import resize as store_resize
from shardq.store import schedules as sched
from shardq.store import workflows as wf
from shardq.store.op import Op
from shardq.store.transport import SyncTransport

SETTINGS = ProducerSettings()


@dataclass
class State:
    """A queue with one partition holding a bit of everything: scheduled jobs, a ready job, a
    delivery pending for consumer c1, a dead job, a lease, a member."""

    queue: str
    pk: keys.PartitionKeys
    scheduled: str
    pending_entry: bytes
    pending_id: bytes
    dead_entry: str
    token: str
    node: str
    redis: Any = None


def prepare(client: Client, created: list[str] | None = None) -> State:
    """A fresh queue (its name appended to ``created``) with one partition prepared."""
    r = client.redis
    queue = "chk-" + uuid.uuid4().hex[:10]
    if created is not None:
        created.append(queue)
    run = lambda op: SyncTransport(r).run(op)  # noqa: E731
    client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    scheduled = [
        run(producer.prepare_enqueue(queue, 1, JobRequest("t", i, delay=600), SETTINGS).op())
        for i in range(3)
    ]
    dead = run(producer.prepare_enqueue(queue, 1, JobRequest("t", "dead"), SETTINGS).op())
    got = run(delivery.fetch(pk, "c0", 1)).jobs[0]
    assert got.raw_id.decode() == dead.job_id
    run(delivery.fail(pk, got.entry_id, got.raw_id, -1, "boom"))
    dead_entry = r.xrange(pk.dead)[0][0].decode()
    run(producer.prepare_enqueue(queue, 1, JobRequest("t", "pending"), SETTINGS).op())
    pending = run(delivery.fetch(pk, "c1", 1)).jobs[0]
    run(producer.prepare_enqueue(queue, 1, JobRequest("t", "ready"), SETTINGS).op())
    grant = run(fleet.lease_acquire(pk, "d1", 60_000))
    run(fleet.members(keys.dispatchers_key(queue), keys.drain_key(queue), "d1", 60_000))
    node = r.get_node_from_key(pk.jobs).name
    return State(
        queue,
        pk,
        scheduled[0].job_id,
        pending.entry_id,
        pending.raw_id,
        dead_entry,
        grant.token,
        node,
        r,
    )


def enqueue_op(s: State, **kw: Any) -> Op[Any]:
    return producer.prepare_enqueue(
        s.queue, 1, JobRequest("t", {"x": 1}, idempotency_key="idem-1", **kw), SETTINGS
    ).op()


def _enqueue_batch(s: State) -> Op[Any]:
    prepared = [
        producer.prepare_enqueue(s.queue, 1, JobRequest("t", i, delay=1), SETTINGS)
        for i in range(3)
    ]
    calls = producer.plan_bulk(prepared)
    assert calls[0].op.name == "enqueue-batch"
    return calls[0].op


def _schedule_fire(s: State) -> Op[Any]:
    """A schedule whose next tick (1000 ms) is long past, fired with its one tick."""
    d = make_definition("chk", "t", {"x": 1}, every=60)
    SyncTransport(s.redis).run(sched.put(s.pk, "put", "chk", d.to_json(), 1000))
    fire = sched.Fire("chk", 1000, d.sha, 10**13, 0, d.body.encode(), [1000])
    return sched.fire(s.pk, s.token, [fire])


def _resize_ack(s: State) -> Op[Any]:
    """Dropping a batch held in the partition's 'moving' hash."""
    s.redis.hset(s.pk.moving, mapping={"": "batch-1", "x": "{}"})
    return store_resize.ack(s.pk, "batch-1")


def _resize_take(s: State) -> Op[Any]:
    """A take out of the prepared partition, sealed first (a take refuses an open one)."""
    SyncTransport(s.redis).run(store_resize.seal(s.pk, (1, 2)))
    return store_resize.take(s.pk, 10)


def _batch(s: State, *, sealed: bool) -> keys.BatchKeys:
    """A batch of 2 children (open, or sealed) with a success callback, made as the admin."""
    bk = keys.batch_keys(s.queue, "chk-" + uuid.uuid4().hex[:8])
    spec = wf.spec_of(JobRequest("cb", {"x": 1}), "on_success")
    SyncTransport(s.redis).run(_open(bk, sealed, [("cb:success", spec)]))
    return bk


def _open(bk: keys.BatchKeys, sealed: bool, fields: list[tuple[str, bytes]]) -> Op[Any]:
    return wf.open_batch(
        bk, kind="batch", policy="fail", retention_ms=60_000, total=2, sealed=sealed, parent="",
        fields=fields,
    )  # fmt: skip


def _batch_fired(s: State) -> Op[Any]:
    bk = _batch(s, sealed=True)
    for i in range(2):
        SyncTransport(s.redis).run(wf.report(bk, [wf.ChildEnd(i, "ok", f"x#{i}")]))
    return wf.fired(bk, ["success"])


OPS: dict[str, Callable[[State], Op[Any]]] = {
    "enqueue": enqueue_op,
    "enqueue-batch": _enqueue_batch,
    "cancel": lambda s: producer.cancel(keys.partition_keys(s.queue, 0, 1), s.scheduled),
    "reschedule": lambda s: producer.reschedule(
        keys.partition_keys(s.queue, 0, 1), s.scheduled, None, 30, SETTINGS
    ),
    "get": lambda s: producer.get(keys.partition_keys(s.queue, 0, 1), s.scheduled),
    "queue-create": lambda s: producer.queue_create(s.queue + "-new", 2),
    "fetch": lambda s: delivery.fetch(s.pk, "c2", 10, promote=True),
    "ack": lambda s: delivery.ack(s.pk, [(s.pending_entry, s.pending_id)]),
    "complete": lambda s: results.complete(
        s.pk,
        [
            results.Completion(
                s.pending_entry, s.pending_id, 60_000, b'{"t":"t","a":1,"v":1}', "b-chk|0", b""
            )
        ],
    ),
    "result": lambda s: results.read(keys.partition_keys(s.queue, 0, 1), s.scheduled),
    "progress": lambda s: store_progress.write(s.pk, s.pending_id.decode(), b'{"done":1}'),
    "fail": lambda s: delivery.fail(s.pk, s.pending_entry, s.pending_id, 1000, "err"),
    "touch": lambda s: delivery.touch(s.pk, "c1", [(s.pending_entry, s.pending_id)], look=True),
    "reclaim": lambda s: delivery.reclaim(
        s.pk, "c2", visibility_ms=0, orphan_idle_ms=0, live=[], count=10, max_deliveries=5
    ),
    "retire": lambda s: delivery.retire(s.pk, "c0"),
    "prune-consumers": lambda s: delivery.prune_consumers(s.pk, 0),
    "lease-acquire": lambda s: fleet.lease_acquire(s.pk, "d2", 10_000, ["d1"]),
    "lease-renew": lambda s: fleet.lease_renew(s.pk, s.token, 10_000),
    "lease-release": lambda s: fleet.lease_release(s.pk, s.token),
    "lease-revoke": lambda s: fleet.lease_revoke(s.pk, "d1"),
    "owner-info": lambda s: fleet.lease_info(s.pk),
    "promote": lambda s: fleet.promote(s.pk, s.token, 10, 10_000),
    "trim": lambda s: fleet.trim(s.pk, s.token, 0, 1, 100),
    "members": lambda s: fleet.members(
        keys.dispatchers_key(s.queue), keys.drain_key(s.queue), "d2", 5_000
    ),
    "partition-stats": lambda s: inspection.partition_stats(s.pk, s.node),
    "dlq-replay": lambda s: inspection.dlq_replay(s.pk, [s.dead_entry]),
    "dlq-purge": lambda s: inspection.dlq_purge(s.pk, [s.dead_entry]),
    "list-due": lambda s: inspection.list_due(s.pk, 0, "", 10**15, 10),
    "list-ready": lambda s: inspection.list_ready(s.pk, "", 10),
    "list-running": lambda s: inspection.list_running(s.pk, "", 10),
    "list-dead": lambda s: inspection.list_dead(s.pk, "", 10),
    "list-retrying": lambda s: inspection.list_retrying(s.pk, "0", 10),
    "inflight": lambda s: inspection.inflight(s.pk),
    "can-run": lambda s: store_functions.can_run(
        keys.queue_meta_key(s.queue), ["CLUSTER SETSLOT 0 STABLE", "MIGRATE h 1 k 0 1"]
    ),
    "pause": lambda s: inspection.pause(s.pk, True),
    "lanes": lambda s: inspection.lanes(s.pk, True),
    "control-init": lambda s: inspection.control_init(s.pk),
    "run-now": lambda s: inspection.run_now(s.pk, s.scheduled),
    "empty-due": lambda s: inspection.empty_due(s.pk, 10),
    "schedule-put": lambda s: sched.put(
        s.pk, "put", "chk", make_definition("chk", "t", every=5).to_json(), 10**13
    ),
    "schedule-read": lambda s: sched.read(s.pk, "scan", "0", 10),
    "schedule-fire": _schedule_fire,
    "limit-take": lambda s: store_limits.take(s.queue, limits.for_type("t", 10), 3),
    "limit-acquire": lambda s: store_limits.acquire(
        s.queue, limits.for_type("t", concurrency=2), [b"a"], 10_000
    ),
    "limit-release": lambda s: store_limits.release(
        s.queue, limits.for_type("t", concurrency=2), [b"a"]
    ),
    "defer": lambda s: store_limits.defer(s.pk, [(s.pending_entry, s.pending_id, 10**13)]),
    "resize-seal": lambda s: store_resize.seal(s.pk, (1, 2)),
    "resize-take": _resize_take,
    "resize-put": lambda s: store_resize.put(
        keys.partition_keys(s.queue, 1, 2, 1),
        "batch-1",
        [store_resize.Record("moved-1", b'{"k":"j","i":"moved-1","s":"1000","e":"S0|{}"}')],
    ),
    "resize-ack": _resize_ack,
    "resize-left": lambda s: store_resize.left(s.pk),
    "batch-open": lambda s: _open(
        keys.batch_keys(s.queue, "chk-" + uuid.uuid4().hex[:8]), False, []
    ),
    "batch-add": lambda s: wf.add(_batch(s, sealed=False), 3),
    "batch-seal": lambda s: wf.seal(_batch(s, sealed=False)),
    "batch-report": lambda s: wf.report(_batch(s, sealed=True), [wf.ChildEnd(1, "ok", "x#1")]),
    "batch-fires": lambda s: wf.pending(_batch(s, sealed=True)),
    "batch-fired": _batch_fired,
    "batch-cancel": lambda s: wf.cancel(_batch(s, sealed=True)),
}
