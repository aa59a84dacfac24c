"""Producer call rates side by side: shardq's Python client, shardq's TypeScript client
(clients/node) and BullMQ's Queue, the same delayed 20-byte jobs, in one run.

    python -m bench.producer_rates [--standalone redis://127.0.0.1:7310]
        [--cluster redis://127.0.0.1:7300] [--rounds 3] [--single 3000] [--bulk 20000]
        [--chunk 1000] [--concurrency 1,16] [--json]

Per round (the designs' order rotating), on the standalone node (all three) and on the cluster
(the shardq clients; BullMQ keeps a queue on one slot, so the cluster adds nothing to it):
``--single`` single enqueues (``Client.enqueue`` / ``client.enqueue`` / ``Queue.add``) with
``--concurrency`` calls in flight (the Python client is sync: one at a time, so it runs only
at concurrency 1), then ``--bulk`` jobs through ``enqueue_many`` / ``enqueueMany`` /
``addBulk`` in chunks of ``--chunk``.  A fresh queue of 64 partitions per run; jobs are
delayed 10 minutes (nothing runs) and the queue deleted afterwards.  Each round starts with
the calibration line; the end prints min-max per design, topology and measure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from typing import Any

from bench.baselines.bullmq_node import NODE_DIR, ensure_installed
from bench.common import REPO, calibrate, calibration_line, fresh_queue
from shardq import JobRequest
from shardq.client import Client
from shardq.inspector import Inspector

DESIGNS = ("shardq-python", "shardq-node", "bullmq")
NODE_CLIENT = REPO / "clients" / "node"


def python_rates(url: str, single: int, bulk: int, chunk: int) -> dict[str, Any]:
    with Client.from_url(url) as client:
        queue = fresh_queue(client, "bench-prod", 64)
        try:
            client.enqueue(queue, "t", "x" * 20, delay=600)  # warm
            t = time.perf_counter()
            for _ in range(single):
                client.enqueue(queue, "t", "x" * 20, delay=600)
            single_rate = single / (time.perf_counter() - t)
            t = time.perf_counter()
            for start in range(0, bulk, chunk):
                n = min(chunk, bulk - start)
                client.enqueue_many(queue, [JobRequest("t", "x" * 20, delay=600)] * n)
            bulk_rate = bulk / (time.perf_counter() - t)
        finally:
            Inspector(client).delete_queue(queue)
    return {"single_per_s": round(single_rate), "bulk_per_s": round(bulk_rate)}


def node_rates(
    design: str, url: str, cluster: bool, single: int, bulk: int, chunk: int, concurrency: int
) -> dict[str, Any]:
    queue = f"bench-prod-{int(time.time() * 1000)}"
    owner: Client | None = None
    if design == "shardq":
        owner = Client.from_url(url)
        owner.create_queue(queue, 64)
    cmd = ["node", str(NODE_DIR / "producer_rates.js"), "--design", design, "--url", url]
    cmd += ["--queue", queue, "--single", str(single), "--bulk", str(bulk)]
    cmd += ["--chunk", str(chunk), "--concurrency", str(concurrency)]
    if cluster:
        cmd.append("--cluster")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True)
    finally:
        if owner is not None:
            Inspector(owner).delete_queue(queue)
            owner.close()
        else:
            _delete_bullmq(url, queue)
    line = [x for x in out.stdout.splitlines() if x.startswith("{")][-1]
    d = json.loads(line)
    return {"single_per_s": d["single_per_s"], "bulk_per_s": d["bulk_per_s"]}


def _delete_bullmq(url: str, queue: str) -> None:
    import redis

    r = redis.Redis.from_url(url)
    try:
        for key in r.scan_iter(match=f"{{bq}}:{queue}:*", count=1000):
            r.delete(key)
    finally:
        r.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.producer_rates")
    parser.add_argument("--standalone", default="redis://127.0.0.1:7310")
    parser.add_argument("--cluster", default="redis://127.0.0.1:7300")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--single", type=int, default=3000)
    parser.add_argument("--bulk", type=int, default=20000)
    parser.add_argument("--chunk", type=int, default=1000)
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    ensure_installed()
    subprocess.run(["npm", "run", "--silent", "build"], cwd=NODE_CLIENT, check=True)
    levels = [int(c) for c in args.concurrency.split(",")]
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        print(f"round {r + 1}: calibration: {calibration_line(calibrate(args.standalone))}")
        order = DESIGNS[r % 3 :] + DESIGNS[: r % 3]
        for topology, url in (("standalone", args.standalone), ("cluster", args.cluster)):
            for design in order:
                if design == "bullmq" and topology == "cluster":
                    continue
                for concurrency in levels:
                    if design == "shardq-python" and concurrency != 1:
                        continue  # the sync client sends one call at a time
                    if design == "shardq-python":
                        got = python_rates(url, args.single, args.bulk, args.chunk)
                    else:
                        got = node_rates(
                            "shardq" if design == "shardq-node" else "bullmq",
                            url,
                            topology == "cluster",
                            args.single,
                            args.bulk,
                            args.chunk,
                            concurrency,
                        )
                    row = {"round": r + 1, "topology": topology, "design": design}
                    row |= {"concurrency": concurrency, **got}
                    rows.append(row)
                    print("  " + json.dumps(row), flush=True)
    print("min-max over rounds (single enqueues/s at that concurrency; bulk jobs/s):")
    seen: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for row in rows:
        seen.setdefault((row["topology"], row["design"], row["concurrency"]), []).append(row)
    for (topology, design, concurrency), group in seen.items():
        s = [g["single_per_s"] for g in group]
        b = [g["bulk_per_s"] for g in group]
        print(
            f"  {topology:10} {design:14} c={concurrency:<3} single {min(s):,}-{max(s):,}/s"
            f"  bulk {min(b):,}-{max(b):,} jobs/s"
        )
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
