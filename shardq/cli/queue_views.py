"""The operator's views of a queue: ``shardq owners`` (each partition's lease) and ``shardq
stats`` (backlog, lag, rates per queue, node and partition, ``--watch`` to follow them)."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import click

from shardq import format as fmt
from shardq.cli.connection import open_client, redis_options
from shardq.cli.options import JSON_OPTION, queue_option


def _fmt(value: float | None, unit: str = "s") -> str:
    return "-" if value is None else f"{value:.1f}{unit}"


@click.command()
@queue_option()
@JSON_OPTION
@redis_options
def owners(queue_name: str, as_json: bool) -> None:
    """Partition, owner, token, lease age and next due time of every partition of the queue."""
    from shardq import admin

    with open_client() as client:
        rows = admin.owners(client, queue_name)
    if as_json:
        fmt.echo_json_lines(fmt.named(dataclasses.asdict(r)) for r in rows)
        return
    click.echo(
        fmt.table(
            ["partition", "token", "age", "ttl", "next due", "owner"],
            [
                [
                    fmt.partition(r.partition),
                    r.token,
                    _fmt(r.lease_age_s),
                    _fmt(r.lease_ttl_s),
                    None if r.next_due_in_s is None else _relative_s(r.next_due_in_s),
                    r.owner or "(free)",
                ]
                for r in rows
            ],
            right=[0, 1, 2, 3],
        )
    )

    fmt.echo_malformed((f"partition {fmt.partition(r.partition)}", r.malformed) for r in rows)


def _relative_s(seconds: float) -> str:
    return fmt.relative(seconds * 1000, 0) or "-"


def _stats_json(data: dict[str, Any]) -> str:
    """``stats --json``: the report, each partition by its name."""
    return fmt.json_text({**data, "partitions": [fmt.named(dict(r)) for r in data["partitions"]]})


def _render_stats(data: dict[str, Any], top: int) -> str:
    q = data["queue"]
    nodes = fmt.table(
        ["node", "parts", "due", "overdue", "pending", "dead", "rate/s"],
        [
            [
                n["node"],
                n["partitions"],
                f"{n['due']:,}",
                f"{n['overdue']:,}",
                f"{n['pending']:,}",
                f"{n['dead']:,}",
                f"{n['rate_per_s']:,}",
            ]
            for n in data["nodes"]
        ],
        right=[1, 2, 3, 4, 5, 6],
    )
    ranked = sorted(data["partitions"], key=lambda r: (-r["rate_per_s"], -r["due"]))
    parts = fmt.table(
        ["part", "node", "due", "overdue", "lag s", "ready", "pending", "dead", "rate/s"],
        [
            [
                fmt.partition(r["partition"]),
                r["node"],
                f"{r['due']:,}",
                f"{r['overdue']:,}",
                r["lag_s"],
                f"{r['ready']:,}",
                f"{r['pending']:,}",
                f"{r['dead']:,}",
                f"{r['rate_per_s']:,}",
            ]
            for r in ranked[:top]
        ],
        right=[0, 2, 3, 4, 5, 6, 7, 8],
    )
    head = (
        f"queue {q['queue']}: {q['partitions']} partitions  due {q['due']:,}  overdue "
        f"{q['overdue']:,}  max lag {q['max_lag_s']}s  ready {q['ready']:,}  pending "
        f"{q['pending']:,}  dead {q['dead']:,}  rate {q['rate_per_s']:,}/s  hot partition x"
        f"{q['hot_partition_ratio']}  hot node x{q['hot_node_ratio']}"
    )
    bad = fmt.malformed(
        (f"partition {fmt.partition(r['partition'])}", r["malformed"]) for r in data["partitions"]
    )
    return "\n".join([head, nodes, f"hottest partitions (top {top}):", parts, *bad])


# Clear the screen and move home: `--watch` on a terminal redraws in place.
_CLEAR = "\x1b[H\x1b[2J"


@click.command()
@queue_option(required=False, help="One queue (default: every queue). Env: SHARDQ_QUEUE.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per queue per refresh.")
@click.option(
    "--watch", is_flag=True, help="Refresh until Ctrl-C (redraws in place on a terminal)."
)
@click.option(
    "--window",
    type=click.FloatRange(0.0, 3600.0),
    default=1.0,
    show_default=True,
    help="Seconds over which rates are taken (and between --watch refreshes).",
)
@click.option(
    "--top", type=click.IntRange(0), default=10, show_default=True, help="Partitions to list."
)
@redis_options
def stats(queue_name: str | None, as_json: bool, watch: bool, window: float, top: int) -> None:
    """Backlog, overdue, lag, pending, dead letters and rates per queue, node and partition."""
    from shardq import admin

    redraw = watch and not as_json and sys.stdout.isatty()
    try:
        with open_client() as client:
            queues = [queue_name] if queue_name else client.queues()
            if not queues:
                raise click.ClickException(
                    "no queues: create one with `shardq queue create --queue NAME`"
                )
            while True:
                frames = []
                for q in queues:
                    data = admin.queue_stats(client, q, window)
                    frames.append(_stats_json(data) if as_json else _render_stats(data, top))
                if redraw:
                    click.echo(_CLEAR, nl=False)
                click.echo("\n\n".join(frames) if not as_json else "\n".join(frames))
                if not watch:
                    return
                if not as_json and not redraw:
                    click.echo("")
    except KeyboardInterrupt:
        # Ctrl-C is how --watch ends: a normal exit, not click's "Aborted!" and exit 1
        return
