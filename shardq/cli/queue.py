"""Inspector commands: ``shardq job list|find|run-now``, ``shardq queue info|members|pause|
resume|cancel|retry-dead|empty|delete``, over :class:`shardq.inspector.Inspector`."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import click

from shardq import cli_format as fmt
from shardq.cli_common import open_client, queue_option, redis_options
from shardq.cli_jobs import JSON_OPTION, job, queue, show_info
from shardq.cli_params import IDEMPOTENCY_KEY, JOB_ID, JOB_TYPE, UTC_TIME
from shardq.inspector import EMPTY_STATES, LIST_STATES, MAX_LIMIT, JobSummary

STATE = click.Choice(LIST_STATES)


def _row(j: JobSummary, now: int) -> list[Any]:
    when = {
        "scheduled": j.due_ms,
        "retrying": j.due_ms,
        "ready": j.due_ms,
        "running": j.started_ms,
    }.get(j.state, j.dead_at_ms)
    detail = j.worker or j.last_error or ""
    return [j.id, j.partition, j.type or "?", j.attempt, fmt.when(when, now), detail[:60]]


@job.command("list")
@queue_option()
@click.option("--state", type=STATE, default="scheduled", show_default=True)
@click.option("--type", "job_type", type=JOB_TYPE, default=None, help="Only jobs of this type.")
@click.option(
    "--limit", type=click.IntRange(1, MAX_LIMIT), default=50, show_default=True, help="Page size."
)
@click.option("--cursor", default=None, help="Cursor a previous page printed (next page).")
@click.option("--from", "start", type=UTC_TIME, default=None, help="Scheduled: due at or after.")
@click.option("--to", "end", type=UTC_TIME, default=None, help="Scheduled: due at or before.")
@click.option("--all", "every", is_flag=True, help="Every page, not one.")
@JSON_OPTION
@redis_options
def job_list(
    queue_name: str,
    state: str,
    job_type: str | None,
    limit: int,
    cursor: str | None,
    start: datetime | None,
    end: datetime | None,
    every: bool,
    as_json: bool,
) -> None:
    """List jobs by state, a page at a time (scheduled in due order across partitions)."""
    from shardq.inspector import Inspector

    with open_client() as client:
        ins = Inspector(client)
        while True:
            page = ins.list_jobs(
                queue_name, state, job_type=job_type, limit=limit, cursor=cursor,
                start=start, end=end,
            )  # fmt: skip
            if as_json:
                fmt.echo_json_lines(dataclasses.asdict(j) for j in page.jobs)
            else:
                now = fmt.now_ms()
                headers = ["id", "partition", "type", "attempt", "when", "worker / error"]
                if page.jobs:
                    click.echo(fmt.table(headers, [_row(j, now) for j in page.jobs], right=(1, 3)))
                fmt.echo_malformed((f"job {j.id}", j.malformed) for j in page.jobs)
            cursor = page.cursor
            if not every or cursor is None:
                break
    if cursor is not None and not as_json:
        click.echo(f"more: --cursor {cursor}", err=True)
    elif cursor is not None:
        fmt.echo_json({"cursor": cursor})


@job.command("find")
@queue_option()
@click.option("--idempotency-key", type=IDEMPOTENCY_KEY, required=True)
@JSON_OPTION
@redis_options
def job_find(queue_name: str, idempotency_key: str, as_json: bool) -> None:
    """Find the job enqueued with an idempotency key (while the key is retained)."""
    from shardq.inspector import Inspector

    with open_client() as client:
        info = Inspector(client).find(queue_name, idempotency_key)
    if info is None:
        raise click.ClickException(
            f"no job with idempotency key {idempotency_key!r} in {queue_name}"
        )
    show_info(info, as_json)


@job.command("run-now")
@queue_option()
@click.argument("job_id", type=JOB_ID)
@redis_options
def job_run_now(queue_name: str, job_id: str) -> None:
    """Make a scheduled or dead job due now."""
    from shardq.inspector import Inspector

    with open_client() as client:
        was = Inspector(client).run_now(queue_name, job_id)
    click.echo(f"{job_id} was {was}: " + ("already promoted" if was == "ready" else "due now"))


@queue.command("info")
@queue_option()
@JSON_OPTION
@redis_options
def queue_info(queue_name: str, as_json: bool) -> None:
    """Per partition: counts per state, oldest due, lag, owner, node, paused."""
    from shardq.inspector import Inspector

    with open_client() as client:
        infos = Inspector(client).partitions(queue_name)
    if as_json:
        fmt.echo_json_lines(dataclasses.asdict(i) for i in infos)
        return
    now = fmt.now_ms()
    rows = [
        [
            i.partition, i.node, i.scheduled, i.overdue, i.ready, i.running, i.dead,
            fmt.when(i.oldest_due_ms, now) if i.oldest_due_ms else "-",
            f"{i.lag_seconds:.3f}", "yes" if i.paused else "", i.owner or "(free)",
        ]
        for i in infos
    ]  # fmt: skip
    headers = ["part", "node", "scheduled", "overdue", "ready", "running", "dead", "oldest due",
               "lag s", "paused", "owner"]  # fmt: skip
    click.echo(fmt.table(headers, rows, right=(0, 2, 3, 4, 5, 6, 8)))
    fmt.echo_malformed((f"partition {i.partition}", i.malformed) for i in infos)
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
        fmt.echo_json_lines(dataclasses.asdict(m) for m in members)
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
    "--state", type=click.Choice(["scheduled", "ready", "retrying"]), default="scheduled",
    show_default=True,
)  # fmt: skip
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
    yes: bool,
) -> None:
    """Cancel every not-started job matching the filter, in batches with progress."""
    from shardq.inspector import Inspector

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
@click.option("--state", type=click.Choice(EMPTY_STATES), required=True)
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
