"""Put shardq and the two baselines through the same scenarios, side by side.

Scenarios (each: ``jobs`` jobs, due times spread evenly over ``spread`` seconds):

- ``steady``: one consumer throughout (the control);
- ``restart``: one consumer, killed with SIGKILL at 30 % of the spread and started again at 55 %;
- ``two-consumers``: two consumers throughout;
- ``backlog``: every job due at one instant, the consumer started one second after it (a large
  overdue backlog);
- ``burst`` (not in :data:`SCENARIOS`, the drain comparison runs it): every job due at one
  instant, the consumer running before the enqueue starts (a due burst).

Every consumer runs as its own process and appends one line per handler run to a run log
(:mod:`bench.baselines.record`); the harness counts the lines per job id.  Reported per run:
jobs not run by the end and how many of those are still stored where the design would still run
them (``will_still_run``), so ``lost`` = not run and never will be; ``duplicates`` = handler runs
beyond the first; lateness p50/p99/max of each job's first run (handler start minus due time);
each consumer process' peak RSS; and the seconds the scenario took.  In ``backlog`` and
``burst`` also the drain rate: jobs run / (last first-run start - first first-run start), each
start being due time + lateness from the run log (:mod:`bench.baselines.drain`).

The run ends when every job ran, or, after the last due time, when nothing new ran for the
design's quiet period (shardq: lease + visibility timeout + 2 s, so a killed consumer's
deliveries are reclaimed; BullMQ: lock duration + stalled-check interval + 2 s, so a killed
worker's active jobs are found stalled and run again; the two home-made baselines never
redeliver: 2 s) and the design holds no job it would still run (or nothing ran for 30 s), or
after ``timeout``.
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.baselines import bullmq_node, shardq_consumer, ttl_timer, zpoller
from bench.common import REPO, pct, peak_rss_mb

DESIGNS: dict[str, ModuleType] = {
    "ttl-timer": ttl_timer,
    "zset-poller": zpoller,
    "shardq": shardq_consumer,
    "ttl-timer-claim": ttl_timer,  # HDEL as an atomic claim before running
    "bullmq": bullmq_node,  # Node.js, bench/baselines/bullmq/ (needs node and npm)
    # shardq's consumer from another revision of this repository (ScenarioConfig.reference):
    # the same data layout, so the jobs are produced by this checkout's client.
    "shardq-ref": shardq_consumer,
}
DESIGN_ARGS: dict[str, list[str]] = {"ttl-timer-claim": ["--claim"]}
MAIN_DESIGNS = ("ttl-timer", "zset-poller", "shardq")
SCENARIOS = ("steady", "restart", "two-consumers", "backlog")
ALL_SCENARIOS = (*SCENARIOS, "burst")
DRAIN_SCENARIOS = ("backlog", "burst")  # every job due at one instant
STUCK = 30.0  # seconds without a run after which a consumer holding jobs counts as stuck


@dataclass
class ScenarioConfig:
    jobs: int = 20_000
    spread: float = 8.0
    payload_bytes: int = 20
    timeout: float = 90.0
    shardq_lease: float = 3.0
    shardq_visibility: float = 5.0
    # BullMQ's Worker: jobs in flight, lock duration, stalled-check interval (BullMQ's defaults
    # are 1, 30 s and 30 s; shorter here, like shardq's lease and visibility timeout above)
    bullmq_concurrency: int = 100
    bullmq_lock: float = 5.0
    bullmq_stalled_interval: float = 5.0
    # seconds from the start of the enqueue to the first due time (None: 1 + jobs / 20,000)
    lead: float | None = None
    # a checkout of another revision (bench.baselines.reference) whose consumer "shardq-ref" runs
    reference: Path | None = None
    extra_args: dict[str, list[str]] = field(default_factory=dict)

    def quiet(self, design: str) -> float:
        if design in ("shardq", "shardq-ref"):
            return self.shardq_lease + self.shardq_visibility + 2.0
        if design == "bullmq":
            return self.bullmq_lock + self.bullmq_stalled_interval + 2.0
        return 2.0

    def lead_seconds(self) -> float:
        return 1.0 + self.jobs / 20_000 if self.lead is None else self.lead


class Consumer:
    """One consumer process of a design."""

    def __init__(
        self,
        design: str,
        url: str,
        prefix: str,
        out: Path,
        args: list[str],
        root: Path = REPO,
    ) -> None:
        module = DESIGNS[design].__name__
        cmd = [sys.executable, "-m", module, "--url", url, "--prefix", prefix, "--out", str(out)]
        if DESIGNS[design] is bullmq_node:
            cmd = bullmq_node.consumer_argv(url, prefix, str(out))
        env = dict(os.environ)
        # root first: a reference checkout's own shardq, not the installed one
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(cmd + args, cwd=root, env=env, stdout=subprocess.PIPE)
        self.peak_mb = 0.0

    def wait_ready(self, timeout: float = 20.0) -> None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self.kill()
            raise RuntimeError(f"consumer {self.proc.args!r} did not start")

    def sample(self) -> None:
        if self.proc.poll() is None:
            self.peak_mb = max(self.peak_mb, peak_rss_mb(self.proc.pid))

    def kill(self) -> None:
        self.sample()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        self.sample()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class RunLogs:
    """Reads every run log in a directory incrementally.

    :meth:`read` only counts the new lines (``lines``); they are parsed when ``runs`` or
    ``first_late`` is read, so the harness' polling costs little CPU while a consumer drains
    (on a 2-core box it competes with the consumer and Redis)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.offsets: dict[Path, int] = {}
        self.lines = 0
        self._pending: list[bytes] = []
        self._runs: Counter[str] = Counter()
        self._first_late: dict[str, float] = {}
        self.last_change = time.monotonic()

    def read(self) -> None:
        for path in sorted(self.directory.glob("*.log")):
            with path.open("rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1
            if end == 0:
                continue
            self.offsets[path] = self.offsets.get(path, 0) + end
            self.last_change = time.monotonic()
            self.lines += data.count(b"\n", 0, end)
            self._pending.append(data[:end])

    def _parse(self) -> None:
        for chunk in self._pending:
            for line in chunk.splitlines():
                job_id, late = line.decode().split()
                self._runs[job_id] += 1
                self._first_late.setdefault(job_id, float(late))
        self._pending.clear()

    @property
    def runs(self) -> Counter[str]:
        """Handler runs per job id."""
        self._parse()
        return self._runs

    @property
    def first_late(self) -> dict[str, float]:
        """Lateness (ms) of each job's first run."""
        self._parse()
        return self._first_late


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


def will_still_run(design: str, handle: Any, prefix: str) -> int:
    """Jobs not run yet that the design still holds a trigger for."""
    if DESIGNS[design] is ttl_timer:
        return sum(1 for _ in handle.scan_iter(f"{prefix}:timer:*", count=1000))
    return int(DESIGNS[design].leftover(handle, prefix))


def run_scenario(design: str, scenario: str, url: str, cfg: ScenarioConfig) -> dict[str, Any]:
    if scenario not in ALL_SCENARIOS:
        raise ValueError(f"scenario {scenario!r}: one of {ALL_SCENARIOS}")
    mod = DESIGNS[design]
    prefix = f"bl-{scenario}-{secrets.token_hex(4)}"
    handle = mod.connect(url)
    mod.setup(handle, prefix)
    workdir = Path(tempfile.mkdtemp(prefix="shardq-baseline-"))
    logs = RunLogs(workdir)
    consumers: list[Consumer] = []
    args = DESIGN_ARGS.get(design, []) + cfg.extra_args.get(design, [])
    root = REPO
    if design == "shardq-ref":
        if cfg.reference is None:
            raise ValueError("design shardq-ref needs ScenarioConfig.reference (a checkout)")
        root = cfg.reference
    if design in ("shardq", "shardq-ref"):
        args = [*args, "--lease", str(cfg.shardq_lease), "--visibility", str(cfg.shardq_visibility)]
    if design == "bullmq":
        args = [
            "--concurrency",
            str(cfg.bullmq_concurrency),
            "--lock-ms",
            str(int(cfg.bullmq_lock * 1000)),
            "--stalled-ms",
            str(int(cfg.bullmq_stalled_interval * 1000)),
            *args,
        ]

    def start() -> Consumer:
        c = Consumer(design, url, prefix, workdir / f"c{len(consumers)}.log", args, root)
        consumers.append(c)
        c.wait_ready()
        logs.last_change = time.monotonic()
        return c

    t0 = time.time()
    try:
        if scenario != "backlog":
            start()  # burst included: the consumer is waiting when the jobs come due
        if scenario == "two-consumers":
            start()
        base_ms = int((time.time() + cfg.lead_seconds()) * 1000)
        step = 0.0 if scenario in DRAIN_SCENARIOS else cfg.spread * 1000 / cfg.jobs
        jobs = [(secrets.token_hex(6), base_ms + int(i * step)) for i in range(cfg.jobs)]
        body = "x" * cfg.payload_bytes
        t_produce = time.time()
        mod.produce(handle, prefix, jobs, body)
        produced = time.time()
        produced_late = produced * 1000 > base_ms
        first_due = base_ms / 1000
        last_due = jobs[-1][1] / 1000
        if scenario == "restart":
            _sleep_until(first_due + 0.30 * cfg.spread)
            consumers[0].kill()
            _sleep_until(first_due + 0.55 * cfg.spread)
            start()
        elif scenario == "backlog":
            _sleep_until(first_due + 1.0)
            start()
        quiet = cfg.quiet(design)
        while True:
            time.sleep(0.2)
            logs.read()
            for c in consumers:
                c.sample()
            now = time.time()
            if logs.lines >= cfg.jobs and len(logs.runs) >= cfg.jobs and now > last_due:
                break
            # after the last due time, stop once nothing new ran for the quiet period and the
            # design holds no job it would still run (a poller chewing on a huge batch does),
            # or once nothing ran for STUCK seconds
            idle = time.monotonic() - logs.last_change
            if (
                now > last_due + 1.0
                and idle > quiet
                and (idle > STUCK or will_still_run(design, handle, prefix) == 0)
            ):
                break
            if now > last_due + cfg.timeout:
                break
        for c in consumers:
            c.stop()
        logs.read()
        expected = {job_id for job_id, _ in jobs}
        ran = len(expected & logs.runs.keys())
        pending = will_still_run(design, handle, prefix)
        late = [logs.first_late[j] for j in expected if j in logs.first_late]
        row: dict[str, Any] = {
            "design": design,
            "scenario": scenario,
            "jobs": cfg.jobs,
            "ran": ran,
            "not_run": cfg.jobs - ran,
            "will_still_run": pending,
            "lost": max(0, cfg.jobs - ran - pending),
            "duplicates": sum(n - 1 for j, n in logs.runs.items() if n > 1 and j in expected),
            "lateness_ms": {"p50": pct(late, 0.5), "p99": pct(late, 0.99), "max": pct(late, 1.0)},
            "consumer_peak_rss_mb": round(max((c.peak_mb for c in consumers), default=0.0), 1),
            "consumer_processes": len(consumers),
            "seconds": round(time.time() - t0, 1),
            "enqueue_outlasted_lead": produced_late,
        }
        if scenario in DRAIN_SCENARIOS:
            # every job has the same due time: first-run start = due + lateness
            window = (max(late) - min(late)) / 1000 if len(late) > 1 else 0.0
            row["enqueue_seconds"] = round(produced - t_produce, 3)
            row["drain_seconds"] = round(window, 3)
            row["drain_jobs_per_s"] = round(len(late) / window, 1) if window > 0 else None
        if design == "bullmq":
            row["bullmq_failed"] = bullmq_node.failed(handle, prefix)
        return row
    finally:
        for c in consumers:
            if c.proc.poll() is None:
                c.kill()
        try:
            mod.cleanup(handle, prefix)
        finally:
            handle.close()
            for path in workdir.glob("*.log"):
                path.unlink()
            workdir.rmdir()


def run_all(
    url: str,
    cfg: ScenarioConfig,
    designs: tuple[str, ...] = MAIN_DESIGNS,
    scenarios: tuple[str, ...] = SCENARIOS,
    progress: Any = None,
) -> list[dict[str, Any]]:
    rows = []
    for scenario in scenarios:
        for design in designs:
            row = run_scenario(design, scenario, url, cfg)
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows
