"""End-to-end benchmark: a fresh queue run end to end by dispatchers and workers in
subprocesses (the engine of ``shardq dev demo``, shardq/dev/demo.py), with the machine's
calibration (bench/calibration.py) taken before the run.

    python -m bench.e2e --url redis://127.0.0.1:7300 [--jobs N --spread S --backlog --json ...]
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

import click

from bench.calibration import calibrate, calibration_line
from shardq.cli.connection import redis_options, redis_settings
from shardq.dev.demo import E2EConfig, format_summary, run_e2e


def run(cfg: E2EConfig, progress: TextIO | None = None) -> dict[str, Any]:
    """:func:`shardq.dev.demo.run_e2e` with the calibration of the same run."""
    return run_e2e(cfg, progress, calibrate=calibrate)


@click.command()
@click.option("--jobs", default=100_000, show_default=True)
@click.option("--spread", default=10.0, show_default=True, help="Seconds over which jobs come due.")
@click.option("--dispatchers", default=1, show_default=True)
@click.option("--workers", default=1, show_default=True)
@click.option("--partitions", default=64, show_default=True)
@click.option("--payload-bytes", default=20, show_default=True)
@click.option("--backlog", is_flag=True, help="Enqueue all jobs overdue before the fleet starts.")
@click.option("--timeout", default=300.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@redis_options
def main(
    jobs: int,
    spread: float,
    dispatchers: int,
    workers: int,
    partitions: int,
    payload_bytes: int,
    backlog: bool,
    timeout: float,
    as_json: bool,
) -> None:
    """Run a fresh queue end to end in subprocesses and report throughput, lateness, memory."""
    conn = redis_settings()
    cfg = E2EConfig(
        url=conn.url,
        jobs=jobs,
        spread=spread,
        dispatchers=dispatchers,
        workers=workers,
        partitions=partitions,
        payload_bytes=payload_bytes,
        backlog=backlog,
        timeout=timeout,
        password=conn.password,
        username=conn.username,
    )
    result = run(cfg, progress=None if as_json else sys.stderr)
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(format_summary(result, calibration_line(result["calibration"])))


if __name__ == "__main__":
    main()
