"""``shardq batch get|list|cancel``: batches and chains (shardq.workflows).

Each command makes the :class:`~shardq.inspector.Inspector` call of its name (``batch``,
``batches``, ``cancel_batch``), the plans the console runs too; reads take ``--json``.  A state
is shown with what it means (:data:`shardq.workflows.BATCH_STATE_MEANINGS`), times as ISO 8601
UTC with a relative form.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from shardq import format as fmt
from shardq.cli.connection import open_client, redis_options
from shardq.cli.options import JSON_OPTION, queue_option, require_yes, yes_option
from shardq.cli.params import Pattern
from shardq.config import MAX_LIMIT
from shardq.workflows import BATCH_ID_RULE, BATCH_STATE_MEANINGS, BatchCancel, BatchInfo
from shardq.workflows import STORED_ID_RE as BATCH_ID_RE

BATCH_ID = click.argument("batch_id", type=Pattern("batch-id", BATCH_ID_RE, BATCH_ID_RULE))
#: The states a batch has ended in: a cancel keeps them (it still cancels children it finds
#: waiting, e.g. those of a batch that failed at its first dead child).
ENDED = ("succeeded", "failed", "cancelled")


def meaning(state: str) -> str:
    """``running - sealed: waiting for its children to end``: a state with what it means."""
    said = BATCH_STATE_MEANINGS.get(state)
    return f"{state} - {said}" if said else state


def row(b: BatchInfo) -> dict[str, Any]:
    """What ``--json`` prints for a batch: its fields, what its state means, the times as
    ISO 8601."""
    return {
        **b.as_dict(),
        "meaning": BATCH_STATE_MEANINGS.get(b.state),
        "created": fmt.iso(b.created_ms),
        "sealed": fmt.iso(b.sealed_ms),
        "ended": fmt.iso(b.ended_ms),
        "fired": fmt.iso(b.fired_ms),
    }


def _ttl(b: BatchInfo) -> str:
    keep = fmt.span(b.retention_ms / 1000)
    if b.ttl_ms is None:
        return f"- (kept until it ends and its fires are done, then {keep})"
    return f"{fmt.span(b.ttl_ms / 1000)} (its record expires then; retention {keep})"


def _list(items: tuple[str, ...]) -> str | None:
    return ", ".join(items) if items else None


def _show(b: BatchInfo) -> None:
    click.echo(
        fmt.fields(
            [
                ("id", b.batch_id),
                ("queue", b.queue),
                ("kind", b.kind),
                ("state", meaning(b.state)),
                ("total", b.total),
                ("pending", b.pending),
                ("completed", b.completed),
                ("dead", b.dead),
                ("cancelled", b.cancelled),
                ("policy", b.policy),
                ("reason", b.reason),
                ("parent", b.parent),
                ("callbacks", _list(b.callbacks)),
                ("fires pending", _list(b.fires_pending)),
                ("fires given up", _list(b.fire_errors)),
                ("created", fmt.when(b.created_ms)),
                ("sealed", fmt.when(b.sealed_ms)),
                ("ended", fmt.when(b.ended_ms)),
                ("fired", fmt.when(b.fired_ms)),
                ("ttl", _ttl(b)),
            ]
        )
    )


def _cancelled(queue: str, out: BatchCancel) -> str:
    children = (
        f"{out.cancelled_children} waiting children cancelled, {out.running_children} running "
        "(they end as they will)"
    )
    if out.was in ENDED:
        was = "been cancelled" if out.was == "cancelled" else out.was
        return f"batch {out.batch_id} in {queue} had already {was} (state kept): {children}"
    return f"batch {out.batch_id} in {queue}: cancelled (was {out.was}), {children}"


@click.group()
def batch() -> None:
    """Batches and chains: their counts and state, and cancelling them."""


@batch.command("get")
@queue_option()
@BATCH_ID
@JSON_OPTION
@redis_options
def batch_get(queue_name: str, batch_id: str, as_json: bool) -> None:
    """Show a batch or chain: state, counts, policy, reason, callbacks, what is left to fire."""
    from shardq.inspector import Inspector

    with open_client() as client:
        b = Inspector(client).batch(queue_name, batch_id)
    if b is None:
        raise click.ClickException(
            f"batch {batch_id!r} not found in {queue_name} (never created, or it ended and its "
            "record expired after its retention): `shardq batch list` shows the queue's batches"
        )
    if as_json:
        fmt.echo_json(row(b))
    else:
        _show(b)


@batch.command("list")
@queue_option()
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LIMIT),
    default=50,
    show_default=True,
    help="The newest this many.",
)
@JSON_OPTION
@redis_options
def batch_list(queue_name: str, limit: int, as_json: bool) -> None:
    """List the queue's newest batches and chains, newest first (JSON lines with --json)."""
    from shardq.inspector import Inspector

    with open_client() as client:
        found = Inspector(client).batches(queue_name, limit)
    if as_json:
        fmt.echo_json_lines(row(b) for b in found)
        return
    if not found:
        click.echo(f"no batches in {queue_name} (or their records expired after their retention)")
        return
    now = fmt.now_ms()
    click.echo(
        fmt.table(
            [
                "id",
                "kind",
                "state",
                "total",
                "pending",
                "completed",
                "dead",
                "cancelled",
                "created",
                "ended",
            ],
            [
                [
                    b.batch_id,
                    b.kind,
                    b.state,
                    b.total,
                    b.pending,
                    b.completed,
                    b.dead,
                    b.cancelled,
                    fmt.relative(b.created_ms, now),
                    fmt.relative(b.ended_ms, now),
                ]
                for b in found
            ],
            right=[3, 4, 5, 6, 7],
        )
    )


@batch.command("cancel")
@queue_option()
@BATCH_ID
@JSON_OPTION
@yes_option("Really cancel it and its waiting children.")
@redis_options
def batch_cancel(queue_name: str, batch_id: str, as_json: bool, yes: bool) -> None:
    """Cancel a batch or chain: no callback fires any more, its waiting children are cancelled,
    running ones end as they will (safe to repeat; needs --yes)."""
    from shardq.inspector import Inspector

    require_yes(yes, f"cancelling batch {batch_id} cancels its waiting children")
    with open_client() as client:
        out = Inspector(client).cancel_batch(queue_name, batch_id)
    if as_json:
        fmt.echo_json(dataclasses.asdict(out))
    else:
        click.echo(_cancelled(queue_name, out))
