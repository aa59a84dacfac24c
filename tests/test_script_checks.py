"""Scripts validate, then write: every script is forced to fail at each of its failure points
(each key overwritten with another type, each numeric argument out of range or not a number),
and each time it returns its typed error and leaves every key of the partition exactly as it
was: Redis does not roll a script back, so a check after the first write would leave half a
change behind.

The failure points are read from the scripts themselves (their ``KEYS[i] name type`` header
lines and their ``arg_number(i, lo, hi)`` checks), so a new script or a new check is covered
without editing this file.  The stats hash is advisory by design: a stats key of the wrong type
is left alone and the operation still happens.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from shardq import limits
from shardq.client import Client
from shardq.config import ProducerSettings
from shardq.errors import CorruptKeyError, ScriptArgumentError
from shardq.jobs import JobRequest
from shardq.schedules import make_definition
from shardq.store import delivery, fleet, inspect, keys, producer, transport
from shardq.store import limits as store_limits
from shardq.store import schedules as sched
from shardq.store.loader import lua_dir
from shardq.store.op import Op

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


_CREATED: list[str] = []


@pytest.fixture(autouse=True)
def _delete_checked_queues(cluster_client: Client) -> Iterator[None]:
    """The cases leave keys of the wrong type behind on purpose: delete each case's queues, so
    nothing that lists every queue (stats, the web console) meets them in later tests."""
    yield
    from shardq.bench import delete_queue

    while _CREATED:
        queue = _CREATED.pop()
        for name, partitions in ((queue, 1), (queue + "-new", 2)):
            delete_queue(cluster_client.redis, name, partitions)


def _prepare(client: Client) -> State:
    r = client.redis
    queue = "chk-" + uuid.uuid4().hex[:10]
    _CREATED.append(queue)
    run = lambda op: transport.run(r, op)  # noqa: E731
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


def _enqueue(s: State, **kw: Any) -> Op[Any]:
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
    transport.run(s.redis, sched.put(s.pk, "put", "chk", d.to_json(), 1000))
    fire = sched.Fire("chk", 1000, d.sha, 10**13, 0, d.body.encode(), [1000])
    return sched.fire(s.pk, s.token, [fire])


OPS: dict[str, Callable[[State], Op[Any]]] = {
    "enqueue": _enqueue,
    "enqueue-batch": _enqueue_batch,
    "cancel": lambda s: producer.cancel(s.queue, 1, s.scheduled),
    "reschedule": lambda s: producer.reschedule(s.queue, 1, s.scheduled, None, 30, SETTINGS),
    "get": lambda s: producer.get(s.queue, 1, s.scheduled),
    "queue-create": lambda s: producer.queue_create(s.queue + "-new", 2),
    "fetch": lambda s: delivery.fetch(s.pk, "c2", 10),
    "ack": lambda s: delivery.ack(s.pk, [(s.pending_entry, s.pending_id)]),
    "fail": lambda s: delivery.fail(s.pk, s.pending_entry, s.pending_id, 1000, "err"),
    "touch": lambda s: delivery.touch(s.pk, "c1", [s.pending_entry]),
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
    "partition-stats": lambda s: inspect.partition_stats(s.pk, s.node),
    "dlq-replay": lambda s: inspect.dlq_replay(s.pk, [s.dead_entry]),
    "dlq-purge": lambda s: inspect.dlq_purge(s.pk, [s.dead_entry]),
    "list-due": lambda s: inspect.list_due(s.pk, 0, "", 10**15, 10),
    "list-ready": lambda s: inspect.list_ready(s.pk, "", 10),
    "list-running": lambda s: inspect.list_running(s.pk, "", 10),
    "list-dead": lambda s: inspect.list_dead(s.pk, "", 10),
    "list-retrying": lambda s: inspect.list_retrying(s.pk, "0", 10),
    "inflight": lambda s: inspect.inflight(s.pk),
    "pause": lambda s: inspect.pause(s.pk, True),
    "lanes": lambda s: inspect.lanes(s.pk, True),
    "run-now": lambda s: inspect.run_now(s.pk, s.scheduled),
    "empty-due": lambda s: inspect.empty_due(s.pk, 10),
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
}

KEY_LINE = re.compile(r"^KEYS\[(\d+)\]\s+(\S+)\s+(\S+)", re.M)
ARG_CHECK = re.compile(r"arg_number\((\d+),\s*([-\w.* ]+?),\s*([-\w.* ]+?)\)")


def _source(name: str) -> str:
    (path,) = lua_dir().glob(f"{name}-[0-9]*.lua")
    return path.read_text()


def _bound(text: str) -> float | None:
    """A literal bound such as ``1e13`` or ``366 * 86400000`` (None for a named constant)."""
    value = 1.0
    for factor in text.split("*"):
        try:
            value *= float(factor.strip())
        except ValueError:
            return None
    return value


def _key_cases() -> list[Any]:
    cases = []
    for name in OPS:
        for index, key_name, key_type in KEY_LINE.findall(_source(name)):
            cases.append(
                pytest.param(name, int(index), key_name, key_type, id=f"{name}-{key_name}")
            )
    return cases


def _arg_cases() -> list[Any]:
    cases = []
    for name in OPS:
        for index, lo, hi in ARG_CHECK.findall(_source(name)):
            values = ["nan", "abc", "inf", "-inf", ""]
            low, high = _bound(lo), _bound(hi)
            if low is not None:
                values.append(repr(low - 1 if low > -1e15 else low * 10))
            if high is not None:
                values.append(repr(high * 2 + 1))
            for value in values:
                cases.append(
                    pytest.param(name, int(index), value, id=f"{name}-argv{index}-{value}")
                )
    return cases


def _snapshot(r: Any, s: State, op: Op[Any]) -> dict[str, Any]:
    """Type and serialized value of every key of the partition and of the op."""
    names = {getattr(s.pk, slot) for slot in ("dead", "due", "errors", "fence", "jobs", "lease")}
    names |= {s.pk.ready, s.pk.stats, *op.keys}
    return {k: (r.type(k), r.dump(k), r.pttl(k) > 0) for k in sorted(names)}


def _overwrite(r: Any, key: str, key_type: str) -> None:
    r.delete(key)
    if key_type == "string":
        r.hset(key, "not", "a string")
    else:
        r.set(key, "not a " + key_type)


def test_every_script_has_a_case() -> None:
    shipped = {p.name.rsplit("-", 1)[0] for p in lua_dir().glob("*-[0-9]*.lua")}
    assert shipped == set(OPS), shipped ^ set(OPS)


@pytest.mark.parametrize(("name", "index", "key_name", "key_type"), _key_cases())
def test_a_key_of_the_wrong_type_fails_the_script_before_any_write(
    cluster_client: Client, name: str, index: int, key_name: str, key_type: str
) -> None:
    r = cluster_client.redis
    s = _prepare(cluster_client)
    if key_name in ("lane", "vtime") or (name == "promote" and key_name == "jobs"):
        # A partition without lanes never touches its lane keys: check them with lanes on.
        r.hset(s.pk.stats, "lanes", "1")
    op = OPS[name](s)
    key = op.keys[index - 1]
    _overwrite(r, key, key_type)
    before = _snapshot(r, s, op)
    if key_name == "stats" and name not in ("pause", "lanes"):
        # Counters are advisory (the pause flag, kept in the same hash, is not): the
        # operation goes on and leaves the stats key alone.
        transport.run(r, op)
        assert _snapshot(r, s, op)[key] == before[key]
        return
    with pytest.raises(CorruptKeyError) as caught:
        transport.run(r, op)
    assert key in str(caught.value), caught.value
    assert _snapshot(r, s, op) == before, "the script wrote before it failed"


@pytest.mark.parametrize(("name", "index", "value"), _arg_cases())
def test_a_bad_numeric_argument_fails_the_script_before_any_write(
    cluster_client: Client, name: str, index: int, value: str
) -> None:
    r = cluster_client.redis
    s = _prepare(cluster_client)
    op = OPS[name](s)
    argv = list(op.argv)
    argv[index - 1] = value
    bad = Op(op.script, op.keys, argv, op.parse)
    before = _snapshot(r, s, op)
    with pytest.raises(ScriptArgumentError) as caught:
        transport.run(r, bad)
    assert f"ARGV[{index}]" in str(caught.value) or str(index) in str(caught.value)
    assert _snapshot(r, s, op) == before, "the script wrote before it failed"


def test_idempotency_retention_below_a_millisecond_is_refused_whole(
    cluster_client: Client,
) -> None:
    """The audit's case: a retention that rounds to 0 ms used to store the job, then fail."""
    r = cluster_client.redis
    s = _prepare(cluster_client)
    op = _enqueue(s)
    argv = list(op.argv)
    argv[6] = 0  # ARGV[7]: retention ms
    before = _snapshot(r, s, op)
    with pytest.raises(ScriptArgumentError):
        transport.run(r, Op(op.script, op.keys, argv, op.parse))
    assert _snapshot(r, s, op) == before
