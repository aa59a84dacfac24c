"""The commands for development and measurement: ``shardq dev`` (start, stop and inspect local
Redis servers), ``shardq demo`` and ``shardq bench``, over shardq.devtools.

Every command imports shardq.devtools inside its body, never at the top of this module: the
rest of the CLI (and so every worker and dispatcher process) never loads the dev tools.

``dev ... up`` writes progress to stderr and the URL as the last line on stdout, so scripts can
do ``URL=$(shardq dev cluster up | tail -n1)``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from shardq.cli.errors import ShardqGroup
from shardq.cli.options import redis_options, redis_settings

__all__ = ["bench", "demo", "dev"]


def _server_bin(fn: Any) -> Any:
    """``--server-bin DIR``: the server to start (redis-server or valkey-server with its cli)."""
    return click.option(
        "--server-bin",
        type=click.Path(exists=True, file_okay=False),
        envvar="SHARDQ_SERVER_BIN",
        help="Directory holding redis-server and redis-cli, or valkey-server and valkey-cli "
        "[default: PATH; env SHARDQ_SERVER_BIN].",
    )(fn)


def _progress(message: str) -> None:
    click.echo(message, err=True)


def _echo_stopped(pids: list[int], what: str) -> None:
    if pids:
        click.echo(f"stopped {what}: pids {' '.join(map(str, pids))}")
    else:
        click.echo(f"{what}: nothing was running")


@click.group(cls=ShardqGroup)
def dev() -> None:
    """Local Redis servers for development, tests, the demo and benchmarks."""


@dev.group()
def cluster() -> None:
    """A 6-node Redis Cluster (3 primaries, 3 replicas) on BASE_PORT..BASE_PORT+5."""


@cluster.command("up")
@click.option("--base-port", type=int, default=7000, show_default=True, help="First port.")
@click.option("--appendonly", is_flag=True, help="Enable AOF persistence on every node.")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds.")
@_server_bin
def cluster_up(base_port: int, appendonly: bool, timeout: float, server_bin: str | None) -> None:
    """Start the cluster (or keep the healthy one) and print its URL."""
    from shardq.devtools import devcluster

    url = devcluster.cluster_up(
        base_port,
        appendonly=appendonly,
        timeout=timeout,
        progress=_progress,
        server_bin=server_bin,
    )
    click.echo(url)


@cluster.command("down")
@click.option("--base-port", type=int, default=7000, show_default=True, help="First port.")
def cluster_down(base_port: int) -> None:
    """Stop the cluster's nodes and delete their data directory."""
    from shardq.devtools import devcluster

    pids = devcluster.cluster_down(base_port)
    _echo_stopped(pids, f"cluster {base_port}")


@cluster.command("status")
@click.option("--base-port", type=int, default=7000, show_default=True, help="First port.")
def cluster_status(base_port: int) -> None:
    """Show each node's pid, role and state."""
    from shardq.devtools import devcluster

    for node in devcluster.cluster_status(base_port):
        click.echo(node.describe())


@dev.group()
def standalone() -> None:
    """A single non-cluster Redis node on PORT."""


@standalone.command("up")
@click.option("--port", type=int, default=6390, show_default=True)
@click.option("--appendonly", is_flag=True, help="Enable AOF persistence.")
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds.")
@_server_bin
def standalone_up(port: int, appendonly: bool, timeout: float, server_bin: str | None) -> None:
    """Start the node (or keep the running one) and print its URL."""
    from shardq.devtools import devcluster

    url = devcluster.standalone_up(
        port, appendonly=appendonly, timeout=timeout, progress=_progress, server_bin=server_bin
    )
    click.echo(url)


@standalone.command("down")
@click.option("--port", type=int, default=6390, show_default=True)
def standalone_down(port: int) -> None:
    """Stop the node and delete its data directory."""
    from shardq.devtools import devcluster

    pids = devcluster.standalone_down(port)
    _echo_stopped(pids, f"standalone {port}")


