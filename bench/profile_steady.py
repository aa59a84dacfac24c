"""Where Redis' time goes in shardq's steady state: calls and Redis time per job, by script.

    python -m bench.profile_steady [--rate 5000] [--seconds 10] [--budget MS] [--py-spy]
        [--url redis://127.0.0.1:7338]

The consumer of bench/baselines/steady.py (`shardq dispatcher run` + `shardq worker run
--concurrency 100`, CLI defaults, 64 partitions) on a standalone Redis of its own (7338 unless
``--url``), ``rate * seconds`` jobs due evenly over ``--seconds`` seconds, enqueued ahead.
Redis logs every command of the due window (``slowlog-log-slower-than 0``: this costs Redis
time of its own, so the CPU figures of bench/baselines/steady.py are measured without it).
The report: per script (``FCALL <function>``), calls per job, mean µs per call and µs per job
(the slow log's durations); every command per job, in scripts or not (``INFO commandstats``
deltas: TYPE checks, XADD, SPUBLISH hints...); the window's lateness p50/p99.

``--budget MS`` runs both processes with that lateness budget (SHARDQ_LATENESS_BUDGET; the
default otherwise).  ``--py-spy`` (needs ``pip install py-spy``) also samples the dispatcher
and the worker for the middle of the window and reports their Python CPU by component: each
sample is charged to the innermost shardq module on its stack (``event loop`` when none is:
asyncio's own work, socket writes and reads; the handler is bench/handlers).  Sampling costs
the processes a little CPU of its own, so it is off by default.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis as redis_lib

from bench.baselines import shardq_consumer
from bench.baselines.scenarios import RunLogs
from bench.baselines.steady import PARTITIONS, PAYLOAD, SETTLE, Consumer
from bench.common import calibrate, calibration_line, pct
from shardq.dev.devcluster import standalone_down, standalone_up

PORT = 7338
LOG_LEN = 2_000_000


def _commandstats(r: redis_lib.Redis) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}


def _name(args: list[Any]) -> str:
    words = [a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in args]
    if not words:
        return "?"
    head = words[0].lower()
    if head in ("fcall", "fcall_ro") and len(words) > 1:
        return f"{head} {words[1]}"
    return head


def _component(frame_path: str) -> str | None:
    """The shardq (or bench) module of a py-spy frame's file, or None."""
    for root in ("shardq/", "bench/"):
        at = frame_path.rfind("/" + root)
        if at >= 0 or frame_path.startswith(root):
            return frame_path[at + 1 if at >= 0 else 0 :]
    return None


_FRAME = re.compile(r"^(.*) \((.*):\d+\)$")


def _waiting(stack: str) -> bool:
    """A sample of the event loop waiting in epoll (py-spy counts it as running)."""
    # py-spy names it "select (selectors.py:..)" or, newer, "EpollSelector.select (...)".
    leaf = stack.rsplit(";", 1)[-1]
    return leaf.startswith(("select (selectors.py", "EpollSelector.select (selectors.py"))


def _busy(raw: str) -> Iterator[tuple[str, int]]:
    """(stack, samples) of a py-spy ``--format raw`` profile (one ``frame;frame;... count``
    line per stack), waits in epoll left out."""
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit() and not _waiting(stack):
            yield stack, int(n)


def busy_samples(raw: str) -> int:
    """Samples of a py-spy raw profile not spent waiting in epoll."""
    return sum(n for _, n in _busy(raw))


def _shares(counts: Counter[str], top: int | None = None) -> dict[str, float]:
    total = sum(counts.values())
    return {k: round(v / total, 3) for k, v in counts.most_common(top)} if total else {}


def components(raw: str) -> dict[str, float]:
    """Shares of the busy samples by the innermost shardq/bench module on each stack."""
    counts: Counter[str] = Counter()
    for stack, n in _busy(raw):
        name = "event loop"
        for frame in reversed(stack.split(";")):
            m = _FRAME.match(frame)
            module = _component(m.group(2)) if m else None
            if module is not None and not module.startswith("shardq/cli/"):
                name = module
                break
        counts[name] += n
    return _shares(counts)


