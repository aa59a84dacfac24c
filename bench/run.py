"""The benchmark suite: ``python -m bench`` (or ``python -m bench.run``).

Runs against a local Redis Cluster (``--url``, default the benchmark cluster on 7300) and a
standalone node for the baselines (``--standalone-url``, default 7310), prints a readable table
per section and writes one JSON document (``--out``).  ``--quick`` runs CI-sized versions of
every section (about two minutes); ``--only`` picks sections.

    shardq dev cluster up --base-port 7300 && shardq dev standalone up --port 7310
    python -m bench --out results/bench/bench.json
    python -m bench --quick --only stages,baselines
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import redis as redis_lib

from bench import failover, migrate, pause, rates, stages
from bench.baselines import bullmq_node, drain, scenarios
from bench.common import calibrate, calibration_line
from bench.enqueue import run_enqueue_bench

SECTIONS = (
    "enqueue",
    "stages",
    "promote_k",
    "promote_rate",
    "drain",
    "lateness",
    "steady_cost",
    "backlog_memory",
    "migrate",
    "baselines",
    "bullmq",
    "pause",
    "failover",
)


@dataclass(frozen=True)
class Sizes:
    enqueue_bulk: int
    enqueue_single: int
    stage_jobs: int
    promote_k_jobs: int
    ks: tuple[int, ...]
    promote_rate_jobs: int
    drain_jobs: int
    rates: tuple[int, ...]
    rate_spread: float
    steady: tuple[tuple[int, int], ...]  # (jobs/s, partitions)
    backlogs: tuple[int, ...]
    migrate_sizes: tuple[int, ...]
    baseline_jobs: int
    baseline_spread: float
    big_backlog: int
    bullmq_rounds: int  # of the drain comparison with BullMQ, at drain_jobs jobs
    pause_rounds: int  # one primary paused 3 s under 5,000 jobs/s
    failover_rounds: int  # of each failover scenario


FULL = Sizes(
    enqueue_bulk=50_000,
    enqueue_single=3_000,
    stage_jobs=200_000,
    promote_k_jobs=100_000,
    ks=(1, 10, 100, 1000),
    promote_rate_jobs=200_000,
    drain_jobs=200_000,
    rates=(1_000, 5_000, 10_000),
    rate_spread=10.0,
    steady=((1_000, 64), (5_000, 64), (10_000, 64), (10_000, 8)),
    backlogs=(10_000, 100_000, 1_000_000, 5_000_000),  # 5M only when memory allows
    migrate_sizes=(10_000, 100_000, 1_000_000),
    baseline_jobs=20_000,
    baseline_spread=8.0,
    big_backlog=200_000,
    bullmq_rounds=3,
    pause_rounds=3,
    failover_rounds=3,
)
QUICK = Sizes(
    enqueue_bulk=20_000,
    enqueue_single=1_000,
    stage_jobs=20_000,
    promote_k_jobs=20_000,
    ks=(1, 100, 1000),
    promote_rate_jobs=50_000,
    drain_jobs=20_000,
    rates=(1_000, 5_000),
    rate_spread=3.0,
    steady=((1_000, 64), (5_000, 8)),
    backlogs=(10_000, 50_000),
    migrate_sizes=(10_000,),
    baseline_jobs=5_000,
    baseline_spread=3.0,
    big_backlog=0,
    bullmq_rounds=1,
    pause_rounds=1,
    failover_rounds=1,
)


def environment(url: str) -> dict[str, Any]:
    r = redis_lib.Redis.from_url(url)
    try:
        server = r.info("server")
    finally:
        r.close()
    return {
        "redis_version": server.get("redis_version"),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# tables ---------------------------------------------------------------------------------------


def table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)
    ]
    lines = [f"\n== {title} =="]
    lines.append(
        "  ".join(
            h.rjust(w) if i else h.ljust(w)
            for i, (h, w) in enumerate(zip(header, widths, strict=True))
        )
    )
    for row in cells:
        lines.append(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def show_enqueue(r: dict[str, Any]) -> str:
    return table(
        "enqueue rate (bench.enqueue.run_enqueue_bench, one client process)",
        ["mode", "jobs", "jobs/s"],
        [
            ["single enqueue() loop", r["single_jobs"], r["single_jobs_per_s"]],
            ["bulk enqueue_many()", r["bulk_jobs"], r["bulk_jobs_per_s"]],
        ],
    )


def show_stages(r: dict[str, Any]) -> str:
    rows = []
    for stage in ("enqueue_bulk", "enqueue_single", "promote", "fetch", "ack"):
        s = r[stage]
        rows.append(
            [
                stage,
                s["jobs"],
                s["script_usec_per_job"],
                s["cpu_usec_per_job"],
                s["script_usec_per_call"],
                s["memory_bytes_per_job"],
                s.get("producer_cpu_usec_per_job"),
            ]
        )
    rows.append(
        [
            "total (bulk enqueue .. ack)",
            r["jobs"],
            r["total_script_usec_per_job"],
            r["total_cpu_usec_per_job"],
            None,
            None,
            None,
        ]
    )
    mem = r["memory_bytes_per_job"]
    return table(
        f"Redis cost per job by stage (K={r['k']}, {r['partitions']} partitions, "
        f"{r['payload_bytes']}-byte payload; primaries with one replica each)",
        [
            "stage",
            "jobs",
            "script us/job",
            "redis CPU us/job",
            "script us/call",
            "memory delta B/job",
            "producer CPU us/job",
        ],
        rows,
    ) + (
        f"\nRedis memory per job held: due {mem['due']} B, ready {mem['ready']} B, "
        f"running {mem['running']} B, after ack {mem['left after ack']} B"
    )


def show_promote_k(rows: list[dict[str, Any]]) -> str:
    return table(
        "promote script by K (jobs moved per call)",
        [
            "K",
            "jobs",
            "calls",
            "script us/job",
            "redis CPU us/job",
            "script us/call (shard blocked)",
        ],
        [
            [
                r["k"],
                r["jobs"],
                r["calls"],
                r["script_usec_per_job"],
                r["cpu_usec_per_job"],
                r["script_usec_per_call"],
            ]
            for r in rows
        ],
    )


def show_promote_rate(r: dict[str, Any]) -> str:
    rows = [[node, rate] for node, rate in r["jobs_per_s_per_primary"].items()]
    rows.append(["all primaries", r["jobs_per_s"]])
    rows.append(["busiest / mean", r["busiest_primary_over_mean"]])
    return table(
        f"promote rate: one dispatcher process, {r['jobs']:,} overdue jobs, no worker "
        f"(Redis: {r['script_usec_per_job_incl_leases']} script us/job, "
        f"{r['cpu_usec_per_job_incl_leases']} CPU us/job incl. leases and metrics; "
        f"dispatcher: {r['dispatcher_cpu_usec_per_job']} CPU us/job, "
        f"{r['dispatcher_cpu_share']:.0%} of a core, RSS {r['dispatcher_rss_mb']['peak']} MiB)",
        ["primary", "jobs/s"],
        rows,
    )


def show_drain(r: dict[str, Any]) -> str:
    lat = r["lateness_ms"]
    return table(
        "end-to-end drain (bench.e2e.run, backlog=True: 1 dispatcher + 1 worker process)",
        [
            "jobs",
            "lost",
            "dup",
            "enqueue jobs/s",
            "drain jobs/s",
            "lateness p50 ms",
            "p99 ms",
            "Redis B/job",
        ],
        [
            [
                r["jobs"],
                r["lost"],
                r["duplicates"],
                r["enqueue_jobs_per_s"],
                r["drain_jobs_per_s"],
                lat["p50"],
                lat["p99"],
                r["redis_bytes_per_job"],
            ]
        ],
    )


def show_lateness(rows: list[dict[str, Any]]) -> str:
    return table(
        "lateness at steady due rates (bench.e2e.run: jobs enqueued ahead, due "
        "evenly over the spread; 1 dispatcher + 1 worker process)",
        [
            "jobs/s due",
            "jobs",
            "lost",
            "dup",
            "p50 ms",
            "p99 ms",
            "max ms",
            "dispatcher MiB",
            "worker MiB",
        ],
        [
            [
                r["rate"],
                r["jobs"],
                r["lost"],
                r["duplicates"],
                r["lateness_ms"]["p50"],
                r["lateness_ms"]["p99"],
                r["lateness_ms"]["max"],
                r["dispatcher_peak_rss_mb"],
                r["worker_peak_rss_mb"],
            ]
            for r in rows
        ],
    )


def show_steady_cost(rows: list[dict[str, Any]]) -> str:
    return table(
        "cost per job in steady state (plain dispatcher + worker; jobs due evenly; Redis over "
        "all primaries, processes' CPU from /proc)",
        [
            "jobs/s",
            "partitions",
            "jobs/s/partition",
            "script us/job",
            "redis CPU us/job",
            "script calls/job",
            "dispatcher CPU us/job",
            "worker CPU us/job",
        ],
        [
            [
                r["rate"],
                r["partitions"],
                r["jobs_per_s_per_partition"],
                r["script_usec_per_job"],
                r["cpu_usec_per_job"],
                r["script_calls_per_job"],
                r["dispatcher_cpu_usec_per_job"],
                r["worker_cpu_usec_per_job"],
            ]
            for r in rows
        ],
    )


def show_backlog_memory(rows: list[dict[str, Any]]) -> str:
    return table(
        "process memory against backlog (plain `shardq dispatcher run` + `shardq worker run`, "
        "no-op handler, all jobs due at one instant)",
        [
            "backlog",
            "done",
            "drain s",
            "drain jobs/s",
            "Redis B/job",
            "dispatcher MiB before/peak",
            "worker MiB before/peak",
            "dispatcher CPU us/job",
            "worker CPU us/job",
        ],
        [
            [r["backlog"], f"skipped: {r['skipped']}", *[None] * 7]
            if "skipped" in r
            else [
                r["backlog"],
                r["complete"],
                r["drain_seconds"],
                r["drain_jobs_per_s"],
                r["redis_bytes_per_job"],
                f"{r['dispatcher_rss_mb']['before_due']} / {r['dispatcher_rss_mb']['peak']}",
                f"{r['worker_rss_mb']['before_due']} / {r['worker_rss_mb']['peak']}",
                r["dispatcher_cpu_usec_per_job"],
                r["worker_cpu_usec_per_job"],
            ]
            for r in rows
        ],
    )


def show_migrate(rows: list[dict[str, Any]]) -> str:
    if rows and "skipped" in rows[0]:
        return "\n== slot migration: skipped (not a cluster) =="
    return table(
        "slot migration of one partition (MIGRATE ... KEYS, waiting jobs: due zset + jobs hash)",
        ["jobs in partition", "bytes moved", "B/job", "MIGRATE ms", "source max PING ms", "MB/s"],
        [
            [
                r["jobs_in_partition"],
                r["bytes_moved"],
                r["bytes_per_job"],
                r["migrate_ms"],
                r["source_max_ping_ms"],
                r["mb_per_s"],
            ]
            for r in rows
        ],
    )


def show_baselines(rows: list[dict[str, Any]]) -> str:
    return table(
        "the designs the field warns against, beside shardq (standalone node; consumer = one "
        "process; lost = not run and no trigger left)",
        ["scenario", "design", "jobs", "lost", "dup runs", "p50 ms", "p99 ms", "consumer MiB", "s"],
        [
            [
                r["scenario"],
                r["design"],
                r["jobs"],
                r["lost"],
                r["duplicates"],
                r["lateness_ms"]["p50"],
                r["lateness_ms"]["p99"],
                r["consumer_peak_rss_mb"],
                r["seconds"],
            ]
            for r in rows
        ],
    )


def show_bullmq(r: dict[str, Any]) -> str:
    if "skipped" in r:
        return f"\n== drain beside BullMQ: skipped ({r['skipped']}) =="
    env = r["environment"]
    rows = []
    for run in r["runs"]:
        rows.append(
            [
                run["round"],
                run["scenario"],
                run["design"],
                run["jobs"],
                run["lost"],
                run["duplicates"],
                run["enqueue_seconds"],
                run["drain_seconds"],
                run["drain_jobs_per_s"],
                run["enqueue_outlasted_lead"],
            ]
        )
    summary = [
        f"{mode}: shardq/bullmq {s['ratio_shardq_over_bullmq']['min']:.2f} - "
        f"{s['ratio_shardq_over_bullmq']['max']:.2f} over {r['rounds']} round(s)"
        for mode, s in r["summary"].items()
        if s["ratio_shardq_over_bullmq"]
    ]
    return (
        table(
            f"drain beside BullMQ (bench.baselines.drain: one consumer process each, BullMQ "
            f"{env['bullmq']} on node {env['node']} with concurrency {r['bullmq_concurrency']}, "
            f"shardq_consumer; all jobs due at one instant; standalone node)",
            [
                "round",
                "mode",
                "design",
                "jobs",
                "lost",
                "dup",
                "enqueue s",
                "drain s",
                "drain jobs/s",
                "enqueue outlasted lead",
            ],
            rows,
        )
        + f"\ncalibration before: {drain.calibration_line(r['calibration_before'])}"
        + f"\ncalibration after:  {drain.calibration_line(r['calibration_after'])}"
        + "".join(f"\n{line}" for line in summary)
    )


def show_pause(r: dict[str, Any]) -> str:
    lines = [f"\n== one primary paused {r['pause_s']} s under {r['rate']} jobs/s (bench.pause) =="]
    lines += [pause.describe(i, row) for i, row in enumerate(r["rounds"])]
    return "\n".join(lines)


# running --------------------------------------------------------------------------------------


def run(args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    sizes = QUICK if args.quick else FULL
    if args.steady:
        sizes = dataclasses.replace(sizes, steady=args.steady)
    wanted = [s.strip() for s in args.only.split(",")] if args.only else list(SECTIONS)
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}: choose from {', '.join(SECTIONS)}")
    doc: dict[str, Any] = {
        "command": "python -m bench " + " ".join(sys.argv[1:]),
        "mode": "quick" if args.quick else "full",
        "url": args.url,
        "standalone_url": args.standalone_url,
        "environment": environment(args.url),
        "results": {},
    }
    results = doc["results"]
    url, p = args.url, args.partitions

    def section(name: str, fn: Callable[[], Any], show: Callable[[Any], str]) -> None:
        if name not in wanted:
            return
        t0 = time.monotonic()
        say(f"-- {name} ...")
        results[name] = fn()
        say(show(results[name]) + f"\n({time.monotonic() - t0:.0f} s)")

    section(
        "enqueue",
        lambda: run_enqueue_bench(
            url, jobs=sizes.enqueue_bulk, single_jobs=sizes.enqueue_single, partitions=p
        ),
        show_enqueue,
    )
    section(
        "stages",
        lambda: stages.stage_costs(
            url, jobs=sizes.stage_jobs, single_jobs=sizes.enqueue_single, partitions=p
        ),
        show_stages,
    )
    section(
        "promote_k",
        lambda: stages.promote_k(url, sizes.promote_k_jobs, list(sizes.ks), p),
        show_promote_k,
    )
    section(
        "promote_rate",
        lambda: rates.promote_rate(url, sizes.promote_rate_jobs, p),
        show_promote_rate,
    )
    section("drain", lambda: rates.drain(url, sizes.drain_jobs, p), show_drain)
    section(
        "lateness",
        lambda: [rates.steady_lateness(url, r, sizes.rate_spread, p) for r in sizes.rates],
        show_lateness,
    )
    section(
        "steady_cost",
        lambda: [rates.steady_cost(url, r, sizes.rate_spread, parts) for r, parts in sizes.steady],
        show_steady_cost,
    )
    section(
        "backlog_memory",
        lambda: [
            {"backlog": n, "skipped": why}
            if (why := rates.memory_allows(n))
            else rates.backlog_memory(url, n, p)
            for n in sizes.backlogs
        ],
        show_backlog_memory,
    )
    section("migrate", lambda: migrate.migrate_pause(url, list(sizes.migrate_sizes)), show_migrate)

    def baselines() -> list[dict[str, Any]]:
        cfg = scenarios.ScenarioConfig(jobs=sizes.baseline_jobs, spread=sizes.baseline_spread)
        rows = scenarios.run_all(args.standalone_url, cfg)
        if sizes.big_backlog:
            # an atomic claim (HDEL first) stops duplicates, not loss
            for scenario in ("restart", "two-consumers"):
                rows.append(
                    scenarios.run_scenario("ttl-timer-claim", scenario, args.standalone_url, cfg)
                )
            big = scenarios.ScenarioConfig(jobs=sizes.big_backlog, spread=sizes.baseline_spread)
            for design in ("zset-poller", "shardq"):
                row = scenarios.run_scenario(design, "backlog", args.standalone_url, big)
                row["scenario"] = f"backlog {sizes.big_backlog // 1000}k"
                rows.append(row)
        return rows

    section("baselines", baselines, show_baselines)

    def bullmq() -> dict[str, Any]:
        why = bullmq_node.missing()
        if why is None:
            try:
                return drain.compare(args.standalone_url, sizes.drain_jobs, sizes.bullmq_rounds)
            except bullmq_node.Unavailable as exc:
                why = str(exc)
        return {"skipped": f"BullMQ baseline unavailable: {why}"}

    section("bullmq", bullmq, show_bullmq)
    section("pause", lambda: pause.run(url, 5000, 3.0, sizes.pause_rounds), show_pause)
    section(
        "failover",
        lambda: failover.run(url, sizes.failover_rounds, int(time.time()), list(failover.BOUNDS)),
        failover.summary,
    )
    return doc


def steady_cases(text: str) -> tuple[tuple[int, int], ...]:
    """``1000x64,1950x8`` -> ((1000, 64), (1950, 8))."""
    try:
        cases = tuple(
            (int(rate), int(parts))
            for rate, parts in (case.strip().split("x") for case in text.split(","))
        )
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: want RATExPARTITIONS,... (1950x8)") from None
    if not cases or any(r < 1 or not 1 <= n <= 16384 for r, n in cases):
        raise argparse.ArgumentTypeError(f"{text!r}: rates >= 1, partitions 1..16384")
    return cases


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("SHARDQ_BENCH_URL", "redis://127.0.0.1:7300"),
        help="Redis Cluster (default: the benchmark cluster on 7300)",
    )
    parser.add_argument(
        "--standalone-url",
        default=os.environ.get("SHARDQ_BENCH_STANDALONE_URL", "redis://127.0.0.1:7310"),
        help="standalone node for the baselines",
    )
    parser.add_argument("--quick", action="store_true", help="CI-sized runs")
    parser.add_argument(
        "--only", default="", help=f"comma-separated sections: {','.join(SECTIONS)}"
    )
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument(
        "--steady",
        type=steady_cases,
        default=(),
        help="steady_cost's cases as RATExPARTITIONS,... (e.g. 1950x8: 244 jobs/s per partition)",
    )
    parser.add_argument("--out", default="", help="write the JSON document here")
    parser.add_argument("--json", action="store_true", help="print only the JSON document")
    args = parser.parse_args(argv)

    def say(text: str) -> None:
        print(text, file=sys.stderr if args.json else sys.stdout, flush=True)

    cal = {"cluster": calibrate(args.url), "standalone": calibrate(args.standalone_url)}
    say(f"calibration (same run): cluster: {calibration_line(cal['cluster'])}")
    say(f"                        standalone: {calibration_line(cal['standalone'])}")
    doc = {"calibration": cal, **run(args, say)}
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_bytes(data + b"\n")
        say(f"\nJSON written to {args.out}")
    if args.json:
        sys.stdout.write(data.decode() + "\n")


if __name__ == "__main__":
    main()
