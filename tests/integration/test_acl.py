"""The roles' ACL users (shardq.admin.acl) against the functions library, on real Redis.

- Roles x functions: every function of the library is called, on a prepared partition
  (tests/support/script_cases.py), as each role's ACL user; :data:`MAY_CALL` says which roles
  may run it.  A role that may not is refused (an operator-only function answers NotPermittedError,
  any other refusal is Redis' NOPERM) and nothing is written.  A function without a row fails
  the test.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.helpers import primaries
from support.script_cases import OPS, prepare

from shardq.admin import acl
from shardq.client import Client
from shardq.config import RedisSettings
from shardq.jobs import Job
from shardq.plans import one
from shardq.store import loader
from shardq.store.retry import SyncRunner
from shardq.store.transport import SyncTransport

ALL = frozenset(acl.ROLES)
OPERATOR = frozenset({"operator", "admin"})
PRODUCER = frozenset({"producer", "operator", "admin"})
DISPATCHER = frozenset({"dispatcher", "operator", "admin"})
WORKER = frozenset({"worker", "operator", "admin"})
# The read-only console's user: the no-writes functions its pages run (FCALL_RO only).
VIEWER = frozenset({"viewer"})
# What only the admin runs: resizing a queue (shardq queue resize).
ADMIN = frozenset({"admin"})

# Which roles may call each function of the library (on the prepared partition of
# tests/support/script_cases.py, where each call succeeds for a role that may).
MAY_CALL: dict[str, frozenset[str]] = {
    # producers
    "queue-create": OPERATOR,
    # (a dispatcher enqueues too: a batch's callbacks and a chain's next steps, which
    # shardq.dispatcher.relay enqueues when a relayed report calls for them)
    "enqueue": PRODUCER | DISPATCHER,
    "enqueue-batch": PRODUCER | DISPATCHER,
    "cancel": PRODUCER,
    "reschedule": PRODUCER | DISPATCHER,
    "get": PRODUCER | VIEWER,
    "result": PRODUCER | VIEWER,
    # (a dispatcher writes the schedule keys anyway: it fires them)
    "schedule-put": PRODUCER | DISPATCHER,
    # (the "scan" read of the listings: dispatchers read only the due ones)
    "schedule-read": PRODUCER | VIEWER,
    # dispatchers
    # (the case heartbeats into the dispatchers' set)
    "members": DISPATCHER,
    "lease-acquire": DISPATCHER,
    "lease-renew": DISPATCHER,
    "lease-release": DISPATCHER,
    "lease-revoke": DISPATCHER,
    "owner-info": DISPATCHER | VIEWER,
    "promote": DISPATCHER,
    "trim": DISPATCHER,
    "schedule-fire": DISPATCHER,
    "partition-stats": DISPATCHER | VIEWER,
    # workers
    "fetch": WORKER,
    "ack": WORKER,
    "complete": WORKER,
    "progress": WORKER,
    "fail": WORKER,
    "touch": WORKER,
    "reclaim": WORKER,
    "retire": WORKER,
    "prune-consumers": WORKER,
    "defer": WORKER,
    "limit-take": WORKER,
    "limit-acquire": WORKER,
    "limit-release": WORKER,
    # the operator's tools
    "pause": OPERATOR,
    "control-init": OPERATOR,
    "lanes": OPERATOR,
    "empty-due": OPERATOR,
    "dlq-purge": OPERATOR,
    "dlq-replay": OPERATOR,
    "run-now": OPERATOR,
    # the listings read only: whoever may read those keys
    "inflight": OPERATOR | VIEWER,
    # asks, runs nothing: every role may ask what it may run (health, slot moves)
    "can-run": ALL,
    "list-due": PRODUCER | VIEWER,  # (it reads the errors hash: retrying jobs)
    "list-ready": OPERATOR | VIEWER,
    "list-running": DISPATCHER | VIEWER,
    "list-dead": DISPATCHER | VIEWER,
    "list-retrying": OPERATOR | VIEWER,
    # resizing (the admin's: it rewrites the meta and moves every job); sealing is a flag in
    # the control hash, which the operator may write too
    "resize-seal": OPERATOR,
    "resize-take": ADMIN,
    "resize-put": ADMIN,
    "resize-ack": ADMIN,
    "resize-left": ADMIN,
    # workflows: producers create, add to, seal and cancel batches; the relay (dispatchers)
    # reports children's ends and does the fires (its grant on the batch keys lacks DEL:
    # it opens no batch)
    "batch-open": PRODUCER,
    "batch-add": PRODUCER | DISPATCHER,
    "batch-seal": PRODUCER | DISPATCHER,
    "batch-report": PRODUCER | DISPATCHER,
    "batch-fired": PRODUCER | DISPATCHER,
    "batch-fires": PRODUCER | DISPATCHER | VIEWER,
    "batch-cancel": PRODUCER | DISPATCHER,
}

# Functions that ask Redis whether the caller is of their role before anything else
# (lua/includes/checks.lua operator_only, producer_only): refused with NotPermittedError.
ASKS = {"pause", "lanes", "control-init", "empty-due", "dlq-purge", "dlq-replay", "run-now"}
ASKS |= {"resize-seal"}
ASKS |= {"enqueue-batch"}

_CREATED: list[str] = []
# role -> (user name, password) of the role_clients fixture's users
USERS: dict[str, tuple[str, str]] = {}


@pytest.fixture(scope="module")
def role_clients(cluster_url: str) -> Iterator[dict[str, Client]]:
    """One client per role, each logged in as that role's user (shardq.admin.acl.rules, on every
    node of the session's cluster); the users are deleted afterwards."""
    suffix = uuid.uuid4().hex[:8]
    admin = Client.from_url(cluster_url)
    nodes = [admin.redis.get_redis_connection(n) for n in admin.redis.get_nodes()]
    names = {role: f"t-{role}-{suffix}" for role in acl.ROLES}
    USERS.update({role: (name, f"pw-{name}") for role, name in names.items()})
    for node in nodes:
        for role, name in names.items():
            rules = re.findall(r"\([^)]*\)|\S+", acl.rules(role))
            node.execute_command("ACL", "SETUSER", name, *rules, "on", f">pw-{name}")
    clients = {
        role: Client(RedisSettings.from_url(cluster_url, username=name, password=f"pw-{name}"))
        for role, name in names.items()
    }
    try:
        yield clients
    finally:
        for c in clients.values():
            c.close()
        for node in nodes:
            node.execute_command("ACL", "DELUSER", *names.values())
        from shardq.dev.demo import delete_queue

        while _CREATED:
            queue = _CREATED.pop()
            for name, partitions in ((queue, 1), (queue + "-new", 2)):
                delete_queue(admin.redis, name, partitions)
        admin.close()


