"""The commands for development, ``shardq dev``: start, stop and inspect local Redis servers,
and run the demo (``dev demo``), over shardq.dev.  The group is hidden from ``shardq --help``:
an operator's (the production image's) command line does not advertise it; ``make demo``,
the tests and docs/ use it.  ``shardq demo`` is the demo's old name, for scripts.  The
benchmarks are repository tools (``python -m bench.e2e``, ``bench.enqueue``, ``bench.fleet``:
bench/README.md), not commands of the product.

Every command imports shardq.dev inside its body, never at the top of this module: the rest
of the CLI (and so every worker and dispatcher process) never loads the dev tools.

``dev ... up`` writes progress to stderr and the URL as the last line on stdout, so scripts can
do ``URL=$(shardq dev cluster up | tail -n1)``.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from shardq.cli.errors import ShardqGroup
from shardq.cli.options import deprecated_alias
from shardq.cli.params import Duration

__all__ = ["demo", "demo_alias", "dev"]


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


@click.group(cls=ShardqGroup, hidden=True)
def dev() -> None:
    """For development: local Redis servers (for tests, the demo and benchmarks), the demo."""


@dev.group()
def cluster() -> None:
    """A 6-node Redis Cluster (3 primaries, 3 replicas) on BASE_PORT..BASE_PORT+5."""


@cluster.command("up")
@click.option("--base-port", type=int, default=7000, show_default=True, help="First port.")
@click.option("--appendonly", is_flag=True, help="Enable AOF persistence on every node.")
@click.option(
    "--timeout",
    type=Duration(0.0, 3600.0),
    default="60s",
    show_default=True,
    help="How long to wait for the cluster to form.",
)
@_server_bin
def cluster_up(base_port: int, appendonly: bool, timeout: float, server_bin: str | None) -> None:
    """Start the cluster (or keep the healthy one) and print its URL."""
    from shardq.dev import devcluster

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
    from shardq.dev import devcluster

    pids = devcluster.cluster_down(base_port)
    _echo_stopped(pids, f"cluster {base_port}")


@cluster.command("status")
@click.option("--base-port", type=int, default=7000, show_default=True, help="First port.")
def cluster_status(base_port: int) -> None:
    """Show each node's pid, role and state."""
    from shardq.dev import devcluster

    for node in devcluster.cluster_status(base_port):
        click.echo(node.describe())


@dev.group()
def standalone() -> None:
    """A single non-cluster Redis node on PORT."""


@standalone.command("up")
@click.option("--port", type=int, default=6390, show_default=True)
@click.option("--appendonly", is_flag=True, help="Enable AOF persistence.")
@click.option(
    "--timeout",
    type=Duration(0.0, 3600.0),
    default="30s",
    show_default=True,
    help="How long to wait for the node to answer.",
)
@_server_bin
def standalone_up(port: int, appendonly: bool, timeout: float, server_bin: str | None) -> None:
    """Start the node (or keep the running one) and print its URL."""
    from shardq.dev import devcluster

    url = devcluster.standalone_up(
        port, appendonly=appendonly, timeout=timeout, progress=_progress, server_bin=server_bin
    )
    click.echo(url)


@standalone.command("down")
@click.option("--port", type=int, default=6390, show_default=True)
def standalone_down(port: int) -> None:
    """Stop the node and delete its data directory."""
    from shardq.dev import devcluster

    pids = devcluster.standalone_down(port)
    _echo_stopped(pids, f"standalone {port}")


@standalone.command("status")
@click.option("--port", type=int, default=6390, show_default=True)
def standalone_status(port: int) -> None:
    """Show the node's pid, role and state."""
    from shardq.dev import devcluster

    click.echo(devcluster.standalone_status(port).describe())


# the demo ---------------------------------------------------------------------------------------


@dev.command("demo")
@click.option("--base-port", default=7200, show_default=True, help="Ports of the demo cluster.")
@click.option("--jobs", default=100_000, show_default=True, help="Jobs to schedule.")
@click.option(
    "--spread",
    type=Duration(0.0, 86400.0),
    default="10s",
    show_default=True,
    help="How far apart the first and the last job are due.",
)
@click.option("--workers", default=2, show_default=True, help="Worker processes to run.")
@click.option("--keep", is_flag=True, help="Leave the demo cluster running afterwards.")
@_server_bin
def demo(
    base_port: int, jobs: int, spread: float, workers: int, keep: bool, server_bin: str | None
) -> None:
    """Start a local cluster, schedule JOBS due over SPREAD seconds, run a fleet, summarise."""
    from shardq.dev.demo import E2EConfig, format_summary, run_e2e
    from shardq.dev.devcluster import cluster_down, cluster_up

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


#: ``shardq demo``: the old name, for scripts.
demo_alias = deprecated_alias(demo, "demo", "dev demo")
