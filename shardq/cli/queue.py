"""Every ``shardq queue`` command: create, list, lanes, upgrade (over the client) and info,
members, pause, resume, cancel, retry-dead, empty, delete (over
:class:`shardq.inspector.Inspector`)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import click

from shardq import format as fmt
from shardq.cli.connection import open_client, redis_options
from shardq.cli.options import JSON_OPTION, queue_option
from shardq.cli.params import JOB_TYPE, PARTITIONS, UTC_TIME, JobStates
from shardq.errors import ShardqError
from shardq.names import EMPTY_STATES, NOT_STARTED_STATES
from shardq.store.keys import MAX_PARTITIONS, SEARCHED_PARTITIONS

# create and list --------------------------------------------------------------------------


@click.group()
def queue() -> None:
    """Create and list queues."""


@queue.command("create")
@queue_option()
@click.option(
    "--partitions", type=PARTITIONS, default=64, show_default=True, help="Partition count (fixed)."
)
@click.option(
    "--ack-retention",
    type=click.FloatRange(0, 7 * 86400),
    default=0.0,
    show_default=True,
    help="Seconds to keep acknowledged ready entries before trimming.",
)
@click.option(
    "--dead-letter-cap",
    type=click.IntRange(1),
    default=100_000,
    show_default=True,
    help="Most dead letters kept per partition; older ones are dropped and counted.",
)
@click.option(
    "--allow-evicting-redis",
    is_flag=True,
    envvar="SHARDQ_ALLOW_EVICTING_REDIS",
    help="Create it even if a primary's maxmemory-policy evicts keys (jobs would vanish).",
)
@click.option(
    "--lanes",
    is_flag=True,
    help="Deliver by priority and share between tenants (see `shardq queue lanes`).",
)
@redis_options
def queue_create(
    queue_name: str,
    partitions: int,
    ack_retention: float,
    dead_letter_cap: int,
    allow_evicting_redis: bool,
    lanes: bool,
) -> None:
    """Create the queue (safe to repeat with the same partition count).

    Refused when a Redis primary's maxmemory-policy would evict keys."""
    with open_client() as client:
        created = client.create_queue(
            queue_name,
            partitions,
            ack_retention=ack_retention,
            dead_letter_cap=dead_letter_cap,
            allow_evicting_redis=allow_evicting_redis,
            lanes=lanes,
        )
    click.echo(
        f"queue {queue_name}: {'created' if created else 'exists'} with {partitions} partitions"
        + (", lanes on" if lanes else "")
    )
    if created and partitions > SEARCHED_PARTITIONS:
        click.echo(
            f"note: past {SEARCHED_PARTITIONS} partitions the idle cost (~2.6 Redis calls/s "
            "per partition) needs a process per ~2,000 partitions in each fleet, dispatchers "
            "and workers (docs/capacity.md, section 2)",
            err=True,
        )


@queue.command("lanes")
@queue_option()
@click.option("--on/--off", "on", default=None, help="Turn lanes on or off (omit: show).")
@redis_options
def queue_lanes(queue_name: str, on: bool | None) -> None:
    """Show or set the queue's lanes: with them on, due jobs are delivered by --priority
    (high, default, low shared 6:3:1) and round-robin between --tenant values, instead of in
    due order, for a few more Redis commands per job (docs/capacity.md)."""
    with open_client() as client:
        if on is None:
            state = client.lanes(queue_name)
            click.echo(f"{queue_name}: lanes {'on' if state else 'off'}")
            return
        n = client.partitions(queue_name)
        changed = client.set_lanes(queue_name, on)
    click.echo(f"{queue_name}: lanes {'on' if on else 'off'} ({changed} of {n} partitions changed)")


