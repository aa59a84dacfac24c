"""``shardq rebalance nodes|plan|apply|move-partition``: a queue's partitions over Redis primaries
(their slots, all their keys with them): the load per primary, the placement that evens it out,
carrying that out, moving one partition.  cli/rebalance.py puts them in the ``rebalance``
group; ``shardq balancer run`` keeps the placement balanced for as long as it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from shardq import format as fmt
from shardq.cli.connection import open_client, redis_options, redis_settings
from shardq.cli.options import (
    JSON_OPTION,
    balance_by_option,
    move_budget_options,
    queue_option,
    yes_option,
)
from shardq.cli.params import Duration
from shardq.names import By
from shardq.store import keys

if TYPE_CHECKING:
    from shardq.admin import balancer, placement
    from shardq.client import Client

WINDOW = click.option(
    "--window",
    type=Duration(0.0, 3600.0),
    default="1s",
    show_default=True,
    help="How long the job rates are taken over (1s, 500ms, 1m).",
)
MIGRATE_TIMEOUT = click.option(
    "--migrate-timeout",
    type=Duration(0.001, 86400.0),
    default="60s",
    show_default=True,
    help="How long MIGRATE may take for one slot's keys.",
)
TOLERANCE = click.option(
    "--tolerance",
    type=click.FloatRange(0.0, 100.0),
    default=10.0,
    show_default=True,
    help="Percent of the mean each primary's load may differ by.",
)
ALL_QUEUES = click.option(
    "--all-queues",
    is_flag=True,
    help="Count every queue's partitions, not only --queue's.",
)


@click.command("nodes")
@queue_option()
@WINDOW
@redis_options
def nodes_command(queue_name: str, window: float) -> None:
    """The queue's partitions and job rate per Redis primary, and the one partition move that
    lowers the busiest primary's rate most (changes nothing)."""
    from shardq import admin
    from shardq.admin import slots

    with open_client() as client:
        primaries = slots.primary_addresses(client)  # SlotMoveError on a single node
        data = admin.queue_stats(client, queue_name, window)
        loads = slots.node_loads(data, primaries)
        click.echo(f"queue {queue_name} over {len(loads)} primaries (rates over {window:g} s):")
        for n in loads:
            click.echo(
                f"  {n.node:<22} partitions {len(n.partitions):>4}  rate {n.rate_per_s:>10,.1f}/s"
                f"  share {n.share:>6.1%}"
            )
        if not any(n.rate_per_s for n in loads):
            click.echo("no job was enqueued or promoted in the window: no load to balance")
            return
        tip = slots.suggest(data, loads)
        if tip is None:
            click.echo(
                "no single partition move lowers the busiest primary's rate (a partition that "
                "carries most of the load takes it wherever it goes; a queue with more "
                "partitions spreads it)"
            )
            return
        click.echo(
            f"suggestion: move partition {fmt.partition(tip.partition)} "
            f"({tip.rate_per_s:,.1f}/s) from {tip.source} to {tip.target}: busiest primary "
            f"{tip.busiest_before:,.1f}/s -> {tip.busiest_after:,.1f}/s"
        )
        number = slots.move_argument(client.layout(queue_name), tip.partition)
        if number is not None:  # (a partition a resize empties moves with its jobs)
            click.echo(
                f"  shardq rebalance move-partition --queue {queue_name} {number} "
                f"--to {tip.target} --yes"
            )


@click.command("plan")
@queue_option()
@balance_by_option
@TOLERANCE
@WINDOW
@ALL_QUEUES
@JSON_OPTION
@redis_options
def placement_command(
    queue_name: str,
    balance_by: By,
    tolerance: float,
    window: float,
    all_queues: bool,
    as_json: bool,
) -> None:
    """The slot moves that bring every primary's load (--by load, rate or bytes of the queue's
    partitions, or of every queue's with --all-queues) within --tolerance percent of the mean,
    moving the fewest bytes; changes nothing.  `shardq rebalance apply` carries them out."""
    with open_client() as client:
        p, counted = _placement(
            client, queue_name, all_queues, balance_by, tolerance / 100.0, window
        )
    if as_json:
        fmt.echo_json(_placement_json(queue_name, balance_by, counted, p))
        return
    _print_placement(balance_by, counted, p)