def snapshot(r: Any, queue: str) -> dict[str, Any]:
    """Every key of a queue (its partitions, its queue keys, its limits' state, and a queue
    created from its name): type, serialized value, whether it expires."""
    found = sorted({k for k in r.scan_iter(match="{sq:" + queue + "*", count=1000)})
    return {k: (r.type(k), r.dump(k), r.pttl(k) > 0) for k in found}


def _outcome(client: Client, op: Any) -> tuple[str, str]:
    """Sent as every facade sends (shardq.store.retry), so a refusal is what a caller sees."""
    [result] = SyncRunner(client.transport, 2.0).batches("the call")([op])
    if isinstance(result, BaseException):  # the refusal's kind is checked by the caller
        return "refused", f"{type(result).__name__}: {result}"
    return "ran", ""


def test_every_function_has_a_row() -> None:
    assert set(MAY_CALL) == set(loader.scripts()), set(MAY_CALL) ^ set(loader.scripts())
    assert set(OPS) == set(loader.scripts())


@pytest.mark.parametrize("name", sorted(MAY_CALL))
def test_roles_x_functions(
    cluster_client: Client, role_clients: dict[str, Client], name: str
) -> None:
    problems = []
    for role in acl.ROLES:
        s = prepare(cluster_client, _CREATED)
        op = OPS[name](s)
        before = snapshot(cluster_client.redis, s.queue)
        outcome, detail = _outcome(role_clients[role], op)
        after = snapshot(cluster_client.redis, s.queue)
        wrote = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        allowed = role in MAY_CALL[name]
        if allowed and outcome != "ran":
            problems.append(f"{role} may call {name} but was refused: {detail}")
        elif not allowed and outcome == "ran":
            problems.append(f"{role} may not call {name} but ran it")
        elif not allowed and wrote:
            problems.append(f"{role} was refused {name} after writing {wrote}: {detail}")
        elif not allowed and not detail.startswith("NotPermittedError"):
            # Refused by the function itself (ASKS), by the server's ACL at the FCALL (a
            # read-only role has FCALL_RO only) or inside the function: one typed error on
            # every server, whose refusals read differently (Redis 7.0, Valkey).
            problems.append(f"{role} refused {name} without NotPermittedError: {detail}")
    assert not problems, "\n".join(problems)


# flags have owners ------------------------------------------------------------------------


def _deliverable(client: Client, pk: Any) -> tuple[int, int]:
    """(jobs one promote moves, jobs one fetch hands out) on this partition, as the default
    user: a paused partition answers (0, 0)."""
    from shardq.store import delivery, fleet

    grant = client.transport.run(fleet.lease_acquire(pk, "d-" + uuid.uuid4().hex, 60_000))
    moved = client.transport.run(fleet.promote(pk, grant.token, 100, 60_000)).moved
    fetched = client.transport.run(delivery.fetch(pk, "c-flags", 100))
    client.transport.run(fleet.lease_release(pk, grant.token))
    return moved, len(fetched.jobs)


def test_only_the_operator_sets_flags_and_the_stats_hash_holds_none(
    cluster_client: Client, role_clients: dict[str, Client], queue: str
) -> None:
    """The audit's case: `HSET <stats> paused 1` as the producer stopped a partition.  Now the
    flags live in the control hash: producer, dispatcher and worker may read it, not write it,
    and whatever they write into the stats hash under the flags' names is ignored."""
    from redis.exceptions import NoPermissionError

    from shardq.errors import NotPermittedError
    from shardq.store import inspection, keys

    client = cluster_client
    client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    assert client.redis.hgetall(pk.ctl) == {b"lanes": b"0"}
    for role in ("producer", "dispatcher", "worker"):
        r = role_clients[role].redis
        r.hset(pk.stats, mapping={"paused": "1", "lanes": "1"})  # counters: theirs to write
        with pytest.raises(NoPermissionError):
            r.hset(pk.ctl, "paused", "1")
        with pytest.raises(NotPermittedError, match="shardq-operator"):
            SyncTransport(r).run(inspection.pause(pk, True))
        with pytest.raises(NotPermittedError):
            Client(r).set_lanes(queue, True)
    client.enqueue(queue, "t", {"n": 1})
    assert _deliverable(client, pk) == (0, 1)  # not paused; no lane: straight to the stream
    assert role_clients["operator"].transport.run(inspection.pause(pk, True))
    client.enqueue(queue, "t", {"n": 2})
    assert _deliverable(client, pk) == (0, 0)
    snap = client.transport.run(inspection.partition_stats(pk, "n"))
    assert snap.paused and not snap.lanes and snap.counters.get("lanes") is None
    assert role_clients["admin"].transport.run(inspection.pause(pk, False))
    assert _deliverable(client, pk) == (0, 1)


def _make_legacy(client: Client, queue: str, partitions: int) -> None:
    """Turn a fresh queue into one created before the control hash (layout 3)."""
    from shardq.store import keys

    for pk in keys.all_partition_keys(queue, partitions):
        client.redis.delete(pk.ctl)
    client.redis.hset(keys.queue_meta_key(queue), "layout", 3)
    client.forget(queue)


def test_only_the_admin_sizes_slots_for_the_placement_plan(
    cluster_client: Client, role_clients: dict[str, Client], queue: str
) -> None:
    """`rebalance --nodes --plan` reads each slot's keys and MEMORY USAGE (read-only, so on
    the shared cluster): the admin user may, the operator is told which user to use."""
    from shardq.admin import slots

    cluster_client.create_queue(queue, 2)
    cluster_client.enqueue(queue, "t", {"n": 1}, delay=3600)
    primaries, usage = slots.slot_usage(role_clients["admin"], queue)
    assert len(primaries) == 3 and sorted(usage) == [0, 1]
    assert sum(u.bytes for u in usage.values()) > 0
    assert all((queue, p) in u.partitions for p, u in usage.items())
    with pytest.raises(slots.SlotMoveError, match="need the shardq-admin user"):
        slots.slot_usage(role_clients["operator"], queue)