@queue.command("resize")
@queue_option()
@click.option(
    "--partitions",
    type=click.IntRange(1, MAX_PARTITIONS),
    default=None,
    help="The new partition count (grow or shrink, any count 1..16384).",
)
@click.option("--resume", is_flag=True, help="Go on with the resize that was started.")
@click.option("--abort", is_flag=True, help="Turn the running resize back: jobs stay in the old.")
@click.option(
    "--batch",
    type=click.IntRange(1, 1000),
    default=200,
    show_default=True,
    help="Jobs taken out of a partition per call (each call one bounded script).",
)
@click.option(
    "--lease-time",
    type=click.FloatRange(1, 600),
    default=15.0,
    show_default=True,
    help="Seconds a killed driver's lease keeps others from resuming.",
)
@redis_options
def queue_resize(
    queue_name: str,
    partitions: int | None,
    resume: bool,
    abort: bool,
    batch: int,
    lease_time: float,
) -> None:
    """Change the partition count of a live queue, with producers, dispatchers and workers
    running: every waiting job, schedule, idempotency record and dead letter moves to the new
    partitions in bounded batches, ready and running jobs finish where they are, and the
    fleet takes up the new layout by itself.  Safe to interrupt: run it again with --resume
    (its state is in Redis), or --abort before it commits.  Needs the admin's rights."""
    from shardq.admin.resize import Progress, Resizer

    if sum((partitions is not None, resume, abort)) != 1:
        raise click.UsageError("pass exactly one of --partitions N, --resume, --abort")

    def report(p: Progress) -> None:
        click.echo(
            f"round {p.rounds}: moved {p.moved} (+{p.idempotency_moved} idempotency records), "
            f"left to move {p.waiting}, draining in place {p.running}, "
            f"slowest round {p.longest_ms:.1f} ms, {p.elapsed:.1f} s",
            err=True,
        )

    with open_client() as client:
        resizer = Resizer(
            client, queue_name, on_progress=report, batch=batch, lease_ms=round(lease_time * 1000)
        )
        final = resizer.abort() if abort else resizer.run(None if resume else partitions)
    click.echo(
        f"queue {queue_name}: resize {final.phase} ({final.raw.get('from')} -> "
        f"{final.raw.get('to')}, as generation:partitions)"
    )


@queue.command("upgrade")
@queue_option()
@redis_options
def queue_upgrade(queue_name: str) -> None:
    """Raise the queue's stored layout to this version's (3: waiting jobs stored compactly,
    ~60 B less each; 4: the pause and lanes flags where only the operator may write them).
    Run it once every producer, dispatcher and worker of the queue runs this version or later:
    an older dispatcher cannot promote compact jobs, older processes read the flags elsewhere."""
    from shardq.store import keys

    with open_client() as client:
        was = client.upgrade_queue(queue_name)
    if was >= keys.LAYOUT_VERSION:
        click.echo(f"{queue_name}: layout {was} already (nothing to do)")
    else:
        click.echo(f"{queue_name}: layout {was} -> {keys.LAYOUT_VERSION}")


@queue.command("list")
@JSON_OPTION
@redis_options
def queue_list(as_json: bool) -> None:
    """List queues with their partition counts (JSON lines with --json)."""
    rows: list[dict[str, Any]] = []
    with open_client() as client:
        for name in client.queues():
            row: dict[str, Any] = {"queue": name, "partitions": None}
            try:
                row["partitions"] = client.partitions(name)
            except ShardqError as exc:  # a registry entry whose queue is gone or damaged
                row["error"] = str(exc)
            rows.append(row)
    if as_json:
        fmt.echo_json_lines(rows)
        return
    if not rows:
        click.echo("no queues: create one with `shardq queue create --queue NAME`")
        return
    click.echo(
        fmt.table(
            ["queue", "partitions"],
            [[r["queue"], r["partitions"] if "error" not in r else "? (damaged)"] for r in rows],
            right=[1],
        )
    )


# inspect and operate (the inspector) ------------------------------------------------------


@queue.command("info")
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


@queue.command("members")
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


@queue.command("pause")
@queue_option()
@redis_options
def queue_pause(queue_name: str) -> None:
    """Pause a queue: nothing is promoted or delivered; jobs keep their due times."""
    from shardq.inspector import Inspector

    with open_client() as client:
        n = Inspector(client).pause(queue_name)
    click.echo(f"{queue_name} paused ({n} partitions changed)")


