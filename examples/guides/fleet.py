"""For the guides' scripts: a dispatcher and a worker of a queue on an event loop in a
background thread, for as long as a ``with running(...)`` block lasts.  In an application
they are processes of their own (`shardq dispatcher run`, `shardq worker run`)."""

import asyncio
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from shardq import Dispatcher, RedisSettings, Worker, WorkerSettings, connect_async


@contextmanager
def running(
    queue: str | list[str],
    handlers: Mapping[str, Callable[..., Any]],
    settings: WorkerSettings | None = None,
    **worker_options: Any,
) -> Iterator[Worker]:
    queues = [queue] if isinstance(queue, str) else queue
    loop = asyncio.new_event_loop()
    roles: list[Dispatcher | Worker] = []
    started = threading.Event()

    async def serve() -> None:
        redis = await connect_async(RedisSettings.from_env())
        worker = Worker(redis, queues, handlers=handlers, settings=settings, **worker_options)
        roles.extend([*(Dispatcher(redis, q) for q in queues), worker])
        loop.call_soon(started.set)
        try:
            await asyncio.gather(*(role.run() for role in roles))
        finally:
            await redis.aclose()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    if not started.wait(30):
        raise RuntimeError("the dispatcher and worker did not start")
    try:
        yield roles[-1]  # type: ignore[misc]
    finally:
        for role in roles:
            loop.call_soon_threadsafe(role.stop)
        thread.join(60)
