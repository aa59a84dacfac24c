"""Lateness of a job on a primary that is idle while the worker's other primaries drain a
backlog: this tree side by side with another revision.

    python -m bench.idle_primary --url redis://127.0.0.1:7300 --reference a8e1b1f
                                 [--rounds 3] [--backlog 300000] [--probes 30]

A worker reads each Redis primary with a loop of its own, all loops sharing the worker's
concurrency.  Per round and revision, on a fresh queue of 16 partitions (lanes off): a backlog
of ``--backlog`` no-op jobs due now, only on the partitions of two of the three primaries, then
one dispatcher and two workers (concurrency 200, bench/handlers/shardq_probe.py).  Once every
busy partition has completed a job, the bench process enqueues probes due at once, 10 a second,
alternating between a partition of the idle primary and one of a busy primary, until
``--probes`` of each were sent or the backlog drained.  Reported: the probes' lateness
(handler start minus due, Redis clock) on the idle primary, and on the busy ones (behind the
backlog: lanes off, plain due order), p50/p99/max; and the backlog's drain rate.

Before shardq/worker/fetcher.py left room to a loop that waits for it (Fetcher.waiting), a busy
loop took every freed slot and the idle primary's probes waited up to ``idle_poll``.
Each round prints the calibration of the machine taken in the same run.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from bench import lanes_lateness
from bench.baselines import reference as reference_mod
from bench.common import calibrate, calibration_line, partition_nodes
from shardq import JobRequest
from shardq.client import Client
from shardq.store import keys

PARTITIONS = lanes_lateness.PARTITIONS


def _ids(parts: list[int], n: int, prefix: str) -> list[str]:
    """n job ids that route to the given partitions, round-robin."""
    out: list[str] = []
    wanted, i = set(parts), 0
    while len(out) < n:
        job_id = f"{prefix}{i}"
        if keys.partition_for(job_id, PARTITIONS) in wanted:
            out.append(job_id)
        i += 1
    return out


def run(client: Client, url: str, n: int, probes: int, checkout: str | None) -> dict[str, Any]:
    queue = lanes_lateness._queue(client, "idle-primary", lanes=False)
    nodes = partition_nodes(client, queue, PARTITIONS)
    idle = nodes[0]
    busy_parts = [p for p in range(PARTITIONS) if nodes[p] != idle]
    idle_ids = _ids([p for p in range(PARTITIONS) if nodes[p] == idle], probes, "I-")
    busy_ids = _ids(busy_parts, probes, "B-")
    runlog = lanes_lateness._runlog()
    fleet = None
    sent = 0
    drained = None
    try:
        lanes_lateness._enqueue(
            client, queue, [JobRequest("bench", None, job_id=j) for j in _ids(busy_parts, n, "w")]
        )
        fleet = lanes_lateness._fleet(url, queue, 2, runlog, checkout)
        stats = [keys.partition_keys(queue, p, PARTITIONS).stats for p in busy_parts]
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            done = [int(client.redis.hget(k, "completed") or 0) for k in stats]
            if all(done):
                break
            time.sleep(0.05)
        t0 = time.monotonic()
        prog = lanes_lateness._Progress(client, queue, runlog)
        while sent < probes and time.monotonic() < deadline:
            bulk, _ = prog.poll()
            if bulk >= n:
                drained = time.monotonic()
                break
            for job_id in (idle_ids[sent], busy_ids[sent]):
                client.enqueue(queue, "probe", None, job_id=job_id)
            sent += 1
            time.sleep(0.1)
        while prog.poll()[1] < 2 * sent and time.monotonic() < deadline:
            time.sleep(0.05)
        while drained is None and time.monotonic() < deadline:
            if prog.poll()[0] >= n:
                drained = time.monotonic()
            time.sleep(0.05)
        first_t = prog.first if prog.first is not None else t0
    finally:
        if fleet is not None:
            fleet.stop()
        left = lanes_lateness._delete(client, queue)
    first, repeats = lanes_lateness._first_runs(runlog)
    os.unlink(runlog)
    late = {
        pre: sorted(r[2] for k, r in first.items() if k.startswith(pre)) for pre in ("I-", "B-")
    }
    return {
        "probes_sent": sent,
        "probes_ran_twice": repeats,
        "idle_primary": idle,
        "idle_late": lanes_lateness._late(late["I-"]),
        "busy_late": lanes_lateness._late(late["B-"]),
        "drain_jobs_per_s": round((n - prog.bulk_at_first) / (drained - first_t))
        if drained and drained > first_t
        else None,
        "keys_left": left,
    }


def _line(name: str, r: dict[str, Any]) -> str:
    def lat(d: dict[str, Any]) -> str:
        return f"{d['p50_ms']} / {d['p99_ms']} / {d['max_ms']} ms (n={d['jobs']})"

    return (
        f"  {name:<10} idle primary p50/p99/max {lat(r['idle_late'])}; busy {lat(r['busy_late'])};"
        f" drain {r['drain_jobs_per_s']} jobs/s; keys left {len(r['keys_left'])}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7300")
    parser.add_argument("--reference", required=True, help="the revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backlog", type=int, default=300_000)
    parser.add_argument("--probes", type=int, default=30)
    args = parser.parse_args()
    sha, checkout = reference_mod.checkout(args.reference)
    client = Client.from_url(args.url)
    print(
        f"idle primary: this tree vs {sha[:12]} ({checkout}); backlog {args.backlog:,}", flush=True
    )
    rows = []
    for rnd in range(1, args.rounds + 1):
        print(f"round {rnd}: {calibration_line(calibrate(args.url))}", flush=True)
        row = {}
        order = (("this", None), ("reference", str(checkout)))
        for name, where in order if rnd % 2 else order[::-1]:
            row[name] = run(client, args.url, args.backlog, args.probes, where)
            print(_line(name, row[name]), flush=True)
        rows.append(row)
    for name in ("this", "reference"):
        for what in ("idle_late", "busy_late"):
            for q in ("p50_ms", "p99_ms"):
                values = [r[name][what][q] for r in rows if r[name][what][q] is not None]
                if values:
                    print(f"{name:<10} {what:<10} {q:<7} {min(values)} - {max(values)}")
    client.close()


if __name__ == "__main__":
    main()
