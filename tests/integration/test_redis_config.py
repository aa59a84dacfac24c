"""Misconfiguration is refused, and a full Redis gets a typed error with nothing half-written.

* An evicting maxmemory-policy on one primary of the cluster: queue create, workers and
  dispatchers refuse to start with a message that says what to set (an explicit override
  exists), `shardq redis check` fails, and the gauge shows which node; a policy changed while they
  run is found by the periodic check and logged, and so is its repair.
* appendonly off with require_appendonly: refused.
* noeviction with memory full (a test's own small server): enqueue raises RedisFullError,
  enqueue_many raises BulkEnqueueError whose ``stored`` is exactly what Redis holds, and
  workers still drain the full Redis, after which enqueues work again.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from support.helpers import FAST_DISPATCHER, FAST_WORKER, Runner, Runs, wait_for
from support.procs import OwnRedis

from shardq.cli import main as cli
from shardq.client import Client
from shardq.config import RedisSettings
from shardq.connection import connect_async
from shardq.dispatcher import Dispatcher
from shardq.errors import BulkEnqueueError, MisconfiguredRedisError, RedisFullError
from shardq.jobs import JobRequest
from shardq.store import keys
from shardq.worker import Worker


def _gauge(node: str, check: str) -> float | None:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("shardq_redis_misconfigured", {"node": node, "check": check})


@pytest.fixture
def evicting_primary(cluster_client: Client) -> Iterator[str]:
    """One primary of the session cluster set to allkeys-lru for this test (restored after)."""
    r = cluster_client.redis
    node = sorted(r.get_primaries(), key=lambda n: n.name)[1]
    r.config_set("maxmemory-policy", "allkeys-lru", target_nodes=node)
    try:
        yield node.name
    finally:
        r.config_set("maxmemory-policy", "noeviction", target_nodes=node)


def _start(role: str, url: str, queue: str, **settings: Any) -> None:
    """Run a worker or dispatcher until it has started (or raise what stopped it)."""

    async def go() -> None:
        redis = await connect_async(RedisSettings.from_url(url))
        try:
            if role == "worker":
                proc: Worker | Dispatcher = Worker(
                    redis, queue, handlers={}, settings=dataclasses.replace(FAST_WORKER, **settings)
                )
            else:
                proc = Dispatcher(
                    redis, queue, settings=dataclasses.replace(FAST_DISPATCHER, **settings)
                )
            task = asyncio.create_task(proc.run())
            while not proc.started.is_set() and not task.done():
                await asyncio.sleep(0.02)
            proc.stop()
            await task
        finally:
            await redis.aclose()

    asyncio.run(go())


def test_an_evicting_primary_is_refused_everywhere(
    cluster_url: str, cluster_client: Client, evicting_primary: str, queue: str
) -> None:
    found = cluster_client.check_redis()
    assert [(f.node, f.check) for f in found] == [(evicting_primary, "eviction")]
    with pytest.raises(MisconfiguredRedisError) as caught:
        cluster_client.create_queue(queue, 4)
    message = str(caught.value)
    assert evicting_primary in message and "maxmemory-policy noeviction" in message
    assert "--allow-evicting-redis" in message
    assert not cluster_client.redis.exists(keys.queue_meta_key(queue))  # nothing written

    runner = CliRunner()
    out = runner.invoke(cli, ["redis", "check", "--url", cluster_url])
    assert out.exit_code == 1 and "allkeys-lru" in out.output, out.output
    out = runner.invoke(cli, ["redis", "check", "--url", cluster_url, "--allow-evicting-redis"])
    assert out.exit_code == 0, out.output
    out = runner.invoke(cli, ["queue", "create", "-q", queue, "--url", cluster_url])
    assert out.exit_code == 1 and "maxmemory-policy" in out.output, out.output
    assert "--allow-evicting-redis" in out.output and "Traceback" not in out.output

    assert cluster_client.create_queue(queue, 4, allow_evicting_redis=True)
    for role in ("worker", "dispatcher"):
        with pytest.raises(MisconfiguredRedisError):
            _start(role, cluster_url, queue)
        _start(role, cluster_url, queue, allow_evicting_redis=True)
    assert _gauge(evicting_primary, "eviction") == 1


def test_a_policy_changed_while_running_is_found_and_its_repair_too(
    cluster_url: str, cluster_client: Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    cluster_client.create_queue(queue, 2)
    r = cluster_client.redis
    node = sorted(r.get_primaries(), key=lambda n: n.name)[0]
    settings = dataclasses.replace(FAST_WORKER, redis_check_interval=0.1)
    runs = Runs()
    caplog.set_level("WARNING", logger="shardq.redis_config")
    with Runner(cluster_url, queue, {"t": runs.add}, worker_settings=settings) as runner:
        try:
            r.config_set("maxmemory-policy", "volatile-lru", target_nodes=node)
            # The gauge is set just before the event is logged, on the runner's thread.
            wait_for(
                lambda: _gauge(node.name, "eviction") == 1 and "volatile-lru" in caplog.text,
                10,
                "not found",
            )
            assert "redis.misconfigured" in caplog.text
        finally:
            r.config_set("maxmemory-policy", "noeviction", target_nodes=node)
        wait_for(
            lambda: _gauge(node.name, "eviction") == 0 and "redis.config_fixed" in caplog.text,
            10,
            "repair not seen",
        )
        job = cluster_client.enqueue(queue, "t", 1)
        wait_for(lambda: job in runs.count(), 10, "the worker stopped working")
        runner.check()


def test_appendonly_off_is_refused_when_required(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    cluster_client.create_queue(queue, 2)
    nodes = cluster_client.redis.info("persistence", target_nodes=cluster_client.redis.PRIMARIES)
    if all(str(i.get("aof_enabled")) == "1" for i in nodes.values()):
        pytest.fail("the test cluster runs with appendonly yes: this test needs it off")
    assert any(f.check == "appendonly" for f in cluster_client.check_redis(True))
    for role in ("worker", "dispatcher"):
        with pytest.raises(MisconfiguredRedisError) as caught:
            _start(role, cluster_url, queue, require_appendonly=True)
        assert "appendonly yes" in str(caught.value)
    out = CliRunner().invoke(cli, ["redis", "check", "--url", cluster_url, "--require-appendonly"])
    assert out.exit_code == 1 and "appendonly" in out.output


def _stored_ids(client: Client, queue: str, partitions: int) -> set[str]:
    r = client.redis
    out: set[str] = set()
    for pk in keys.all_partition_keys(queue, partitions):
        out |= {k.decode() for k in r.hkeys(pk.jobs)}
        # compact waiting jobs: due-set members '<id> <body>' (lua/includes/compact.lua)
        out |= {m.split(b" ", 1)[0].decode() for m in r.zrange(pk.due, 0, -1) if b" " in m}
    return out


def test_a_full_redis_refuses_enqueues_whole_and_still_drains(
    own_redis: Callable[..., OwnRedis], queue: str
) -> None:
    server = own_redis("--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
    client = Client.from_url(server.url)
    partitions = 4
    client.create_queue(queue, partitions)
    payload = "x" * 2000
    accepted: list[str] = []
    with pytest.raises(RedisFullError) as caught:
        for _ in range(10_000):
            accepted.append(client.enqueue(queue, "t", payload, delay=0.2))
    assert "maxmemory" in str(caught.value) or "full" in str(caught.value).lower()
    assert _stored_ids(client, queue, partitions) == set(accepted)  # nothing half-written

    requests = [JobRequest("t", payload) for _ in range(300)]
    with pytest.raises(BulkEnqueueError) as bulk:
        client.enqueue_many(queue, requests)
    stored = set(bulk.value.stored)
    assert all(isinstance(e, RedisFullError) for e in bulk.value.failed.values())
    assert _stored_ids(client, queue, partitions) == set(accepted) | stored
    assert len(stored) + len(bulk.value.failed) == len(requests)

    # Workers and the dispatcher drain a full Redis (their scripts may run at maxmemory).
    runs = Runs()
    with Runner(server.url, queue, {"t": runs.add}) as runner:
        expected = set(accepted) | stored
        wait_for(lambda: expected <= set(runs.count()), 60, lambda: f"{len(runs.count())} ran")
        again = client.enqueue(queue, "t", "after")
        wait_for(lambda: again in runs.count(), 10, "enqueue did not work again")
        runner.check()
    client.close()


def test_the_server_and_its_version_are_read_and_an_older_one_is_refused(
    cluster_client: Client,
) -> None:
    """INFO as this session's server writes it (Redis 7.0, or Valkey 8.1 with its own version
    beside the Redis one it reports): read as that server and version, and accepted; the same
    INFO with a version below shardq's floor is refused, naming what it found and needs."""
    from support import servers

    from shardq.runtime import redis_config

    r = cluster_client.redis
    node = sorted(r.get_primaries(), key=lambda n: n.name)[0]
    info = r.get_redis_connection(node).info()
    read = redis_config._node_config(node.name, info, info)
    banner = servers.banner()  # "Redis server v=7.0.15 ..." / "Valkey server v=8.1.8 ..."
    assert banner.startswith(read.describe_server.split()[0] + " server")
    assert f"v={read.version} " in banner
    assert read.too_old() is None and redis_config.findings([read], False) == []

    older = dict(info)
    older["valkey_version" if read.server == "valkey" else "redis_version"] = "6.2.14"
    old = redis_config._node_config(node.name, older, older)
    [finding] = redis_config.findings([old], False)
    assert finding.check == "version" and "6.2.14" in finding.detail
    assert "Redis >= 7.0 or Valkey >= 7.2" in finding.detail
    error = redis_config.refusal([finding], allow_eviction=True)
    assert error is not None and "shardq cannot run on this server" in str(error)
