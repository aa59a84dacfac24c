"""How fast the fleet recovers from a dead or paused process, with default settings.

    python -m bench.failover --url redis://127.0.0.1:7300 [--rounds 5] [--json]

Plain ``shardq dispatcher run`` / ``shardq worker run`` processes with default settings, one
queue of 64 partitions, a fresh queue per round, the kill at a random moment (``--seed``).

- ``worker-kill``: 3 workers hold 60 jobs that each run 30 s; one worker is SIGKILLed; figure:
  seconds from the kill until each of its jobs starts again elsewhere (bound: 5 s).  Jobs due
  in its partitions right after the kill: how late they run (bound: 5 s).
- ``dispatcher-kill`` / ``dispatcher-stop``: 3 dispatchers, jobs due steadily (500/s); one is
  SIGKILLed or SIGSTOPped; figure: the lateness of jobs due in its partitions in the 2 s after
  the signal, which is how long those partitions went without promotion (bound: 5 s); a
  stopped one is resumed at the end and must log ``lease.fenced``.
- ``dispatcher-restart``: one dispatcher with ``SHARDQ_INSTANCE`` set is SIGKILLed and started
  again at once with the same instance; figure: seconds from the restart until the first job
  due after it runs (bound: 2 s).

Every run prints a calibration line first (the server's name and version, this interpreter's CPU
loop, the node's ``redis-benchmark`` PING rate, the load average): the machine is shared, so
figures are compared within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import calibrate, calibration_line, pct
from shardq import Client, JobRequest
from shardq.dev.demo import cli_command
from shardq.store import keys

PARTITIONS = 64
BOUNDS = {
    "worker-kill": 5.0,
    "dispatcher-kill": 5.0,
    "dispatcher-stop": 5.0,
    "dispatcher-restart": 2.0,
}


class Proc:
    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - the process writes it
            prefix="bench-failover-", suffix=".log", delete=False
        )
        self.popen = subprocess.Popen(
            argv, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        self.log.close()

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def text(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(40)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.popen.wait()
        os.unlink(self.log.name)


def _log_time(record: dict[str, Any]) -> float:
    """Epoch seconds of a JSON log line (``timestamp``: ISO 8601 UTC; older lines: ``ts``)."""
    if "timestamp" in record:
        return datetime.fromisoformat(record["timestamp"]).timestamp()
    return float(record["ts"])


def dispatcher(url: str, queue: str, env: dict[str, str] | None = None) -> Proc:
    cmd = cli_command("dispatcher", "run", "--queue", queue, "--url", url)
    cmd[cmd.index("--log-level") + 1] = "INFO"
    return Proc(cmd, env)


def worker(url: str, queue: str, runlog: str, hold: float) -> Proc:
    env = {"SHARDQ_BENCH_RUNLOG": runlog, "SHARDQ_BENCH_HOLD": str(hold), "PYTHONPATH": HANDLERS}
    cmd = cli_command(
        "worker",
        "run",
        "--queue",
        queue,
        "--url",
        url,
        "--handlers",
        "shardq_runlog:register",
        "--concurrency",
        "200",
    )
    cmd[cmd.index("--log-level") + 1] = "INFO"
    return Proc(cmd, env)


ROOT = Path(__file__).resolve().parent.parent
# The handlers module lives on its own path entry, so a worker of another checkout (--code)
# imports it without that checkout's own bench package in the way.
HANDLERS = str(ROOT / "bench" / "handlers")


def read_runs(path: str) -> list[dict[str, Any]]:
    """Lines ``<job id> <attempt> <start epoch s> <lateness ms> <pid>``; none before the first
    job's handler created the file (a slow start on a loaded machine)."""
    out: list[dict[str, Any]] = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 5:
                out.append(
                    {
                        "id": parts[0],
                        "attempt": int(parts[1]),
                        "at": float(parts[2]),
                        "late_ms": float(parts[3]),
                        "pid": int(parts[4]),
                    }
                )
    return out


def wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def owners_of(client: Client, queue: str) -> list[str | None]:
    pipe = client.redis.pipeline(transaction=False)
    for pk in keys.all_partition_keys(queue, PARTITIONS):
        pipe.get(pk.lease)
    out: list[str | None] = []
    for value in pipe.execute():
        out.append(value.decode().split(":", 1)[1] if value else None)
    return out


def steady(client: Client, queue: str, start: float, seconds: float, rate: int) -> None:
    """Enqueue ``rate`` jobs per second due from ``start`` (epoch s) for ``seconds``."""
    n = int(seconds * rate)
    reqs = [JobRequest("tick", None, run_at=start + seconds * i / n) for i in range(n)]
    client.enqueue_many(queue, reqs)