def test_the_balancer_runs_as_the_admin_and_the_operator_reads_its_status(
    cluster_url: str, role_clients: dict[str, Client]
) -> None:
    """`shardq balancer run` as the admin: its leader lease (the lease functions on
    {sq:balancer}) and its last round; the operator may read that round (`balancer status`),
    no other role may take the balancer's lease."""
    from shardq.admin import balancer
    from shardq.errors import NotPermittedError
    from shardq.store import fleet, keys

    def admin() -> Client:
        name, password = USERS["admin"]
        return Client(RedisSettings.from_url(cluster_url, username=name, password=password))

    settings = balancer.BalancerSettings(lease_ms=3000, window=0.1, interval=0.2)
    b = balancer.Balancer(admin, settings, owner="balancer:acl#1")
    try:
        assert b.lead() and b.still_leading()
        b._report(balancer.Round(True, b.token, 0.5))
        status = balancer.status(role_clients["operator"])
        assert status["leader"] == "balancer:acl#1" and status["deviation"] == "0.5"
        for role in ("producer", "dispatcher", "worker", "operator", "viewer"):
            # the server's own refusal (the lease's key is not one of the role's), typed
            with pytest.raises(NotPermittedError, match="may not do"):
                role_clients[role].run(
                    one(fleet.lease_acquire(keys.BALANCER, f"x-{role}", 3000)), "test"
                )
    finally:
        b.step_down()
        b.close()
        Client.from_url(cluster_url).redis.delete(keys.BALANCER.status)


def test_a_dispatcher_user_cannot_hold_a_lease_longer_than_the_lease_time(
    cluster_client: Client, role_clients: dict[str, Client], queue: str
) -> None:
    """The audit's case (M14): as the dispatcher user, a lease written for an hour (a raw
    `SET PX` with the fence hash's lease time raised to match, or lease-acquire and
    lease-renew called with an hour) blocked the partition for that hour, renewably.  A
    dispatcher that wants the partition honours a lease only up to its own lease time: it
    takes the partition over at once, and the squatter's next renewal is fenced."""
    from shardq.store import fleet, keys

    cluster_client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    r = role_clients["dispatcher"].redis
    hour, lease_time = 3_600_000, 10_000

    def honest_takes_it() -> None:
        grant = SyncTransport(r).run(fleet.lease_acquire(pk, "d-honest", lease_time))
        assert grant.won and grant.takeover, grant
        assert 0 < r.pttl(pk.lease) <= lease_time
        assert SyncTransport(r).run(fleet.lease_release(pk, grant.token))

    # Raw, with the rights the dispatcher's functions need.
    r.hset(pk.fence, "ttl", hour)
    r.set(pk.lease, "1:squatter", px=hour)
    honest_takes_it()
    # Through the functions, with an hour as the lease time, renewed.
    grant = SyncTransport(r).run(fleet.lease_acquire(pk, "squatter", hour))
    assert grant.won
    assert SyncTransport(r).run(fleet.lease_renew(pk, grant.token, hour)) is True
    honest_takes_it()
    assert SyncTransport(r).run(fleet.lease_renew(pk, grant.token, hour)) is False  # fenced
    # A lease within the lease time is a live owner's: left alone.
    kept = SyncTransport(r).run(fleet.lease_acquire(pk, "d-peer", lease_time))
    refused = SyncTransport(r).run(fleet.lease_acquire(pk, "d-honest", lease_time))
    assert not refused.won and refused.owner == "d-peer" and kept.won


def test_a_sealed_field_naming_an_unknown_generation_is_refused_not_followed(
    cluster_client: Client, role_clients: dict[str, Client], queue: str
) -> None:
    """The audit's case (M13): the operator may write a partition's control hash, and a
    `sealed` field there naming a generation the queue never had sent new jobs into that
    generation's partitions, which no process serves.  A producer follows a redirect only to
    a generation the queue's meta names: this one is refused with a typed error, nothing is
    written, and a by-id call is refused alike."""
    from shardq import JobRequest
    from shardq.errors import BulkEnqueueError, MalformedRecordError
    from shardq.store import keys

    cluster_client.create_queue(queue, 2)
    pk = keys.partition_keys(queue, 0, 2)
    role_clients["operator"].redis.hset(pk.ctl, "sealed", "999:4")
    producer = role_clients["producer"]
    job_id = _id_in(0, 2)
    with pytest.raises(MalformedRecordError, match="generation 999"):
        producer.enqueue(queue, "t", {"n": 1}, job_id=job_id, delay=60)
    with pytest.raises(BulkEnqueueError) as bulk:
        producer.enqueue_many(queue, [JobRequest("t", i, job_id=_id_in(0, 2)) for i in range(3)])
    assert len(bulk.value.failed) == 3
    assert all(isinstance(e, MalformedRecordError) for e in bulk.value.failed.values())
    with pytest.raises(MalformedRecordError, match="generation 999"):
        producer.get(queue, job_id)
    # Nothing written: not in the sealed partition, not in the generation it names.
    r = cluster_client.redis
    assert r.exists(pk.jobs, pk.due) == 0 and r.xlen(pk.ready) == 0
    for forged in keys.all_partition_keys(queue, 4, 999):
        assert r.exists(forged.jobs, forged.due, forged.ready, forged.stats) == 0
    # The partition not sealed takes jobs as ever.
    assert producer.enqueue(queue, "t", {"n": 2}, job_id=_id_in(1, 2), delay=60)


