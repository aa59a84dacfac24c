"""Drain rate of shardq and BullMQ side by side: same job count, same Redis, same box, one run.

    python -m bench.baselines.drain --url redis://127.0.0.1:7310 --jobs 200000 --rounds 3

Each round runs, for each design, two scenarios of :mod:`bench.baselines.scenarios` (its
producer timing, run logs and loss/duplicate accounting), every job due at one instant:

- ``backlog``: the consumer starts one second after the due time, once the enqueue has
  finished: an overdue backlog;
- ``burst``: the consumer runs before the enqueue starts; the jobs come due ``--lead`` seconds
  after the enqueue started: a due burst.

The designs: ``bullmq``, one Node process running a BullMQ ``Worker``
(``--bullmq-concurrency`` jobs in flight, default 100: within the noise of 200, the best of a
10-1,000 sweep on the reference box; see bench/README.md), and ``shardq``, one Python process
running a shardq ``Dispatcher`` and ``Worker`` (:mod:`bench.baselines.shardq_consumer`: 16
partitions, worker concurrency 1,000).
One consumer process each, both appending one line per handler run to a run log; the handler
does nothing else.  Drain rate = jobs run / (last first-run start - first first-run start), the
starts read from the run log (due time + lateness), the way ``python -m bench.e2e`` measures it.
The order of the designs alternates from round to round.

Before the first round and after the last, a calibration of the box in the same run: a fixed
CPU loop timed in Python and, when ``redis-benchmark`` is on PATH, ``redis-benchmark -q -n
200000 SET <key of this run> x`` against the same node (its key deleted afterwards).  Each
scenario deletes its own keys when it ends (shardq: the queue's; BullMQ: ``{bq}:<queue>:*``).
``--json`` prints the JSON document on stdout and the tables on stderr.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
import redis as redis_lib

from bench.baselines import bullmq_node
from bench.baselines import reference as reference_mod
from bench.baselines.scenarios import ScenarioConfig, run_scenario
from bench.common import calibrate, calibration_line

DESIGNS = ("bullmq", "shardq")
REFERENCE = "shardq-ref"
MODES = ("backlog", "burst")


def environment(url: str) -> dict[str, Any]:
    r = redis_lib.Redis.from_url(url)
    try:
        server = r.info("server")
        cluster = int(r.info("cluster").get("cluster_enabled", 0)) == 1
    finally:
        r.close()
    return {
        "redis_version": server.get("redis_version"),
        "redis_cluster": cluster,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        **bullmq_node.versions(),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _span(values: list[float]) -> dict[str, float] | None:
    return {"min": min(values), "max": max(values)} if values else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    designs = [d for d in (*DESIGNS, REFERENCE) if any(r["design"] == d for r in runs)]
    out: dict[str, Any] = {}
    for mode in MODES:
        rates: dict[str, list[float]] = {d: [] for d in designs}
        ratios: dict[str, list[float]] = {d: [] for d in designs if d != "shardq"}
        for rnd in sorted({r["round"] for r in runs}):
            row = {r["design"]: r for r in runs if r["round"] == rnd and r["scenario"] == mode}
            for d in designs:
                if d in row and row[d]["drain_jobs_per_s"]:
                    rates[d].append(row[d]["drain_jobs_per_s"])
            mine = row.get("shardq", {}).get("drain_jobs_per_s")
            for d in ratios:
                theirs = row.get(d, {}).get("drain_jobs_per_s")
                if mine and theirs:
                    ratios[d].append(round(mine / theirs, 2))
        out[mode] = {
            **{f"{d.replace('-', '_')}_jobs_per_s": _span(rates[d]) for d in designs},
            **{f"ratio_shardq_over_{d.replace('-', '_')}": _span(ratios[d]) for d in ratios},
            "lost": sum(r["lost"] for r in runs if r["scenario"] == mode),
            "duplicates": sum(r["duplicates"] for r in runs if r["scenario"] == mode),
        }
    return out


def compare(
    url: str,
    jobs: int,
    rounds: int = 1,
    modes: tuple[str, ...] = MODES,
    cfg: ScenarioConfig | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Run the comparison; returns the JSON document (calibration, runs, summary)."""
    bullmq_node.ensure_installed()
    base = cfg or ScenarioConfig()
    lead = base.lead if base.lead is not None else 2.0 + jobs / 10_000
    cfg = ScenarioConfig(
        jobs=jobs,
        payload_bytes=base.payload_bytes,
        timeout=max(base.timeout, 60.0 + jobs / 2_000),
        shardq_lease=base.shardq_lease,
        shardq_visibility=base.shardq_visibility,
        bullmq_concurrency=base.bullmq_concurrency,
        bullmq_lock=base.bullmq_lock,
        bullmq_stalled_interval=base.bullmq_stalled_interval,
        lead=lead,
        reference=base.reference,
    )
    designs = (*DESIGNS, REFERENCE) if base.reference is not None else DESIGNS
    doc: dict[str, Any] = {
        "url": url,
        "jobs": jobs,
        "rounds": rounds,
        "lead_s": lead,
        "bullmq_concurrency": cfg.bullmq_concurrency,
        "shardq_consumer": "bench.baselines.shardq_consumer (16 partitions, concurrency 1000)",
        "environment": environment(url),
    }
    cal = calibrate(url)
    doc["calibration_before"] = cal
    say(f"calibration (same run, before): {calibration_line(cal)}")
    env = doc["environment"]
    say(
        f"redis {env['redis_version']}{' cluster' if env['redis_cluster'] else ''}, "
        f"{env['cpus']} CPUs, node {env['node']}, bullmq {env['bullmq']}, python "
        f"{env['python']}; {jobs:,} jobs, payload {cfg.payload_bytes} B, lead {lead:.1f} s, "
        f"BullMQ concurrency {cfg.bullmq_concurrency}"
    )
    runs: list[dict[str, Any]] = []
    for rnd in range(1, rounds + 1):
        order = designs if rnd % 2 else designs[::-1]
        for mode in modes:
            by_design: dict[str, dict[str, Any]] = {}
            for design in order:
                r = run_scenario(design, mode, url, cfg)
                r["round"] = rnd
                runs.append(r)
                by_design[design] = r
            say(_round_line(rnd, mode, by_design))
    doc["runs"] = runs
    cal = calibrate(url)
    doc["calibration_after"] = cal
    doc["summary"] = summarize(runs)
    say(f"calibration (same run, after):  {calibration_line(cal)}")
    for mode in modes:
        say(_summary_line(mode, doc["summary"][mode], rounds))
    return doc


