"""shardq in the same comparison: one process running a Dispatcher and a Worker of the queue.

Same producer input (job id, due epoch ms) and the same per-job handler (one line in the run
log) as the baselines.  Lateness is handler start minus due time on the Redis clock
(``job.redis_now_ms(monotonic) - job.due_ms``).  Short timeouts so a killed consumer's work is
taken over within seconds: lease 3 s, visibility timeout 5 s (``--lease``, ``--visibility``).

    python -m bench.baselines.shardq_consumer --url redis://127.0.0.1:7310 --prefix bl-x \\
        --out runs.log
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time

from bench.baselines.record import RunLog, ready
from shardq import JobRequest
from shardq.client import Client
from shardq.config import DispatcherSettings, ProducerSettings, RedisSettings, WorkerSettings
from shardq.connection import connect_async
from shardq.dev.demo import delete_queue
from shardq.dispatcher import Dispatcher
from shardq.jobs import Job
from shardq.store import keys
from shardq.worker import Worker

PARTITIONS = 16


def connect(url: str, sticky_jobs: int | None = None) -> Client:
    """A producer client; ``sticky_jobs`` other than None sets ProducerSettings.sticky_jobs."""
    settings = None if sticky_jobs is None else ProducerSettings(sticky_jobs=sticky_jobs)
    return Client.from_url(url, settings)


def setup(client: Client, prefix: str) -> None:
    client.create_queue(prefix, PARTITIONS)


def produce(client: Client, prefix: str, jobs: list[tuple[str, int]], body: str) -> None:
    for start in range(0, len(jobs), 5000):
        client.enqueue_many(
            prefix,
            [
                JobRequest("job", body, run_at=due_ms / 1000.0, job_id=job_id)
                for job_id, due_ms in jobs[start : start + 5000]
            ],
        )


def produce_generated(client: Client, prefix: str, dues_ms: list[int], body: str) -> list[str]:
    """Enqueue jobs due at ``dues_ms`` (epoch ms) without ids, as a producer that leaves them
    to shardq (timed ids: compact waiting jobs); returns their ids, in order."""
    ids: list[str] = []
    for start in range(0, len(dues_ms), 5000):
        made = client.enqueue_many(
            prefix,
            [JobRequest("job", body, run_at=due / 1000.0) for due in dues_ms[start : start + 5000]],
        )
        ids.extend(r.job_id for r in made)
    return ids


def leftover(client: Client, prefix: str) -> int:
    pipe = client.redis.pipeline(transaction=False)
    for pk in keys.all_partition_keys(prefix, PARTITIONS):
        pipe.hlen(pk.jobs)
    return sum(int(n) for n in pipe.execute())


def cleanup(client: Client, prefix: str) -> None:
    delete_queue(client.redis, prefix, PARTITIONS)


async def consume(args: argparse.Namespace) -> None:
    redis = await connect_async(RedisSettings.from_url(args.url))
    log = RunLog(args.out)
    dispatcher = Dispatcher(
        redis,
        args.prefix,
        settings=DispatcherSettings(
            lease_time=args.lease,
            renew_interval=args.lease / 3,
            membership_timeout=args.lease,
            max_sleep=0.5,
        ),
    )
    worker = Worker(
        redis,
        args.prefix,
        settings=WorkerSettings(
            concurrency=1000,
            fetch_batch=200,
            visibility_timeout=args.visibility,
            heartbeat_interval=min(1.0, args.visibility / 3),
            reclaim_interval=min(1.0, args.visibility / 3),
            membership_timeout=args.lease,
            sweep_interval=1.0,
            idle_poll=0.5,
            shutdown_grace=5.0,
        ),
    )

    async def handle(job: Job) -> None:
        late = 0.0 if job.due_ms is None else job.redis_now_ms(time.monotonic()) - job.due_ms
        log.record(job.id, late)

    worker.register("job", handle)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: (dispatcher.stop(), worker.stop()))  # type: ignore[func-returns-value]
    tasks = [asyncio.create_task(dispatcher.run()), asyncio.create_task(worker.run())]
    ready()
    try:
        await asyncio.gather(*tasks)
    finally:
        await redis.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.baselines.shardq_consumer")
    parser.add_argument("--url", required=True)
    parser.add_argument("--prefix", required=True, help="the queue name")
    parser.add_argument("--out", required=True)
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument("--visibility", type=float, default=5.0)
    asyncio.run(consume(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