def test_the_operator_deletes_a_queue_with_every_key_of_it(
    cluster_client: Client, role_clients: dict[str, Client], queue: str
) -> None:
    """`shardq queue delete` runs as the operator: its UNLINKs, and the SCAN that finds the
    idempotency keys and limit state, are within the operator's grants; nothing is left."""
    from shardq import limits
    from shardq.inspector import Inspector
    from shardq.store import limits as store_limits

    operator = role_clients["operator"]
    cluster_client.create_queue(queue, 2)  # (loads the functions, which the operator may not)
    role_clients["producer"].enqueue(queue, "t", delay=600, idempotency_key="order-1")
    rate = limits.for_type("t", "1/m")
    operator.set_limit(queue, rate)
    role_clients["worker"].transport.run(store_limits.take(queue, rate, 2))
    operator.schedules.add(queue, "nightly", "t", cron="0 3 * * *")
    assert Inspector(operator).delete_queue(queue) > 0
    left = [k for node in primaries(cluster_client.redis) for k in node.scan_iter(f"*sq:{queue}*")]
    assert left == []


def test_a_queue_from_before_the_control_hash_keeps_its_flags_until_upgraded(
    cluster_url: str, cluster_client: Client, role_clients: dict[str, Client], queue: str
) -> None:
    """A layout-3 queue's flags are in its stats hash: its partitions keep reading them there
    (and the operator's pause and lanes write them there) until `shardq queue upgrade` moves
    them into the control hashes; from then on the stats hash's copies mean nothing."""
    from click.testing import CliRunner

    from shardq.cli import main as cli
    from shardq.store import inspection, keys

    client, op_r = cluster_client, role_clients["operator"].redis
    partitions = 2
    client.create_queue(queue, partitions)
    _make_legacy(client, queue, partitions)
    pk0, pk1 = keys.all_partition_keys(queue, partitions)
    client.redis.hset(pk0.stats, "paused", "1")  # as an older shardq's pause wrote it
    assert SyncTransport(op_r).run(inspection.lanes(pk1, True))  # written where its readers look
    assert client.redis.hget(pk1.stats, "lanes") == b"1" and not client.redis.exists(pk1.ctl)
    job0 = client.enqueue(queue, "t", 0, job_id=_id_in(0, partitions))
    job1 = client.enqueue(queue, "t", 1, job_id=_id_in(1, partitions))
    assert client.redis.zcard(pk1.lane) == 1  # lanes on: the due job waits in the lane
    assert _deliverable(client, pk0) == (0, 0)  # paused
    assert client.transport.run(inspection.partition_stats(pk0, "n")).paused

    url = cluster_url
    out = CliRunner().invoke(cli, ["queue", "upgrade", "-q", queue, "--url", url])
    assert out.exit_code == 0 and f"layout 3 -> {keys.LAYOUT_VERSION}" in out.output, out.output
    assert client.redis.hgetall(pk0.ctl) == {b"lanes": b"0", b"paused": b"1"}
    assert client.redis.hgetall(pk1.ctl) == {b"lanes": b"1"}
    for pk in (pk0, pk1):
        assert client.redis.hmget(pk.stats, "paused", "lanes") == [None, None]
    # The producer's stats writes no longer steer anything.
    role_clients["producer"].redis.hset(pk1.stats, "paused", "1")
    assert _deliverable(client, pk0) == (0, 0)
    fetched = client.transport.run(delivery_fetch(pk1))
    assert [j.raw_id.decode() for j in fetched.jobs] == [job1]  # from the lane, not paused
    assert SyncTransport(op_r).run(inspection.pause(pk0, False))
    assert _deliverable(client, pk0) == (0, 1)
    assert client.get(queue, job0) is not None
    again = CliRunner().invoke(cli, ["queue", "upgrade", "-q", queue, "--url", url])
    assert "already" in again.output, again.output


def delivery_fetch(pk: Any) -> Any:
    from shardq.store import delivery

    return delivery.fetch(pk, "c-legacy", 10)


def _id_in(partition: int, partitions: int) -> str:
    from support.helpers import job_id_in

    return job_id_in(partition, partitions, "flag-" + uuid.uuid4().hex[:6])


# no call can hold a primary -----------------------------------------------------------------


def _resp(*args: Any) -> bytes:
    """One command in RESP (what redis-py would send), encoded once up front."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def _reply(sock: Any) -> bytes:
    """Read until a complete (small) reply is in: enough for +OK, +PONG and the -15 array."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
        if data.startswith((b"+", b"-", b":")) and data.endswith(b"\r\n"):
            return data
        if data.startswith(b"*4\r\n") and data.count(b"\r\n") >= 6:
            return data


def _fcall_usec(node: Any) -> int:
    return int(node.info("commandstats").get("cmdstat_fcall", {}).get("usec", 0))


@pytest.mark.parametrize("name", sorted(MAY_CALL))
def test_an_oversized_call_is_refused_at_once_and_the_node_keeps_answering(
    cluster_client: Client, role_clients: dict[str, Client], name: str
) -> None:
    """The audit's case: one enqueue-batch call carrying 1.4M jobs held a primary for 5 s
    (others got BUSY, FUNCTION KILL said UNKILLABLE); an ack of 1M ids stalled it for 1 s.
    Every function, called as its own role with ten times its cap (at least 5,000 arguments),
    is refused before it runs anything: nothing is written, the call costs the node about as
    long as Redis takes to hand the arguments to Lua, and a PING from another client meanwhile
    is answered within a few ms."""
    import socket
    import threading

    from support.helpers import scaled

    from shardq.errors import ScriptArgumentError
    from shardq.store.codes import check

    role = next(r for r in acl.ROLES if r in MAY_CALL[name])
    username, password = USERS[role]
    s = prepare(cluster_client, _CREATED)
    good = OPS[name](s)
    lua = good.script
    n = max(10 * lua.max_argv, 5000)
    pad = good.argv[-2:] if len(good.argv) >= 2 else ["1", "1"]
    argv = list(good.argv) + [pad[i % 2] for i in range(n - len(good.argv))]
    command = _resp("FCALL", lua.function, len(good.keys), *good.keys, *argv)

    where = cluster_client.redis.get_node_from_key(good.route_key)
    host, port = where.host, int(where.port)
    node = cluster_client.redis.get_redis_connection(where)
    before = snapshot(cluster_client.redis, s.queue)
    busy_before = _fcall_usec(node)

    caller = socket.create_connection((host, port))
    caller.sendall(_resp("AUTH", username, password))
    assert _reply(caller) == b"+OK\r\n"
    pinger = socket.create_connection((host, port))
    answer: list[bytes] = []

    def call() -> None:
        caller.sendall(command)
        answer.append(_reply(caller))

    worst, pings = 0.0, 0
    thread = threading.Thread(target=call, daemon=True)
    started = time.perf_counter()
    thread.start()
    while thread.is_alive() or not pings:
        t = time.perf_counter()
        pinger.sendall(b"PING\r\n")
        assert _reply(pinger) == b"+PONG\r\n"
        worst, pings = max(worst, time.perf_counter() - t), pings + 1
    thread.join()
    elapsed = time.perf_counter() - started
    caller.close()
    pinger.close()

    [reply] = answer
    assert reply.startswith(
        b"*4\r\n:-15\r\n$4\r\nARGV\r\n:%d\r\n:%d\r\n" % (len(argv), lua.max_argv)
    ), reply
    with pytest.raises(ScriptArgumentError):
        check([-15, b"ARGV", len(argv), lua.max_argv])
    assert snapshot(cluster_client.redis, s.queue) == before, "the refused call wrote"
    busy_ms = (_fcall_usec(node) - busy_before) / 1000
    assert busy_ms < scaled(10), f"{len(argv)} arguments held the node {busy_ms:.1f} ms"
    assert worst < scaled(0.025), (
        f"a PING waited {worst * 1000:.1f} ms ({pings} pings in {elapsed * 1000:.0f} ms)"
    )


