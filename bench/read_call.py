"""Redis cost of the steady state's one call per job: a worker's read that promotes its
partition's due jobs, reads them and settles the jobs its previous read handed out.

In steady state at a few thousand jobs/s over 64 partitions a job costs about one such call
carrying 1-2 jobs (docs/capacity.md §1.3b), so what that call costs Redis is most of what a
job costs.  This bench makes exactly those calls itself, nothing else running, against a
standalone Redis of its own (the same Redis the steady harness uses): every partition holds
overdue jobs, each round reads ``--per-call`` jobs of each partition with ``promote`` on and
the previous round's jobs of that partition as acks, pipelined ``--depth`` calls per round
trip (the worker's per-primary round).  It prints Redis CPU per call and per job (net of the
idle rate) and the script time per call, ``--rounds`` times, with a calibration.

    python -m bench.read_call [--calls 20000] [--per-call 1] [--rounds 3]

To compare two trees, run it from each (``PYTHONPATH=<tree>``): each tree's function library
has its own name, so both live in one Redis side by side.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench.common import Sampler, calibrate, calibration_line, fresh_queue
from shardq import JobRequest
from shardq.client import Client
from shardq.dev.demo import delete_queue
from shardq.dev.devcluster import standalone_down, standalone_up
from shardq.store import delivery, keys

CONSUMER = "bench:read-call"


def _ok(results: list[Any]) -> list[Any]:
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def _commands(client: Client) -> dict[str, int]:
    """Calls per command so far (INFO commandstats: the commands scripts run count too)."""
    stats = client.redis.info("commandstats")
    return {name[len("cmdstat_") :]: int(v["calls"]) for name, v in stats.items()}


def measure(
    client: Client,
    calls: int,
    per_call: int,
    partitions: int,
    depth: int,
    payload: int,
) -> dict[str, Any]:
    """One round: a fresh queue, 1.5 x ``calls * per_call`` jobs coming due, then the reads."""
    queue = fresh_queue(client, "bench-read-call", partitions)
    pks = keys.all_partition_keys(queue, partitions)
    # Half as many again as the calls read, so that no partition runs dry (ids spread the jobs
    # over the partitions unevenly).
    jobs = calls * per_call * 3 // 2
    body = "x" * payload
    # Due just after the enqueue ends, so that they wait in the due sets (a job enqueued
    # already due goes to the ready stream at once) and the reads promote them.
    due_at = time.time() + 2.0 + jobs / 20_000
    for start in range(0, jobs, 10_000):
        n = min(10_000, jobs - start)
        client.enqueue_many(queue, [JobRequest("bench", body, run_at=due_at) for _ in range(n)])
    time.sleep(max(0.0, due_at + 0.1 - time.time()))
    s = Sampler(client)
    s.calibrate(1.0)
    held: dict[int, list[tuple[bytes, bytes]]] = {i: [] for i in range(partitions)}
    read = made = 0
    s.mark()
    before = _commands(client)
    while made < calls:
        batch = []
        order = []
        for i in range(partitions):
            if made + len(batch) >= calls or len(batch) >= depth:
                break
            batch.append(delivery.fetch(pks[i], CONSUMER, per_call, held[i], promote=True))
            order.append(i)
        for i, result in zip(order, _ok(client.transport.run_many(batch)), strict=True):
            held[i] = [(j.entry_id, j.raw_id) for j in result.jobs]
            read += len(result.jobs)
        made += len(batch)
        # Rotate so each round starts at another partition (all of them see calls).
        pks = pks[len(order) :] + pks[: len(order)]
        held = {n: held[(n + len(order)) % partitions] for n in range(partitions)}
    d = s.delta()
    after = _commands(client)
    # What the scripts ran, per call: exact, where the CPU figures swing with the box.
    ran = {
        name: after[name] - before.get(name, 0)
        for name in after
        if not name.startswith(("fcall", "info")) and after[name] > before.get(name, 0)
    }
    # The last round's jobs settle outside the window: their acks are not charged.
    for i in range(partitions):
        if held[i]:
            _ok(client.transport.run_many([delivery.ack(pks[i], held[i])]))
    # Only this round's queue goes: --url may name a Redis that holds other data.
    delete_queue(client.redis, queue, partitions)
    return {
        "calls": made,
        "jobs": read,
        "redis_cpu_usec_per_call": round(d["cpu_usec"] / made, 2),
        "redis_cpu_usec_per_job": round(d["cpu_usec"] / max(1, read), 2),
        "script_usec_per_call": round(d["script_usec"] / max(1, d["script_calls"]), 2),
        "seconds": round(d["seconds"], 2),
        "commands_per_call": round(sum(ran.values()) / made, 2),
        "commands": {k: round(v / made, 2) for k, v in sorted(ran.items())},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--per-call", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--depth", type=int, default=16, help="calls pipelined per round trip")
    ap.add_argument("--payload", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=7339)
    ap.add_argument("--url", help="use this Redis instead of starting one")
    ap.add_argument("--out", help="write the rounds as JSON here")
    args = ap.parse_args()
    out: dict[str, Any] = {"args": vars(args), "rounds": []}
    url = args.url
    if not url:
        standalone_down(args.port)
        url = standalone_up(args.port)
    try:
        out["calibration"] = calibrate(url)
        print("calibration:", calibration_line(out["calibration"]), flush=True)
        client = Client(url)
        for r in range(args.rounds):
            row = measure(
                client,
                args.calls,
                args.per_call,
                args.partitions,
                args.depth,
                args.payload,
            )
            out["rounds"].append(row)
            print(f"round {r + 1}: {row}", flush=True)
    finally:
        if not args.url:
            standalone_down(args.port)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
