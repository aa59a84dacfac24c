"""A dispatcher and a worker of the queue "reminders" in one Python process: what
`shardq dispatcher run` and `shardq worker run` do, for an application that starts its own
processes.  Ctrl-C (or SIGTERM) stops both cleanly: leases handed back, running jobs
finished within the worker's shutdown grace."""

import asyncio
import signal

from jobs import handlers

from shardq import Dispatcher, RedisSettings, Worker, WorkerSettings, connect_async


async def main() -> None:
    redis = await connect_async(RedisSettings.from_env())
    dispatcher = Dispatcher(redis, "reminders")
    worker = Worker(redis, "reminders", handlers=handlers, settings=WorkerSettings(concurrency=32))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: (dispatcher.stop(), worker.stop()))
    try:
        await asyncio.gather(dispatcher.run(), worker.run())
    finally:
        await redis.aclose()


if __name__ == "__main__":
    asyncio.run(main())
