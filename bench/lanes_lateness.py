"""Lanes (priorities and fair sharing between tenants) on against off: lateness of the jobs that
should not wait, and the drain rate of the bulk beside them.

    python -m bench.lanes_lateness --url redis://127.0.0.1:7300 [--rounds 3] [--workers 2]
                         [--backlog 200000] [--trickle-rate 20] [--trickle-seconds 15]
                         [--tenant-a 500000] [--tenant-b 1000] [--spread 60]
                         [--json] [--out PATH]

Every round runs both parts with lanes on and with lanes off (the order of the two modes
alternating from round to round), each run on a fresh queue of 16 partitions with one
``shardq dispatcher run`` and ``--workers`` ``shardq worker run`` processes (concurrency 200,
``bench/handlers/shardq_probe.py``: type ``bench`` is a no-op, type ``probe`` appends its
lateness to a run log).  Lateness is handler start minus due time on the Redis clock, as the
worker measures it (bench/handlers/shardq_runlog.py does the same).

- **priorities**: a backlog of ``--backlog`` ``bench`` jobs due now is enqueued before the
  fleet starts.  Once every partition has completed a job (a fresh fleet does not start
  reading every primary at the same moment), the bench process enqueues ``--trickle-rate``
  ``probe`` jobs a second, each due at once (ids ``H-<n>``; ``priority="high"`` with lanes on,
  plain jobs with lanes off), for ``--trickle-seconds`` or until the backlog has drained,
  whichever comes first (a probe sent after that measures nothing).  Reported: the probes'
  lateness p50/p99/max, and the backlog's drain rate (backlog / seconds from the first
  completion until every backlog job completed).
- **fair sharing**: tenant A's ``--tenant-a`` ``bench`` jobs, due now, are enqueued; then tenant
  B's ``--tenant-b`` ``probe`` jobs (ids ``B-<n>``) due evenly over ``--spread`` seconds
  from 3 s later (``run_at = start + i * spread / n``); then the fleet starts.  ``tenant="A"``
  / ``"B"`` with lanes on, plain jobs with lanes off.  Measuring stops once every B job ran
  (bounded by the spread + 63 s).  Reported: B's lateness p50/p99/max, and the same for the B
  jobs that came due while A still had jobs waiting and every partition was being read (the
  ones fair sharing is for); A's rate over the window = A jobs completed / seconds from the
  first completion until A drained or B's last job ran, whichever came first.

A's and the backlog's completions are the queue's ``completed`` counters less the probes'
run-log lines, polled every 50 ms. The probes keep their result (``PROBE_RESULT`` seconds) so
that a probe is counted completed as soon as its handler returns: a plain job's ack waits up to
the worker's linger for its partition's next read, so the probes that had run but whose acks had
not landed yet were taken off the bulk's count, which then read short for as long as probes ran
(every drain read as unfinished until the trickle or B's spread ended: on 2026-12-06 the backlog
"drained" at backlog / 15 s and A at A / 60 s in every mode). Then a rate counts from the first
poll that sees a completion, leaving out the jobs completed by then. Each round prints the
calibration of the machine taken in the same run; the end prints the min-max over rounds.
``--json`` prints the JSON document on stdout and the text on stderr. Every queue is deleted
when its run ends (its lane keys and the probes' results too), and its keys checked gone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import orjson

from bench.common import (
    Fleet,
    calibrate,
    calibration_line,
    fresh_queue,
    partition_nodes,
    pct,
    primaries,
)
from bench.failover import HANDLERS
from shardq import JobRequest
from shardq.client import Client
from shardq.dev.demo import cli_command
from shardq.inspector import Inspector
from shardq.store import keys

PARTITIONS = 16
CONCURRENCY = 200
CHUNK = 20_000  # jobs per enqueue_many call
LEAD = 3.0  # seconds from the end of B's enqueue to its first due time (the fleet starts)
POLL = 0.05
#: Seconds a probe keeps its result: a kept result settles at once, not after the ack linger.
PROBE_RESULT = 60.0

Say = Callable[[str], None]


# --- processes, run log, queues --------------------------------------------------------------


def _fleet(url: str, queue: str, workers: int, runlog: str, checkout: str | None = None) -> Fleet:
    """One dispatcher and ``workers`` workers running bench/handlers/shardq_probe.py; with
    ``checkout`` (bench.baselines.reference), the shardq of that revision."""
    fleet = Fleet(url, queue)
    first = (checkout, HANDLERS) if checkout else (HANDLERS,)
    path = os.pathsep.join(p for p in (*first, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "SHARDQ_BENCH_RUNLOG": runlog, "PYTHONPATH": path}
    fleet.procs["dispatcher"] = subprocess.Popen(
        cli_command(
            *("dispatcher", "run", "--queue", queue, "--url", url),
            *("--batch", "100", "--lease-time", "4", "--renew-interval", "1"),
        ),
        env=env,
        cwd=checkout,  # python -m puts the working directory first on sys.path
    )
    for i in range(workers):
        cmd = cli_command(
            "worker",
            "run",
            "--queue",
            queue,
            "--url",
            url,
            "--handlers",
            "shardq_probe:register",
            "--concurrency",
            str(CONCURRENCY),
        )
        fleet.procs[f"worker-{i}"] = subprocess.Popen(cmd, env=env, cwd=checkout)
    return fleet


def _runs(path: str) -> list[tuple[str, float, float, str, str]]:
    """Run-log lines ``<id> <start epoch s> <lateness ms> <priority> <tenant>``."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) == 5:
                    out.append((p[0], float(p[1]), float(p[2]), p[3], p[4]))
    except FileNotFoundError:
        pass
    return out


