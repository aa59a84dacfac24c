"""One primary paused while jobs come due on all of them: do the others keep flowing?

    python -m bench.pause --url redis://127.0.0.1:7300 [--rate 5000] [--pause 3] [--rounds 3]
                          [--mode all|write|sleep] [--code DIR] [--json]

A queue of 64 partitions, one ``shardq dispatcher run`` and one ``shardq worker run`` with
default settings, jobs due at ``--rate`` per second for 14 s.  Four seconds in, the primary
holding partition 0 is stalled for ``--pause`` seconds, as ``--mode`` says (BRIEF §7: they stall
a primary in different ways, and isolation must hold for each):

- ``all``: ``CLIENT PAUSE <ms> ALL``: every command waits (connections are accepted);
- ``write``: ``CLIENT PAUSE <ms> WRITE``: reads are served, writes (and scripts that may
  write, every FCALL of shardq's) wait;
- ``sleep``: ``DEBUG SLEEP <s>``: the whole node is blocked, nothing answers at all.

Reported per round:

- lateness p50/p99/max of jobs on the *other* primaries that came due during the pause (they
  should not notice it);
- for jobs on the paused primary that came due during the pause: how long after the pause
  ended the last of them ran (catch-up), and their lateness.

``--code DIR`` runs the dispatcher and worker from another checkout's ``shardq`` package (the
same bench and handlers), to compare two versions side by side in one session.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis as redis_lib

from bench.common import calibrate, calibration_line, pct
from bench.failover import HANDLERS, ROOT, read_runs, wait
from shardq import Client, JobRequest
from shardq.dev.demo import cli_command
from shardq.store import keys

PARTITIONS = 64


def start(url: str, queue: str, runlog: str, code: str | None) -> list[Any]:
    import subprocess

    path = os.pathsep.join(p for p in (code, HANDLERS) if p)
    env = {**os.environ, "SHARDQ_BENCH_RUNLOG": runlog, "PYTHONPATH": path}
    base = ["--queue", queue, "--url", url]
    argv = [
        cli_command("dispatcher", "run", *base),
        cli_command(
            "worker",
            "run",
            *base,
            "--handlers",
            "shardq_runlog:register",
            "--concurrency",
            "1000",
        ),
    ]
    return [subprocess.Popen(a, env=env, cwd=code or ROOT) for a in argv]


MODES = ("all", "write", "sleep")


def stall(host: str, port: int, mode: str, seconds: float) -> None:
    """Stall one node for ``seconds`` as ``mode`` says; returns at once (DEBUG SLEEP, which
    blocks its own connection, is sent from a thread)."""
    if mode == "sleep":
        import threading

        def sleep() -> None:
            with redis_lib.Redis(host=host, port=port) as r:
                r.execute_command("DEBUG", "SLEEP", seconds)

        threading.Thread(target=sleep, daemon=True).start()
        return
    with redis_lib.Redis(host=host, port=port) as r:
        r.execute_command("CLIENT", "PAUSE", int(seconds * 1000), mode.upper())


def one_round(
    url: str, rate: int, pause_s: float, code: str | None, mode: str = "all"
) -> dict[str, Any]:
    client = Client.from_url(url)
    queue = f"pause-{int(time.time() * 1000)}"
    client.create_queue(queue, PARTITIONS)
    runlog = tempfile.mktemp(prefix="bench-pause-runs-")
    procs = start(url, queue, runlog, code)
    try:
        time.sleep(2.5)
        t0 = time.time() + 1.0
        seconds = 14.0
        n = int(rate * seconds)
        for s in range(0, n, 20_000):
            client.enqueue_many(
                queue,
                [
                    JobRequest("tick", None, run_at=t0 + seconds * i / n)
                    for i in range(s, min(n, s + 20_000))
                ],
            )
        manager = client.redis.nodes_manager  # type: ignore[union-attr]
        paused = manager.get_node_from_slot(
            keys.slot_of(keys.partition_keys(queue, 0, PARTITIONS).due)
        )
        node_of = {
            p: manager.get_node_from_slot(keys.slot_of(pk.due)).name
            for p, pk in enumerate(keys.all_partition_keys(queue, PARTITIONS))
        }
        while time.time() < t0 + 3.0:
            time.sleep(0.01)
        pause_at = time.time()
        stall(paused.host, paused.port, mode, pause_s)
        pause_end = pause_at + pause_s
        wait(lambda: len(read_runs(runlog)) >= n, 120, "every job to run")
        runs = read_runs(runlog)
        others, mine, catch_up = [], [], []
        for r in runs:
            due = r["at"] - r["late_ms"] / 1000
            if not pause_at <= due <= pause_end:
                continue
            if node_of[keys.partition_for(r["id"], PARTITIONS)] == paused.name:
                mine.append(r["late_ms"])
                catch_up.append(r["at"] - pause_end)
            else:
                others.append(r["late_ms"])
        return {
            "mode": mode,
            "jobs": n,
            "ran": len({r["id"] for r in runs}),
            "others_late_ms": {
                "p50": pct(others, 0.5),
                "p99": pct(others, 0.99),
                "max": round(max(others), 1) if others else None,
                "n": len(others),
            },
            "paused_node_late_ms": {
                "p50": pct(mine, 0.5),
                "p99": pct(mine, 0.99),
                "max": round(max(mine), 1) if mine else None,
                "n": len(mine),
            },
            "paused_node_caught_up_s_after_pause": round(max(catch_up), 3) if catch_up else None,
        }
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
        if os.path.exists(runlog):
            os.unlink(runlog)
        client.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--url", default=os.environ.get("SHARDQ_BENCH_URL", "redis://127.0.0.1:7300"))
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--pause", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", choices=MODES, default="all", help="how the primary is stalled")
    ap.add_argument("--code", default=None, help="run shardq from this checkout instead")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    code = str(Path(args.code).resolve()) if args.code else None
    say = (lambda s: print(s, file=sys.stderr)) if args.json else print
    cal = calibrate(args.url)
    say(f"calibration: {calibration_line(cal)}")
    say(
        f"{args.rate} jobs/s, one primary stalled {args.pause} s ({args.mode}),"
        f" code {code or 'this checkout'}"
    )
    report = run(args.url, args.rate, args.pause, args.rounds, code, say, args.mode)
    report["calibration"] = cal
    if args.json:
        print(json.dumps(report))


def describe(i: int, r: dict[str, Any]) -> str:
    o, m = r["others_late_ms"], r["paused_node_late_ms"]
    return (
        f"round {i + 1} ({r.get('mode', 'all')}): other primaries p50 {o['p50']} ms"
        f" p99 {o['p99']} ms max {o['max']} ms"
        f" (n={o['n']}); paused primary caught up {r['paused_node_caught_up_s_after_pause']} s"
        f" after the pause, its jobs p99 {m['p99']} ms; ran {r['ran']}/{r['jobs']}"
    )


def run(
    url: str,
    rate: int,
    pause_s: float,
    rounds: int,
    code: str | None = None,
    say: Any = None,
    mode: str = "all",
) -> dict[str, Any]:
    """The rounds, as the bench suite's ``pause`` section runs them."""
    out = []
    for i in range(rounds):
        r = one_round(url, rate, pause_s, code, mode)
        out.append(r)
        if say is not None:
            say(describe(i, r))
    return {"rate": rate, "pause_s": pause_s, "mode": mode, "code": code, "rounds": out}


if __name__ == "__main__":
    main()
