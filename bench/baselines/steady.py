"""Steady state and idle, shardq beside BullMQ, with CPU accounting: same Redis, same box, one run.

    python -m bench.baselines.steady [--url redis://127.0.0.1:7337] [--rates 5000,2000]
        [--seconds 10] [--idle 5] [--idle-settle 3] [--rounds 2] [--budgets 2,10,20]
        [--code DIR] [--out FILE.json]

Without ``--url``, a standalone Redis of its own on 7337 (started fresh, stopped at the end).
For each round, rate and design (the order alternates from round to round):

1. the consumer starts and settles (``--idle-settle``, 3 s), then **idle** is measured for
   ``--idle`` seconds with no job due: Redis CPU (``used_cpu_user + used_cpu_sys`` of
   redis-server, as a share of a core) and the consumer's (utime + stime of its processes, the
   same).  Each round first measures Redis alone for ``--idle`` seconds (no consumer: its own
   rate, serverCron and the like), printed beside.  shardq's idle back-offs take about a minute
   to reach their longest waits (a partition found idle again and again: 1, 2, 4 ... 30 s), so
   the default 3 s settle measures the first seconds of an idle queue, ``--idle-settle 60`` the
   lasting state;
2. ``rate * seconds`` jobs are enqueued ahead, due evenly over ``--seconds`` seconds starting
   after the enqueue ended, then **steady** is measured over the due window (+0.5 s): Redis
   CPU and consumer CPU per job, each net of the idle rate of Redis measured just before
   (serverCron and the like; the consumer's own idle CPU is charged to it);
3. lateness p50/p99/max of every job's first run (handler start minus due time), from the run
   log; lost (never ran) and ran twice.

The designs, each at its defaults where a user would leave them:

- ``shardq``: ``shardq dispatcher run`` and ``shardq worker run --concurrency 100`` (two
  processes, every other setting the CLI's default; ``--budgets`` runs each lateness budget
  given, SHARDQ_LATENESS_BUDGET for both processes), a queue of 64 partitions (the default),
  an inline handler appending one line to the run log (bench/handlers/baseline_runlog.py);
- ``bullmq``: one Node process, a BullMQ ``Worker`` of concurrency 100
  (bench/baselines/bullmq/consumer.js), the same handler.

``--concurrency N`` sets both designs' jobs in flight instead of 100 (``--rates 50000 --seconds
1`` is a due burst: 50,000 jobs due within one second, the consumer running).

``--sticky-jobs 1,16,64`` runs shardq's producer with each ``ProducerSettings.sticky_jobs`` in
turn (shardq.store.sticky; 1 routes each job on its own, as before sticky routing).

``--code DIR`` runs shardq's processes from another checkout (to compare versions, alternating
runs of this same harness).

Job ids (``--ids``): ``generated`` (the default): shardq's producer passes none and
``enqueue_many`` generates them (timed ids, ``shardq.jobs.new_timed_job_id``), so shardq keeps
a waiting job compactly (one due-set member, no jobs-hash entry: docs/capacity.md §1.4) as it
does for any user who leaves ids to it; ``given``: shardq gets the harness's ids (12 random hex
characters, as a user's own ids: the envelope waits in the jobs hash).  BullMQ gets the
harness's ids either way (``opts.jobId``: its storage is the same for any id).

Payloads of 20 bytes; both producers bulk-enqueue (shardq ``enqueue_many``, BullMQ
``addBulk``), before the window, so the enqueue's cost is not in the figures.  A calibration
of the box (CPU loop, redis-benchmark) before and after, in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis as redis_lib

from bench.baselines import bullmq_node, shardq_consumer
from bench.baselines.scenarios import RunLogs
from bench.common import REPO, calibrate, calibration_line, cpu_seconds, pct
from shardq.dev.demo import cli_command
from shardq.dev.devcluster import standalone_down, standalone_up

PORT = 7337
PARTITIONS = 64  # `shardq queue create`'s default
CONCURRENCY = 100
SETTLE = 3.0
PAYLOAD = "x" * 20
DESIGNS = ("shardq", "bullmq")


def _redis_cpu(r: redis_lib.Redis) -> float:
    cpu = r.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


class Consumer:
    """A design's consumer processes (killed by their own pids at the end)."""

    def __init__(
        self,
        design: str,
        url: str,
        queue: str,
        log: Path,
        budget_ms: float | None = None,
        concurrency: int = CONCURRENCY,
        code: Path = REPO,
        shardq_env: dict[str, str] | None = None,
    ) -> None:
        env = dict(os.environ, SHARDQ_BENCH_RUNLOG=str(log))
        if design == "shardq":
            env.update(shardq_env or {})
        if budget_ms is not None:  # both shardq processes read it (the default otherwise)
            env["SHARDQ_LATENESS_BUDGET"] = f"{budget_ms}ms"
        # The handler module is this checkout's (bench/handlers), shardq the code's.
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(code), str(REPO), env.get("PYTHONPATH")])
        )
        if design == "shardq":
            common = ["--queue", queue, "--url", url]
            self.procs = [
                subprocess.Popen(cli_command("dispatcher", "run", *common), env=env, cwd=code),
                subprocess.Popen(
                    cli_command(
                        "worker", "run", *common, "--concurrency", str(concurrency),
                        "--handlers", "bench.handlers.baseline_runlog:register",
                    ),
                    env=env, cwd=code,
                ),
            ]  # fmt: skip
        else:
            argv = bullmq_node.consumer_argv(url, queue, str(log))
            argv += ["--concurrency", str(concurrency)]
            self.procs = [subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)]

    def cpu(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.procs)

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def run_one(
    design: str,
    url: str,
    rate: int,
    seconds: float,
    idle: float,
    budget_ms: float | None = None,
    concurrency: int = CONCURRENCY,
    idle_settle: float = SETTLE,
    code: Path = REPO,
    id_kind: str = "generated",
    sticky_jobs: int | None = None,
    shardq_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    r = redis_lib.Redis.from_url(url)
    queue = f"steady-{secrets.token_hex(4)}"
    mod: Any = shardq_consumer if design == "shardq" else bullmq_node
    handle = mod.connect(url, sticky_jobs) if design == "shardq" else mod.connect(url)
    if design == "shardq":
        handle.create_queue(queue, PARTITIONS)
    else:
        mod.setup(handle, queue)
    workdir = Path(tempfile.mkdtemp(prefix="shardq-steady-"))
    consumer = Consumer(
        design, url, queue, workdir / "runs.log", budget_ms, concurrency, code, shardq_env
    )
    logs = RunLogs(workdir)
    try:
        time.sleep(idle_settle)
        if not consumer.alive():
            raise RuntimeError(f"the {design} consumer exited at start")
        # Idle: nothing due.
        r0, c0, t0 = _redis_cpu(r), consumer.cpu(), time.monotonic()
        time.sleep(idle)
        r1, c1, t1 = _redis_cpu(r), consumer.cpu(), time.monotonic()
        idle_redis = (r1 - r0) / (t1 - t0)
        idle_consumer = (c1 - c0) / (t1 - t0)
        # Steady: rate * seconds jobs due evenly over the window, enqueued ahead.
        n = int(rate * seconds)
        lead = 1.0 + n / 40_000  # the bulk enqueue finishes before the first due time
        base_ms = int((time.time() + lead) * 1000)
        step = seconds * 1000 / n
        jobs = [(secrets.token_hex(6), base_ms + int(i * step)) for i in range(n)]
        if design == "shardq" and id_kind == "generated":
            dues = [d for _, d in jobs]
            made = shardq_consumer.produce_generated(handle, queue, dues, PAYLOAD)
            jobs = list(zip(made, dues, strict=True))
        else:
            mod.produce(handle, queue, jobs, PAYLOAD)
        enqueue_late = time.time() * 1000 > base_ms
        time.sleep(max(0.0, base_ms / 1000 - time.time()))
        r2, c2, t2 = _redis_cpu(r), consumer.cpu(), time.monotonic()
        time.sleep(seconds + 0.5)
        r3, c3, t3 = _redis_cpu(r), consumer.cpu(), time.monotonic()
        window = t3 - t2
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            logs.read()
            if len(logs.runs) >= n:
                break
            time.sleep(0.2)
        ids = {j for j, _ in jobs}
        late = [logs.first_late[j] for j in ids if j in logs.first_late]
        return {
            "design": design,
            "rate": rate,
            "budget_ms": budget_ms if design == "shardq" else None,
            "jobs": n,
            "redis_cpu_us_per_job": round((r3 - r2 - idle_redis * window) * 1e6 / n, 1),
            "consumer_cpu_us_per_job": round((c3 - c2) * 1e6 / n, 1),
            "lateness_ms": {"p50": pct(late, 0.5), "p99": pct(late, 0.99), "max": pct(late, 1.0)},
            "lost": len(ids - set(logs.runs)),
            "ran_twice": sum(1 for j, k in logs.runs.items() if k > 1 and j in ids),
            "idle_redis_core_pct": round(idle_redis * 100, 3),
            "idle_consumer_core_pct": round(idle_consumer * 100, 3),
            "idle_settle": idle_settle,
            "enqueue_outlasted_lead": enqueue_late,
            "sticky_jobs": sticky_jobs if design == "shardq" else None,
            "ids": id_kind,
        }
    finally:
        consumer.stop()
        mod.cleanup(handle, queue)
        handle.close()
        r.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| design | budget ms | rate | Redis CPU µs/job | consumer CPU µs/job "
        "| lateness p50 / p99 ms | lost | twice | idle Redis % core | idle consumer % core |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for w in rows:
        lat = w["lateness_ms"]
        budget = w.get("budget_ms")
        shown = "" if w["design"] != "shardq" else "default" if budget is None else budget
        if w.get("sticky_jobs") is not None:
            shown = f"{shown}, sticky {w['sticky_jobs']}"
        lines.append(
            f"| {w['design']} | {shown} | {w['rate']:,} | {w['redis_cpu_us_per_job']} | "
            f"{w['consumer_cpu_us_per_job']} | {lat['p50']} / {lat['p99']} | {w['lost']} | "
            f"{w['ran_twice']} | {w['idle_redis_core_pct']} | {w['idle_consumer_core_pct']} |"
        )
    return "\n".join(lines)


def _span(values: list[float], digits: int | None = None) -> str:
    lo, hi = min(values), max(values)
    if digits is not None:
        fmt = lambda v: f"{v:.{digits}f}"  # noqa: E731
    else:
        fmt = (lambda v: f"{v:,.0f}") if hi >= 100 else (lambda v: f"{v:.1f}")
    return fmt(lo) if lo == hi else f"{fmt(lo)}-{fmt(hi)}"


def summary(rows: list[dict[str, Any]]) -> str:
    """Min-max over rounds of each design, budget and rate, with each shardq row's Redis CPU
    per job as a multiple of BullMQ's at that rate (the min-max of the ratios within a round:
    both were measured side by side)."""
    groups: dict[tuple[str, Any, Any, int], list[dict[str, Any]]] = {}
    for w in rows:
        key = (w["design"], w.get("budget_ms"), w.get("sticky_jobs"), w["rate"])
        groups.setdefault(key, []).append(w)
    bull = {(w["round"], w["rate"]): w for w in rows if w["design"] == "bullmq"}
    lines = [
        "| design | budget ms | jobs/s | Redis CPU µs/job | x BullMQ's | consumer CPU µs/job "
        "| x BullMQ's | lateness p50 ms | p99 ms | lost | twice |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (design, budget, sticky, rate), ws in sorted(
        groups.items(),
        key=lambda kv: (kv[0][3], kv[0][0] != "shardq", kv[0][1] or 0, kv[0][2] or 0),
    ):
        ratios = [
            (w["redis_cpu_us_per_job"] / b["redis_cpu_us_per_job"],
             w["consumer_cpu_us_per_job"] / b["consumer_cpu_us_per_job"])
            for w in ws
            if design == "shardq" and (b := bull.get((w["round"], rate)))
        ]  # fmt: skip
        shown = "" if design != "shardq" else "default" if budget is None else f"{budget:g}"
        if sticky is not None:
            shown = f"{shown}, sticky {sticky}"
        redis_x = f"{_span([r[0] for r in ratios], 2)}x" if ratios else ""
        consumer_x = f"{_span([r[1] for r in ratios], 2)}x" if ratios else ""
        lines.append(
            f"| {design} | {shown} | {rate:,} | {_span([w['redis_cpu_us_per_job'] for w in ws])} "
            f"| {redis_x} | {_span([w['consumer_cpu_us_per_job'] for w in ws])} | {consumer_x} "
            f"| {_span([w['lateness_ms']['p50'] for w in ws])} "
            f"| {_span([w['lateness_ms']['p99'] for w in ws])} "
            f"| {sum(w['lost'] for w in ws)} | {sum(w['ran_twice'] for w in ws)} |"
        )
    return "\n".join(lines)


def _bare_redis(url: str, seconds: float) -> float:
    """Redis' own CPU, % of a core, over ``seconds`` with no consumer of this harness."""
    r = redis_lib.Redis.from_url(url)
    try:
        c0, t0 = _redis_cpu(r), time.monotonic()
        time.sleep(seconds)
        return round((_redis_cpu(r) - c0) / (time.monotonic() - t0) * 100, 3)
    finally:
        r.close()


def idle_summary(rows: list[dict[str, Any]], bare: list[float]) -> str:
    """Min-max of each design's idle figures over rounds and rates, beside Redis' own rate."""
    lines = [
        "| design | idle after s | idle Redis % of a core | idle consumer % of a core "
        "| Redis alone, same rounds |",
        "|---|---|---|---|---|",
    ]
    for design in dict.fromkeys(w["design"] for w in rows):
        ws = [w for w in rows if w["design"] == design]
        settle = _span([w.get("idle_settle", SETTLE) for w in ws], 0)
        lines.append(
            f"| {design} | {settle} | {_span([w['idle_redis_core_pct'] for w in ws], 2)} "
            f"| {_span([w['idle_consumer_core_pct'] for w in ws], 2)} "
            f"| {_span(bare, 2) if bare else ''} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.baselines.steady", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--url", default="", help="a standalone Redis (default: one of its own)")
    parser.add_argument("--rates", default="5000,2000")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--idle", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--designs", default=",".join(DESIGNS))
    parser.add_argument(
        "--budgets",
        default="",
        help="shardq lateness budgets to run, in ms (e.g. 2,10,20,50,100; 'default' for the "
        "dispatcher's and worker's default); BullMQ runs once per rate and round",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=CONCURRENCY,
        help="jobs in flight per consumer, both designs (shardq worker --concurrency, BullMQ "
        "Worker concurrency)",
    )
    parser.add_argument(
        "--idle-settle",
        type=float,
        default=SETTLE,
        help="seconds the consumer runs before the idle window (3 s: an idle queue's first "
        "seconds; 60 s: its lasting state, shardq's back-offs at their longest)",
    )
    parser.add_argument(
        "--ids",
        choices=("generated", "given"),
        default="generated",
        help="shardq's job ids: generated by its enqueue (none given: compact waiting jobs) or "
        "given by the harness (a user's own ids)",
    )
    parser.add_argument(
        "--sticky-jobs",
        default="",
        help="comma-separated ProducerSettings.sticky_jobs for shardq's producer, each run in "
        "turn (default: the producer's own; 1: each job routed on its own, as before sticky "
        "routing)",
    )
    parser.add_argument(
        "--shardq-env",
        action="append",
        default=[],
        metavar="SHARDQ_NAME=VALUE",
        help="a setting of shardq's dispatcher and worker processes, as its environment "
        "variable (repeatable), e.g. SHARDQ_WORKER_HEARTBEAT_INTERVAL=10: the idle cost of "
        "other heartbeat cadences",
    )
    parser.add_argument(
        "--code", default="", help="run shardq's processes from this checkout (default: this one)"
    )
    parser.add_argument("--out", default="", help="also write the JSON document here")
    parser.add_argument(
        "--summarize", default="", help="print the min-max table of a stored --out file and exit"
    )
    args = parser.parse_args(argv)
    if args.summarize:
        stored = json.loads(Path(args.summarize).read_text())
        print(summary(stored["runs"]))
        print()
        print(idle_summary(stored["runs"], stored.get("bare_redis_core_pct", [])))
        return
    designs = [d for d in args.designs.split(",") if d]
    shardq_env: dict[str, str] = {}
    for item in args.shardq_env:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("SHARDQ_"):
            parser.error(f"--shardq-env takes SHARDQ_NAME=VALUE, not {item!r}")
        shardq_env[name] = value
    budgets: list[float | None] = [
        None if b.strip() == "default" else float(b) for b in args.budgets.split(",") if b.strip()
    ] or [None]
    stickies: list[int | None] = [int(x) for x in args.sticky_jobs.split(",") if x.strip()] or [
        None
    ]
    if "bullmq" in designs:
        why = bullmq_node.missing()
        if why:
            raise SystemExit(f"BullMQ baseline unavailable: {why}")
        bullmq_node.ensure_installed()
    own = not args.url
    url = args.url
    if own:
        standalone_down(PORT)
        url = standalone_up(PORT)
    try:
        doc: dict[str, Any] = {
            "command": " ".join(["python -m bench.baselines.steady", *sys.argv[1:]])
        }
        doc["date"] = time.strftime("%Y-%m-%d")
        doc["versions"] = {"bullmq": bullmq_node.versions()} if "bullmq" in designs else {}
        cal = calibrate(url)
        doc["calibration_before"] = cal
        print(f"calibration (same run, before): {calibration_line(cal)}", file=sys.stderr)
        code = Path(args.code).resolve() if args.code else REPO
        doc["code"] = str(code)
        doc["idle_settle"] = args.idle_settle
        doc["shardq_env"] = shardq_env
        rows: list[dict[str, Any]] = []
        bare: list[float] = []
        for rnd in range(args.rounds):
            bare.append(_bare_redis(url, args.idle))
            print(json.dumps({"round": rnd + 1, "bare_redis_core_pct": bare[-1]}), file=sys.stderr)
            order = designs if rnd % 2 == 0 else designs[::-1]
            for rate in (int(x) for x in args.rates.split(",")):
                for design in order:
                    for budget, sticky in (
                        [(b, s) for b in budgets for s in stickies]
                        if design == "shardq"
                        else [(None, None)]
                    ):
                        row = run_one(
                            design, url, rate, args.seconds, args.idle, budget,
                            args.concurrency, args.idle_settle, code, args.ids, sticky,
                            shardq_env,
                        )  # fmt: skip
                        row["concurrency"] = args.concurrency
                        row["round"] = rnd + 1
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr)
        cal = calibrate(url)
        doc["calibration_after"] = cal
        print(f"calibration (same run, after):  {calibration_line(cal)}", file=sys.stderr)
        doc["runs"] = rows
        doc["bare_redis_core_pct"] = bare
        print(_table(rows))
        print()
        print(summary(rows))
        print()
        print(idle_summary(rows, bare))
        if args.out:
            Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    finally:
        if own:
            standalone_down(PORT)


if __name__ == "__main__":
    main()