def _rate(r: dict[str, Any]) -> str:
    rate = r.get("drain_jobs_per_s")
    flag = " (!enqueue outlasted the lead)" if r["enqueue_outlasted_lead"] else ""
    return (f"{rate:>9,.0f}" if rate else "        -") + " jobs/s" + flag


def _round_line(rnd: int, mode: str, by: dict[str, dict[str, Any]]) -> str:
    s = by["shardq"]
    parts = [f"round {rnd}  {mode:<7}"]
    parts += [f"{d} {_rate(r)}" for d, r in by.items()]
    for d, r in by.items():
        if d != "shardq":
            ratio = (
                f"{s['drain_jobs_per_s'] / r['drain_jobs_per_s']:.2f}"
                if s.get("drain_jobs_per_s") and r.get("drain_jobs_per_s")
                else "-"
            )
            parts.append(f"shardq/{d} {ratio}")
    parts.append("lost " + "/".join(str(r["lost"]) for r in by.values()))
    parts.append("dup " + "/".join(str(r["duplicates"]) for r in by.values()))
    parts.append(
        "(enqueue s "
        + "/".join(str(r["enqueue_seconds"]) for r in by.values())
        + ", drain s "
        + "/".join(str(r["drain_seconds"]) for r in by.values())
        + ", "
        + "/".join(by)
        + ")"
    )
    return "  ".join(parts)


def _summary_line(mode: str, s: dict[str, Any], rounds: int) -> str:
    def span(v: dict[str, float] | None, fmt: str) -> str:
        return "-" if v is None else f"{v['min']:{fmt}} - {v['max']:{fmt}}"

    rates = [
        f"{k.removesuffix('_jobs_per_s').replace('_', '-')} {span(v, ',.0f')} jobs/s"
        for k, v in s.items()
        if k.endswith("_jobs_per_s")
    ]
    ratios = [
        f"shardq/{k.removeprefix('ratio_shardq_over_').replace('_', '-')} {span(v, '.2f')}"
        for k, v in s.items()
        if k.startswith("ratio_")
    ]
    return (
        f"{mode:<7} over {rounds} round(s): {', '.join(rates)}; {', '.join(ratios)}; "
        f"lost {s['lost']}, duplicates {s['duplicates']}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.baselines.drain",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("SHARDQ_BENCH_STANDALONE_URL", "redis://127.0.0.1:7310"),
        help="Redis node (default: the benchmark standalone node on 7310)",
    )
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--modes", default=",".join(MODES), help="backlog,burst")
    parser.add_argument("--bullmq-concurrency", type=int, default=ScenarioConfig.bullmq_concurrency)
    parser.add_argument(
        "--lead", type=float, default=None, help="seconds to the due time (2 + jobs/10,000)"
    )
    parser.add_argument("--payload-bytes", type=int, default=20)
    parser.add_argument(
        "--reference",
        default="",
        help="also run shardq's consumer from this git revision (e.g. the last release), "
        "side by side: design shardq-ref",
    )
    parser.add_argument("--out", default="", help="also write the JSON document here")
    parser.add_argument("--json", action="store_true", help="JSON on stdout, tables on stderr")
    args = parser.parse_args(argv)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if set(modes) - set(MODES):
        raise SystemExit(f"--modes: choose from {','.join(MODES)}")

    def say(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    reference_sha, reference = (
        reference_mod.checkout(args.reference) if args.reference else ("", None)
    )
    if reference_sha:
        say(f"shardq-ref: shardq's consumer at {reference_sha[:12]} ({reference})")
    cfg = ScenarioConfig(
        bullmq_concurrency=args.bullmq_concurrency,
        lead=args.lead,
        payload_bytes=args.payload_bytes,
        reference=reference,
    )
    try:
        doc = compare(args.url, args.jobs, args.rounds, modes, cfg, say)
    except bullmq_node.Unavailable as exc:
        raise SystemExit(f"BullMQ baseline unavailable: {exc}") from exc
    doc = {"command": "python -m bench.baselines.drain " + " ".join(sys.argv[1:]), **doc}
    if reference_sha:
        doc["reference_revision"] = reference_sha
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    if args.out:
        with open(args.out, "wb") as f:
            f.write(data + b"\n")
        say(f"JSON written to {args.out}")
    if args.json:
        sys.stdout.write(data.decode() + "\n")


if __name__ == "__main__":
    main()
