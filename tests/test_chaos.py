"""Failure modes on a cluster of the tests' own (ports 7120-7125), so the rest of the suite
never sees a node killed or a slot moved: slot migration under load, a primary killed and its
replica promoted, Redis restarted with persistence, a producer clock far off Redis', a handler
that never returns."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from helpers import FAST_DISPATCHER, FAST_WORKER, Runner, Runs, wait_for
from redis.exceptions import RedisError

from shardq import Client, WorkerSettings, keys, ops
from shardq.devcluster import cluster_down, cluster_up, standalone_down, standalone_up

CHAOS_PORT = 7120
AOF_PORT = 7130


@pytest.fixture(scope="module")
def chaos_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("chaos")
    url = cluster_up(CHAOS_PORT, root=root)
    try:
        yield url
    finally:
        cluster_down(CHAOS_PORT, root=root)


def node_id(r: redis.Redis) -> str:
    return str(r.execute_command("CLUSTER MYID").decode())


def migrate_slot(
    slot: int, source: redis.Redis, target: redis.Redis, everyone: list[redis.Redis]
) -> None:
    """Move one slot with all its keys in single MIGRATE calls (keys of one partition move
    together, so a script never finds half of them gone: no TRYAGAIN storm)."""
    src_id, dst_id = node_id(source), node_id(target)
    target.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
    source.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
    host = target.connection_pool.connection_kwargs["host"]
    port = target.connection_pool.connection_kwargs["port"]
    while True:
        names = source.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000)
        if not names:
            break
        source.execute_command("MIGRATE", host, port, "", 0, 5000, "KEYS", *names)
    for r in [target, source, *everyone]:
        r.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)


def primaries(url: str) -> list[redis.Redis]:
    c = redis.cluster.RedisCluster.from_url(url)
    try:
        return [redis.Redis(host=n.host, port=n.port) for n in c.get_primaries()]
    finally:
        c.close()


def produce(
    client: Client, queue: str, n: int, spread: float, ids: list[str], stop: threading.Event
) -> None:
    """Enqueue n jobs over `spread` seconds, retrying through redirects and failovers."""
    start = time.monotonic()
    for i in range(n):
        if stop.is_set():
            return
        while True:
            try:
                ids.append(client.enqueue(queue, "t", i, delay=0.3, job_id=f"j{i}"))
                break
            except RedisError:
                time.sleep(0.05)
        lag = start + spread * (i + 1) / n - time.monotonic()
        if lag > 0:
            time.sleep(lag)


def test_slot_migration_under_load(chaos_url: str, queue: str) -> None:
    partitions = 4
    n = 1500
    client = Client.from_url(chaos_url)
    client.create_queue(queue, partitions)
    runs = Runs()
    ids: list[str] = []
    stop = threading.Event()
    nodes = primaries(chaos_url)
    pk = keys.partition_keys(queue, 0, partitions)
    slot = keys.slot_of(pk.due)
    owner_port = client.redis.nodes_manager.get_node_from_slot(slot).port  # type: ignore[union-attr]
    source = next(r for r in nodes if r.connection_pool.connection_kwargs["port"] == owner_port)
    target = next(r for r in nodes if r is not source)
    with Runner(chaos_url, queue, {"t": runs.add}):
        producer = threading.Thread(target=produce, args=(client, queue, n, 6.0, ids, stop))
        producer.start()
        try:
            time.sleep(2.0)
            migrate_slot(slot, source, target, [r for r in nodes if r not in (source, target)])
            producer.join(60)
            wait_for(lambda: len(runs.count()) >= n, 60, "jobs lost across the migration")
        finally:
            stop.set()
            producer.join(10)
    counts = runs.count()
    assert len(counts) == n
    assert source.execute_command("CLUSTER COUNTKEYSINSLOT", slot) == 0
    assert target.execute_command("CLUSTER COUNTKEYSINSLOT", slot) > 0
    client.close()


def test_primary_killed_replica_promoted(chaos_url: str, queue: str) -> None:
    """SIGKILL the primary of a partition mid-run: its replica takes over in a few seconds,
    dispatcher and worker keep serving the other partitions meanwhile and then that one too.
    Jobs enqueued durably before the kill are never lost (at least once: some may run twice)."""
    partitions = 8
    n = 2000
    client = Client.from_url(chaos_url)
    client.create_queue(queue, partitions)
    now = time.time()
    client.enqueue_many(
        queue, [ops.JobRequest("t", i, run_at=now + 1 + 6 * i / n) for i in range(n)], durable=True
    )
    pk = keys.partition_keys(queue, 0, partitions)
    victim_port = int(
        client.redis.nodes_manager.get_node_from_slot(  # type: ignore[union-attr]
            keys.slot_of(pk.due)
        ).port
    )
    victim_pid = int(redis.Redis(port=victim_port).info("server")["process_id"])
    runs = Runs()
    with Runner(chaos_url, queue, {"t": runs.add}):
        time.sleep(2.0)
        os.kill(victim_pid, signal.SIGKILL)
        wait_for(lambda: len(runs.count()) >= n, 90, "jobs lost across the failover")
    client.close()
    assert len(runs.count()) == n
    fresh = redis.cluster.RedisCluster.from_url(
        chaos_url.replace(
            str(victim_port), str(CHAOS_PORT + (1 if victim_port == CHAOS_PORT else 0))
        )
    )
    try:
        new_port = fresh.nodes_manager.get_node_from_slot(keys.slot_of(pk.due)).port
    finally:
        fresh.close()
    assert new_port != victim_port, "no failover happened"


def test_redis_restart_with_persistence(tmp_path: Path, queue: str) -> None:
    url = standalone_up(AOF_PORT, root=tmp_path, appendonly=True)
    try:
        client = Client.from_url(url)
        client.create_queue(queue, 4)
        ids = [
            r.job_id
            for r in client.enqueue_many(
                queue, [ops.JobRequest("t", i, delay=1) for i in range(200)]
            )
        ]
        r = redis.Redis(port=AOF_PORT)
        pid = int(r.info("server")["process_id"])
        r.execute_command("BGREWRITEAOF")
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)  # appendfsync everysec: at most ~1 s of writes at risk
        client.close()
        wait_for(
            lambda: (
                not os.path.exists(f"/proc/{pid}")
                or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
            ),
            10,
            "not dead",
        )
        # Start the same server on the same files (standalone_up would start afresh).
        (conf,) = tmp_path.rglob("redis.conf")
        subprocess.run(["redis-server", str(conf)], check=True, timeout=30)
        wait_for(lambda: _pings(AOF_PORT), 20, "restarted redis did not answer")
        runs = Runs()
        with Runner(url, queue, {"t": runs.add}):
            wait_for(lambda: len(runs.count()) >= 200, 30, "jobs lost across the restart")
        assert set(runs.count()) == set(ids)
    finally:
        standalone_down(AOF_PORT, root=tmp_path)


def _pings(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port).ping())
    except RedisError:
        return False


def test_producer_clock_skew_does_not_move_due_times(
    cluster_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delay is applied on the Redis clock: a producer whose clock is an hour ahead still
    gets its job run one second after enqueue, and the due time is the Redis clock's."""
    client = Client.from_url(cluster_url)
    client.create_queue(queue, 4)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600)
    job_id = client.enqueue(queue, "t", None, delay=1.0)
    monkeypatch.setattr(time, "time", real_time)
    info = client.get(queue, job_id)
    assert info is not None and info.due_ms is not None
    redis_now = client.redis.time()  # type: ignore[misc]
    redis_ms = int(redis_now[0]) * 1000 + int(redis_now[1]) // 1000
    assert 0 <= info.due_ms - redis_ms <= 1100
    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}):
        wait_for(lambda: len(runs.jobs) == 1, 10, "skewed job did not run")
    client.close()