@standalone.command("status")
@click.option("--port", type=int, default=6390, show_default=True)
def standalone_status(port: int) -> None:
    """Show the node's pid, role and state."""
    from shardq.devtools import devcluster

    click.echo(devcluster.standalone_status(port).describe())


# benchmarks and demo -----------------------------------------------------------------------


@click.group()
def bench() -> None:
    """Benchmarks that print figures."""


@bench.command("e2e")
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
def bench_e2e(
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
    from shardq.devtools.bench import E2EConfig, format_summary, run_e2e

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
    result = run_e2e(cfg, progress=None if as_json else sys.stderr)
    click.echo(json.dumps(result) if as_json else format_summary(result))


@bench.command("enqueue")
@click.option("--jobs", default=50_000, show_default=True, help="Jobs for enqueue_many.")
@click.option("--single-jobs", default=3_000, show_default=True, help="Jobs for the single loop.")
@click.option("--partitions", default=64, show_default=True)
@click.option(
    "--rounds", default=3, show_default=True, help="enqueue_many and script-limit runs each."
)
@redis_options
def bench_enqueue(
    jobs: int,
    single_jobs: int,
    partitions: int,
    rounds: int,
) -> None:
    """Enqueue rates in one run (JSON): single enqueues, enqueue_many, and the batched script's
    limit (the same calls prepared beforehand); each starts on an empty queue."""
    from shardq.devtools.bench import run_enqueue_bench

    conn = redis_settings()
    click.echo(
        json.dumps(
            run_enqueue_bench(
                conn.url,
                jobs,
                single_jobs,
                partitions,
                username=conn.username,
                password=conn.password,
                rounds=rounds,
            )
        )
    )


@bench.command("fleet")
@click.option("--dispatchers", default=8, show_default=True)
@click.option("--partitions", default=256, show_default=True)
@click.option("--workers", default=4, show_default=True)
@click.option("--lease-time", default=4.0, show_default=True)
@click.option("--renew-interval", default=1.0, show_default=True)
@click.option("--idle-seconds", default=10.0, show_default=True)
@redis_options
def bench_fleet(
    dispatchers: int,
    partitions: int,
    workers: int,
    lease_time: float,
    renew_interval: float,
    idle_seconds: float,
) -> None:
    """Lease convergence after start, SIGKILL and SIGTERM, and the idle fleet's Redis calls/s."""
    from shardq.devtools.bench_fleet import run_fleet

    conn = redis_settings()
    click.echo(
        json.dumps(
            run_fleet(
                conn.url,
                dispatchers,
                partitions,
                workers,
                lease_time,
                renew_interval,
                idle_seconds,
                password=conn.password,
            )
        )
    )


@click.command()
@click.option("--base-port", default=7200, show_default=True, help="Ports of the demo cluster.")
@click.option("--jobs", default=100_000, show_default=True)
@click.option("--spread", default=10.0, show_default=True)
@click.option("--workers", default=2, show_default=True)
@click.option("--keep", is_flag=True, help="Leave the demo cluster running afterwards.")
@_server_bin
def demo(
    base_port: int, jobs: int, spread: float, workers: int, keep: bool, server_bin: str | None
) -> None:
    """Start a local cluster, schedule JOBS due over SPREAD seconds, run a fleet, summarise."""
    from shardq.devtools.bench import E2EConfig, format_summary, run_e2e
    from shardq.devtools.devcluster import cluster_down, cluster_up

    url = cluster_up(base_port, progress=_progress, server_bin=server_bin)
    try:
        cfg = E2EConfig(
            url=url,
            jobs=jobs,
            spread=spread,
            dispatchers=1,
            workers=workers,
            partitions=64,
            payload_bytes=20,
            backlog=False,
            timeout=300.0,
        )
        result = run_e2e(cfg, progress=sys.stdout)
        click.echo(format_summary(result))
    finally:
        if not keep:
            cluster_down(base_port)
