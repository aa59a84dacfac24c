"""What workflows cost: Redis CPU and memory per batch child beside a plain job, and how late a
batch's callback runs after its last child.

    python -m bench.workflow_cost [--url redis://127.0.0.1:7300] [--jobs 20000] [--rounds 3]
        [--per-batch 1000] [--partitions 16] [--lateness-batches 100] [--json]

Each round starts with the calibration line and runs both modes, alternating which goes first:
a fresh queue, ``--jobs`` jobs of type ``bench`` (a no-op handler) due 4 s ahead, enqueued
plainly (``enqueue_many``) or as batches of ``--per-batch`` children each with an
``on_complete`` callback (``client.batches.create``); one ``shardq dispatcher run`` and one
``shardq worker run`` drain them.  Measured over the primaries: the growth of ``used_memory``
while the jobs wait (per job), and from the due time until every job (and, for batches, every
callback) completed, Redis CPU (net of the idle rate just before) and FCALLs per job (the
batch mode's include its callbacks', reports' and fires': everything a child costs).  Then
the lateness phase: ``--lateness-batches`` batches of 20 children due at once, each with an
``on_complete`` callback that keeps its result, so its finish time is on record: lateness =
the callback's finish (Redis clock) minus the batch's end (``ended_ms``, Redis clock; the
bench cluster's primaries share one host clock).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench.common import Fleet, Sampler, calibrate, calibration_line, fresh_queue, pct, wait_until
from shardq import JobRequest
from shardq.client import Client
from shardq.devtools.bench import delete_queue, queue_counters


def _fleet(url: str, queue: str) -> Fleet:
    fleet = Fleet(url, queue)
    fleet.dispatcher()
    fleet._start(
        "worker",
        ["worker", "run", "--handlers", "shardq.devtools.handlers:handlers",
         "--concurrency", "200"],
    )  # fmt: skip
    time.sleep(2.0)  # both started and serving
    return fleet


def run_mode(url: str, jobs: int, batched: bool, per_batch: int, partitions: int) -> dict[str, Any]:
    client = Client(url)
    queue = fresh_queue(client, "bench-wf", partitions)
    fleet = _fleet(url, queue)
    s = Sampler(client)
    try:
        base = s.snap()
        due = time.time() + 4.0
        reqs = [JobRequest("bench", None, run_at=due) for _ in range(jobs)]
        batch_ids: list[str] = []
        if batched:
            for lo in range(0, jobs, per_batch):
                batch_ids.append(
                    client.batches.create(
                        queue, reqs[lo : lo + per_batch], on_complete=JobRequest("bench")
                    )
                )
        else:
            for lo in range(0, jobs, 10_000):
                client.enqueue_many(queue, reqs[lo : lo + 10_000])
        waiting = s.snap()
        memory = sum(waiting[n].used_memory - base[n].used_memory for n in waiting)
        wait_until(lambda: time.time() >= due - 1.0, 10)
        s.calibrate(0.8)
        t0 = time.time()
        want = jobs + len(batch_ids)
        done = wait_until(
            lambda: queue_counters(client.redis, queue, partitions).get("completed", 0) >= want,
            180,
            0.02,
        )
        if batched:
            done = done and wait_until(
                lambda: all(
                    (b := client.batches.get(queue, bid)) is not None
                    and b.ended
                    and not b.fires_pending
                    for bid in batch_ids
                ),
                60,
                0.05,
            )
        seconds = time.time() - max(t0, due)
        d = s.delta()
        return {
            "mode": "batch" if batched else "plain",
            "drained": done,
            "jobs_per_s": round(jobs / max(seconds, 1e-3)),
            "redis_cpu_us_per_job": round(d["cpu_usec"] / jobs, 1),
            "fcalls_per_job": round(d["script_calls"] / jobs, 3),
            "memory_bytes_per_waiting_job": round(memory / jobs, 1),
        }
    finally:
        fleet.stop()
        delete_queue(client.redis, queue, partitions)
        client.close()


def lateness(url: str, batches: int, partitions: int) -> dict[str, Any]:
    client = Client(url)
    queue = fresh_queue(client, "bench-wf-late", partitions)
    fleet = _fleet(url, queue)
    try:
        ids = []
        for _ in range(batches):
            children = [JobRequest("bench", None) for _ in range(20)]
            ids.append(
                client.batches.create(
                    queue, children, on_complete=JobRequest("echo", "cb", keep_result=600)
                )
            )
            time.sleep(0.01)  # spread over the run, not one burst

        def finished() -> bool:
            return all(client.result_info(queue, f"{bid}#complete") is not None for bid in ids)

        ok = wait_until(finished, 120, 0.05)
        lags = []
        for bid in ids:
            info = client.batches.get(queue, bid)
            res = client.result_info(queue, f"{bid}#complete")
            if info and info.ended_ms and res and res.finished_ms:
                lags.append(res.finished_ms - info.ended_ms)
        return {
            "mode": "lateness",
            "batches": len(lags),
            "all_fired": ok,
            "callback_after_end_ms_p50": pct(lags, 0.5),
            "callback_after_end_ms_p99": pct(lags, 0.99),
            "callback_after_end_ms_max": max(lags) if lags else None,
        }
    finally:
        fleet.stop()
        delete_queue(client.redis, queue, partitions)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7300")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--per-batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--lateness-batches", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        print(f"round {r + 1}: calibration: {calibration_line(calibrate(args.url))}", flush=True)
        order = (False, True) if r % 2 == 0 else (True, False)
        for batched in order:
            row = run_mode(args.url, args.jobs, batched, args.per_batch, args.partitions)
            row["round"] = r + 1
            rows.append(row)
            print("  " + json.dumps(row), flush=True)
        row = lateness(args.url, args.lateness_batches, args.partitions)
        row["round"] = r + 1
        rows.append(row)
        print("  " + json.dumps(row), flush=True)
    for key in (
        "jobs_per_s",
        "redis_cpu_us_per_job",
        "fcalls_per_job",
        "memory_bytes_per_waiting_job",
    ):
        for mode in ("plain", "batch"):
            vals = [row[key] for row in rows if row["mode"] == mode]
            print(f"{key} {mode}: {min(vals)}-{max(vals)}")
    for key in ("callback_after_end_ms_p50", "callback_after_end_ms_p99"):
        vals = [row[key] for row in rows if row["mode"] == "lateness" and row[key] is not None]
        if vals:
            print(f"{key}: {min(vals):.1f}-{max(vals):.1f}")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