# the ACL file loads as shipped ------------------------------------------------------------

ACL_FILE = Path(__file__).resolve().parents[2] / "deploy" / "redis" / "acl-users.acl"


def _setuser_as_documented(r: Any) -> None:
    """docs/deploy.md: give each user a password and turn it on (`ACL SETUSER <user> on >PW`)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    assert "ACL SETUSER shardq-worker on >WORKER_PASSWORD" in doc
    for role in acl.ROLES:
        r.execute_command("ACL", "SETUSER", f"shardq-{role}", "on", f">pw-{role}")


def test_redis_starts_with_the_acl_file_as_shipped_and_the_fleet_runs_under_its_users(
    own_redis: Any, procs: list[Any], queue: str
) -> None:
    """The audit's case: the file began with three '#' lines; Redis 7.0 refused to start with
    --aclfile on it ("should start with user keyword") and ACL LOAD refused the whole file (the
    tests stripped the comments first).  Here redis-server starts with --aclfile on the file in
    the repository, unmodified; passwords are set as docs/deploy.md says; the admin loads the
    functions, the operator creates a queue, and a producer, a dispatcher and a worker, each as
    its own user, run a job end to end."""
    import subprocess

    from support.procs import Proc

    from shardq import JobRequest
    from shardq.dev.demo import cli_command
    from shardq.store import functions, keys

    before = ACL_FILE.read_bytes()
    server = own_redis("--aclfile", str(ACL_FILE))
    plain = Client.from_url(server.url)  # the default user: the file does not name it
    try:
        users = {u.decode() for u in plain.redis.execute_command("ACL", "USERS")}
        assert {f"shardq-{role}" for role in acl.ROLES} <= users, users
        _setuser_as_documented(plain.redis)
    finally:
        plain.close()

    def url(role: str) -> str:
        return f"redis://shardq-{role}:pw-{role}@127.0.0.1:{server.port}"

    def settings(role: str) -> RedisSettings:
        return RedisSettings.from_url(url(role))

    with Client(settings("admin")) as admin:
        functions.load_everywhere(admin.redis)
    created = subprocess.run(
        cli_command("queue", "create", "-q", queue, "--partitions", "4", "--url", url("operator")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    with Client(settings("producer")) as producer:
        job = producer.enqueue(queue, "demo", {"n": 1}, delay=0.2)
        producer.enqueue_many(queue, [JobRequest("demo", {"i": i}) for i in range(5)])
    procs.append(
        Proc(cli_command("dispatcher", "run", "--queue", queue, "--url", url("dispatcher")))
    )
    worker = cli_command("worker", "run", "--queue", queue, "--url", url("worker"))
    procs.append(Proc([*worker, "--handlers", "shardq.dev.handlers:handlers"]))
    pks = keys.all_partition_keys(queue, 4)
    with Client(settings("admin")) as admin:

        def completed() -> int:
            return sum(int(admin.redis.hget(pk.stats, "completed") or 0) for pk in pks)

        from support.helpers import wait_for

        wait_for(lambda: completed() >= 6, 40, lambda: "\n".join(p.log() for p in procs))
        assert admin.get(queue, job) is None  # done and gone
        # The dispatcher ran under its user too (workers' reads promote due jobs themselves,
        # so the jobs above need not wait for it): it holds every partition's lease.
        wait_for(
            lambda: all(admin.redis.get(pk.lease) for pk in pks),
            40,
            lambda: "\n".join(p.log() for p in procs),
        )
    with Client.from_url(server.url) as plain:
        refused = plain.redis.execute_command("ACL", "LOG")
        assert not refused, f"a role was refused something: {refused}"
    for p in procs:
        assert p.stop() == 0, p.log()
    assert ACL_FILE.read_bytes() == before  # the server never wrote the file


def test_acl_load_as_documented_loads_the_file_appended_to_an_acl_file(
    own_redis: Any, tmp_path: Path
) -> None:
    """docs/deploy.md: on a node started with an aclfile, append the shipped file to it and run
    ACL LOAD; the users are there (off, no password) and turn on as documented."""
    aclfile = tmp_path / "users.acl"
    aclfile.write_text("user default on nopass ~* &* +@all\n")
    server = own_redis("--aclfile", str(aclfile))
    with aclfile.open("a") as f:
        f.write(ACL_FILE.read_text())
    with Client.from_url(server.url) as c:
        assert c.redis.execute_command("ACL", "LOAD") in (b"OK", "OK", True)
        for role in acl.ROLES:
            rules = c.redis.execute_command("ACL", "GETUSER", f"shardq-{role}")
            assert rules is not None, role
        _setuser_as_documented(c.redis)
    with Client(
        RedisSettings.from_url(f"redis://shardq-worker:pw-worker@127.0.0.1:{server.port}")
    ) as w:
        assert w.redis.ping()


def test_connecting_as_any_role_leaves_nothing_in_the_acl_log(
    cluster_url: str, cluster_client: Client, role_clients: dict[str, Client], queue: str
) -> None:
    """What the client library sends on connect is within every role's rules: on a server that
    has CLIENT SETINFO (Redis 7.2+, Valkey), a library that sent it as a role lacking it would
    leave one ACL LOG entry per connection."""
    cluster_client.create_queue(queue, 2)
    nodes = [cluster_client.redis.get_redis_connection(n) for n in cluster_client.redis.get_nodes()]
    for node in nodes:
        node.execute_command("ACL", "LOG", "RESET")
    for role in role_clients:
        fresh = Client(RedisSettings.from_url(cluster_url, **_login(role)))
        try:
            fresh.redis.ping(target_nodes=fresh.redis.ALL_NODES)
        finally:
            fresh.close()
    users = {name for name, _ in USERS.values()}
    entries = [
        e for node in nodes for e in node.execute_command("ACL", "LOG") if _log_user(e) in users
    ]
    assert entries == [], entries


def _login(role: str) -> dict[str, str]:
    name, password = USERS[role]
    return {"username": name, "password": password}


def _log_user(entry: Any) -> str:
    fields = dict(zip(entry[::2], entry[1::2], strict=False)) if isinstance(entry, list) else entry
    user = fields.get("username", fields.get(b"username", b""))
    return user.decode() if isinstance(user, bytes) else str(user)


# every producer feature as the producer user -------------------------------------------------


def _role_url(cluster_url: str, role: str) -> str:
    """The session cluster's URL logged in as the role_clients fixture's user of ``role``."""
    name, password = USERS[role]
    return cluster_url.replace("redis://", f"redis://{name}:{password}@", 1)


def _acl_log(cluster_client: Client) -> Counter[tuple[str, ...]]:
    """What ACL LOG holds on every node: (user, reason, context, object) -> times refused."""
    out: Counter[tuple[str, ...]] = Counter()
    for node in cluster_client.redis.get_nodes():
        conn = cluster_client.redis.get_redis_connection(node)
        for entry in conn.execute_command("ACL", "LOG", "128"):
            e = {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}
            key = tuple(
                v.decode() if isinstance(v, bytes) else str(v)
                for v in (e["username"], e["reason"], e["context"], e["object"])
            )
            out[key] = max(out[key], int(e["count"]))
    return out


def _refused_since(
    cluster_client: Client, before: Counter[tuple[str, ...]], users: set[str]
) -> dict[tuple[str, ...], int]:
    """What Redis refused ``users`` since ACL LOG read ``before`` (entry -> new refusals)."""
    return {
        k: n - before.get(k, 0)
        for k, n in _acl_log(cluster_client).items()
        if k[0] in users and n > before.get(k, 0)
    }


def _each_burst_ran_once_with_its_last_payload(seen: _Seen, debounced: dict[str, str]) -> None:
    for key, job_id in debounced.items():
        runs = seen.ran(job_id)
        assert len(runs) == 1 and runs[0]["burst"] == 2, (key, runs)


class _Seen:
    """What the workers ran, thread-safe: job id -> payloads, callbacks fired by name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: dict[str, list[Any]] = {}
        self.callbacks: Counter[str] = Counter()

    def handlers(self) -> dict[str, Any]:
        def t(job: Job) -> Any:
            with self.lock:
                self.runs.setdefault(job.id, []).append(job.payload)
            return {"got": job.payload}

        def step(job: Job) -> Any:
            before = job.previous["total"] if job.previous else 0
            return {"total": before + job.payload["add"]}

        def callback(job: Job) -> None:
            with self.lock:
                self.callbacks[job.payload["name"]] += 1

        return {"t": t, "child": t, "step": step, "callback": callback}

    def ran(self, job_id: str) -> list[Any]:
        with self.lock:
            return list(self.runs.get(job_id, []))


