"""The locust load test runs headless against the test cluster and reports enqueue calls and
end-to-end lateness in its CSV (loadtest/locustfile.py)."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCUSTFILE = REPO / "loadtest" / "locustfile.py"

# Not importorskip: importing locust here would gevent-patch threading for the whole session.
if importlib.util.find_spec("locust") is None:
    pytest.skip("locust is in the dev extra: pip install -e '.[dev]'", allow_module_level=True)


def test_locustfile_headless_reports_enqueue_and_lateness(cluster_url: str, tmp_path: Path) -> None:
    """The tour shape (steady, bursts, overdue backlog) for ~10 s: every scenario has enqueue
    rows and lateness rows with non-zero counts, every job ran once, and the reports exist."""
    prefix = tmp_path / "lt"
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--only-summary",
        "--csv",
        str(prefix),
        "--html",
        str(tmp_path / "report.html"),
        "--shardq-url",
        cluster_url,
        "--shardq-partitions",
        "16",
        "--shardq-duration",
        "10",
        "--shardq-users",
        "3",
        "--shardq-rate",
        "300",
        "--shardq-batch",
        "20",
        "--shardq-single-share",
        "0.3",
        "--shardq-delay",
        "0.5",
        "--shardq-burst-every",
        "1",
        "--shardq-burst-jobs",
        "300",
        "--shardq-backlog-jobs",
        "3000",
        "--shardq-backlog-fill",
        "1",
        "--shardq-drain-timeout",
        "15",
    ]
    env = dict(os.environ, LOADTEST_SHAPE="tour")
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=55)
    assert proc.returncode == 0, proc.stderr[-3000:]

    with (tmp_path / "lt_stats.csv").open() as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    count = {key: int(r["Request Count"]) for key, r in rows.items()}
    for scenario in ("steady", "burst", "backlog"):
        assert count.get(("enqueue_many", scenario), 0) > 0, sorted(count)
        assert count.get(("lateness", scenario), 0) > 0, sorted(count)
    assert count.get(("enqueue", "steady"), 0) > 0, sorted(count)
    assert int(rows[("check", "jobs not run")]["Failure Count"]) == 0
    assert int(rows[("check", "jobs run twice")]["Failure Count"]) == 0
    # lateness is a time: percentile columns are filled in
    assert rows[("lateness", "steady")]["99%"] not in ("", "N/A")

    summary = json.loads((tmp_path / "lt_summary.json").read_text())
    assert summary["enqueued"] > 0
    assert summary["ran"] == summary["enqueued"]
    assert summary["not_run"] == 0 and summary["run_twice"] == 0
    lateness_rows = sum(count[("lateness", s)] for s in ("steady", "burst", "backlog"))
    assert lateness_rows == summary["ran"]
    assert (tmp_path / "report.html").stat().st_size > 0
