"""``shardq balancer run`` and ``status``: the placement autopilot (shardq.admin.balancer)."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import click

from shardq import format as fmt
from shardq.cli.connection import open_client, redis_options, redis_settings
from shardq.cli.options import JSON_OPTION, balance_by_option, move_budget_options
from shardq.cli.params import QUEUE_NAME, Duration
from shardq.names import By


@click.group("balancer")
def balancer_group() -> None:
    """The placement autopilot: keeps every primary's load near the mean by moving slots."""


@balancer_group.command("run")
@click.option(
    "--queue",
    "-q",
    "queues",
    type=QUEUE_NAME,
    multiple=True,
    help="A queue to balance (repeat it for more); default: every queue.",
)
@balance_by_option
@click.option(
    "--tolerance",
    type=click.FloatRange(0.0, 100.0),
    default=10.0,
    show_default=True,
    help="Percent of the mean a plan brings every primary's load within.",
)
@click.option(
    "--trigger",
    type=click.FloatRange(0.0, 1000.0),
    default=25.0,
    show_default=True,
    help="Percent off the mean a primary must be before anything moves (above --tolerance).",
)
@click.option(
    "--sustain",
    type=click.IntRange(1, 1000),
    default=3,
    show_default=True,
    help="Measurements in a row past --trigger before it plans.",
)
@click.option(
    "--interval",
    type=Duration(0.1, 86400.0),
    default="30s",
    show_default=True,
    help="How long from one measurement to the next.",
)
@click.option(
    "--window",
    type=Duration(0.05, 1200.0),
    default="5s",
    show_default=True,
    help="How long the job rates are measured over.",
)
@click.option(
    "--lease",
    "lease_s",
    type=Duration(1.0, 3600.0),
    default="30s",
    show_default=True,
    help="How long the leader lease lasts (one balancer leads; the others stand by).",
)
@move_budget_options
@click.option(
    "--migrate-timeout",
    type=Duration(0.001, 86400.0),
    default="60s",
    show_default=True,
    help="How long MIGRATE may take for one slot's keys.",
)
@click.option(
    "--rounds",
    type=click.IntRange(1),
    default=None,
    help="Stop after this many rounds (default: run until SIGTERM/SIGINT).",
)
@redis_options
def run(
    queues: tuple[str, ...],
    balance_by: By,
    tolerance: float,
    trigger: float,
    sustain: int,
    interval: float,
    window: float,
    lease_s: float,
    max_moves: int,
    concurrency: int,
    bytes_per_second: float | None,
    migrate_timeout: float,
    rounds: int | None,
) -> None:
    """Keep every primary's load within --tolerance of the mean, for as long as it runs.

    Any number may run: one holds the leader lease (fenced: a leader paused past its lease
    starts no further move) and the others take over within a third of --lease when it goes.
    The leader measures every --interval and plans only when a primary has been more
    than --trigger percent off the mean in --sustain measurements in a row, then moves slots
    (the safe move of `shardq rebalance move-partition`, 0 lost under load) until every
    primary is within --tolerance, within the budget (--max-moves, --concurrency,
    --bytes-per-second). Logs one JSON line per decision and move.
    """
    from shardq.admin import balancer, slots
    from shardq.client import Client

    settings = balancer.BalancerSettings(
        queues=queues,
        by=balance_by,
        tolerance=tolerance / 100.0,
        trigger=trigger / 100.0,
        sustain=sustain,
        interval=interval,
        window=window,
        lease_ms=int(lease_s * 1000),
        budget=balancer.Budget(
            concurrency, bytes_per_second, max_moves, int(migrate_timeout * 1000)
        ),
    )
    redis = redis_settings()
    with Client(redis) as client:
        slots.primary_addresses(client)  # a single node has no slots to move: say so now
        slots.require_slot_moves(client)  # nor does a managed service: say so now
    b = balancer.Balancer(lambda: Client(redis), settings)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    click.echo(f"balancer {b.owner}: balancing {', '.join(queues) or 'every queue'}", err=True)
    try:
        b.run(stop, rounds)
    finally:
        b.close()


@balancer_group.command("status")
@JSON_OPTION
@redis_options
def status(as_json: bool) -> None:
    """The balancer leader's last round: who leads, when, the deviation and the moves made."""
    from shardq.admin import balancer

    with open_client() as client:
        report = balancer.status(client)
    if as_json:
        fmt.echo_json(report)
        return
    if not report:
        click.echo("no balancer has led on this Redis (start one with `shardq balancer run`)")
        return
    at_ms = int(report.get("at_ms", "0") or 0)
    ago = time.time() - at_ms / 1000.0
    deviation = float(report.get("deviation", "-1") or -1)
    click.echo(f"leader      {report.get('leader', '?')} (token {report.get('token', '?')})")
    click.echo(f"last round  {ago:,.0f} s ago")
    click.echo(
        "deviation   "
        + ("not measured" if deviation < 0 else f"{deviation:.1%} (by {report.get('by', '?')})")
    )
    click.echo(
        f"moves       {report.get('moves', '0')} ({int(report.get('bytes', '0') or 0):,} bytes)"
        + (" in the last round's plan" if report.get("acted") == "1" else "")
    )
    if report.get("error"):
        click.echo(f"error       {report['error']}")