@click.command("apply")
@queue_option()
@balance_by_option
@TOLERANCE
@WINDOW
@ALL_QUEUES
@move_budget_options
@MIGRATE_TIMEOUT
@yes_option("Do it (without it, only print the moves).")
@redis_options
def apply_command(
    queue_name: str,
    balance_by: By,
    tolerance: float,
    window: float,
    all_queues: bool,
    max_moves: int,
    concurrency: int,
    bytes_per_second: float | None,
    migrate_timeout: float,
    yes: bool,
) -> None:
    """Carry out the placement `shardq rebalance plan` shows, move by move, under load: at most
    --max-moves, --concurrency at once, --bytes-per-second, stopping at the first error.  Each
    move is the safe one of `shardq rebalance move-partition`."""
    from shardq.admin import balancer

    budget = balancer.Budget(concurrency, bytes_per_second, max_moves, int(migrate_timeout * 1000))
    with open_client() as client:
        _apply(client, queue_name, all_queues, balance_by, tolerance / 100.0, window, yes, budget)


@click.command("move-partition")
@queue_option()
@click.argument("partition", type=click.IntRange(0))
@click.option("--to", "to", required=True, help="Target primary: host:port or node id.")
@MIGRATE_TIMEOUT
@yes_option("Do it (without it, only print the move).")
@redis_options
def move_partition_command(
    queue_name: str, partition: int, to: str, migrate_timeout: float, yes: bool
) -> None:
    """Move PARTITION's slot, with all its keys, to the primary --to, in one MIGRATE, under load
    (callers follow ASK redirects; both primaries pause for about 2 us per waiting job).
    PARTITION is a partition of the active generation (named gG.P after a resize)."""
    from shardq.admin import slots

    with open_client() as client:
        layout = client.layout(queue_name)
        if partition >= layout.partitions:
            raise click.ClickException(
                f"queue {queue_name!r} has partitions 0-{layout.partitions - 1}; {partition} "
                "is not one of them"
            )
        step = slots.prepare_move(
            client, queue_name, keys.fleet_id(layout.generation, partition), to
        )
        name = fmt.partition(step.partition)
        if not step.needed:
            click.echo(f"partition {name} already lives on {step.target}: nothing to do")
            return
        others = (
            f", {step.other_keys} of them not this partition's (they share its slot and move too)"
            if step.other_keys
            else ""
        )
        click.echo(
            f"plan: move partition {name} of {step.queue} (slot {step.slot}: "
            f"{step.keys_in_slot} keys{others}) from {step.source} to {step.target}"
            + (" (finishing a move that stopped half-way)" if step.in_progress else "")
        )
        click.echo(
            f"  {step.waiting_jobs:,} waiting jobs move in one MIGRATE: both primaries pause "
            f"~{step.estimated_pause_s * 1000:,.1f} ms"
        )
        slots.require_slot_moves(client, queue_name)  # a managed service: refused, plan shown
        if not yes:
            click.echo("add --yes to do it")
            return
        result = slots.move(client, step, int(migrate_timeout * 1000))
        click.echo(
            f"moved {result.keys_moved} keys in {result.migrate_seconds * 1000:,.1f} ms; partition "
            f"{name} now lives on {step.target}"
        )


def _placement(
    client: Client,
    queue_name: str,
    all_queues: bool,
    balance_by: By,
    tolerance: float,
    window: float,
) -> tuple[placement.Placement, str]:
    """The placement, and a sentence saying what was counted."""
    from shardq.admin import balancer, placement

    # SlotMoveError on a single node; SlotMidMoveError names the command that finishes a move.
    m = balancer.measure(client, [] if all_queues else [queue_name], window)
    if all_queues and queue_name not in m.queues:
        client.partitions(queue_name)  # UnknownQueueError, as without --all-queues
    what = {
        "rate": f"jobs/s (enqueued + promoted over {window:g} s)",
        "bytes": "bytes (MEMORY USAGE of every key in their slots)",
        "load": f"% of the total: each slot's share of the jobs/s (over {window:g} s) plus its "
        "share of the bytes (MEMORY USAGE of every key), the two counting equally",
    }[balance_by]
    partitions = sum(1 for s in m.slots for q, _ in s.partitions if q in m.queues)
    if all_queues:
        scope = f"the {partitions} partitions of every queue ({', '.join(m.queues)})"
    else:
        scope = f"the {partitions} partitions of {queue_name}"
    shared = sum(1 for s in m.slots if len({q for q, _ in s.partitions}) > 1)
    counted = (
        f"load counted: {what} of {scope} over {len(m.primaries)} primaries"
        + ("" if all_queues else "; other queues' partitions are not counted (--all-queues)")
        + (
            f" ({shared} slot(s) hold partitions of two queues: they move together)"
            if shared
            else ""
        )
        + "; bytes moved: every key of a moved slot"
    )
    return placement.place(m.units(balance_by), m.primaries, tolerance), counted