def worker_kill(url: str, client: Client, rng: random.Random) -> dict[str, Any]:
    queue = f"fo-w-{int(time.time() * 1000)}"
    client.create_queue(queue, PARTITIONS)
    runlog = tempfile.mktemp(prefix="bench-failover-runs-")
    procs = [dispatcher(url, queue)] + [worker(url, queue, runlog, 30.0) for _ in range(3)]
    try:
        time.sleep(2.0)
        held = [client.enqueue(queue, "hold", i) for i in range(60)]
        wait(lambda: len(read_runs(runlog)) >= 60, 30, "60 jobs started")
        time.sleep(rng.uniform(0.0, 2.0))
        by_pid: dict[int, list[str]] = {}
        for run in read_runs(runlog):
            by_pid.setdefault(run["pid"], []).append(run["id"])
        victim_pid = max(by_pid, key=lambda p: len(by_pid[p]))
        victim = next(p for p in procs if p.popen.pid == victim_pid)
        mine = set(by_pid[victim_pid])
        killed = time.time()
        victim.signal(signal.SIGKILL)
        steady(client, queue, killed + 0.2, 6.0, 200)

        def rerun() -> bool:
            return sum(1 for r in read_runs(runlog) if r["attempt"] == 2) >= len(mine)

        wait(rerun, 60, "the victim's jobs to run again")
        time.sleep(7.0)
        runs = read_runs(runlog)
        restarts = [r["at"] - killed for r in runs if r["attempt"] == 2 and r["id"] in mine]
        gone_seen = [
            _log_time(json.loads(line)) - killed
            for p in procs
            if p is not victim
            for line in p.text().splitlines()
            if '"event":"member.gone"' in line
        ]
        # Ticks due after the kill in the victim's assigned partitions wait for reassignment;
        # all ticks are reported (the others are on time).
        ticks = [r["late_ms"] / 1000 for r in runs if r["id"] not in held]
        return {
            "gone_seen_s": [round(x, 3) for x in gone_seen],
            "held": len(mine),
            "restart_s": [round(x, 3) for x in restarts],
            "due_after_kill_late_s": [round(x, 3) for x in ticks],
        }
    finally:
        for p in procs:
            p.stop()
        if os.path.exists(runlog):
            os.unlink(runlog)


def dispatcher_signal(url: str, client: Client, rng: random.Random, how: int) -> dict[str, Any]:
    queue = f"fo-d-{int(time.time() * 1000)}"
    client.create_queue(queue, PARTITIONS)
    runlog = tempfile.mktemp(prefix="bench-failover-runs-")
    ds = [dispatcher(url, queue) for _ in range(3)]
    w = worker(url, queue, runlog, 0.0)
    try:
        wait(
            lambda: (
                None not in owners_of(client, queue) and len(set(owners_of(client, queue))) == 3
            ),
            30,
            "three dispatchers sharing the partitions",
        )
        start = time.time() + 1.0
        steady(client, queue, start, 12.0, 500)
        time.sleep(1.0 + rng.uniform(2.0, 5.0))
        victim = rng.choice(ds)
        owners = owners_of(client, queue)
        victim_owner = next(o for o in owners if o and f":{victim.popen.pid}#" in o)
        mine = {p for p, o in enumerate(owners) if o == victim_owner}
        signalled = time.time()
        victim.signal(how)
        wait(lambda: victim_owner not in owners_of(client, queue), 60, "takeover")
        taken = time.time() - signalled
        wait(lambda: len(read_runs(runlog)) >= 6000, 60, "every job to run")
        runs = read_runs(runlog)
        fenced = None
        if how == signal.SIGSTOP:
            victim.signal(signal.SIGCONT)
            wait(lambda: "lease.fenced" in victim.text(), 30, "the resumed dispatcher to be fenced")
            fenced = True
        ids = {r["id"] for r in runs}
        # Jobs due in the victim's partitions within 2 s after the signal.
        late = []
        for r in runs:
            due_s = r["at"] - r["late_ms"] / 1000
            if (
                signalled <= due_s <= signalled + 2
                and keys.partition_for(r["id"], PARTITIONS) in mine
            ):
                late.append(r["late_ms"] / 1000)
        return {
            "partitions": len(mine),
            "takeover_s": [round(taken, 3)],
            "late_s": [round(x, 3) for x in late],
            "fenced_on_resume": fenced,
            "ran": len(ids),
        }
    finally:
        for p in [*ds, w]:
            p.stop()
        if os.path.exists(runlog):
            os.unlink(runlog)


