"""What each web console page costs: server time and Redis commands, on a big queue.

    python -m bench.web_pages --url redis://127.0.0.1:7000 --partitions 1024 --jobs 1000000

Creates a throw-away queue with ``--partitions`` partitions and ``--jobs`` scheduled jobs (plus
a few ready and dead ones), then requests each page in-process (starlette's TestClient, no
network) ``--repeat`` times.  Redis commands are counted on the primaries themselves
(``total_commands_processed`` before and after, less the INFO calls that read it; it counts
the commands a script runs too), with the script calls and the Redis time spent in them from
``INFO commandstats``.  Prints a markdown table
(docs/capacity.md, "The web console") between two calibrations of the box, then deletes the
queue.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from starlette.testclient import TestClient

from bench.calibration import calibrate, calibration_line
from shardq import JobRequest
from shardq.client import Client
from shardq.config import RedisSettings
from shardq.inspector import Inspector
from shardq.store import delivery, keys
from shardq.web import WebConfig, create_app

SCRIPT_COMMANDS = ("fcall", "fcall_ro", "evalsha", "eval", "evalsha_ro", "eval_ro")


def counters(client: Client) -> tuple[int, int, int]:
    """(every command, incl. those run inside scripts; script calls; µs spent in scripts),
    summed over the primaries."""
    redis: Any = client.redis
    nodes = redis.get_primaries() if hasattr(redis, "get_primaries") else [None]
    total = calls = usec = 0
    for node in nodes:
        kw = {"target_nodes": node} if node else {}
        total += int(redis.info("stats", **kw)["total_commands_processed"])
        stats = redis.info("commandstats", **kw)
        for name in SCRIPT_COMMANDS:
            row = stats.get(f"cmdstat_{name}")
            if row:
                calls += int(row["calls"])
                usec += int(row["usec"])
    return total, calls, usec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="redis://127.0.0.1:7000")
    ap.add_argument("--partitions", type=int, default=1024)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"calibration (before): {calibration_line(calibrate(args.url))}", flush=True)
    client = Client.from_url(args.url)
    queue = "web-bench-" + uuid.uuid4().hex[:8]
    client.create_queue(queue, args.partitions, allow_evicting_redis=True)
    started = time.monotonic()
    batch = 20_000
    for start in range(0, args.jobs, batch):
        n = min(batch, args.jobs - start)
        client.enqueue_many(
            queue,
            [JobRequest("t", i, delay=3600 + (start + i) % 86_400) for i in range(n)],
        )
    fill_s = time.monotonic() - started
    ready = client.enqueue_many(queue, [JobRequest("r", i) for i in range(200)])
    pk = keys.partition_keys(queue, ready[0].partition, args.partitions)
    got = client.transport.run(delivery.fetch(pk, "bench-worker", 2)).jobs
    client.transport.run(delivery.fail(pk, got[0].entry_id, got[0].raw_id, -1, "x"))
    dead = got[0].raw_id.decode()
    nodes = len(client.redis.get_primaries()) if hasattr(client.redis, "get_primaries") else 1
    info_cost = 2 * nodes  # INFO stats + INFO commandstats per primary per read

    pages = [
        ("overview", "/"),
        ("queue (heat map)", f"/q/{queue}"),
        ("queue live JSON", f"/live/q/{queue}"),
        ("jobs: scheduled, 50", f"/q/{queue}/jobs?state=scheduled&limit=50"),
        ("jobs: scheduled, page 2", None),
        ("jobs: ready, 50", f"/q/{queue}/jobs?state=ready&limit=50"),
        ("jobs: retrying, 50", f"/q/{queue}/jobs?state=retrying&limit=50"),
        ("dead letters, 50", f"/q/{queue}/dead"),
        ("job detail", f"/q/{queue}/job/{dead}"),
        ("search (id)", f"/q/{queue}/search?q={dead}"),
        ("fleet", f"/q/{queue}/fleet"),
        ("fleet live JSON", f"/live/q/{queue}/fleet"),
        ("schedules", f"/q/{queue}/schedules"),
    ]
    page = Inspector(client).list_jobs(queue, "scheduled", limit=50)
    rows = []
    config = WebConfig(redis=RedisSettings.from_url(args.url), poll_seconds=3)
    # the Host of a loopback console (the console refuses TestClient's default "testserver")
    http_client = TestClient(
        create_app(config), base_url="http://127.0.0.1", follow_redirects=False
    )
    with http_client as http:
        for name, path in pages:
            if path is None:
                path = f"/q/{queue}/jobs?state=scheduled&limit=50&cursor={page.cursor}"
            assert http.get(path).status_code in (200, 303), path  # warm up (script load)
            times: list[float] = []
            counts: list[tuple[int, int, int]] = []
            for _ in range(args.repeat):
                before = counters(client)
                t0 = time.perf_counter()
                r = http.get(path)
                times.append(time.perf_counter() - t0)
                after = counters(client)
                counts.append(
                    (after[0] - before[0] - info_cost, after[1] - before[1], after[2] - before[2])
                )
                assert r.status_code in (200, 303), (path, r.status_code)
            rows.append(
                (
                    name,
                    statistics.median(times) * 1000,
                    statistics.median(c[1] for c in counts),
                    statistics.median(c[0] for c in counts),
                    statistics.median(c[2] for c in counts) / 1000,
                )
            )
    print(
        f"queue: {args.partitions} partitions, {args.jobs:,} scheduled jobs "
        f"(filled in {fill_s:.0f} s), {nodes} primaries, median of {args.repeat}\n"
    )
    print(
        "| page | server time (ms) | script calls | Redis commands, incl. inside scripts "
        "| Redis time in scripts (ms) |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, ms, calls, total, redis_ms in rows:
        print(f"| {name} | {ms:.0f} | {calls:.0f} | {total:.0f} | {redis_ms:.1f} |")
    Inspector(client).delete_queue(queue, force=True)
    client.close()
    print(f"\ncalibration (after): {calibration_line(calibrate(args.url))}")


if __name__ == "__main__":
    main()
