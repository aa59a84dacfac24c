"""Redis memory per waiting job, compact (queue layout 3) against plain (layout 2), side by side.

    python -m bench.compact_memory [--url redis://127.0.0.1:7300] [--rounds 3]
        [--sizes 10000,100000,1000000,10000000] [--payload-bytes 20]

For each size and layout, a fresh 64-partition queue gets that many jobs with ``enqueue_many``
(20-byte payloads), due over the next hour (distinct times, as producers spread them) or all at
one instant (``--instant``); the figure is the growth of ``used_memory`` over the primaries
(less the replication backlog) per job, and the enqueue rate of the same call.  The queue is
then deleted.  Layouts alternate in order between rounds; each round starts with the
calibration line; a warm-up of each layout comes first.  A size is skipped, with the reason,
when the machine lacks the memory.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import Sampler, calibrate, calibration_line, fresh_queue
from bench.rates import memory_allows
from shardq import JobRequest
from shardq.client import Client
from shardq.dev.demo import delete_queue
from shardq.store import keys

CHUNK = 20_000


def measure(
    url: str, jobs: int, compact: bool, instant: bool, payload_bytes: int
) -> dict[str, Any]:
    client = Client(url)
    queue = fresh_queue(client, "bench-compact", 64)
    if not compact:
        client.redis.hset(keys.queue_meta_key(queue), "layout", 2)  # as before layout 3
        client.forget(queue)
    assert client.compact(queue) == compact
    payload = "x" * payload_bytes
    s = Sampler(client)
    try:
        start = time.time() + 60
        s.mark()
        t0 = time.perf_counter()
        for first in range(0, jobs, CHUNK):
            n = min(CHUNK, jobs - first)
            reqs = [
                JobRequest(
                    "bench",
                    payload,
                    run_at=start if instant else start + 3600 * (first + i) / jobs,
                )
                for i in range(n)
            ]
            client.enqueue_many(queue, reqs)
        seconds = time.perf_counter() - t0
        memory = s.delta()["memory"]
        return {
            "bytes_per_job": round(memory / jobs, 1),
            "enqueue_jobs_per_s": round(jobs / seconds),
        }
    finally:
        delete_queue(client.redis, queue, 64)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7300")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="10000,100000,1000000,10000000")
    parser.add_argument("--payload-bytes", type=int, default=20)
    parser.add_argument("--instant", action="store_true", help="all jobs due at one instant")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    seen: dict[tuple[int, str, str], list[float]] = {}
    # Warm-up, not counted: the first call of a new library version loads it on every primary
    # (memory that would be charged to whichever layout ran first).
    for compact in (True, False):
        measure(args.url, 2_000, compact, args.instant, args.payload_bytes)
    for rnd in range(1, args.rounds + 1):
        print(f"round {rnd}: {calibration_line(calibrate(args.url))}", flush=True)
        for size in sizes:
            # Both layouts must fit: the plain one needs ~220 B per job on primaries and replicas.
            why = memory_allows(size)
            if why:
                print(f"  {size:>10,} jobs: skipped ({why})", flush=True)
                continue
            for compact in (True, False) if rnd % 2 else (False, True):
                o = measure(args.url, size, compact, args.instant, args.payload_bytes)
                layout = "compact" if compact else "plain"
                for name, value in o.items():
                    seen.setdefault((size, name, layout), []).append(value)
                print(
                    f"  {size:>10,} jobs {layout:<7} {o['bytes_per_job']:>7} B/job  "
                    f"enqueue_many {o['enqueue_jobs_per_s']:>7,} jobs/s",
                    flush=True,
                )
    print(f"min - max over {args.rounds} rounds        compact (layout 3)     plain (layout 2)")
    for size in sizes:
        for name in ("bytes_per_job", "enqueue_jobs_per_s"):
            cells = []
            for layout in ("compact", "plain"):
                v = seen.get((size, name, layout), [])
                cells.append(f"{min(v):,} - {max(v):,}" if v else "-")
            print(f"  {size:>10,} {name:<20} {cells[0]:>20} {cells[1]:>20}")


if __name__ == "__main__":
    main()
