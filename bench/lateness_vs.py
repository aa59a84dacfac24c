"""Lateness of a spread of due jobs, this tree side by side with another revision.

    python -m bench.lateness_vs --reference REV [--reference REV2 ...]
                                [--url redis://127.0.0.1:7300] [--rounds 3] [--rates 5000,10000]

Each round, per rate and tree (the order alternating between rounds): ``python -m bench.e2e
--jobs 10*rate --spread 10`` (64 partitions, 1 dispatcher + 1 worker, the tree's defaults),
run from that tree (a reference revision unpacked by bench.baselines.reference, first on
PYTHONPATH and as the working directory).  Several references compare several revisions in
one run (e.g. to find which commit between two moved a figure); the order rotates by round,
so each tree runs first as often as the others.
One line per run: lateness p50/p99, lost, duplicates, the CPU the run's processes spent per
job (less noisy than lateness on a shared machine) and the calibration of that run; then
min-max per tree and rate.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.baselines import reference as reference_mod
from bench.common import REPO


def run(tree: str | None, url: str, rate: int) -> dict[str, Any]:
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
    root = Path(tree) if tree else REPO
    # Trees from before the benchmarks left the package ran it as `shardq bench e2e`.
    if (root / "bench" / "e2e.py").is_file():
        cmd = [sys.executable, "-m", "bench.e2e", "--url", url]
    else:
        cmd = [sys.executable, "-m", "shardq.cli", "bench", "e2e", "--url", url]
    cmd += ["--jobs", str(rate * 10), "--spread", "10", "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        cmd, cwd=tree or str(REPO), env=env, capture_output=True, text=True, timeout=900
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU of the whole run (the bench process, its producer, dispatcher and worker: every
    # descendant it waited for), the same measure for both trees whatever their bench code.
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(cmd)} failed in {tree or REPO}:\n{out.stderr[-2000:]}")
    d = json.loads(lines[-1])
    c = d["calibration"]
    return {
        "p50": d["lateness_ms"]["p50"],
        "p99": d["lateness_ms"]["p99"],
        "lost": d["lost"],
        "duplicates": d["duplicates"],
        "cpu_us_per_job": round(cpu_s * 1e6 / max(d["jobs"], 1), 1),
        "cpu_loop": c["cpu_loop_iter_per_s"],
        "ping": c["redis_benchmark"]["ping_per_s"],
        "load": c["loadavg_1m"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7300")
    parser.add_argument("--reference", required=True, action="append")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rates", default="5000,10000")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    trees: list[tuple[str, str | None]] = [("this", None)]
    for rev in args.reference:
        sha, checkout = reference_mod.checkout(rev)
        trees.append((sha[:12], str(checkout)))
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rnd in range(1, args.rounds + 1):
        # Each round starts from the next tree, so every tree runs in every position as often
        # (a run after another finds the machine warmer and more loaded: the second of a pair
        # came out later in most rounds).  Rotation only: reversing every other round as
        # well undid the rotation for two trees, and the reference ran first every round.
        shift = rnd % len(trees)
        for name, tree in trees[shift:] + trees[:shift]:
            for rate in rates:
                r = run(tree, args.url, rate)
                results.setdefault((name, rate), []).append(r)
                print(
                    f"round={rnd} tree={name} rate={rate} "
                    + " ".join(f"{k}={v}" for k, v in r.items()),
                    flush=True,
                )
    for (name, rate), rs in sorted(results.items()):
        p50 = [r["p50"] for r in rs]
        p99 = [r["p99"] for r in rs]
        cpu = [r["cpu_us_per_job"] for r in rs]
        print(
            f"{name:<12} {rate:>6}/s  p50 {min(p50)}-{max(p50)} ms  p99 {min(p99)}-{max(p99)} ms"
            f"  CPU {min(cpu)}-{max(cpu)} us/job"
            f"  lost {sum(r['lost'] for r in rs)}  dup {sum(r['duplicates'] for r in rs)}"
        )


if __name__ == "__main__":
    main()