@contextlib.contextmanager
def _fleet_as_roles(cluster_url: str, queue: str, seen: _Seen) -> Iterator[None]:
    """A dispatcher as the dispatcher user and a worker as the worker user, for ``queue``."""
    from support.helpers import Runner

    dispatcher = Runner(_role_url(cluster_url, "dispatcher"), queue, workers=0)
    worker = Runner(_role_url(cluster_url, "worker"), queue, seen.handlers(), dispatcher=False)
    with dispatcher, worker:
        yield


def test_every_producer_feature_runs_as_the_producer_user(
    cluster_client: Client, cluster_url: str, role_clients: dict[str, Client], queue: str
) -> None:
    """The audit's case (M1): a debounced enqueue as the shipped producer user removed the
    waiting job's due entry, then Redis refused its HSET: 5 of 5 jobs lost, and an untyped
    ResponseError.  Here every producer feature runs as the producer user, with a dispatcher and
    a worker as theirs: plain, delayed, durable and bulk enqueues, idempotency keys, unique
    until done, debounce (each burst one job, run once with its last payload), get, reschedule,
    cancel, results, batches (created, opened, added to, sealed, cancelled), chains, schedules;
    and Redis refused none of the three users anything (ACL LOG)."""
    from support.helpers import scaled, wait_for

    from shardq import JobRequest

    producer = role_clients["producer"]
    cluster_client.create_queue(queue, 4)
    users = {USERS[r][0] for r in ("producer", "dispatcher", "worker")}
    refused_before = _acl_log(cluster_client)
    seen = _Seen()
    with _fleet_as_roles(cluster_url, queue, seen):
        # plain, delayed and durable, each with its result
        plain = producer.enqueue(queue, "t", {"n": "plain"}, keep_result=60)
        delayed = producer.enqueue(queue, "t", {"n": "delayed"}, delay=0.3, keep_result=60)
        durable = producer.enqueue(queue, "t", {"n": "durable"}, durable=True, keep_result=60)
        for job_id, n in ((plain, "plain"), (delayed, "delayed"), (durable, "durable")):
            assert producer.result(queue, job_id, timeout=scaled(30)) == {"got": {"n": n}}
        # debounce: five bursts of three enqueues; each burst is one job, run once, last payload
        bursts: dict[str, set[str]] = {}
        for burst in range(3):
            for k in range(5):
                job_id = producer.enqueue(
                    queue, "t", {"key": k, "burst": burst}, idempotency_key=f"deb-{k}",
                    debounce=0.5,
                )  # fmt: skip
                bursts.setdefault(f"deb-{k}", set()).add(job_id)
        assert all(len(ids) == 1 for ids in bursts.values()), bursts
        debounced = {k: next(iter(ids)) for k, ids in bursts.items()}
        wait_for(
            lambda: all(seen.ran(j) for j in debounced.values()),
            scaled(30),
            lambda: f"debounced jobs lost: {[k for k, j in debounced.items() if not seen.ran(j)]}",
        )
        # unique until done: the key returns its job until the job is done, then a new one
        first = producer.enqueue(
            queue, "t", {"n": "u"}, idempotency_key="uniq", unique_until="done", keep_result=60
        )
        assert producer.result(queue, first, timeout=scaled(30)) == {"got": {"n": "u"}}
        again = producer.enqueue(
            queue, "t", {"n": "u2"}, idempotency_key="uniq", unique_until="done"
        )
        assert again != first
        # an idempotency key; get, reschedule, cancel
        waiting = producer.enqueue(queue, "t", {"n": "idem"}, idempotency_key="idem", delay=3600)
        assert producer.enqueue(queue, "t", {"n": "idem"}, idempotency_key="idem") == waiting
        info = producer.get(queue, waiting)
        assert info is not None and info.state == "scheduled"
        producer.reschedule(queue, waiting, delay=0.2)
        doomed = producer.enqueue(queue, "t", {"n": "cancelled"}, delay=3600)
        assert producer.cancel(queue, doomed) is True
        # bulk
        many = producer.enqueue_many(queue, [JobRequest("t", {"i": i}) for i in range(20)])
        # workflows: a batch, an open batch added to and sealed, a chain, a cancelled batch
        producer.batches.create(
            queue, [JobRequest("child", {"n": i}) for i in range(3)],
            on_success=JobRequest("callback", {"name": "batch"}),
        )  # fmt: skip
        opened = producer.batches.open(queue, on_complete=JobRequest("callback", {"name": "open"}))
        producer.batches.add(queue, opened, [JobRequest("child", {"n": 9})], add_id="part-1")
        producer.batches.seal(queue, opened)
        chain = producer.batches.chain(
            queue, [JobRequest("step", {"add": 1}), JobRequest("step", {"add": 2})],
            on_success=JobRequest("callback", {"name": "chain"}),
        )  # fmt: skip
        later = producer.batches.create(queue, [JobRequest("child", {"n": 0}, delay=3600)])
        producer.batches.cancel(queue, later)
        assert {b.batch_id for b in producer.batches.list(queue)} >= {opened, chain, later}
        # schedules: added, read, paused, resumed, removed
        producer.schedules.add(queue, "nightly", "t", {"n": "s"}, cron="0 3 * * *")
        assert producer.schedules.get(queue, "nightly").name == "nightly"
        producer.schedules.pause(queue, "nightly")
        producer.schedules.resume(queue, "nightly")
        assert producer.schedules.remove(queue, "nightly") is True

        wait_for(
            lambda: all(seen.ran(r.job_id) for r in many) and seen.ran(waiting),
            scaled(30),
            "bulk or rescheduled jobs did not run",
        )
        wait_for(
            lambda: all(seen.callbacks[n] == 1 for n in ("batch", "open", "chain")),
            scaled(30),
            lambda: f"callbacks fired: {seen.callbacks}",
        )
    _each_burst_ran_once_with_its_last_payload(seen, debounced)
    assert not seen.ran(doomed)
    refused = _refused_since(cluster_client, refused_before, users)
    assert not refused, f"Redis refused the roles: {refused}"


