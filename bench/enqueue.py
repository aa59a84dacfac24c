"""Enqueue rates in one run: single enqueues, enqueue_many, and the batched script's limit.

    python -m bench.enqueue --url redis://127.0.0.1:7300 [--jobs 50000 --single-jobs 3000 ...]

Prints one JSON object (with the machine's calibration, bench/calibration.py).
"""

from __future__ import annotations

import json
import secrets
import statistics
import time
from typing import Any

import click

from bench.calibration import calibrate
from shardq.cli.connection import redis_options, redis_settings
from shardq.client import Client
from shardq.config import RedisSettings
from shardq.connection import is_cluster
from shardq.dev.demo import delete_queue
from shardq.jobs import JobRequest


def _script_limit(client: Client, queue: str, partitions: int, requests: list[JobRequest]) -> float:
    """Jobs/s of the batched enqueue script alone: the same calls enqueue_many makes, prepared
    (validated, routed, encoded) beforehand, so only sending, Redis and reading the replies are
    timed.  The ceiling enqueue_many's own producer work is measured against."""
    from shardq.store import producer

    prepared = producer.prepare_many(
        queue, partitions, requests, client.settings, client.compact(queue)
    )
    ops = [call.op for call in producer.plan_bulk(prepared)]
    t0 = time.perf_counter()
    results = client.transport.run_many(ops)
    seconds = time.perf_counter() - t0
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise failed[0]
    return len(requests) / seconds


def run_enqueue_bench(
    url: str,
    jobs: int = 20_000,
    single_jobs: int = 2_000,
    partitions: int = 64,
    payload_bytes: int = 20,
    username: str | None = None,
    password: str | None = None,
    rounds: int = 3,
) -> dict[str, Any]:
    """Enqueue rates side by side: a loop of single enqueue() calls, enqueue_many, and the
    batched script's limit (the same calls, prepared beforehand).

    Every request is a distinct JobRequest (as a producer would build them).  Each measurement
    starts on an empty queue of its own (a growing hash or sorted set rehashes at sizes that
    would favour whichever run came later); enqueue_many and the limit alternate in order for
    ``rounds`` rounds.  The ratio is of the medians."""
    cal = calibrate(url, username, password)
    client = Client(RedisSettings.from_url(url, username=username, password=password))
    payload = "x" * payload_bytes

    def requests() -> list[JobRequest]:
        return [JobRequest("bench", payload, delay=3600) for _ in range(jobs)]

    def fresh() -> str:
        queue = f"bench-enq-{int(time.time())}-{secrets.token_hex(3)}"
        client.create_queue(queue, partitions)
        return queue

    def bulk_rate(queue: str) -> float:
        batch = requests()
        t0 = time.perf_counter()
        client.enqueue_many(queue, batch)
        return jobs / (time.perf_counter() - t0)

    def limit_rate(queue: str) -> float:
        return _script_limit(client, queue, partitions, requests())

    measure = {"bulk": bulk_rate, "limit": limit_rate}
    rates: dict[str, list[float]] = {"bulk": [], "limit": []}
    try:
        queue = fresh()
        try:
            t0 = time.perf_counter()
            for _ in range(single_jobs):
                client.enqueue(queue, "bench", payload, delay=3600)
            single = single_jobs / (time.perf_counter() - t0)
        finally:
            delete_queue(client.redis, queue, partitions)
        for n in range(rounds):
            for kind in ("bulk", "limit") if n % 2 == 0 else ("limit", "bulk"):
                queue = fresh()
                try:
                    rates[kind].append(measure[kind](queue))
                finally:
                    delete_queue(client.redis, queue, partitions)
        bulk, limit = statistics.median(rates["bulk"]), statistics.median(rates["limit"])
        return {
            "calibration": cal,
            "single_jobs": single_jobs,
            "single_jobs_per_s": round(single, 1),
            "bulk_jobs": jobs,
            "bulk_jobs_per_s": round(bulk, 1),
            "bulk_jobs_per_s_rounds": [round(b, 1) for b in rates["bulk"]],
            "script_limit_jobs_per_s": round(limit, 1),
            "script_limit_jobs_per_s_rounds": [round(x, 1) for x in rates["limit"]],
            "bulk_over_limit": round(bulk / limit, 2),
            "bulk_over_single": round(bulk / single, 2),
            "partitions": partitions,
            "cluster": is_cluster(client.redis),
        }
    finally:
        client.close()


@click.command()
@click.option("--jobs", default=50_000, show_default=True, help="Jobs for enqueue_many.")
@click.option("--single-jobs", default=3_000, show_default=True, help="Jobs for the single loop.")
@click.option("--partitions", default=64, show_default=True)
@click.option(
    "--rounds", default=3, show_default=True, help="enqueue_many and script-limit runs each."
)
@redis_options
def main(jobs: int, single_jobs: int, partitions: int, rounds: int) -> None:
    """Enqueue rates in one run (JSON): single enqueues, enqueue_many, and the batched script's
    limit (the same calls prepared beforehand); each starts on an empty queue."""
    conn = redis_settings()
    click.echo(
        json.dumps(
            run_enqueue_bench(
                conn.url,
                jobs,
                single_jobs,
                partitions,
                username=conn.username,
                password=conn.password,
                rounds=rounds,
            )
        )
    )


if __name__ == "__main__":
    main()