def hot_frames(raw: str, top: int = 10) -> dict[str, float]:
    """Shares of the busy samples by the innermost frame (``function (file)``, the file cut to
    its last two parts): where the time goes below the components, e.g. inside "event loop"."""
    counts: Counter[str] = Counter()
    for stack, n in _busy(raw):
        leaf = stack.rsplit(";", 1)[-1]
        m = _FRAME.match(leaf)
        counts[f"{m.group(1)} ({'/'.join(m.group(2).split('/')[-2:])})" if m else leaf] += n
    return _shares(counts, top)


def _spy(pids: dict[str, int], seconds: float, workdir: Path) -> dict[str, subprocess.Popen[bytes]]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return {
        role: subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--duration", str(max(1, int(seconds))),
             "--rate", "200", "--format", "raw", "--nonblocking",
             "--output", str(workdir / f"{role}.spy")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for role, pid in pids.items()
    }  # fmt: skip


def profile(
    url: str,
    rate: int,
    seconds: float,
    budget_ms: float | None = None,
    py_spy: bool = False,
    id_kind: str = "generated",
) -> dict[str, Any]:
    r = redis_lib.Redis.from_url(url)
    queue = f"profile-{secrets.token_hex(4)}"
    client = shardq_consumer.connect(url)
    client.create_queue(queue, PARTITIONS)
    workdir = Path(tempfile.mkdtemp(prefix="shardq-profile-"))
    consumer = Consumer("shardq", url, queue, workdir / "runs.log", budget_ms)
    logs = RunLogs(workdir)
    old = r.config_get("slowlog-*")
    try:
        time.sleep(SETTLE)
        n = int(rate * seconds)
        base_ms = int((time.time() + 1.0 + n / 40_000) * 1000)
        jobs = [(secrets.token_hex(6), base_ms + int(i * seconds * 1000 / n)) for i in range(n)]
        if id_kind == "generated":  # as bench/baselines/steady.py: ids (and routing) shardq's
            dues = [d for _, d in jobs]
            made = shardq_consumer.produce_generated(client, queue, dues, PAYLOAD)
            jobs = list(zip(made, dues, strict=True))
        else:
            shardq_consumer.produce(client, queue, jobs, PAYLOAD)
        time.sleep(max(0.0, base_ms / 1000 - time.time()))
        r.config_set("slowlog-max-len", LOG_LEN)
        r.config_set("slowlog-log-slower-than", 0)
        r.slowlog_reset()
        stats0 = _commandstats(r)
        spies = {}
        if py_spy:
            pids = dict(zip(("dispatcher", "worker"), (p.pid for p in consumer.procs), strict=True))
            time.sleep(seconds * 0.2)
            spies = _spy(pids, seconds * 0.6, workdir)
            time.sleep(seconds * 0.8 + 0.5)
        else:
            time.sleep(seconds + 0.5)
        python: dict[str, Any] = {}
        for role, spy in spies.items():
            spy.wait(30)
            out = workdir / f"{role}.spy"
            raw = out.read_text() if out.exists() else ""
            samples = busy_samples(raw)
            python[role] = {
                "busy_share_of_a_core": round(samples / (200 * max(1, int(seconds * 0.6))), 3),
                "by_component": components(raw),
                "hot_frames": hot_frames(raw),
            }
        r.config_set("slowlog-log-slower-than", old.get("slowlog-log-slower-than", 10000))
        stats1 = _commandstats(r)
        entries = r.slowlog_get(LOG_LEN)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(logs.runs) < n:
            logs.read()
            time.sleep(0.2)
        calls: Counter[str] = Counter()
        usec: Counter[str] = Counter()
        for e in entries:
            command = e.get("command", b"")  # redis-py joins the arguments with spaces
            name = _name(command.split() if isinstance(command, bytes) else str(command).split())
            calls[name] += 1
            usec[name] += int(e["duration"])
        for name in ("config", "slowlog", "info"):  # this profiler's own calls
            calls.pop(name, None)
            usec.pop(name, None)
        inside = {
            k: stats1.get(k, 0) - stats0.get(k, 0)
            for k in stats1
            if stats1.get(k, 0) - stats0.get(k, 0) > 0
            and k not in ("fcall", "fcall_ro", "config|set", "slowlog|get", "slowlog|reset", "info")
        }
        late = list(logs.first_late.values())
        # The slow log holds the commands a script runs as entries of their own too (their
        # time inside the script's), so only the FCALLs are summed; every command (in a script
        # or not: the roles send few plain ones) is counted apart.
        top = [k for k in calls if k.startswith("fcall")]
        rows = [
            {
                "call": name,
                "calls_per_job": round(calls[name] / n, 4),
                "us_per_call": round(usec[name] / calls[name], 1),
                "us_per_job": round(usec[name] / n, 2),
            }
            for name in sorted(top, key=lambda k: -usec[k])
        ]
        return {
            "rate": rate,
            "jobs": n,
            "ran": len(logs.runs),
            "calls_per_job": round(sum(calls[k] for k in top) / n, 3),
            "us_per_job": round(sum(usec[k] for k in top) / n, 1),
            "by_call": rows,
            "commands_per_job": {k: round(v / n, 3) for k, v in sorted(inside.items())},
            "lateness_ms": {"p50": pct(late, 0.5), "p99": pct(late, 0.99)},
            "budget_ms": budget_ms,
            "python": python,
        }
    finally:
        consumer.stop()
        r.config_set("slowlog-log-slower-than", old.get("slowlog-log-slower-than", 10000))
        r.config_set("slowlog-max-len", old.get("slowlog-max-len", 128))
        r.slowlog_reset()
        shardq_consumer.cleanup(client, queue)
        client.close()
        r.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile_steady", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--url", default="")
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--budget", type=float, default=None, help="lateness budget, ms")
    parser.add_argument("--py-spy", action="store_true", help="Python CPU by component too")
    parser.add_argument(
        "--ids",
        choices=("generated", "given"),
        default="generated",
        help="job ids generated by shardq's enqueue (its sticky routing and compact waiting "
        "jobs; the default, as bench/baselines/steady.py) or the harness's own",
    )
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    url = args.url
    if not url:
        standalone_down(PORT)
        url = standalone_up(PORT)
    try:
        cal = calibrate(url)
        print(f"calibration: {calibration_line(cal)}", file=sys.stderr)
        doc = profile(url, args.rate, args.seconds, args.budget, args.py_spy, args.ids)
        doc["calibration"] = cal
        doc["command"] = " ".join(["python -m bench.profile_steady", *sys.argv[1:]])
        doc["date"] = time.strftime("%Y-%m-%d")
        print(
            f"{doc['jobs']:,} jobs at {doc['rate']:,}/s: {doc['calls_per_job']} calls/job, "
            f"{doc['us_per_job']} µs/job of Redis time in them (slow log); "
            f"lateness {doc['lateness_ms']}"
        )
        print("| script call | calls/job | µs/call | µs/job |\n|---|---|---|---|")
        for row in doc["by_call"]:
            cells = (row["call"], row["calls_per_job"], row["us_per_call"], row["us_per_job"])
            print("| " + " | ".join(str(c) for c in cells) + " |")
        print("commands per job (in scripts or not):", json.dumps(doc["commands_per_job"]))
        for role, spied in doc["python"].items():
            shares = ", ".join(
                f"{k} {v:.0%}" for k, v in spied["by_component"].items() if v >= 0.01
            )
            print(f"{role} Python, {spied['busy_share_of_a_core']:.0%} of a core busy: {shares}")
            hot = ", ".join(f"{k} {v:.0%}" for k, v in spied["hot_frames"].items())
            print(f"  {role} innermost frames: {hot}")
        if args.out:
            Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    finally:
        if not args.url:
            standalone_down(PORT)


if __name__ == "__main__":
    main()
