"""Durable enqueue: WAIT for a replica on the connection that wrote, per partition."""

from __future__ import annotations

import asyncio
import os
import re
import signal

import pytest
import redis

from shardq import AsyncClient, Client, JobRequest, ProducerSettings
from shardq.errors import NotDurableError
from shardq.store import keys

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
