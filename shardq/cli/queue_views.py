"""The views of a queue, read-only: ``shardq queue info`` (per partition: counts, lag, owner),
``queue members`` (live workers and dispatchers), ``queue owners`` (each partition's lease) and
``queue stats`` (backlog, lag, rates per queue, node and partition, ``--watch`` to follow
them).  cli/queue.py puts them in the ``queue`` group; ``shardq owners`` and ``shardq stats``
are their old names, for scripts."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import click

from shardq import format as fmt
from shardq.cli.connection import open_client, redis_options
from shardq.cli.options import JSON_OPTION, deprecated_alias, queue_option
from shardq.cli.params import Duration


@click.command("info")
@queue_option()
@JSON_OPTION
@redis_options
def queue_info(queue_name: str, as_json: bool) -> None:
    """Per partition: counts per state, oldest due, lag, owner, node, paused; a running
    resize's progress."""
    from shardq.admin.resize import Resizer
    from shardq.inspector import Inspector

    with open_client() as client:
        infos = Inspector(client).partitions(queue_name)
        layout = client.layout(queue_name)
        resize = Resizer(client, queue_name).status() if layout.resizing else None
    if as_json:
        fmt.echo_json_lines(fmt.named(dataclasses.asdict(i)) for i in infos)
        return
    if resize is not None:
        click.echo(
            f"resizing: phase {resize.phase}, {resize.raw.get('from')} -> {resize.raw.get('to')} "
            f"(generation:partitions), moved {resize.raw.get('moved', '0')} jobs and "
            f"{resize.raw.get('idempotency_moved', '0')} idempotency records; partitions "
            f"g<generation>.<p> are the new ones (`shardq queue resize --resume` goes on)"
        )
    now = fmt.now_ms()
    rows = [
        [
            fmt.partition(i.partition), i.node, i.scheduled, i.overdue, i.ready,
            i.running, i.dead,
            fmt.when(i.oldest_due_ms, now) if i.oldest_due_ms else "-",
            f"{i.lag_seconds:.3f}", "yes" if i.paused else "", i.owner or "(free)",
        ]
        for i in infos
    ]  # fmt: skip
    headers = ["part", "node", "scheduled", "overdue", "ready", "running", "dead", "oldest due",
               "lag s", "paused", "owner"]  # fmt: skip
    click.echo(fmt.table(headers, rows, right=(0, 2, 3, 4, 5, 6, 8)))
    fmt.echo_malformed((f"partition {fmt.partition(i.partition)}", i.malformed) for i in infos)
    on = sum(i.lanes for i in infos)
    if on:
        # 'ready' then counts the lane too: due jobs waiting for a worker, by priority/tenant
        click.echo(f"lanes on in {on} of {len(infos)} partitions (ready includes the lanes)")


@click.command("members")
@queue_option()
@JSON_OPTION
@redis_options
def queue_members(queue_name: str, as_json: bool) -> None:
    """Live workers and dispatchers: instance, partitions held, jobs in flight, heartbeat."""
    from shardq.inspector import Inspector

    with open_client() as client:
        members = Inspector(client).members(queue_name)
    if as_json:
        fmt.echo_json_lines(
            {**dataclasses.asdict(m), "partitions": [fmt.partition(p) for p in m.partitions]}
            for m in members
        )
        return
    now = fmt.now_ms()
    rows = [
        [m.role, m.id, len(m.partitions) if m.role == "dispatcher" else "",
         m.inflight if m.role == "worker" else "", "yes" if m.draining else "",
         "(malformed)" if m.malformed else fmt.when(m.heartbeat_expires_ms, now)]
        for m in members
    ]  # fmt: skip
    headers = ["role", "id", "partitions", "in flight", "draining", "heartbeat expires"]
    click.echo(fmt.table(headers, rows, right=(2, 3)) if rows else "no live members")
    fmt.echo_malformed((f"{m.role} {m.id}", m.malformed) for m in members)


def _fmt(value: float | None, unit: str = "s") -> str:
    return "-" if value is None else f"{value:.1f}{unit}"


@click.command("owners")
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


@click.command("stats")
@queue_option(required=False, help="One queue (default: every queue). Env: SHARDQ_QUEUE.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per queue per refresh.")
@click.option(
    "--watch", is_flag=True, help="Refresh until Ctrl-C (redraws in place on a terminal)."
)
@click.option(
    "--window",
    type=Duration(0.0, 3600.0),
    default="1s",
    show_default=True,
    help="How long rates are taken over (and between --watch refreshes): 1s, 500ms, 1m.",
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


#: ``shardq owners`` and ``shardq stats``: the old names, for scripts.
owners_alias = deprecated_alias(owners, "owners", "queue owners")
stats_alias = deprecated_alias(stats, "stats", "queue stats")