def _placement_json(
    queue_name: str, by: str, counted: str, p: placement.Placement
) -> dict[str, Any]:
    return {
        "queue": queue_name,
        "by": by,
        "counted": counted,
        "tolerance": p.tolerance,
        "mean": p.mean,
        "before": p.before,
        "after": p.after,
        "busiest_over_mean_before": round(p.ratio_before, 4),
        "busiest_over_mean_after": round(p.ratio_after, 4),
        "least_over_mean_before": round(p.least_before, 4),
        "least_over_mean_after": round(p.least_after, 4),
        "within_tolerance": p.within_tolerance,
        "optimal": p.optimal,
        "reason": p.reason,
        "bytes_moved": p.bytes_moved,
        "moves": [
            {
                "slot": m.slot,
                "partitions": [
                    {"queue": q, "partition": fmt.partition(n)} for q, n in m.partitions
                ],
                "from": m.source,
                "to": m.target,
                "bytes": m.bytes,
                "load": m.load,
            }
            for m in p.moves
        ],
    }


def _unit(by: str, value: float) -> str:
    if by == "load":
        return f"{value:,.2f} %"
    return f"{value:,.1f}/s" if by == "rate" else f"{value:,.0f} B"


def _print_placement(by: str, counted: str, p: placement.Placement) -> None:
    click.echo(counted)
    click.echo(
        fmt.table(
            ["primary", "load now", "after plan"],
            [[n, _unit(by, p.before[n]), _unit(by, p.after[n])] for n in sorted(p.before)],
            right=[1, 2],
        )
    )
    click.echo(
        f"busiest/mean {p.ratio_before:.2f} -> {p.ratio_after:.2f}, least/mean "
        f"{p.least_before:.2f} -> {p.least_after:.2f} (tolerance +/-{p.tolerance:.0%}; mean "
        f"{_unit(by, p.mean)})"
    )
    if not p.moves:
        click.echo(
            "within tolerance: nothing to move"
            if p.within_tolerance
            else f"nothing to move: {p.reason}"
        )
        return
    click.echo(
        f"plan: {len(p.moves)} move(s), {p.bytes_moved:,} bytes"
        + (" (fewest bytes: proven)" if p.optimal else "")
    )
    for i, m in enumerate(p.moves, 1):
        names = ", ".join(f"{q}/{fmt.partition(n)}" for q, n in m.partitions)
        click.echo(
            f"  {i:>3}. slot {m.slot:>5} (partition {names}) {m.source} -> {m.target}  "
            f"{m.bytes:,} B" + (f"  {_unit(by, m.load)}" if by != "bytes" else "")
        )
    if not p.within_tolerance:
        click.echo(f"tolerance not met: {p.reason}")


def _apply(
    client: Client,
    queue_name: str,
    all_queues: bool,
    balance_by: By,
    tolerance: float,
    window: float,
    yes: bool,
    budget: balancer.Budget,
) -> None:
    from shardq.admin import balancer, slots
    from shardq.client import Client

    p, counted = _placement(client, queue_name, all_queues, balance_by, tolerance, window)
    _print_placement(balance_by, counted, p)
    if not p.moves:
        return
    slots.require_slot_moves(client, queue_name)  # a managed service: refused, plan shown
    todo = list(p.moves[: budget.max_moves])
    if not yes:
        click.echo(
            f"add --yes to carry out {len(todo)} of the {len(p.moves)} move(s)"
            if len(todo) < len(p.moves)
            else "add --yes to carry it out"
        )
        return
    settings = redis_settings()

    def report(r: balancer.Moved) -> None:
        click.echo(
            f"  moved slot {r.move.slot} to {r.move.target}: {r.keys_moved} keys, MIGRATE "
            f"{r.migrate_seconds * 1000:,.1f} ms"
        )

    out = balancer.carry_out(lambda: Client(settings), p.moves, budget, on_moved=report)
    done = len(out.done)
    left = len(p.moves) - done
    if out.error is not None and out.failed is not None:
        m = out.failed
        raise click.ClickException(
            f"stopped at move {done + 1} of {len(p.moves)} (slot {m.slot} {m.source} -> "
            f"{m.target}): {out.error}. Done: {done} move(s), {out.bytes_moved:,} bytes; left: "
            f"{left}; `shardq rebalance plan` shows what is left (and the command that "
            "finishes a move left half-way)"
        )
    rate = out.bytes_moved / out.seconds if out.seconds > 0 else 0.0
    click.echo(
        f"done: {done} move(s), {out.bytes_moved:,} bytes in {out.seconds:,.1f} s "
        f"({rate:,.0f} B/s, at most {out.most_at_once} at once)"
        + (
            f"; {left} left (--max-moves {budget.max_moves}): run it again for the rest"
            if left
            else ""
        )
    )
