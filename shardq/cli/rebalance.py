"""``shardq rebalance``: move a queue's partitions between dispatchers (their leases: ``leases``,
``even``, ``drain``, ``undrain``, here) or between Redis primaries (their slots: ``nodes``,
``plan``, ``apply``, ``move-partition``, in :mod:`shardq.cli.rebalance_slots`).

Every subcommand that moves something prints what it will do and acts only with ``--yes``.
``shardq rebalance --drain ID`` and the other flags of the one command ``rebalance`` was still
work, for scripts: each runs its subcommand after a one-line note on stderr.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from shardq import format as fmt
from shardq.cli import rebalance_slots
from shardq.cli.connection import open_client, redis_options
from shardq.cli.options import queue_option, yes_option
from shardq.cli.params import QUEUE_NAME, Duration
from shardq.names import BY_CHOICES

if TYPE_CHECKING:
    from shardq import admin

DISPATCHER = click.argument("dispatcher")


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


def _spread(client: Any, queue_name: str) -> admin.Spread:
    from shardq import admin

    s = admin.spread(client, queue_name)
    _print_spread(s)
    return s


# The old spelling: `shardq rebalance --drain ID ...` ------------------------------------------
# Its options, hidden, on the group: given without a subcommand, they run the subcommand that
# does what they did.  (Its connection options are the group's too, as on every command.)

_OLD_OPTIONS = [
    click.option(
        "--queue", "-q", "queue_name", type=QUEUE_NAME, envvar="SHARDQ_QUEUE", hidden=True
    ),
    click.option("--drain", "drain_id", default=None, hidden=True),
    click.option("--undrain", "undrain_id", default=None, hidden=True),
    click.option("--even", is_flag=True, hidden=True),
    click.option("--nodes", "show_nodes", is_flag=True, hidden=True),
    click.option("--move-partition", type=click.IntRange(0), default=None, hidden=True),
    click.option("--to", "to_node", default=None, hidden=True),
    click.option("--window", type=Duration(0.0, 3600.0), default=None, hidden=True),
    click.option("--migrate-timeout", type=Duration(0.001, 86400.0), default=None, hidden=True),
    click.option("--plan", "plan_only", is_flag=True, hidden=True),
    click.option("--apply", "apply_placement", is_flag=True, hidden=True),
    click.option("--tolerance", type=click.FloatRange(0.0, 100.0), default=None, hidden=True),
    click.option("--by", "balance_by", type=click.Choice(BY_CHOICES), default=None, hidden=True),
    click.option("--max-moves", type=click.IntRange(1), default=None, hidden=True),
    click.option("--concurrency", type=click.IntRange(1, 64), default=None, hidden=True),
    click.option("--bytes-per-second", type=click.FloatRange(min=1.0), default=None, hidden=True),
    click.option("--all-queues", is_flag=True, hidden=True),
    click.option("--json", "as_json", is_flag=True, hidden=True),
    click.option("--yes", is_flag=True, hidden=True),
    click.option("--timeout", type=Duration(0.0, 86400.0), default=None, hidden=True),
]


def _old_options(fn: Any) -> Any:
    for option in reversed(_OLD_OPTIONS):
        fn = option(fn)
    return fn


@click.group(invoke_without_command=True)
@_old_options
@redis_options
@click.pass_context
def rebalance(ctx: click.Context, /, **old: Any) -> None:
    """Move a queue's partitions between dispatchers (their leases) or between Redis
    primaries (their slots).

    \b
    Between dispatchers (safe under load: a revoked or drained partition is
    fenced off its old owner before a peer promotes it, so no job is promoted
    twice or lost):
      leases          the spread over dispatchers against their fair share
      even            revoke the leases above fair share
      drain           move every partition off one dispatcher (a planned
                      shutdown); undrain cancels it

    \b
    Between Redis primaries (each move is one MIGRATE of a slot and all its
    keys, under load):
      nodes           the load per primary, and the partition move that helps
      plan            the slot moves that bring every primary near the mean
      apply           carry that plan out, within a budget
      move-partition  move one partition's slot to a primary
    `shardq balancer run` keeps the primaries balanced while it runs.

    Whatever moves something prints what it will do and acts only with --yes.
    """
    given = [name for name in old if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]
    if ctx.invoked_subcommand is not None:
        if given:
            raise click.UsageError(
                f"put the options after the subcommand: shardq rebalance "
                f"{ctx.invoked_subcommand} [OPTIONS]"
            )
        return
    if not given:
        click.echo(ctx.get_help())
        return
    _run_old_spelling(ctx, **old)


def _run_old_spelling(
    ctx: click.Context,
    queue_name: str | None,
    drain_id: str | None,
    undrain_id: str | None,
    even: bool,
    show_nodes: bool,
    move_partition: int | None,
    to_node: str | None,
    window: float | None,
    migrate_timeout: float | None,
    plan_only: bool,
    apply_placement: bool,
    tolerance: float | None,
    balance_by: str | None,
    max_moves: int | None,
    concurrency: int | None,
    bytes_per_second: float | None,
    all_queues: bool,
    as_json: bool,
    yes: bool,
    timeout: float | None,
) -> None:
    """``shardq rebalance --FLAGS``: check them as the one command did, then run the
    subcommand that does it now."""
    planning = plan_only or apply_placement
    node_mode = show_nodes or planning or move_partition is not None or to_node is not None
    if plan_only and apply_placement:
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
    if queue_name is None:
        raise click.UsageError("Missing option '--queue' / '-q'.")
    placement_args = {
        k: v
        for k, v in (("balance_by", balance_by), ("tolerance", tolerance), ("window", window))
        if v is not None
    }
    args: dict[str, Any] = {"queue_name": queue_name}
    if plan_only:
        command, old, new = rebalance_slots.placement_command, "--nodes --plan", "plan"
        args.update(placement_args, all_queues=all_queues, as_json=as_json)
    elif apply_placement:
        command, old, new = rebalance_slots.apply_command, "--nodes --apply", "apply"
        budget = {
            "max_moves": max_moves,
            "concurrency": concurrency,
            "bytes_per_second": bytes_per_second,
            "migrate_timeout": migrate_timeout,
        }
        args.update(placement_args, all_queues=all_queues, yes=yes)
        args.update({k: v for k, v in budget.items() if v is not None})
    elif move_partition is not None:
        command = rebalance_slots.move_partition_command
        old, new = "--move-partition P --to NODE", "move-partition P --to NODE"
        args.update(partition=move_partition, to=to_node, yes=yes)
        if migrate_timeout is not None:
            args["migrate_timeout"] = migrate_timeout
    elif show_nodes:
        command, old, new = rebalance_slots.nodes_command, "--nodes", "nodes"
        if window is not None:
            args["window"] = window
    elif undrain_id is not None:
        command, old, new = undrain, "--undrain ID", "undrain ID"
        args.update(dispatcher=undrain_id, yes=yes)
    elif drain_id is not None:
        command, old, new = drain, "--drain ID", "drain ID"
        args.update(dispatcher=drain_id, yes=yes)
        if timeout is not None:
            args["timeout"] = timeout
    elif even:
        command, old, new = even_command, "--even", "even"
        args.update(yes=yes)
    else:
        command, old, new = leases, "--queue Q", "leases --queue Q"
    click.echo(
        f"note: `shardq rebalance {old}` is now `shardq rebalance {new}`; the old spelling will go",
        err=True,
    )
    ctx.invoke(command, **args)


# between dispatchers ------------------------------------------------------------------------------


@rebalance.command("leases")
@queue_option()
@redis_options
def leases(queue_name: str) -> None:
    """The spread of the queue's partitions over its live dispatchers, against each one's fair
    share (changes nothing)."""
    with open_client() as client:
        _spread(client, queue_name)


@rebalance.command("even")
@queue_option()
@yes_option("Do it (without it, only print the leases it would revoke).")
@redis_options
def even_command(queue_name: str, yes: bool) -> None:
    """Revoke the leases above fair share now: peers below theirs take them within one renewal
    interval."""
    from shardq import admin

    with open_client() as client:
        _spread(client, queue_name)
        excess = admin.excess_leases(client, queue_name)
        if not excess:
            click.echo("nothing above fair share: nothing to do")
            return
        for p, owner in excess:
            click.echo(f"  revoke partition {fmt.partition(p)} from {owner}")
        if not yes:
            click.echo("add --yes to do it")
            return
        n = admin.revoke(client, queue_name, excess)
    click.echo(
        f"revoked {n} lease(s); peers below fair share take them within one renewal interval"
    )


@rebalance.command("drain")
@queue_option()
@DISPATCHER
@click.option(
    "--timeout",
    type=Duration(0.0, 86400.0),
    default="60s",
    show_default=True,
    help="How long to wait for it to hand back every partition.",
)
@yes_option("Do it (without it, only print what would move).")
@redis_options
def drain(queue_name: str, dispatcher: str, timeout: float, yes: bool) -> None:
    """Move every partition of DISPATCHER (a member id, as `shardq rebalance leases` lists it)
    to the others, for a planned shutdown: it keeps running, holding none, until stopped or
    undrained."""
    from shardq import admin

    with open_client() as client:
        s = _spread(client, queue_name)
        if dispatcher not in s.live:
            raise click.ClickException(
                f"{dispatcher!r} is not a live dispatcher of {queue_name}: pick one of "
                f"{s.live or 'none'}"
            )
        if len(s.live) - len(s.draining) <= 1:
            raise click.ClickException(
                "it is the only active dispatcher: start another one before draining it"
            )
        click.echo(
            f"plan: {dispatcher} hands back its {s.held.get(dispatcher, 0)} partitions; "
            "the others take them up to their new fair share"
        )
        if not yes:
            click.echo("add --yes to do it")
            return
        admin.request_drain(client, queue_name, dispatcher)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            held = admin.spread(client, queue_name).held.get(dispatcher, 0)
            click.echo(f"  {dispatcher} holds {held}")
            if held == 0:
                break
            time.sleep(1.0)
        else:
            raise click.ClickException(f"{dispatcher} still holds partitions after {timeout:g} s")
    click.echo(
        f"drained {dispatcher}; it keeps running with no partitions (stop it, or `shardq "
        "rebalance undrain` it)"
    )


@rebalance.command("undrain")
@queue_option()
@DISPATCHER
@yes_option()
@redis_options
def undrain(queue_name: str, dispatcher: str, yes: bool) -> None:
    """Cancel the drain of DISPATCHER: it takes partitions again, up to its fair share."""
    from shardq import admin

    with open_client() as client:
        _spread(client, queue_name)
        if not yes:
            click.echo(f"would cancel the drain of {dispatcher}; add --yes to do it")
            return
        admin.cancel_drain(client, queue_name, dispatcher)
    click.echo(f"drain of {dispatcher} cancelled")


# between primaries: shardq.cli.rebalance_slots ----------------------------------------------------

for _command in (
    rebalance_slots.nodes_command,
    rebalance_slots.placement_command,
    rebalance_slots.apply_command,
    rebalance_slots.move_partition_command,
):
    rebalance.add_command(_command)
