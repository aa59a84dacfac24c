"""Every ``shardq queue`` command: create, list, lanes, upgrade, resize (over the client and
the resize driver) and pause, resume, cancel, empty, delete (over
:class:`shardq.inspector.Inspector`); the read-only views (info, members, owners, stats) are
:mod:`shardq.cli.queue_views`'s.  ``queue retry-dead`` is the old name of ``shardq dlq replay
--all``, for scripts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from shardq import format as fmt
from shardq.cli import queue_views
from shardq.cli.connection import open_client, redis_options
from shardq.cli.options import JSON_OPTION, queue_option, require_yes, yes_option
from shardq.cli.params import JOB_TYPE, PARTITIONS, UTC_TIME, Duration, JobStates
from shardq.errors import ShardqError
from shardq.names import EMPTY_STATES, NOT_STARTED_STATES
from shardq.store.keys import MAX_PARTITIONS

# create and list --------------------------------------------------------------------------


@click.group()
def queue() -> None:
    """Create, list, resize, pause and empty queues; their partitions, members and stats."""


for _view in (queue_views.queue_info, queue_views.queue_members, queue_views.owners,
              queue_views.stats):  # fmt: skip
    queue.add_command(_view)


@queue.command("create")
@queue_option()
@click.option(
    "--partitions",
    type=PARTITIONS,
    default=64,
    show_default=True,
    help="Partition count (change it later with `shardq queue resize`).",
)
@click.option(
    "--ack-retention",
    type=Duration(0.0, 7 * 86400.0),
    default="0s",
    show_default=True,
    help="How long to keep acknowledged ready entries before trimming (e.g. 1h).",
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
    help="Create it even if a primary's maxmemory-policy evicts keys (jobs would vanish). "
    "Env: SHARDQ_ALLOW_EVICTING_REDIS.",
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
    type=Duration(1.0, 600.0),
    default="15s",
    show_default=True,
    help="How long a killed driver's lease keeps others from resuming.",
)
@yes_option("Really move the jobs (without it, nothing changes).")
@redis_options
def queue_resize(
    queue_name: str,
    partitions: int | None,
    resume: bool,
    abort: bool,
    batch: int,
    lease_time: float,
    yes: bool,
) -> None:
    """Change the partition count of a live queue, with producers, dispatchers and workers
        running: every waiting job, schedule, idempotency record and dead letter moves to the new
        partitions in bounded batches, ready and running jobs finish where they are, and the
        fleet takes up the new layout by itself.  Safe to interrupt: run it again with --resume
        (its state is in Redis), or --abort before it commits (that moves the jobs back).  Needs
    the admin's rights, and --yes."""
    from shardq.admin.resize import Progress, Resizer

    if sum((partitions is not None, resume, abort)) != 1:
        raise click.UsageError("pass exactly one of --partitions N, --resume, --abort")
    if abort:
        require_yes(yes, f"aborting moves the jobs of {queue_name} the resize moved back")
    else:
        require_yes(yes, f"a resize moves every waiting job of {queue_name} to new partitions")

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


# operate (the inspector) ------------------------------------------------------------------


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
@yes_option("Really cancel them.")
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
    require_yes(yes, "cancelling jobs cannot be undone")
    with open_client() as client:
        n = Inspector(client).cancel(
            queue_name, state, job_type=job_type, start=start, end=end,
            progress=_progress("cancelled"),
        )  # fmt: skip
    click.echo(f"\ncancelled {n} jobs", err=True)


@queue.command("retry-dead", hidden=True)
@queue_option()
@click.option("--type", "job_type", type=JOB_TYPE, default=None, help="Only jobs of this type.")
@yes_option("Really replay them.")
@redis_options
def queue_retry_dead(queue_name: str, job_type: str | None, yes: bool) -> None:
    """Deprecated: the old name of `shardq dlq replay --all` (--type too)."""
    from shardq.inspector import Inspector

    click.echo(
        "note: `shardq queue retry-dead` is now `shardq dlq replay --all`; the old name will go",
        err=True,
    )
    require_yes(yes, f"replaying every dead job of {queue_name}")
    with open_client() as client:
        n = Inspector(client).retry_dead(queue_name, job_type, progress=_progress("replayed"))
    click.echo(f"\nreplayed {n} dead jobs", err=True)


@queue.command("empty")
@queue_option()
@click.option(
    "--state",
    type=JobStates(EMPTY_STATES),
    required=True,
    help="scheduled takes the whole due set (retrying jobs too); dead: `shardq dlq purge --all`.",
)
@yes_option("Really delete them.")
@redis_options
def queue_empty(queue_name: str, state: str, yes: bool) -> None:
    """Delete every job in one state, in bounded batches with progress."""
    from shardq.inspector import Inspector

    if state == "dead":  # one path per action: the dead letters are the dlq group's
        click.echo(
            "note: `shardq queue empty --state dead` is now `shardq dlq purge --all`; "
            "the old spelling will go",
            err=True,
        )
    require_yes(yes, f"deleting every {state} job cannot be undone")
    with open_client() as client:
        n = Inspector(client).empty(queue_name, state, progress=_progress("deleted"))
    click.echo(f"\ndeleted {n} {state} jobs", err=True)


@queue.command("delete")
@queue_option()
@yes_option("Really delete the queue and its jobs.")
@click.option("--force", is_flag=True, help="Even with live workers or dispatchers.")
@redis_options
def queue_delete(queue_name: str, yes: bool, force: bool) -> None:
    """Delete a queue and every job in it (stop its workers and dispatchers first)."""
    from shardq.inspector import Inspector

    require_yes(yes, f"deleting queue {queue_name} cannot be undone")
    with open_client() as client:
        n = Inspector(client).delete_queue(queue_name, force=force)
    click.echo(f"deleted {queue_name} ({n} keys)")