def _runlog() -> str:
    fd, path = tempfile.mkstemp(prefix="bench-lanes-lateness-runs-")
    os.close(fd)
    return path


def _queue(client: Client, prefix: str, lanes: bool) -> str:
    queue = fresh_queue(client, prefix, PARTITIONS)
    if lanes:
        client.set_lanes(queue, True)
    return queue


def _delete(client: Client, queue: str) -> list[str]:
    """Delete every key of the queue (the lanes' and the probes' results too); returns the
    names of any left behind."""
    Inspector(client).delete_queue(queue, force=True)
    left: list[str] = []
    for node in primaries(client).values():
        left += [k.decode() for k in node.scan_iter(match=f"*sq:{queue}*", count=1000)]
    return left


def _enqueue(client: Client, queue: str, requests: list[JobRequest]) -> float:
    t0 = time.monotonic()
    for start in range(0, len(requests), CHUNK):
        client.enqueue_many(queue, requests[start : start + CHUNK])
    return time.monotonic() - t0


def _late(values: list[float]) -> dict[str, Any]:
    return {
        "jobs": len(values),
        "p50_ms": pct(values, 0.5),
        "p99_ms": pct(values, 0.99),
        "max_ms": round(max(values), 2) if values else None,
    }


# --- progress --------------------------------------------------------------------------------


class _Progress:
    """Completions of a run, from the partitions' ``completed`` counters and the run log.

    ``first``: the first poll that sees a completion; ``active``: the first that sees one in
    every partition (a fresh fleet does not start reading every primary at the same moment).
    """

    def __init__(self, client: Client, queue: str, runlog: str) -> None:
        self.client, self.runlog = client, runlog
        self.stats = [pk.stats for pk in keys.all_partition_keys(queue, PARTITIONS)]
        self.launched = time.monotonic()
        self.first: float | None = None
        self.active: float | None = None
        self.active_epoch: float | None = None
        self.bulk_at_first = 0

    def poll(self) -> tuple[int, int]:
        """(bulk jobs completed, probes that ran)."""
        pipe = self.client.redis.pipeline(transaction=False)
        for key in self.stats:
            pipe.hget(key, "completed")
        per = [int(v or 0) for v in pipe.execute()]
        runs = _runs(self.runlog)
        now = time.monotonic()
        bulk = sum(per) - len(runs)
        if self.first is None and sum(per) > 0:
            self.first, self.bulk_at_first = now, bulk
        if self.active is None and all(per):
            self.active, self.active_epoch = now, time.time()
        return bulk, len({r[0] for r in runs})

    def startup(self) -> dict[str, float | None]:
        """Seconds from the fleet's launch to the first completion and to every partition's."""
        return {
            "first_completion_s": _since(self.launched, self.first),
            "all_partitions_s": _since(self.launched, self.active),
        }