def dispatcher_restart(url: str, client: Client, rng: random.Random) -> dict[str, Any]:
    queue = f"fo-r-{int(time.time() * 1000)}"
    client.create_queue(queue, PARTITIONS)
    runlog = tempfile.mktemp(prefix="bench-failover-runs-")
    env = {"SHARDQ_INSTANCE": f"bench-{queue}"}
    first = dispatcher(url, queue, env)
    w = worker(url, queue, runlog, 0.0)
    second: Proc | None = None
    try:
        wait(lambda: None not in owners_of(client, queue), 30, "the dispatcher holding all")
        time.sleep(rng.uniform(0.5, 2.0))
        first.signal(signal.SIGKILL)
        restarted = time.time()
        second = dispatcher(url, queue, env)
        steady(client, queue, restarted + 0.05, 4.0, 500)
        wait(lambda: len(read_runs(runlog)) >= 2000, 60, "every job to run")
        runs = read_runs(runlog)
        first_run = min(r["at"] for r in runs) - restarted
        late = [r["late_ms"] / 1000 for r in runs]
        return {
            "first_job_after_restart_s": [round(first_run, 3)],
            "late_s": [round(x, 3) for x in late],
        }
    finally:
        for p in [first, w, *([second] if second else [])]:
            p.stop()
        if os.path.exists(runlog):
            os.unlink(runlog)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--url", default=os.environ.get("SHARDQ_BENCH_URL", "redis://127.0.0.1:7300"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument(
        "--only", default="worker-kill,dispatcher-kill,dispatcher-stop,dispatcher-restart"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    cal = calibrate(args.url)
    say = (lambda s: print(s, file=sys.stderr)) if args.json else print
    say(f"calibration: {calibration_line(cal)}")
    say(f"seed {seed} (--seed repeats the kill timing), {args.rounds} rounds, default settings")
    report = run(args.url, args.rounds, seed, args.only.split(","), say)
    report["calibration"] = cal
    say(summary(report))
    if args.json:
        print(json.dumps(report))


def run(url: str, rounds_n: int, seed: int, only: list[str], say: Any = None) -> dict[str, Any]:
    """Every scenario's rounds, as the bench suite's ``failover`` section runs them."""
    rng = random.Random(seed)
    client = Client.from_url(url)
    args = argparse.Namespace(url=url)
    scenarios = {
        "worker-kill": lambda: worker_kill(args.url, client, rng),
        "dispatcher-kill": lambda: dispatcher_signal(args.url, client, rng, signal.SIGKILL),
        "dispatcher-stop": lambda: dispatcher_signal(args.url, client, rng, signal.SIGSTOP),
        "dispatcher-restart": lambda: dispatcher_restart(args.url, client, rng),
    }
    report: dict[str, Any] = {"seed": seed, "bounds_s": BOUNDS, "scenarios": {}}
    for name in only:
        rounds = []
        for i in range(rounds_n):
            result = scenarios[name]()
            rounds.append(result)
            if say is not None:
                say(f"{name} round {i + 1}: {brief(result)}")
        report["scenarios"][name] = rounds
    client.close()
    return report


FIGURES = {
    "worker-kill": ["restart_s", "due_after_kill_late_s"],
    "dispatcher-kill": ["late_s", "takeover_s"],
    "dispatcher-stop": ["late_s", "takeover_s"],
    "dispatcher-restart": ["first_job_after_restart_s", "late_s"],
}


def brief(result: dict[str, Any]) -> str:
    """A round's figures: lists as max/p50 and their count."""
    parts = []
    for key, value in result.items():
        if isinstance(value, list):
            if value:
                parts.append(
                    f"{key} max {max(value):.2f} p50 {pct(value, 0.5):.2f} (n={len(value)})"
                )
        else:
            parts.append(f"{key} {value}")
    return ", ".join(parts)


def summary(report: dict[str, Any]) -> str:
    """Max and p50 of every figure over all rounds' samples, against its bound."""
    rounds_n = max((len(r) for r in report["scenarios"].values()), default=0)
    lines = [
        "",
        f"over {rounds_n} round(s): scenario, figure, max, p50, bound",
    ]
    for name, rounds in report["scenarios"].items():
        for fig in FIGURES[name]:
            values = [x for r in rounds for x in r.get(fig, [])]
            if not values:
                continue
            bound = report["bounds_s"][name]
            ok = "ok" if max(values) <= bound else "OVER"
            lines.append(
                f"{name:<19} {fig:<26} max {max(values):>6.2f} s  p50 {pct(values, 0.5):>6.2f} s"
                f"  bound {bound:.0f} s {ok}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
