"""What keeping results costs: Redis memory per kept result, Redis CPU and script calls per job,
and the drain rate, for jobs that keep their result beside the same jobs keeping none.

    python -m bench.results_cost [--url redis://127.0.0.1:7300] [--jobs 20000] [--rounds 3]
        [--payload-bytes 20] [--partitions 16]

Each round runs both modes, alternating which goes first: a fresh queue, ``--jobs`` jobs of
type ``echo`` (its handler returns the payload, so each result is as large as the job's
``--payload-bytes``) enqueued due 4 s ahead, with ``keep_result=3600`` or without; one plain
``shardq dispatcher run`` and one ``shardq worker run`` drain them.  Measured over the
primaries from the due time to the last completion: Redis CPU (net of the idle rate just
before) and FCALLs per job, drain jobs/s; and the growth of ``used_memory`` from before the
enqueue to after the drain: the kept results are what the keep mode holds more, per job.  Each
round starts with the calibration line.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench.common import Fleet, Sampler, calibrate, calibration_line, fresh_queue, wait_until
from shardq import JobRequest
from shardq.client import Client
from shardq.dev.demo import delete_queue, queue_counters

KEEP = 3600.0


def run_mode(
    url: str, jobs: int, keep: bool, payload_bytes: int, partitions: int
) -> dict[str, Any]:
    client = Client(url)
    queue = fresh_queue(client, "bench-results", partitions)
    fleet = Fleet(url, queue)
    s = Sampler(client)
    try:
        fleet.dispatcher()
        fleet._start(
            "worker",
            ["worker", "run", "--handlers", "shardq.dev.handlers:handlers",
             "--concurrency", "200"],
        )  # fmt: skip
        time.sleep(2.0)  # both started and serving
        s.mark()
        base_memory = s.snap()
        payload = "x" * payload_bytes
        due = time.time() + 4.0
        reqs = [
            JobRequest("echo", payload, run_at=due, keep_result=KEEP if keep else None)
            for _ in range(jobs)
        ]
        for lo in range(0, jobs, 10_000):
            client.enqueue_many(queue, reqs[lo : lo + 10_000])
        wait_until(lambda: time.time() >= due - 1.0, 10)
        s.calibrate(0.8)
        t0 = time.time()
        done = wait_until(
            lambda: queue_counters(client.redis, queue, partitions).get("completed", 0) >= jobs,
            120,
            0.02,
        )
        seconds = time.time() - max(t0, due)
        d = s.delta()
        time.sleep(0.5)  # the last acks' stream entries: the same in both modes
        after = s.snap()
        memory = sum(after[n].used_memory - base_memory[n].used_memory for n in after)
        counters = queue_counters(client.redis, queue, partitions)
        return {
            "mode": "keep" if keep else "none",
            "completed": counters.get("completed", 0),
            "results": counters.get("results", 0),
            "drained": done,
            "drain_jobs_per_s": round(jobs / max(seconds, 1e-3)),
            "redis_cpu_us_per_job": round(d["cpu_usec"] / jobs, 1),
            "fcalls_per_job": round(d["script_calls"] / jobs, 3),
            "memory_bytes_per_job_after": round(memory / jobs, 1),
        }
    finally:
        fleet.stop()
        delete_queue(client.redis, queue, partitions)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7300")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--payload-bytes", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        print(f"round {r + 1}: calibration: {calibration_line(calibrate(args.url))}", flush=True)
        order = (False, True) if r % 2 == 0 else (True, False)
        pair = {}
        for keep in order:
            row = run_mode(args.url, args.jobs, keep, args.payload_bytes, args.partitions)
            row["round"] = r + 1
            pair[row["mode"]] = row
            rows.append(row)
            print("  " + json.dumps(row), flush=True)
        extra = (
            pair["keep"]["memory_bytes_per_job_after"] - pair["none"]["memory_bytes_per_job_after"]
        )
        print(f"  kept result: {extra:.1f} B each (keep - none, after the drain)", flush=True)
    for key in ("drain_jobs_per_s", "redis_cpu_us_per_job", "fcalls_per_job"):
        for mode in ("none", "keep"):
            vals = [row[key] for row in rows if row["mode"] == mode]
            print(f"{key} {mode}: {min(vals)}-{max(vals)}")
    per = [
        k["memory_bytes_per_job_after"] - n["memory_bytes_per_job_after"]
        for k, n in zip(
            [x for x in rows if x["mode"] == "keep"],
            [x for x in rows if x["mode"] == "none"],
            strict=True,
        )
    ]
    print(
        f"bytes per kept result ({args.payload_bytes}-byte result): {min(per):.1f}-{max(per):.1f}"
    )
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