@queue.command("resume")
@queue_option()
@redis_options
def queue_resume(queue_name: str) -> None:
    """Resume a paused queue; its dispatchers and workers are woken at once."""
    from shardq.inspector import Inspector

    with open_client() as client:
        n = Inspector(client).resume(queue_name)
    click.echo(f"{queue_name} resumed ({n} partitions changed)")


def _progress(label: str) -> Any:
    def show(done: int) -> None:
        click.echo(f"\r{label}: {done:,}", nl=False, err=True)

    return show


def _confirm(yes: bool, what: str) -> None:
    if not yes:
        raise click.UsageError(f"{what} cannot be undone: add --yes to go ahead")


@queue.command("cancel")
@queue_option()
@click.option(
    "--state", type=JobStates((*NOT_STARTED_STATES, "running")), default="scheduled",
    show_default=True,
    help="scheduled takes the whole due set (retrying jobs too); running stops running jobs "
    "(their workers are told; each ends as cancelled, never retried).",
)  # fmt: skip
@click.option("--running", is_flag=True, help="The same as --state running.")
@click.option("--type", "job_type", type=JOB_TYPE, default=None, help="Only jobs of this type.")
@click.option("--from", "start", type=UTC_TIME, default=None, help="Scheduled: due at or after.")
@click.option("--to", "end", type=UTC_TIME, default=None, help="Scheduled: due at or before.")
@click.option("--yes", is_flag=True, help="Really cancel them.")
@redis_options
def queue_cancel(
    queue_name: str,
    state: str,
    job_type: str | None,
    start: datetime | None,
    end: datetime | None,
    running: bool,
    yes: bool,
) -> None:
    """Cancel every not-started job matching the filter (or, with --running, every running
    one), in batches with progress."""
    from shardq.inspector import Inspector

    if running:
        state = "running"
    _confirm(yes, "cancelling jobs")
    with open_client() as client:
        n = Inspector(client).cancel(
            queue_name, state, job_type=job_type, start=start, end=end,
            progress=_progress("cancelled"),
        )  # fmt: skip
    click.echo(f"\ncancelled {n} jobs", err=True)


@queue.command("retry-dead")
@queue_option()
@click.option("--type", "job_type", type=JOB_TYPE, default=None, help="Only jobs of this type.")
@redis_options
def queue_retry_dead(queue_name: str, job_type: str | None) -> None:
    """Run every dead job (of a type) again, attempts reset."""
    from shardq.inspector import Inspector

    with open_client() as client:
        n = Inspector(client).retry_dead(queue_name, job_type, progress=_progress("replayed"))
    click.echo(f"\nreplayed {n} dead jobs", err=True)


@queue.command("empty")
@queue_option()
@click.option(
    "--state",
    type=JobStates(EMPTY_STATES),
    required=True,
    help="scheduled takes the whole due set (retrying jobs too).",
)
@click.option("--yes", is_flag=True, help="Really delete them.")
@redis_options
def queue_empty(queue_name: str, state: str, yes: bool) -> None:
    """Delete every job in one state, in bounded batches with progress."""
    from shardq.inspector import Inspector

    _confirm(yes, f"deleting every {state} job")
    with open_client() as client:
        n = Inspector(client).empty(queue_name, state, progress=_progress("deleted"))
    click.echo(f"\ndeleted {n} {state} jobs", err=True)


@queue.command("delete")
@queue_option()
@click.option("--yes", is_flag=True, help="Really delete the queue and its jobs.")
@click.option("--force", is_flag=True, help="Even with live workers or dispatchers.")
@redis_options
def queue_delete(queue_name: str, yes: bool, force: bool) -> None:
    """Delete a queue and every job in it (stop its workers and dispatchers first)."""
    from shardq.inspector import Inspector

    _confirm(yes, f"deleting queue {queue_name}")
    with open_client() as client:
        n = Inspector(client).delete_queue(queue_name, force=force)
    click.echo(f"deleted {queue_name} ({n} keys)")