def test_handler_that_never_returns_is_retried(cluster_url: str, queue: str) -> None:
    client = Client.from_url(cluster_url)
    client.create_queue(queue, 2)
    attempts: list[int] = []

    async def hang(job: object) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            import asyncio

            await asyncio.sleep(3600)

    settings = WorkerSettings(
        visibility_timeout=FAST_WORKER.visibility_timeout,
        heartbeat_interval=FAST_WORKER.heartbeat_interval,
        reclaim_interval=FAST_WORKER.reclaim_interval,
        idle_poll=FAST_WORKER.idle_poll,
        sweep_interval=FAST_WORKER.sweep_interval,
        membership_timeout=FAST_WORKER.membership_timeout,
        shutdown_grace=FAST_WORKER.shutdown_grace,
        handler_timeout=1.0,
    )
    from shardq import Backoff

    job_id = client.enqueue(queue, "t", None, backoff=Backoff("fixed", 0.1))
    with Runner(
        cluster_url,
        queue,
        {"t": hang},
        worker_settings=settings,
        dispatcher_settings=FAST_DISPATCHER,
    ):
        wait_for(lambda: len(attempts) >= 2, 15, "hung handler was not retried")
        wait_for(lambda: client.get(queue, job_id) is None, 10, "retry did not complete")
    client.close()
