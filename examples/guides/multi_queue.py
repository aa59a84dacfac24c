"""The code of docs/guides/multi-queue.md, runnable against a cluster (SHARDQ_REDIS_URL)."""

import asyncio

from shardq import Client, Job, RedisSettings

done: list[str] = []


async def send(job: Job) -> None:
    done.append(job.queue)


async def render(job: Job) -> None:
    done.append(job.queue)


# --8<-- [start:worker]
from shardq import QueueChoice, Worker, WorkerSettings, connect_async  # noqa: E402


async def serve(stop: asyncio.Event) -> None:
    redis = await connect_async(RedisSettings.from_env())
    handlers = {"send": send, "render": render}
    # One pool of 40 deliveries: "notifications" is guaranteed 1/4 of it, "invoices" 3/4, and a
    # queue with nothing waiting lends its share to the other.
    worker = Worker(
        redis,
        ["notifications", "invoices:3"],
        handlers=handlers,
        settings=WorkerSettings(concurrency=40),
    )
    # The same queues: [QueueChoice("notifications"), QueueChoice("invoices", weight=3)]
    # In order instead: Worker(redis, ["urgent", "normal", "bulk"], ..., strict=True)
    task = asyncio.create_task(worker.run())
    await stop.wait()  # in a real process: until SIGTERM
    worker.stop()
    await task
    await redis.aclose()


# --8<-- [end:worker]


async def main() -> None:
    with Client(RedisSettings.from_env()) as client:
        for queue in ("notifications", "invoices"):
            client.create_queue(queue, partitions=16)
            for n in range(20):  # due now: no dispatcher needed, the worker's reads promote
                client.enqueue(queue, "send" if queue == "notifications" else "render", {"n": n})
    stop = asyncio.Event()
    serving = asyncio.create_task(serve(stop))
    for _ in range(600):
        if done.count("notifications") >= 20 and done.count("invoices") >= 20:
            break
        await asyncio.sleep(0.1)
    stop.set()
    await serving
    assert done.count("notifications") >= 20 and done.count("invoices") >= 20, done
    assert QueueChoice("invoices", weight=3).weight == 3


if __name__ == "__main__":
    asyncio.run(main())