def test_a_debounce_a_user_may_not_write_is_refused_whole(
    cluster_client: Client, role_clients: dict[str, Client], queue: str
) -> None:
    """A debounce asks Redis for every write it will make before the first (M1): a user that
    may not make one (here the dispatcher, which may enqueue but not remove a due-set member)
    gets NotPermittedError, and the waiting job, its due entry and its key are as they were
    (before, Redis refused the write half-way: an untyped error, and the job lost)."""
    from shardq.errors import NotPermittedError

    cluster_client.create_queue(queue, 2)
    producer, dispatcher = role_clients["producer"], role_clients["dispatcher"]
    job_id = producer.enqueue(queue, "t", {"n": 1}, idempotency_key="k", debounce=600)
    pk = keys_of(queue, "k", 2)
    compact = [m for m in cluster_client.redis.zrange(pk.due, 0, -1) if b" " in m]
    assert compact and compact[0].startswith(job_id.encode()), "not stored compactly"
    before = snapshot(cluster_client.redis, queue)
    with pytest.raises(NotPermittedError, match="producer"):
        dispatcher.enqueue(queue, "t", {"n": 2}, idempotency_key="k", debounce=600)
    assert snapshot(cluster_client.redis, queue) == before
    info = producer.get(queue, job_id)
    assert info is not None and info.payload == {"n": 1}
    # the producer debounces it
    assert producer.enqueue(queue, "t", {"n": 3}, idempotency_key="k", debounce=600) == job_id


def keys_of(queue: str, idempotency_key: str, partitions: int) -> Any:
    from shardq.store import keys

    return keys.partition_keys(queue, keys.partition_for(idempotency_key, partitions), partitions)


