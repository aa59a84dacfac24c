"""Operator commands: ``shardq owners``, ``rebalance``, ``stats`` and ``dlq``.

Commands that change state print what they will do and act only with ``--yes``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import click

from shardq import admin, slots
from shardq.cli_common import friendly_errors, redis_options, settings_from
from shardq.client import Client


def _client(url: str, username: str | None, password: str | None) -> Client:
    return Client(settings_from(url, username, password))


def _fmt(value: float | None, unit: str = "s") -> str:
    return "-" if value is None else f"{value:.1f}{unit}"


@click.command()
@click.option("--queue", "queue_name", required=True)
@click.option("--json", "as_json", is_flag=True)
@redis_options
@friendly_errors
def owners(
    queue_name: str, as_json: bool, url: str, username: str | None, password: str | None
) -> None:
    """Partition, owner, token, lease age and next due time of every partition of QUEUE."""
    with _client(url, username, password) as client:
        rows = admin.owners(client, queue_name)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in rows]))
        return
    click.echo(f"{'partition':>9}  {'token':>6}  {'age':>7}  {'ttl':>6}  {'next due':>9}  owner")
    for r in rows:
        click.echo(
            f"{r.partition:>9}  {r.token if r.token is not None else '-':>6}  "
            f"{_fmt(r.lease_age_s):>7}  {_fmt(r.lease_ttl_s):>6}  {_fmt(r.next_due_in_s):>9}  "
            f"{r.owner or '(free)'}"
        )


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
@click.option("--queue", "queue_name", required=True)
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
@click.option("--yes", is_flag=True, help="Do it (without it, only print the plan).")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for a drain.")
@redis_options
@friendly_errors
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
    yes: bool,
    timeout: float,
    url: str,
    username: str | None,
    password: str | None,
) -> None:
    """Rebalance QUEUE: partitions over dispatchers (leases), or over Redis primaries (slots).

    Without --nodes or --move-partition: show the spread of QUEUE's partitions over
    dispatchers against fair share; --drain, --undrain and --even move leases. Safe under
    load: a revoked or drained partition is fenced off its old owner before a peer promotes
    it, so no job is promoted twice or lost.

    --nodes shows the load per Redis primary and suggests one partition move;
    --move-partition P --to NODE moves partition P's slot and all its keys there in one
    MIGRATE, under load (callers follow ASK redirects; both primaries pause for about 2 us
    per waiting job).
    """
    node_mode = show_nodes or move_partition is not None or to_node is not None
    if node_mode and (drain_id or undrain_id or even):
        raise click.UsageError(
            "--nodes/--move-partition move data between primaries; --drain/--undrain/--even "
            "move leases between dispatchers: run them separately"
        )
    if (move_partition is None) != (to_node is None):
        raise click.UsageError("--move-partition and --to go together")
    with _client(url, username, password) as client:
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
            plan = admin.even_plan(client, queue_name)
            if not plan:
                click.echo("nothing above fair share: nothing to do")
                return
            for p, owner in plan:
                click.echo(f"  revoke partition {p} from {owner}")
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
            f"suggestion: move partition {tip.partition} ({tip.rate_per_s:,.1f}/s) from "
            f"{tip.source} to {tip.target}: busiest primary {tip.busiest_before:,.1f}/s -> "
            f"{tip.busiest_after:,.1f}/s"
        )
        click.echo(
            f"  shardq rebalance --queue {queue_name} --move-partition {tip.partition} "
            f"--to {tip.target} --yes"
        )
        return
    plan = slots.plan_move(client, queue_name, move_partition, to_node)
    if not plan.needed:
        click.echo(f"partition {plan.partition} already lives on {plan.target}: nothing to do")
        return
    others = (
        f", {plan.other_keys} of them not this partition's (they share its slot and move too)"
        if plan.other_keys
        else ""
    )
    click.echo(
        f"plan: move partition {plan.partition} of {plan.queue} (slot {plan.slot}: "
        f"{plan.keys_in_slot} keys{others}) from {plan.source} to {plan.target}"
        + (" (finishing a move that stopped half-way)" if plan.in_progress else "")
    )
    click.echo(
        f"  {plan.waiting_jobs:,} waiting jobs move in one MIGRATE: both primaries pause "
        f"~{plan.estimated_pause_s * 1000:,.1f} ms"
    )
    if not yes:
        click.echo("add --yes to do it")
        return
    result = slots.move(client, plan, int(migrate_timeout * 1000))
    click.echo(
        f"moved {result.keys_moved} keys in {result.migrate_seconds * 1000:,.1f} ms; partition "
        f"{plan.partition} now lives on {plan.target}"
    )


def _render_stats(data: dict[str, Any], top: int) -> str:
    q = data["queue"]
    lines = [
        f"queue {q['queue']}: {q['partitions']} partitions  due {q['due']:,}  overdue "
        f"{q['overdue']:,}  max lag {q['max_lag_s']}s  ready {q['ready']:,}  pending "
        f"{q['pending']:,}  dead {q['dead']:,}  rate {q['rate_per_s']:,}/s  hot partition x"
        f"{q['hot_partition_ratio']}  hot node x{q['hot_node_ratio']}",
        f"{'node':<22}{'parts':>6}{'due':>11}{'overdue':>9}{'pending':>9}{'dead':>7}{'rate/s':>10}",
    ]
    for n in data["nodes"]:
        lines.append(
            f"{n['node']:<22}{n['partitions']:>6}{n['due']:>11,}{n['overdue']:>9,}"
            f"{n['pending']:>9,}{n['dead']:>7,}{n['rate_per_s']:>10,}"
        )
    lines.append(f"hottest partitions (top {top}):")
    lines.append(
        f"{'part':>6}{'node':>22}{'due':>10}{'overdue':>9}{'lag s':>8}{'ready':>8}"
        f"{'pending':>9}{'dead':>7}{'rate/s':>9}"
    )
    ranked = sorted(data["partitions"], key=lambda r: (-r["rate_per_s"], -r["due"]))
    for r in ranked[:top]:
        lines.append(
            f"{r['partition']:>6}{r['node']:>22}{r['due']:>10,}{r['overdue']:>9,}"
            f"{r['lag_s']:>8}{r['ready']:>8,}{r['pending']:>9,}{r['dead']:>7,}"
            f"{r['rate_per_s']:>9,}"
        )
    return "\n".join(lines)


@click.command()
@click.option("--queue", "queue_name", default=None, help="One queue (default: every queue).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per queue per refresh.")
@click.option("--watch", is_flag=True, help="Refresh until interrupted.")
@click.option(
    "--window", default=1.0, show_default=True, help="Seconds over which rates are taken."
)
@click.option("--top", default=10, show_default=True, help="Partitions to list.")
@redis_options
@friendly_errors
def stats(
    queue_name: str | None,
    as_json: bool,
    watch: bool,
    window: float,
    top: int,
    url: str,
    username: str | None,
    password: str | None,
) -> None:
    """Backlog, overdue, lag, pending, dead letters and rates per queue, node and partition."""
    with _client(url, username, password) as client:
        queues = [queue_name] if queue_name else client.queues()
        if not queues:
            raise click.ClickException("no queues: create one with `shardq queue create NAME`")
        while True:
            for q in queues:
                data = admin.queue_stats(client, q, window)
                click.echo(json.dumps(data) if as_json else _render_stats(data, top))
            if not watch:
                return
            if not as_json:
                click.echo("")


@click.group()
def dlq() -> None:
    """The dead-letter stream: list, show, replay, purge."""


@dlq.command("list")
@click.option("--queue", "queue_name", required=True)
@click.option("--limit", default=50, show_default=True)
@click.option("--partition", type=int, default=None)
@click.option("--json", "as_json", is_flag=True)
@redis_options
@friendly_errors
def dlq_list(
    queue_name: str,
    limit: int,
    partition: int | None,
    as_json: bool,
    url: str,
    username: str | None,
    password: str | None,
) -> None:
    """Newest dead letters first."""
    with _client(url, username, password) as client:
        letters = admin.dead_letters(client, queue_name, limit, partition)
        total = admin.dead_count(client, queue_name)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(d) for d in letters]))
        return
    click.echo(f"{total} dead letter(s) in {queue_name}; newest {len(letters)}:")
    for d in letters:
        error = d.error.splitlines()[0] if d.error else ""
        click.echo(
            f"  p{d.partition} {d.entry_id} job={d.job_id or '(malformed)'} "
            f"attempt={d.attempt} {error[:120]}"
        )


@dlq.command("show")
@click.option("--queue", "queue_name", required=True)
@click.argument("job_id")
@redis_options
@friendly_errors
def dlq_show(
    queue_name: str, job_id: str, url: str, username: str | None, password: str | None
) -> None:
    """A dead job in full: payload, attempts and last error."""
    with _client(url, username, password) as client:
        info = client.get(queue_name, job_id)
    if info is None:
        raise click.ClickException(f"job {job_id!r} not found")
    click.echo(json.dumps(dataclasses.asdict(info), indent=2, default=str))


def _job_ids(job_ids: tuple[str, ...], all_jobs: bool) -> list[str] | None:
    if all_jobs == bool(job_ids):
        raise click.UsageError("name job ids or pass --all (not both)")
    return None if all_jobs else list(job_ids)


@dlq.command("replay")
@click.option("--queue", "queue_name", required=True)
@click.argument("job_ids", nargs=-1)
@click.option("--all", "all_jobs", is_flag=True, help="Every dead job of the queue.")
@click.option("--yes", is_flag=True, help="Do it (without it, only count).")
@redis_options
@friendly_errors
def dlq_replay(
    queue_name: str,
    job_ids: tuple[str, ...],
    all_jobs: bool,
    yes: bool,
    url: str,
    username: str | None,
    password: str | None,
) -> None:
    """Put dead jobs back, due now, with attempts reset; says how many moved."""
    wanted = _job_ids(job_ids, all_jobs)
    with _client(url, username, password) as client:
        if not yes:
            n = admin.dead_count(client, queue_name) if wanted is None else len(wanted)
            click.echo(f"would replay {n} dead job(s) of {queue_name}; add --yes to do it")
            return
        moved, skipped = admin.replay(client, queue_name, wanted)
    click.echo(f"replayed {moved} job(s); skipped {skipped} (malformed or no longer dead)")


@dlq.command("purge")
@click.option("--queue", "queue_name", required=True)
@click.argument("job_ids", nargs=-1)
@click.option("--all", "all_jobs", is_flag=True, help="Every dead letter of the queue.")
@click.option("--yes", is_flag=True, help="Do it (without it, only count).")
@redis_options
@friendly_errors
def dlq_purge(
    queue_name: str,
    job_ids: tuple[str, ...],
    all_jobs: bool,
    yes: bool,
    url: str,
    username: str | None,
    password: str | None,
) -> None:
    """Delete dead letters and their dead jobs for good."""
    wanted = _job_ids(job_ids, all_jobs)
    with _client(url, username, password) as client:
        if not yes:
            n = admin.dead_count(client, queue_name) if wanted is None else len(wanted)
            click.echo(f"would purge {n} dead letter(s) of {queue_name}; add --yes to do it")
            return
        n = admin.purge(client, queue_name, wanted)
    click.echo(f"purged {n} dead letter(s)")
