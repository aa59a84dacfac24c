"""``shardq rebalance``: partitions over dispatchers (leases) or over Redis primaries (slots).

It prints what it will do and acts only with ``--yes``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

import click

from shardq import format as fmt
from shardq.cli.connection import open_client, redis_options, redis_settings
from shardq.cli.options import balance_by_option, move_budget_options, queue_option
from shardq.names import By
from shardq.store import keys

if TYPE_CHECKING:
    from shardq import admin
    from shardq.admin import balancer, placement
    from shardq.client import Client


def _print_spread(s: admin.Spread) -> None:
    click.echo(f"{s.partitions} partitions, {len(s.live)} live dispatcher(s), {s.unowned} unowned")
    for member in s.live:
        mark = " (draining)" if member in s.draining else ""
        click.echo(
            f"  {member}: holds {s.held.get(member, 0)}, fair share {s.target.get(member, 0)}{mark}"
        )
    for owner, n in s.held.items():
        if owner not in s.live:
            click.echo(f"  {owner}: holds {n} but is not live (leases expire soon)")
    click.echo("spread is even" if s.even else "spread is NOT even")


@click.command()
@queue_option()
@click.option(
    "--drain",
    "drain_id",
    default=None,
    help="Move every partition of this dispatcher to the others (planned shutdown).",
)
@click.option("--undrain", "undrain_id", default=None, help="Cancel a drain request.")
@click.option("--even", is_flag=True, help="Revoke leases above fair share now.")
@click.option(
    "--nodes",
    "show_nodes",
    is_flag=True,
    help="Show the queue's partitions and rate per Redis primary, and suggest a partition move.",
)
@click.option(
    "--move-partition",
    type=int,
    default=None,
    help="Move this partition's slot (its data) to the primary given by --to.",
)
@click.option("--to", "to_node", default=None, help="Target primary: host:port or node id.")
@click.option(
    "--window", default=1.0, show_default=True, help="Seconds over which --nodes takes rates."
)
@click.option(
    "--migrate-timeout",
    default=60.0,
    show_default=True,
    help="Seconds MIGRATE may take for the partition's keys.",
)
@click.option(
    "--plan",
    "plan_only",
    is_flag=True,
    help="With --nodes: the slot moves that bring every primary within --tolerance of the "
    "mean, moving the fewest bytes; changes nothing.",
)
@click.option(
    "--apply",
    "apply_plan",
    is_flag=True,
    help="With --nodes: carry out that plan move by move (with --yes), at most --max-moves.",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(0.0, 100.0),
    default=10.0,
    show_default=True,
    help="Percent of the mean each primary's load may differ by (--plan/--apply).",
)
@balance_by_option
@move_budget_options
@click.option(
    "--all-queues",
    is_flag=True,
    help="Count every queue's partitions (--plan/--apply), not only --queue's.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (--plan).")
@click.option("--yes", is_flag=True, help="Do it (without it, only print the plan).")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for a drain.")
@redis_options
def rebalance(
    queue_name: str,
    drain_id: str | None,
    undrain_id: str | None,
    even: bool,
    show_nodes: bool,
    move_partition: int | None,
    to_node: str | None,
    window: float,
    migrate_timeout: float,
    plan_only: bool,
    apply_plan: bool,
    tolerance: float,
    balance_by: str,
    max_moves: int,
    concurrency: int,
    bytes_per_second: float | None,
    all_queues: bool,
    as_json: bool,
    yes: bool,
    timeout: float,
) -> None:
    """Rebalance the queue: partitions over dispatchers (leases), or over Redis primaries (slots).

    Without --nodes or --move-partition: show the spread of the queue's partitions over
    dispatchers against fair share; --drain, --undrain and --even move leases. Safe under
    load: a revoked or drained partition is fenced off its old owner before a peer promotes
    it, so no job is promoted twice or lost.

    --nodes shows the load per Redis primary and suggests one partition move;
    --move-partition P --to NODE moves partition P's slot and all its keys there in one
    MIGRATE, under load (callers follow ASK redirects; both primaries pause for about 2 us
    per waiting job).

    --nodes --plan computes the slot moves that bring every primary's load (--by load, rate
    or bytes of the queue's partitions, or of every queue's with --all-queues) within
    --tolerance percent of the mean with the fewest bytes moved; --nodes --apply --yes
    carries them out (at most --max-moves, --concurrency at once, --bytes-per-second),
    stopping at the first error.  `shardq balancer run` keeps it balanced.
    """
    from shardq import admin
    from shardq.admin import balancer

    planning = plan_only or apply_plan
    node_mode = show_nodes or planning or move_partition is not None or to_node is not None
    if plan_only and apply_plan:
        raise click.UsageError("--plan shows the plan, --apply carries it out: pick one")
    if planning and move_partition is not None:
        raise click.UsageError(
            "--plan/--apply choose the moves themselves; --move-partition moves one: pick one"
        )
    if as_json and not plan_only:
        raise click.UsageError("--json goes with --nodes --plan")
    if node_mode and (drain_id or undrain_id or even):
        raise click.UsageError(
            "--nodes/--move-partition move data between primaries; --drain/--undrain/--even "
            "move leases between dispatchers: run them separately"
        )
    if (move_partition is None) != (to_node is None):
        raise click.UsageError("--move-partition and --to go together")
    with open_client() as client:
        if planning:
            budget = balancer.Budget(
                concurrency, bytes_per_second, max_moves, int(migrate_timeout * 1000)
            )
            _rebalance_plan(
                client,
                queue_name,
                all_queues,
                cast(By, balance_by),  # a click.Choice of BY_CHOICES
                tolerance / 100.0,
                window,
                apply_plan,
                yes,
                budget,
                as_json,
            )
            return
        if node_mode:
            _rebalance_nodes(
                client, queue_name, move_partition, to_node, window, migrate_timeout, yes
            )
            return
        s = admin.spread(client, queue_name)
        _print_spread(s)
        if undrain_id:
            if not yes:
                click.echo(f"would cancel the drain of {undrain_id}; add --yes to do it")
                return
            admin.cancel_drain(client, queue_name, undrain_id)
            click.echo(f"drain of {undrain_id} cancelled")
            return
        if drain_id:
            if drain_id not in s.live:
                raise click.ClickException(
                    f"{drain_id!r} is not a live dispatcher of {queue_name}: pick one of "
                    f"{s.live or 'none'}"
                )
            if len(s.live) - len(s.draining) <= 1:
                raise click.ClickException(
                    "it is the only active dispatcher: start another one before draining it"
                )
            click.echo(
                f"plan: {drain_id} hands back its {s.held.get(drain_id, 0)} partitions; "
                "the others take them up to their new fair share"
            )
            if not yes:
                click.echo("add --yes to do it")
                return
            admin.request_drain(client, queue_name, drain_id)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                held = admin.spread(client, queue_name).held.get(drain_id, 0)
                click.echo(f"  {drain_id} holds {held}")
                if held == 0:
                    break
                time.sleep(1.0)
            else:
                raise click.ClickException(f"{drain_id} still holds partitions after {timeout} s")
            click.echo(
                f"drained {drain_id}; it keeps running with no partitions "
                "(stop it, or `--undrain` it)"
            )
            return
        if even:
            plan = admin.excess_leases(client, queue_name)
            if not plan:
                click.echo("nothing above fair share: nothing to do")
                return
            for p, owner in plan:
                click.echo(f"  revoke partition {fmt.partition(p)} from {owner}")
            if not yes:
                click.echo("add --yes to do it")
                return
            n = admin.revoke(client, queue_name, plan)
            click.echo(
                f"revoked {n} lease(s); peers below fair share take them within one "
                "renewal interval"
            )


def _rebalance_nodes(
    client: Client,
    queue_name: str,
    move_partition: int | None,
    to_node: str | None,
    window: float,
    migrate_timeout: float,
    yes: bool,
) -> None:
    from shardq import admin
    from shardq.admin import slots

    if move_partition is None or to_node is None:
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
                f"  shardq rebalance --queue {queue_name} --move-partition {number} "
                f"--to {tip.target} --yes"
            )
        return
    # --move-partition P: partition P of the active generation (named gG.P after a resize)
    layout = client.layout(queue_name)
    if move_partition >= layout.partitions:
        raise click.ClickException(
            f"queue {queue_name!r} has partitions 0-{layout.partitions - 1}; {move_partition} "
            "is not one of them"
        )
    plan = slots.prepare_move(
        client, queue_name, keys.fleet_id(layout.generation, move_partition), to_node
    )
    name = fmt.partition(plan.partition)
    if not plan.needed:
        click.echo(f"partition {name} already lives on {plan.target}: nothing to do")
        return
    others = (
        f", {plan.other_keys} of them not this partition's (they share its slot and move too)"
        if plan.other_keys
        else ""
    )
    click.echo(
        f"plan: move partition {name} of {plan.queue} (slot {plan.slot}: "
        f"{plan.keys_in_slot} keys{others}) from {plan.source} to {plan.target}"
        + (" (finishing a move that stopped half-way)" if plan.in_progress else "")
    )
    click.echo(
        f"  {plan.waiting_jobs:,} waiting jobs move in one MIGRATE: both primaries pause "
        f"~{plan.estimated_pause_s * 1000:,.1f} ms"
    )
    slots.require_slot_moves(client, queue_name)  # a managed service: refused, plan shown
    if not yes:
        click.echo("add --yes to do it")
        return
    result = slots.move(client, plan, int(migrate_timeout * 1000))
    click.echo(
        f"moved {result.keys_moved} keys in {result.migrate_seconds * 1000:,.1f} ms; partition "
        f"{name} now lives on {plan.target}"
    )


def _placement(
    client: Client,
    queue_name: str,
    all_queues: bool,
    balance_by: By,
    tolerance: float,
    window: float,
) -> tuple[placement.Placement, str]:
    """The plan, and a sentence saying what was counted."""
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


def _rebalance_plan(
    client: Client,
    queue_name: str,
    all_queues: bool,
    balance_by: By,
    tolerance: float,
    window: float,
    apply_plan: bool,
    yes: bool,
    budget: balancer.Budget,
    as_json: bool,
) -> None:
    from shardq.admin import balancer, slots
    from shardq.client import Client

    p, counted = _placement(client, queue_name, all_queues, balance_by, tolerance, window)
    if as_json:
        fmt.echo_json(_placement_json(queue_name, balance_by, counted, p))
        return
    _print_placement(balance_by, counted, p)
    if not apply_plan or not p.moves:
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
            f"{left}; `--nodes --plan` shows what is left (and the command that "
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