def test_the_typescript_producer_runs_its_features_as_the_producer_user(
    cluster_client: Client, cluster_url: str, role_clients: dict[str, Client], queue: str
) -> None:
    """M1 from clients/node: every feature of the TypeScript producer (plain, delayed and bulk
    enqueues, idempotency keys, unique until done, debounce, get, reschedule, cancel), driven
    through its conformance driver logged in as the producer user, with a dispatcher and a worker
    as theirs.  Each debounced burst is one job, run once with its last payload; Redis refused
    the producer nothing."""
    from support.helpers import scaled, wait_for
    from support.nodeclient import built_node_client, driver_command

    from wire import runner

    node = built_node_client()
    cluster_client.create_queue(queue, 4)
    url = _role_url(cluster_url, "producer")
    where = {"name": queue, "partitions": 4}
    user = USERS["producer"][0]
    refused_before = _acl_log(cluster_client)
    seen = _Seen()
    driver = runner.SubprocessDriver(driver_command(node))

    def enqueue(**request: Any) -> str:
        r = driver.run(url, where, {"op": "enqueue", "request": {"type": "t", **request}})
        return str(r["job_id"])

    try:
        with _fleet_as_roles(cluster_url, queue, seen):
            plain = enqueue(payload={"n": "plain"})
            delayed = enqueue(payload={"n": "delayed"}, delay_ms=300)
            bursts: dict[str, set[str]] = {}
            for burst in range(3):
                for k in range(5):
                    job_id = enqueue(
                        payload={"key": k, "burst": burst},
                        idempotency_key=f"deb-{k}",
                        debounce_ms=500,
                    )
                    bursts.setdefault(f"deb-{k}", set()).add(job_id)
            assert all(len(ids) == 1 for ids in bursts.values()), bursts
            debounced = {k: next(iter(ids)) for k, ids in bursts.items()}
            unique = enqueue(payload={"n": "u"}, idempotency_key="uniq", unique_until="done")
            again = enqueue(payload={"n": "u"}, idempotency_key="uniq", unique_until="done")
            assert again == unique
            waiting = enqueue(payload={"n": "idem"}, idempotency_key="idem", delay_ms=3_600_000)
            assert enqueue(payload={"n": "idem"}, idempotency_key="idem") == waiting
            got = driver.run(url, where, {"op": "get", "job_id": waiting})
            assert got["state"] == "scheduled", got
            driver.run(url, where, {"op": "reschedule", "job_id": waiting, "delay_ms": 200})
            doomed = enqueue(payload={"n": "cancelled"}, delay_ms=3_600_000)
            assert driver.run(url, where, {"op": "cancel", "job_id": doomed}) is True
            many = driver.run(
                url,
                where,
                {
                    "op": "enqueue_many",
                    "requests": [{"type": "t", "payload": i} for i in range(10)],
                },
            )
            ids = [plain, delayed, unique, waiting, *debounced.values()]
            ids += [str(r["job_id"]) for r in many]
            wait_for(
                lambda: all(seen.ran(j) for j in ids),
                scaled(30),
                lambda: f"jobs lost: {[j for j in ids if not seen.ran(j)]}",
            )
    finally:
        driver.close()
    _each_burst_ran_once_with_its_last_payload(seen, debounced)
    assert not seen.ran(doomed)
    refused = _refused_since(cluster_client, refused_before, {user})
    assert not refused, f"Redis refused the producer: {refused}"


# no raw command can hold a primary either ---------------------------------------------------

# Redis' client memory limit (maxmemory-clients: deploy/redis/redis-cluster.conf, the dev
# cluster's config) counts a command's arguments, each its bytes plus an 8-byte pointer, while
# they arrive: a command of more arguments than fit is cut off before it runs.
CLIENT_MEMORY_LIMIT = 32 * 1024 * 1024


def _cut_off(host: str, port: int, auth: tuple[str, str], command: bytes) -> tuple[bytes, float]:
    """Send ``command`` as the user ``auth`` while another connection PINGs the node; (what the
    caller got back: b'' when the node closed the connection, the longest a PING waited)."""
    import socket
    import threading

    caller = socket.create_connection((host, port))
    caller.sendall(_resp("AUTH", *auth))
    assert _reply(caller) == b"+OK\r\n"
    pinger = socket.create_connection((host, port))
    worst, stop = [0.0], threading.Event()

    def ping() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            pinger.sendall(b"PING\r\n")
            assert _reply(pinger) == b"+PONG\r\n"
            worst[0] = max(worst[0], time.perf_counter() - t)

    thread = threading.Thread(target=ping, daemon=True)
    thread.start()
    try:
        caller.sendall(command)
        got = caller.recv(1000)
    except OSError:  # reset while still sending: cut off
        got = b""
    finally:
        stop.set()
        thread.join()
        caller.close()
        pinger.close()
    return got, worst[0]


def test_one_raw_variadic_command_cannot_hold_a_primary(
    cluster_client: Client, role_clients: dict[str, Client], queue: str
) -> None:
    """The audit's case (M8): one HDEL of 5.6M fields, a command the producer may send raw on
    its queues' job hashes, held a primary for 9.8 s (each field a scan of a small hash's
    listpack).  With the deployment's client memory limit the node closes the connection while
    the arguments arrive, before the command runs, and keeps answering PINGs; so does an FCALL
    of as many arguments (refused by the function only after Redis had built them all)."""
    from support.helpers import scaled

    from shardq.store import keys

    cluster_client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    for i in range(120):  # a listpack of 120 fields: the costliest lookup per argument
        cluster_client.redis.hset(pk.jobs, f"job-with-a-longer-id-{i:04d}", "S0|[]")
    node = cluster_client.redis.get_node_from_key(pk.jobs)
    n = 2 * CLIENT_MEMORY_LIMIT // 9  # one-byte arguments: twice what the limit holds
    args = b"$1\r\na\r\n" * n
    hdel = b"*%d\r\n" % (n + 2) + _resp("HDEL", pk.jobs)[len(b"*3\r\n") :] + args
    fn = loader.scripts()["enqueue"].function
    fcall = b"*%d\r\n" % (n + 4) + _resp("FCALL", fn, 1, pk.jobs)[len(b"*4\r\n") :] + args
    before = snapshot(cluster_client.redis, queue)
    for name, command in (("HDEL", hdel), ("FCALL", fcall)):
        got, worst = _cut_off(node.host, int(node.port), USERS["producer"], command)
        assert got == b"", f"{name} of {n} arguments ran: {got[:80]!r}"
        assert worst < scaled(0.5), f"{name}: a PING waited {worst * 1000:.0f} ms"
    assert snapshot(cluster_client.redis, queue) == before
