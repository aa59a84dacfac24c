"""The one wait-for-Redis loop (shardq.runtime.startup): a process started while Redis is down
waits for it, both to connect and to read its queue's settings; what waiting cannot fix is
raised at once.  Each test runs its own standalone redis-server, started late on purpose."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from pathlib import Path

import pytest
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from support.helpers import TIME_FACTOR, free_port
from support.procs import OwnRedis

from shardq.client import Client
from shardq.config import RedisSettings
from shardq.errors import UnknownQueueError
from shardq.runtime import startup
from shardq.store.transport import AsyncTransport

# Long enough for the loop to fail a few times (backoff 0.1 s doubling) before Redis starts.
DOWN_FOR = 1.0


def _waits(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "startup.waiting_for_redis" in r.getMessage()]


def test_connect_waits_until_redis_starts(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    settings = RedisSettings(url=f"redis://127.0.0.1:{port}")
    server: OwnRedis | None = None

    async def main() -> bool:
        nonlocal server
        stop = asyncio.Event()
        task = asyncio.create_task(startup.connect_async_waiting(settings, stop))
        await asyncio.sleep(DOWN_FOR)
        assert not task.done(), "gave up (or connected) while Redis was down"
        server = OwnRedis(port=port)
        client = await asyncio.wait_for(task, 10 * TIME_FACTOR)
        assert client is not None
        try:
            return bool(await client.ping())
        finally:
            await client.aclose()

    caplog.set_level(logging.WARNING, "shardq.connection")
    try:
        assert asyncio.run(main())
    finally:
        if server is not None:
            server.stop()
    waits = _waits(caplog)
    assert waits and waits[0].name == "shardq.connection"
    assert waits[0].msg["url"] == settings.url and waits[0].msg["attempts"] == 1


def test_connect_gives_up_when_stopped_while_redis_is_down() -> None:
    settings = RedisSettings(url=f"redis://127.0.0.1:{free_port()}")

    async def main() -> object:
        stop = asyncio.Event()
        task = asyncio.create_task(startup.connect_async_waiting(settings, stop))
        await asyncio.sleep(0.3)
        stop.set()
        return await asyncio.wait_for(task, 5 * TIME_FACTOR)

    assert asyncio.run(main()) is None


def test_connect_raises_at_once_what_waiting_cannot_fix() -> None:
    server = OwnRedis("--requirepass", "right")
    try:
        settings = RedisSettings(url=server.url.replace("redis://", "redis://:wrong@"))

        async def main() -> None:
            await asyncio.wait_for(
                startup.connect_async_waiting(settings, asyncio.Event()), 5 * TIME_FACTOR
            )

        with pytest.raises(redis.exceptions.AuthenticationError):
            asyncio.run(main())
    finally:
        server.stop()


def test_queue_meta_waits_for_redis_and_refuses_a_missing_queue_at_once(
    queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    data = Path(tempfile.mkdtemp(prefix="shardq-startup-"))
    kept = ("--dir", str(data), "--appendonly", "yes", "--appendfsync", "always")
    first = OwnRedis(*kept)
    port = first.port
    with Client.from_url(first.url) as client:
        client.create_queue(queue, 3)
    first.stop()  # killed: the queue survives in the append-only file
    server: OwnRedis | None = None
    log = logging.getLogger("shardq.test_startup")

    async def main() -> int:
        nonlocal server
        # No retries inside redis-py: each read of the loop fails at once while Redis is down.
        plain = redis.asyncio.Redis(host="127.0.0.1", port=port, retry=Retry(NoBackoff(), 0))
        transport = AsyncTransport(plain)
        try:
            stop = asyncio.Event()
            task = asyncio.create_task(startup.queue_meta(transport, queue, stop, log))
            await asyncio.sleep(DOWN_FOR)
            assert not task.done(), "gave up (or read) while Redis was down"
            server = OwnRedis(*kept, port=port)
            meta = await asyncio.wait_for(task, 10 * TIME_FACTOR)
            assert meta is not None
            with pytest.raises(UnknownQueueError):
                await startup.queue_meta(transport, queue + "-missing", stop, log)
            return meta.partitions
        finally:
            await transport.aclose()

    caplog.set_level(logging.WARNING, log.name)
    try:
        assert asyncio.run(main()) == 3
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(data, ignore_errors=True)
    waits = _waits(caplog)
    assert waits and waits[0].msg["queue"] == queue and waits[0].msg["attempts"] == 1
