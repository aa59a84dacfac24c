"""What a batch child costs beside a plain job (Redis CPU, calls, memory while waiting), what a
batch's own keys hold, and how late its callback starts after the batch ended.

    python -m bench.workflows [--url redis://127.0.0.1:7300] [--jobs 20000] [--per-batch 1000]
        [--partitions 16] [--lateness-batches 200] [--lateness-children 20] [--rounds 3] [--json]

Each round starts with the calibration line, then runs both cost modes, alternating which goes
first, each on a fresh queue with one ``shardq dispatcher run`` and one ``shardq worker run``
(the same no-op inline handler, bench/handlers/workflow_probe.py, for plain jobs, children and
callbacks): ``--jobs`` jobs due 6 s ahead, enqueued plainly (``enqueue_many``, ``plain``) or as
``client.batches.create`` batches of ``--per-batch`` children, each with an ``on_complete``
callback (``batch``).  Measured over the primaries: the growth of ``used_memory`` (INFO memory,
less the replication backlog) from before the enqueue to when every job waits, per job; for
the batch mode also ``MEMORY USAGE`` of each batch record and of the queue's batch index while
waiting, and of record + bitmap once ended (kept for the batch's retention); from the due time
until the queue's ``completed`` counter reached every job (for batches: and every callback),
Redis CPU net of the idle rate just before, and FCALLs, per job (the batch mode's include its
callbacks', the relay's reports and fires: all a child costs).  Both modes poll the same
counter the same way; the batches' records are read only after the measured window.

Then the lateness phase, on a fresh queue: ``--lateness-batches`` batches of
``--lateness-children`` children, batch i due at t0 + i * 25 ms (they end one by one, not in
one burst), each with an ``on_complete`` callback.  Per batch, on the Redis clock: the
callback handler's start minus the batch's ``ended_ms`` (set by the report that counted its
last child), and minus the last child's handler return (so this one includes that child's ack
and the relay's wake-up too).  p50 / p99 / max over the batches.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    REPO,
    Sampler,
    calibrate,
    calibration_line,
    fresh_queue,
    pct,
    wait_until,
)
from shardq import JobRequest
from shardq.client import Client
from shardq.dev.demo import cli_command, delete_queue, queue_counters
from shardq.store import keys

HANDLERS = str(REPO / "bench" / "handlers")
LEAD_S = 6.0  # the cost modes' jobs are due this long after the enqueue starts
STAGGER_S = 0.025  # the lateness phase: one batch due every 25 ms


class Procs:
    """The dispatcher and the worker of one mode (their own handlers and run log)."""

    def __init__(self, url: str, queue: str, runlog: Path) -> None:
        env = {**os.environ, "SHARDQ_BENCH_RUNLOG": str(runlog), "PYTHONPATH": HANDLERS}
        base = ["--queue", queue, "--url", url]
        self.procs = [
            subprocess.Popen(
                cli_command("dispatcher", "run", *base, "--lease-time", "4",
                            "--renew-interval", "1"),
                env=env,
            ),
            subprocess.Popen(
                cli_command("worker", "run", *base, "--handlers", "workflow_probe:register",
                            "--concurrency", "200"),
                env=env,
            ),
        ]  # fmt: skip
        time.sleep(2.0)  # both started and serving

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def memory_usage(client: Client, key: str) -> int:
    return int(client.redis.memory_usage(key, samples=0) or 0)


def run_cost(url: str, jobs: int, batched: bool, per_batch: int, partitions: int) -> dict[str, Any]:
    client = Client(url)
    queue = fresh_queue(client, "bench-wfc", partitions)
    runlog = Path(tempfile.mkdtemp(prefix="bench-wf-")) / "runs"
    procs = Procs(url, queue, runlog)
    s = Sampler(client)
    try:
        base = s.snap()
        due = time.time() + LEAD_S
        reqs = [JobRequest("bench", None, run_at=due) for _ in range(jobs)]
        ids: list[str] = []
        if batched:
            for lo in range(0, jobs, per_batch):
                ids.append(
                    client.batches.create(
                        queue, reqs[lo : lo + per_batch], on_complete=JobRequest("bench")
                    )
                )
        else:
            for lo in range(0, jobs, 10_000):
                client.enqueue_many(queue, reqs[lo : lo + 10_000])
        enqueued_by = time.time()
        waiting = s.snap()
        memory = sum(waiting[n].used_memory - base[n].used_memory for n in waiting)
        row: dict[str, Any] = {"mode": "batch" if batched else "plain"}
        if batched:
            records = [memory_usage(client, keys.batch_keys(queue, b).record) for b in ids]
            index = memory_usage(client, keys.batches_key(queue))
            row["batch_record_bytes_waiting"] = round(sum(records) / len(ids), 1)
            row["batch_index_bytes_per_batch"] = round(index / len(ids), 1)
            own = sum(records) + index
            row["memory_bytes_per_child_net_of_batch_keys"] = round((memory - own) / jobs, 1)
        row["memory_bytes_per_waiting_job"] = round(memory / jobs, 1)
        row["enqueued_before_due"] = enqueued_by < due - 1.0
        wait_until(lambda: time.time() >= due - 1.0, 30)
        s.calibrate(0.8)
        want = jobs + len(ids)  # the callbacks are jobs too
        drained = wait_until(
            lambda: queue_counters(client.redis, queue, partitions).get("completed", 0) >= want,
            180,
            0.02,
        )
        seconds = time.time() - due
        d = s.delta()
        if batched:
            drained = drained and wait_until(
                lambda: all(
                    (b := client.batches.get(queue, bid)) is not None
                    and b.ended
                    and not b.fires_pending
                    for bid in ids
                ),
                60,
                0.1,
            )
            kept = [
                memory_usage(client, keys.batch_keys(queue, b).record)
                + memory_usage(client, keys.batch_keys(queue, b).seen)
                for b in ids
            ]
            row["batch_keys_bytes_ended"] = round(sum(kept) / len(ids), 1)
        row.update(
            drained=drained,
            jobs_per_s=round(jobs / max(seconds, 1e-3)),
            redis_cpu_us_per_job=round(d["cpu_usec"] / jobs, 1),
            fcalls_per_job=round(d["script_calls"] / jobs, 3),
        )
        return row
    finally:
        procs.stop()
        delete_queue(client.redis, queue, partitions)
        client.close()


def read_runlog(path: Path) -> list[tuple[str, str, str, float]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            out.append((parts[0], parts[1], parts[2], float(parts[3])))
    return out


def run_lateness(url: str, batches: int, children: int, partitions: int) -> dict[str, Any]:
    client = Client(url)
    queue = fresh_queue(client, "bench-wfl", partitions)
    runlog = Path(tempfile.mkdtemp(prefix="bench-wf-")) / "runs"
    procs = Procs(url, queue, runlog)
    try:
        t0 = time.time() + 3.0
        ids = []
        for i in range(batches):
            due = t0 + i * STAGGER_S
            kids = [JobRequest("late-child", None, run_at=due) for _ in range(children)]
            ids.append(client.batches.create(queue, kids, on_complete=JobRequest("late-callback")))
        late_start = time.time() > t0  # the enqueue took longer than the lead
        fired = wait_until(
            lambda: sum(1 for r in read_runlog(runlog) if r[0] == "C") >= batches,
            t0 - time.time() + batches * STAGGER_S + 60,
            0.1,
        )
        time.sleep(0.5)
        callback_start: dict[str, float] = {}
        last_child: dict[str, float] = {}
        for event, _job, bid, at in read_runlog(runlog):
            if event == "C":
                callback_start.setdefault(bid, at)  # the first start (a rerun comes later)
            else:
                last_child[bid] = max(last_child.get(bid, 0.0), at)
        after_end, after_child = [], []
        for bid in ids:
            info = client.batches.get(queue, bid)
            if info is None or info.ended_ms is None or bid not in callback_start:
                continue
            after_end.append(callback_start[bid] - info.ended_ms)
            after_child.append(callback_start[bid] - last_child[bid])
        return {
            "mode": "lateness",
            "batches": len(after_end),
            "all_fired": fired,
            "enqueue_outran_the_lead": late_start,
            "callback_after_ended_ms_p50": pct(after_end, 0.5),
            "callback_after_ended_ms_p99": pct(after_end, 0.99),
            "callback_after_ended_ms_max": round(max(after_end), 2) if after_end else None,
            "callback_after_last_child_ms_p50": pct(after_child, 0.5),
            "callback_after_last_child_ms_p99": pct(after_child, 0.99),
            "callback_after_last_child_ms_max": round(max(after_child), 2) if after_child else None,
        }
    finally:
        procs.stop()
        delete_queue(client.redis, queue, partitions)
        client.close()


def span(rows: list[dict[str, Any]], mode: str, key: str) -> str:
    vals = [row[key] for row in rows if row["mode"] == mode and row.get(key) is not None]
    return f"{min(vals)}-{max(vals)}" if vals else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7300")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--per-batch", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--lateness-batches", type=int, default=200)
    parser.add_argument("--lateness-children", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        print(f"round {r + 1}: calibration: {calibration_line(calibrate(args.url))}", flush=True)
        order = (False, True) if r % 2 == 0 else (True, False)
        for batched in order:
            row = run_cost(args.url, args.jobs, batched, args.per_batch, args.partitions)
            row["round"] = r + 1
            rows.append(row)
            print("  " + json.dumps(row), flush=True)
        row = run_lateness(args.url, args.lateness_batches, args.lateness_children, args.partitions)
        row["round"] = r + 1
        rows.append(row)
        print("  " + json.dumps(row), flush=True)
    print(f"min-max over {args.rounds} rounds:")
    for key in ("redis_cpu_us_per_job", "fcalls_per_job", "memory_bytes_per_waiting_job",
                "jobs_per_s"):  # fmt: skip
        print(f"  {key}: plain {span(rows, 'plain', key)}, batch child {span(rows, 'batch', key)}")
    for key in ("batch_record_bytes_waiting", "batch_index_bytes_per_batch",
                "memory_bytes_per_child_net_of_batch_keys", "batch_keys_bytes_ended"):  # fmt: skip
        print(f"  {key} ({args.per_batch} children): {span(rows, 'batch', key)}")
    for key in [f"callback_after_{ref}_ms_{q}" for ref in ("ended", "last_child")
                for q in ("p50", "p99", "max")]:  # fmt: skip
        print(f"  {key}: {span(rows, 'lateness', key)}")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
