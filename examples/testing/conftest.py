"""Fixtures for testing handlers against a real Redis (SHARDQ_REDIS_URL, default
redis://127.0.0.1:7000: `shardq dev cluster up`): a client, a fresh queue per test, and a
dispatcher and worker running the handlers in a background thread for the test's length."""

import asyncio
import threading
import uuid
from collections.abc import Iterator

import pytest
from jobs import handlers

from shardq import (
    Client,
    Dispatcher,
    RedisSettings,
    Worker,
    WorkerSettings,
    connect_async,
)


@pytest.fixture
def client() -> Iterator[Client]:
    with Client(RedisSettings.from_env()) as c:
        yield c


@pytest.fixture
def queue(client: Client) -> str:
    name = f"test-{uuid.uuid4().hex[:8]}"  # a queue of its own: tests do not see each other
    client.create_queue(name, partitions=4)
    return name


@pytest.fixture
def running_worker(queue: str) -> Iterator[Worker]:
    """A dispatcher and a worker of ``queue`` on their own event loop, stopped at the end."""
    started = threading.Event()
    roles: list[Dispatcher | Worker] = []
    loop = asyncio.new_event_loop()

    async def serve() -> None:
        redis = await connect_async(RedisSettings.from_env())
        roles.extend(
            [
                Dispatcher(redis, queue),
                Worker(redis, queue, handlers=handlers, settings=WorkerSettings(concurrency=4)),
            ]
        )
        loop.call_soon(started.set)
        try:
            await asyncio.gather(*(role.run() for role in roles))
        finally:
            await redis.aclose()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    started.wait(10)
    yield roles[1]  # the worker
    for role in roles:
        loop.call_soon_threadsafe(role.stop)
    thread.join(30)
