"""Which second runs of a job the guarantees allow, from every start the proc_helper workers
logged (tests/support/proc_helper.py, :func:`support.helpers.start_log`) and the workers' own
logs.

README, Guarantees, "At-least-once execution": a handler runs again only when a worker died or
was paused past its membership timeout, or the job failed and is retried.  So a start after
the first is allowed only when the start before it

- was on a worker SIGKILLed between the two, and this one redelivers the same ready entry
  (reclaim-7 XCLAIMs it: same partition, more deliveries);
- was on a worker that then reported the delivery taken over while it ran (paused: its
  heartbeat's "reclaimed by another worker" warning for that partition, or ``job.settle_gone``
  for that job), or that the test SIGSTOPped between the two, likewise redelivered;
- failed, as that worker logged (``job.retry`` for that job and attempt): the retry is a new
  ready entry, one attempt on.

Any other second start is a duplicate the guarantees do not allow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

_LOST = re.compile(r"partition (\d+): \d+ deliveries were reclaimed by another worker")


@dataclass
class WorkerReport:
    """What one worker's log says about its deliveries."""

    lost: set[int] = field(default_factory=set)  # partitions where one was taken from it
    gone: set[str] = field(default_factory=set)  # jobs whose outcome found them taken over
    retried: set[tuple[str, int]] = field(default_factory=set)  # (job id, attempt) that failed


def worker_report(log: str) -> WorkerReport:
    report = WorkerReport({int(p) for p in _LOST.findall(log)})
    for line in log.splitlines():
        if '"job.retry"' not in line and '"job.settle_gone"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "job.retry":
            report.retried.add((record["job_id"], int(record["attempt"])))
        elif record.get("event") == "job.settle_gone":
            report.gone.add(record["job_id"])
    return report


@dataclass
class Reruns:
    """Job id -> every logged event of it, by why it started more than once."""

    killed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    paused: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    failed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    unexplained: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {
            "killed": len(self.killed),
            "paused": len(self.paused),
            "failed": len(self.failed),
            "unexplained": len(self.unexplained),
        }


def _why(
    prev: dict[str, Any],
    cur: dict[str, Any],
    kills: Mapping[int, int],
    reports: Mapping[int, WorkerReport],
    stops: Mapping[int, list[int]],
) -> str:
    report = reports.get(prev["pid"], WorkerReport())
    if (prev["id"], prev["attempt"]) in report.retried:
        return "failed"
    # The same ready entry delivered again: a reclaim counts one more delivery.
    same_entry = cur["partition"] == prev["partition"] and cur["deliveries"] != prev["deliveries"]
    if not same_entry:
        return "unexplained"
    killed_at = kills.get(prev["pid"])
    redelivered = cur["deliveries"] > prev["deliveries"]
    if redelivered and killed_at is not None and prev["wall_ms"] <= killed_at <= cur["wall_ms"]:
        return "killed"
    # A paused worker may start what it fetched before the pause only after it, so the
    # taker's start can come first: the holder is the one of fewer deliveries.
    holder, taker = (prev, cur) if prev["deliveries"] < cur["deliveries"] else (cur, prev)
    held = reports.get(holder["pid"], WorkerReport())
    if holder["partition"] in held.lost or holder["id"] in held.gone:
        return "paused"
    if any(at <= taker["wall_ms"] for at in stops.get(holder["pid"], ())):
        return "paused"
    return "unexplained"


def classify(
    log: Mapping[str, list[dict[str, Any]]],
    kills: Mapping[int, int],
    reports: Mapping[int, WorkerReport],
    stops: Mapping[int, list[int]] | None = None,
) -> Reruns:
    """``log``: job id -> its logged events in order; ``kills``: worker pid -> wall ms when it
    was dead (reaped); ``reports``: worker pid -> :func:`worker_report` of its log; ``stops``:
    worker pid -> wall ms of each SIGSTOP the test sent it."""
    out = Reruns()
    order = ("unexplained", "paused", "failed", "killed")  # the worst reason names the job
    for job_id, events in log.items():
        starts = [e for e in events if e["event"] == "start"]
        reasons = {_why(p, c, kills, reports, stops or {}) for p, c in pairwise(starts)}
        for reason in order:
            if reason in reasons:
                getattr(out, reason)[job_id] = events
                break
    return out
