"""``shardq dev``: start, stop and inspect local Redis servers (see shardq.devcluster).

``up`` writes progress to stderr and the URL as the last line on stdout, so scripts can do
``URL=$(shardq dev cluster up | tail -n1)``.
"""

from __future__ import annotations

import click

from shardq import devcluster
from shardq.cli_common import ShardqGroup

__all__ = ["dev"]


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
def cluster_up(base_port: int, appendonly: bool, timeout: float) -> None:
    """Start the cluster (or keep the healthy one) and print its URL."""
    url = devcluster.cluster_up(
        base_port, appendonly=appendonly, timeout=timeout, progress=_progress
    )
    click.echo(url)


@cluster.command("down")
@click.option("--base-port", type=int, default=7000, show_default=True, help="First port.")
def cluster_down(base_port: int) -> None:
    """Stop the cluster's nodes and delete their data directory."""
    pids = devcluster.cluster_down(base_port)
    _echo_stopped(pids, f"cluster {base_port}")


@cluster.command("status")
@click.option("--base-port", type=int, default=7000, show_default=True, help="First port.")
def cluster_status(base_port: int) -> None:
    """Show each node's pid, role and state."""
    for node in devcluster.cluster_status(base_port):
        click.echo(node.describe())


@dev.group()
def standalone() -> None:
    """A single non-cluster Redis node on PORT."""


@standalone.command("up")
@click.option("--port", type=int, default=6390, show_default=True)
@click.option("--appendonly", is_flag=True, help="Enable AOF persistence.")
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds.")
def standalone_up(port: int, appendonly: bool, timeout: float) -> None:
    """Start the node (or keep the running one) and print its URL."""
    url = devcluster.standalone_up(port, appendonly=appendonly, timeout=timeout, progress=_progress)
    click.echo(url)


@standalone.command("down")
@click.option("--port", type=int, default=6390, show_default=True)
def standalone_down(port: int) -> None:
    """Stop the node and delete its data directory."""
    pids = devcluster.standalone_down(port)
    _echo_stopped(pids, f"standalone {port}")


@standalone.command("status")
@click.option("--port", type=int, default=6390, show_default=True)
def standalone_status(port: int) -> None:
    """Show the node's pid, role and state."""
    click.echo(devcluster.standalone_status(port).describe())