def _since(t0: float, t: float | None) -> float | None:
    return round(t - t0, 2) if t is not None else None


def _by_primary(client: Client, queue: str, late: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Lateness of probes (id -> ms) by the primary holding their partition: a worker serves
    each primary with a loop of its own, which is where a probe's wait can come from."""
    nodes = partition_nodes(client, queue, PARTITIONS)
    groups: dict[str, list[float]] = {}
    for job_id, ms in late.items():
        groups.setdefault(nodes[keys.partition_for(job_id, PARTITIONS)], []).append(ms)
    return {node: _late(v) for node, v in sorted(groups.items())}


def _first_runs(runlog: str) -> tuple[dict[str, tuple[str, float, float, str, str]], int]:
    """Each probe's first run, and how many runs were repeats."""
    runs = _runs(runlog)
    first: dict[str, tuple[str, float, float, str, str]] = {}
    for r in runs:
        first.setdefault(r[0], r)
    return first, len(runs) - len(first)


# --- part 1: priorities ----------------------------------------------------------------------


def priorities(client: Client, args: argparse.Namespace, lanes: bool) -> dict[str, Any]:
    queue = _queue(client, "lanes-prio", lanes)
    runlog = _runlog()
    fleet: Fleet | None = None
    n = args.backlog
    try:
        enqueue_s = _enqueue(client, queue, [JobRequest("bench", None) for _ in range(n)])
        fleet = _fleet(args.url, queue, args.workers, runlog)
        prog = _Progress(client, queue, runlog)
        deadline = prog.launched + args.timeout
        drained = trickle_end = None
        sent = 0
        next_poll = prog.launched
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_poll:
                bulk, _ = prog.poll()
                now = time.monotonic()
                next_poll = now + POLL
                if prog.first is not None and bulk >= n:
                    drained = now
                    break
            wake = next_poll
            t0 = prog.active
            if t0 is not None and now - t0 < args.trickle_seconds:
                if sent < (now - t0) * args.trickle_rate:
                    client.enqueue(
                        queue,
                        "probe",
                        None,
                        job_id=f"H-{sent}",
                        priority="high" if lanes else None,
                        keep_result=PROBE_RESULT,
                    )
                    sent += 1
                    trickle_end = time.monotonic()
                    continue
                wake = min(wake, t0 + (sent + 1) / args.trickle_rate)
            time.sleep(max(0.0, min(wake, deadline) - time.monotonic()))
        # The probes sent last may still be on their way.
        probe_deadline = time.monotonic() + 30
        while prog.poll()[1] < sent and time.monotonic() < probe_deadline:
            time.sleep(POLL)
    finally:
        if fleet is not None:
            fleet.stop()
        left = _delete(client, queue)
    first_runs, repeats = _first_runs(runlog)
    os.unlink(runlog)
    drain_s = drained - prog.first if drained is not None and prog.first is not None else None
    return {
        "lanes": lanes,
        "queue": queue,
        "backlog": n,
        "enqueue_s": round(enqueue_s, 2),
        **prog.startup(),
        "drained": drained is not None,
        "drain_s": round(drain_s, 2) if drain_s else None,
        "drain_jobs_per_s": round((n - prog.bulk_at_first) / drain_s) if drain_s else None,
        "completed_at_first_poll": prog.bulk_at_first,
        "high_sent": sent,
        "trickle_s": _since(prog.active, trickle_end) if prog.active is not None else None,
        "high_ran": len(first_runs),
        "high_ran_twice": repeats,
        "high_late": _late([r[2] for r in first_runs.values()]),
        "high_late_by_primary": _by_primary(
            client, queue, {k: r[2] for k, r in first_runs.items()}
        ),
        "high_seen_as": dict(Counter(f"{r[3]}/{r[4]}" for r in first_runs.values())),
        "keys_left": left,
    }


# --- part 2: fair sharing --------------------------------------------------------------------


def fairness(client: Client, args: argparse.Namespace, lanes: bool) -> dict[str, Any]:
    queue = _queue(client, "lanes-fair", lanes)
    runlog = _runlog()
    fleet: Fleet | None = None
    na, nb = args.tenant_a, args.tenant_b
    try:
        tenant_a = "A" if lanes else None
        enqueue_s = _enqueue(
            client, queue, [JobRequest("bench", None, tenant=tenant_a) for _ in range(na)]
        )
        start = time.time() + LEAD
        tenant_b = "B" if lanes else None
        _enqueue(
            client,
            queue,
            [
                JobRequest(
                    "probe",
                    None,
                    run_at=start + i * args.spread / nb,
                    job_id=f"B-{i}",
                    tenant=tenant_b,
                    keep_result=PROBE_RESULT,
                )
                for i in range(nb)
            ],
        )
        if time.time() > start:
            raise RuntimeError("B's enqueue outlasted its lead: B's first jobs were overdue")
        fleet = _fleet(args.url, queue, args.workers, runlog)
        prog = _Progress(client, queue, runlog)
        deadline = prog.launched + LEAD + args.spread + 60
        a_drained = a_drained_epoch = end = None
        a_done = 0
        while time.monotonic() < deadline:
            bulk, b_done = prog.poll()
            now = time.monotonic()
            if a_drained is None:
                a_done = min(bulk, na)
                if a_done >= na:
                    a_drained, a_drained_epoch = now, time.time()
            if b_done >= nb:
                end = now
                break
            time.sleep(POLL)
        stopped = end if end is not None else time.monotonic()
    finally:
        if fleet is not None:
            fleet.stop()
        left = _delete(client, queue)
    first_runs, repeats = _first_runs(runlog)
    os.unlink(runlog)
    window_end = min(a_drained, stopped) if a_drained is not None else stopped
    window = window_end - prog.first if prog.first is not None else None
    # B jobs due (start - lateness) once every partition was being read and before A drained:
    # the ones fair sharing is for.  Those due before that waited for the fleet to start.
    lo = prog.active_epoch if prog.active_epoch is not None else float("inf")
    hi = a_drained_epoch if a_drained_epoch is not None else float("inf")
    due = {k: r[1] - r[2] / 1000 for k, r in first_runs.items()}
    during_by_id = {k: r[2] for k, r in first_runs.items() if lo <= due[k] < hi}
    during = list(during_by_id.values())
    return {
        "lanes": lanes,
        "queue": queue,
        "tenant_a_jobs": na,
        "tenant_b_jobs": nb,
        "enqueue_a_s": round(enqueue_s, 2),
        **prog.startup(),
        "a_drained": a_drained is not None,
        "a_completed_in_window": a_done,
        "window_s": round(window, 2) if window else None,
        "a_jobs_per_s": round((a_done - prog.bulk_at_first) / window) if window else None,
        "completed_at_first_poll": prog.bulk_at_first,
        "b_ran": len(first_runs),
        "b_ran_twice": repeats,
        "b_complete": end is not None,
        "b_due_before_all_partitions": sum(1 for d in due.values() if d < lo),
        "b_late": _late([r[2] for r in first_runs.values()]),
        "b_late_while_a_waited": _late(during),
        "b_late_while_a_waited_by_primary": _by_primary(client, queue, during_by_id),
        "b_seen_as": dict(Counter(f"{r[3]}/{r[4]}" for r in first_runs.values())),
        "keys_left": left,
    }


# --- report ----------------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _lat(d: dict[str, Any]) -> str:
    return f"{_fmt(d['p50_ms'])} / {_fmt(d['p99_ms'])} / {_fmt(d['max_ms'])} ms (n={d['jobs']})"


def _prio_line(r: dict[str, Any]) -> str:
    mode = "on " if r["lanes"] else "off"
    return (
        f"  priorities lanes {mode}: high trickle lateness p50/p99/max {_lat(r['high_late'])} "
        f"of {r['high_sent']} sent over {_fmt(r['trickle_s'])} s; backlog {r['backlog']:,} "
        f"drained at {_fmt(r['drain_jobs_per_s'])} jobs/s in {_fmt(r['drain_s'])} s "
        f"(enqueue {r['enqueue_s']} s; first completion {_fmt(r['first_completion_s'])} s, "
        f"every partition {_fmt(r['all_partitions_s'])} s after launch); "
        f"seen as {r['high_seen_as']}"
        + (f"; ran twice {r['high_ran_twice']}" if r["high_ran_twice"] else "")
        + ("" if r["drained"] else "; BACKLOG NOT DRAINED (timeout)")
        + (f"; KEYS LEFT {r['keys_left'][:5]}" if r["keys_left"] else "")
    )


def _fair_line(r: dict[str, Any]) -> str:
    mode = "on " if r["lanes"] else "off"
    return (
        f"  fairness   lanes {mode}: B lateness p50/p99/max {_lat(r['b_late'])}, "
        f"while A waited {_lat(r['b_late_while_a_waited'])}; A {_fmt(r['a_jobs_per_s'])} jobs/s "
        f"({r['a_completed_in_window']:,} in {_fmt(r['window_s'])} s, "
        f"{'drained' if r['a_drained'] else 'not drained when B finished'}; "
        f"enqueue {r['enqueue_a_s']} s; first completion {_fmt(r['first_completion_s'])} s, "
        f"every partition {_fmt(r['all_partitions_s'])} s after launch, "
        f"{r['b_due_before_all_partitions']} B due before); seen as {r['b_seen_as']}"
        + (f"; ran twice {r['b_ran_twice']}" if r["b_ran_twice"] else "")
        + ("" if r["b_complete"] else "; B NOT COMPLETE (timeout)")
        + (f"; KEYS LEFT {r['keys_left'][:5]}" if r["keys_left"] else "")
    )


METRICS: list[tuple[str, str, Callable[[dict[str, Any]], Any]]] = [
    ("priorities", "high lateness p50 ms", lambda r: r["high_late"]["p50_ms"]),
    ("priorities", "high lateness p99 ms", lambda r: r["high_late"]["p99_ms"]),
    ("priorities", "high lateness max ms", lambda r: r["high_late"]["max_ms"]),
    ("priorities", "backlog drain jobs/s", lambda r: r["drain_jobs_per_s"]),
    ("fairness", "B lateness p50 ms", lambda r: r["b_late"]["p50_ms"]),
    ("fairness", "B lateness p99 ms", lambda r: r["b_late"]["p99_ms"]),
    ("fairness", "B lateness max ms", lambda r: r["b_late"]["max_ms"]),
    ("fairness", "B (due while A waited) p50 ms", lambda r: r["b_late_while_a_waited"]["p50_ms"]),
    ("fairness", "B (due while A waited) p99 ms", lambda r: r["b_late_while_a_waited"]["p99_ms"]),
    ("fairness", "A jobs/s over the window", lambda r: r["a_jobs_per_s"]),
]


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part, name, get in METRICS:
        for mode in ("on", "off"):
            values = [get(r[part][mode]) for r in rounds]
            values = [v for v in values if v is not None]
            out.setdefault(name, {})[f"lanes_{mode}"] = (
                {"min": min(values), "max": max(values)} if values else None
            )
    return out


def _span(s: dict[str, Any] | None) -> str:
    if s is None:
        return "-"
    if s["min"] == s["max"]:
        return _fmt(s["min"])
    return f"{_fmt(s['min'])} - {_fmt(s['max'])}"


def table(summary: dict[str, Any], rounds: int) -> str:
    rows = [(name, _span(v["lanes_on"]), _span(v["lanes_off"])) for name, v in summary.items()]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len("lanes on"), *(len(r[1]) for r in rows))
    w2 = max(len("lanes off"), *(len(r[2]) for r in rows))
    lines = [
        f"min - max over {rounds} round{'s' if rounds != 1 else ''}:",
        f"{'':<{w0}}  {'lanes on':>{w1}}  {'lanes off':>{w2}}",
    ]
    lines += [f"{a:<{w0}}  {b:>{w1}}  {c:>{w2}}" for a, b, c in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7300")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--trickle-rate", type=float, default=20.0)
    parser.add_argument("--trickle-seconds", type=float, default=15.0)
    parser.add_argument("--tenant-a", type=int, default=500_000)
    parser.add_argument("--tenant-b", type=int, default=1_000)
    parser.add_argument("--spread", type=float, default=60.0)
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="longest backlog drain (priorities)"
    )
    parser.add_argument("--json", action="store_true", help="JSON on stdout, text on stderr")
    parser.add_argument("--out", default="", help="also write the JSON document here")
    args = parser.parse_args()

    def say(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    client = Client.from_url(args.url)
    say(
        f"lanes_lateness: {PARTITIONS} partitions, 1 dispatcher + {args.workers} workers "
        f"(concurrency {CONCURRENCY}); priorities: backlog {args.backlog:,}, high trickle "
        f"{args.trickle_rate:g}/s for up to {args.trickle_seconds:g} s; fairness: A "
        f"{args.tenant_a:,} due now, B {args.tenant_b:,} over {args.spread:g} s"
    )
    rounds: list[dict[str, Any]] = []
    t_all = time.monotonic()
    for rnd in range(1, args.rounds + 1):
        t0 = time.monotonic()
        cal = calibrate(args.url)
        say(f"round {rnd}: {calibration_line(cal)}")
        order = (True, False) if rnd % 2 else (False, True)
        row: dict[str, Any] = {"round": rnd, "calibration": cal, "priorities": {}, "fairness": {}}
        for lanes in order:
            r = priorities(client, args, lanes)
            row["priorities"]["on" if lanes else "off"] = r
            say(_prio_line(r))
        for lanes in order:
            r = fairness(client, args, lanes)
            row["fairness"]["on" if lanes else "off"] = r
            say(_fair_line(r))
        row["seconds"] = round(time.monotonic() - t0, 1)
        say(f"  round {rnd} took {row['seconds']} s")
        rounds.append(row)
    summary = summarize(rounds)
    say(table(summary, len(rounds)))
    say(f"total {time.monotonic() - t_all:.0f} s")
    client.close()
    doc = {
        "command": "python -m bench.lanes_lateness " + " ".join(sys.argv[1:]),
        "settings": {k: v for k, v in vars(args).items() if k not in ("json", "out")},
        "partitions": PARTITIONS,
        "worker_concurrency": CONCURRENCY,
        "rounds": rounds,
        "summary": summary,
    }
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    if args.out:
        with open(args.out, "wb") as f:
            f.write(data + b"\n")
        say(f"JSON written to {args.out}")
    if args.json:
        sys.stdout.write(data.decode() + "\n")


if __name__ == "__main__":
    main()
