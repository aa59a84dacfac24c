"""What the shipped roles can forge with calls no shipped code makes (issue 50, M2 M9 M10 M11),
each as that role's ACL user on real Redis: a forged call is refused with a typed error and
writes nothing, a size past the shared bounds is refused, and a forged record is not believed."""

from __future__ import annotations

from typing import Any

import pytest
from support.roles import add_role_users, role_client

from shardq.client import Client
from shardq.errors import RedisFullError, ScriptArgumentError
from shardq.store import keys
from shardq.store import workflows as ops

MiB = 1024 * 1024


def _used(client: Client) -> int:
    return int(client.redis.info("memory")["used_memory"])


def _opened(
    bk: keys.BatchKeys,
    total: int,
    fields: list[tuple[str, bytes]] | None = None,
    sealed: bool = True,
) -> Any:
    return ops.open_batch(
        bk, kind="batch", policy="fail", retention_ms=60_000, total=total, sealed=sealed,
        parent="", fields=fields or [],
    )  # fmt: skip


def test_a_producer_cannot_make_a_batch_allocate_past_maxmemory(own_redis: Any, queue: str) -> None:
    """The audit's M2: a batch opened with 2^32 - 1 children, then a report of its last child,
    made a 64 MiB node allocate 512 MiB (batch-report runs at maxmemory: allow-oom).  Now the
    count is bounded as the producer's own check bounds it, the bitmap is allocated where Redis
    may still refuse (open, add), and a report never grows it."""
    server = own_redis("--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
    admin = Client.from_url(server.url)
    admin.create_queue(queue, 2)
    producer = role_client(server.url, add_role_users([admin.redis], ("producer",))["producer"])
    huge = keys.batch_keys(queue, "huge")
    with pytest.raises(ScriptArgumentError, match="1000000"):
        producer._run(_opened(huge, 2**32 - 1))
    # A pair may not set the counts or the bitmap's size either.
    for field in ("total", "bits", "state", "step:7"):
        with pytest.raises(ScriptArgumentError):
            producer._run(_opened(huge, 10, [(field, b"4294967296")]))
    assert admin.redis.exists(huge.record, huge.seen) == 0

    small = keys.batch_keys(queue, "small")
    producer._run(_opened(small, 10))
    grown = keys.batch_keys(queue, "grown")
    producer._run(_opened(grown, 0, sealed=False))
    assert producer._run(ops.add(grown, 100_000)) == (0, False)
    with pytest.raises(ScriptArgumentError):  # past MAX_ADD
        producer._run(ops.add(grown, 100_001))
    bitmaps = {bk.seen: admin.redis.strlen(bk.seen) for bk in (small, grown)}
    assert bitmaps == {small.seen: 2, grown.seen: 12_500}  # allocated by open and add

    # Redis at maxmemory: what may grow memory is refused whole, the settling scripts run.
    admin.redis.config_set("maxmemory", _used(admin) - MiB)
    try:
        with pytest.raises(RedisFullError):
            producer._run(ops.add(grown, 100_000))
        before = _used(admin)
        for bk, past in ((small, 10), (grown, 100_000)):
            forged = [ops.ChildEnd(i, "ok", f"x#{i}") for i in (2**32 - 2, 10**9, past)]
            reported = producer._run(ops.report(bk, forged))
            assert reported.known and reported.counted == 0 and reported.skipped == [0, 1, 2]
        real = producer._run(ops.report(grown, [ops.ChildEnd(99_999, "ok", "grown#99999")]))
        assert real.counted == 1
        assert _used(admin) - before < MiB
        assert {bk.seen: admin.redis.strlen(bk.seen) for bk in (small, grown)} == bitmaps
    finally:
        admin.redis.config_set("maxmemory", 0)
    admin.close()
    producer.close()


def test_what_runs_at_maxmemory_keeps_nothing_of_a_callers_size(own_redis: Any, queue: str) -> None:
    """The allow-oom scripts (they run on a full Redis) keep no name, error or result longer
    than the shared bounds, whatever a worker or dispatcher sends: a name over MAX_NAME_BYTES
    is refused, an error is kept to MAX_ERROR_BYTES, a result over MAX_RESULT_BYTES refused."""
    from shardq.config import MAX_ERROR_BYTES, MAX_RESULT_BYTES
    from shardq.names import MAX_MEMBER_BYTES
    from shardq.store import delivery, fleet, results

    server = own_redis("--maxmemory", "256mb", "--maxmemory-policy", "noeviction")
    admin = Client.from_url(server.url)
    admin.create_queue(queue, 1)
    users = add_role_users([admin.redis], ("worker", "dispatcher"))
    worker, dispatcher = (role_client(server.url, users[r]) for r in ("worker", "dispatcher"))
    pk = keys.partition_keys(queue, 0, 1)
    ids = [admin.enqueue(queue, "t", {"n": n}) for n in range(2)]
    long_name = "w" * (MAX_MEMBER_BYTES + 1)
    for call in (
        delivery.fetch(pk, long_name, 10),
        fleet.members(keys.dispatchers_key(queue), keys.drain_key(queue), long_name, 5000),
        fleet.lease_acquire(pk, long_name, 5000),
    ):
        with pytest.raises(ScriptArgumentError, match=str(MAX_MEMBER_BYTES)):
            (dispatcher if call.script.name != "fetch" else worker)._run(call)
    got = worker._run(delivery.fetch(pk, "w-1", 10)).jobs
    assert sorted(j.raw_id.decode() for j in got) == sorted(ids)
    first, second = got
    too_big = results.Completion(
        first.entry_id, first.raw_id, 60_000, b"x" * (MAX_RESULT_BYTES + 1)
    )
    with pytest.raises(ScriptArgumentError, match=str(MAX_RESULT_BYTES)):
        worker._run(results.complete(pk, [too_big]))
    admin.redis.config_set("maxmemory", _used(admin) - MiB)
    try:
        error = "e" * (MAX_ERROR_BYTES + 500_000)
        failed = worker._run(delivery.fail(pk, second.entry_id, second.raw_id, -1, error))
        assert failed.outcome == "dead"
        assert admin.redis.hstrlen(pk.errors, second.raw_id) == MAX_ERROR_BYTES
    finally:
        admin.redis.config_set("maxmemory", 0)
    assert admin.redis.exists(pk.result(first.raw_id.decode())) == 0
    assert admin.redis.xpending(pk.ready, keys.WORKER_GROUP)["pending"] == 1  # the first, still
    for c in (admin, worker, dispatcher):
        c.close()

