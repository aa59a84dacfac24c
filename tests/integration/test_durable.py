"""Durable enqueue: WAIT for a replica on the connection that wrote, per partition."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time

import pytest
import redis
from support.helpers import scaled, wait_for

from shardq import AsyncClient, Client, JobRequest, ProducerSettings
from shardq.errors import NotDurableError
from shardq.store import keys
from shardq.store.transport import SyncTransport

SETTINGS = ProducerSettings(durable_timeout=0.3)


def test_durable_enqueue_on_cluster(cluster_url: str, queue: str) -> None:
    with Client.from_url(cluster_url, SETTINGS) as client:
        client.create_queue(queue, 8)
        job_id = client.enqueue(queue, "t", 1, durable=True)
        assert client.get(queue, job_id) is not None
        results = client.enqueue_many(queue, [JobRequest("t", i) for i in range(300)], durable=True)
        assert len(results) == 300 and all(r.created for r in results)

    async def go() -> None:
        a = await AsyncClient.from_url(cluster_url, SETTINGS)
        try:
            assert await a.enqueue(queue, "t", 2, durable=True)
            assert (
                len(
                    await a.enqueue_many(
                        queue, [JobRequest("t", i) for i in range(50)], durable=True
                    )
                )
                == 50
            )
        finally:
            await a.close()

    asyncio.run(go())


def test_durable_without_replica_raises_and_keeps_the_job(standalone_url: str, queue: str) -> None:
    with Client.from_url(standalone_url, SETTINGS) as client:
        client.create_queue(queue, 4)
        with pytest.raises(NotDurableError, match="resending with the same idempotency_key") as e:
            client.enqueue(queue, "t", 1, idempotency_key="k1", durable=True)
        (job_id,) = e.value.job_ids
        assert client.get(queue, job_id) is not None  # stored on the primary all the same
        # Resending with the key is safe: same job, still not durable.
        with pytest.raises(NotDurableError):
            client.enqueue(queue, "t", 1, idempotency_key="k1", durable=True)
        assert client.enqueue(queue, "t", 1, idempotency_key="k1") == job_id


def _replica_pid(primary: redis.Redis) -> int:
    info = primary.info("replication")
    port = int(info["slave0"]["port"])
    return int(redis.Redis(port=port).info("server")["process_id"])


def _waits(node: redis.Redis) -> int:
    """WAIT commands the node has run (INFO commandstats)."""
    return int(node.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def test_one_stalled_replica_does_not_stall_other_partitions(cluster_url: str, queue: str) -> None:
    """A partition whose replica is stuck fails its durable enqueue after one WAIT (its
    timeout, not resent until the retry window ends); a durable enqueue to a partition on
    another primary waits on that primary only, and succeeds."""
    partitions = 8
    settings = ProducerSettings(durable_timeout=1.0)
    with Client.from_url(cluster_url, settings) as client:
        client.create_queue(queue, partitions)
        manager = client.redis.nodes_manager  # type: ignore[union-attr]

        def node_of(p: int) -> str:
            pk = keys.partition_keys(queue, p, partitions)
            return str(manager.get_node_from_slot(keys.slot_of(pk.due)).name)

        stalled_node = node_of(0)
        other = next(p for p in range(partitions) if node_of(p) != stalled_node)
        host, port = stalled_node.rsplit(":", 1)
        stalled = redis.Redis(host=host, port=int(port))
        other_host, other_port = node_of(other).rsplit(":", 1)
        healthy = redis.Redis(host=other_host, port=int(other_port))
        pid = _replica_pid(stalled)

        def job_in(p: int) -> str:
            return next(
                f"d{i}" for i in range(10_000) if keys.partition_for(f"d{i}", partitions) == p
            )

        os.kill(pid, signal.SIGSTOP)
        try:
            before = _waits(stalled), _waits(healthy)
            with pytest.raises(
                NotDurableError, match=re.escape("only 0 of 1 replica(s) confirmed within 1.0 s")
            ):
                client.enqueue(queue, "t", 1, job_id=job_in(0), durable=True)
            assert (_waits(stalled), _waits(healthy)) == (before[0] + 1, before[1])  # gave up
            client.enqueue(queue, "t", 1, job_id=job_in(other), durable=True)
            # not held up by the stall: nothing waited on the stalled primary
            assert (_waits(stalled), _waits(healthy)) == (before[0] + 1, before[1] + 1)
        finally:
            os.kill(pid, signal.SIGCONT)
            stalled.close()
            healthy.close()


def test_durable_enqueue_many_without_replica_keeps_every_id(
    standalone_url: str, queue: str
) -> None:
    """NotDurableError from enqueue_many carries every request's result: the jobs were stored,
    and the ids generated for them are not lost with the error (sync and asyncio)."""
    requests = [JobRequest("t", i, delay=60) for i in range(7)]
    with Client.from_url(standalone_url, SETTINGS) as client:
        client.create_queue(queue, 4)
        with pytest.raises(NotDurableError) as e:
            client.enqueue_many(queue, requests, chunk=3, durable=True)

        async def go() -> NotDurableError:
            async with await AsyncClient.from_url(standalone_url, SETTINGS) as producer:
                try:
                    await producer.enqueue_many(queue, requests, chunk=3, durable=True)
                except NotDurableError as exc:
                    return exc
            raise AssertionError("no NotDurableError")

        for exc in (e.value, asyncio.run(go())):
            ids = [r.job_id for r in exc.results]  # type: ignore[attr-defined]
            assert len(set(ids)) == 7 and sorted(exc.job_ids) == sorted(ids)
            for job_id in ids:
                assert client.get(queue, job_id) is not None


# Waiting per node: the relay's reports and a resize's moves ------------------------------------


def _wait_calls(r: redis.RedisCluster) -> dict[str, int]:
    """WAIT commands each primary has run (INFO commandstats)."""
    return {
        node.name: r.get_redis_connection(node)
        .info("commandstats")
        .get("cmdstat_wait", {})
        .get("calls", 0)
        for node in r.get_primaries()
    }


def _without_replicas(manager: object, primary: str) -> None:
    """The slot map as a client sees it right after ``primary`` lost its replica (a failover
    whose old primary has not rejoined): its slots list the primary alone."""
    cache = manager.slots_cache  # type: ignore[attr-defined]
    for slot, nodes in cache.items():
        if nodes and nodes[0].name == primary:
            cache[slot] = nodes[:1]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_per_node_wait_asks_each_primary_for_the_replicas_it_has(
    cluster_url: str, flavour: str
) -> None:
    """``Waiting(per_node=True)``: each primary's batch waits for at most the replicas the slot
    map gives that primary, for none where it has none, and a batch all its primary's replicas
    confirmed counts as confirmed by every replica asked.  So one primary left without a
    replica (right after a failover) no longer makes the relay's reports and a resize's moves
    go unconfirmed on every other primary (they waited for no replica anywhere before), and a
    strict Waiting still reports what the WAIT answered."""
    from shardq.store.op import Waiting, cmd, raw
    from shardq.store.retry import AsyncRunner, SyncRunner

    with Client.from_url(cluster_url) as client:
        r = client.redis
        tag = os.urandom(4).hex()
        calls = [
            cmd("SET", f"{route}:per-node-{tag}", "1", "PX", "60000", parse=raw)
            for route in SyncTransport(r).primary_routes()
        ]

        def one_replica_each() -> bool:
            r.nodes_manager.initialize()  # the slot map as the cluster gives it now
            return sorted(SyncTransport(r).replicas_by_primary().values()) == [1, 1, 1]

        # (A failover test before this one may have left a replica still rejoining.)
        wait_for(one_replica_each, 30, lambda: f"replicas {SyncTransport(r).replicas_by_primary()}")
        primaries = sorted(SyncTransport(r).replicas_by_primary())
        assert len(calls) == len(primaries) == 3
        lonely = SyncTransport(r).node_name(calls[0].route_key)

        def send(batch: Waiting) -> tuple[list[object], list[int | None]]:
            if flavour == "sync":
                _without_replicas(r.nodes_manager, lonely)
                result: tuple[list[object], list[int | None]] = SyncRunner(
                    SyncTransport(r), 10.0
                ).send(batch, time.monotonic() + 10.0, "per-node test")
                return result

            async def go() -> tuple[list[object], list[int | None]]:
                a = await AsyncClient.from_url(cluster_url)
                try:
                    manager = a.transport.client.nodes_manager
                    _without_replicas(manager, lonely)
                    runner = AsyncRunner(a.transport, 10.0)
                    got: tuple[list[object], list[int | None]] = await runner.send(
                        batch, time.monotonic() + 10.0, "per-node test"
                    )
                    return got
                finally:
                    await a.close()

            return asyncio.run(go())

        before = _wait_calls(r)
        started = time.monotonic()
        results, acked = send(Waiting(list(calls), 2, 5_000, per_node=True))
        took = time.monotonic() - started
        assert all(x is True or x == b"OK" for x in results), results
        # Two asked of primaries that have one (or, the lonely one, none): each waited for
        # what it has, confirmed, and reads as confirmed by both; none timed out.
        assert acked == [2, 2, 2]
        assert took < scaled(5.0)  # none waited its 5 s out (nor hung)
        after = _wait_calls(r)
        assert after[lonely] == before[lonely]  # no WAIT where no replica is
        assert all(after[p] >= before[p] + 1 for p in primaries if p != lonely)
        # Strict (a producer's durable write): the WAIT's own answer, 1 of the 2 asked.
        _, strict = send(Waiting(list(calls), 2, 300))
        assert sorted(strict, key=str) == [1, 1, 1]
