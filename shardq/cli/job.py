"""Every ``shardq job`` command: enqueue, then get, list, find, cancel, reschedule or run a job
now (and ``shardq enqueue``, the old name of ``job enqueue``, for scripts).

``enqueue`` and ``job reschedule`` take the same options as the client call they make; the
producer limits (``--past-tolerance``, ``--max-payload-bytes``, ...) are generated from
ProducerSettings.  ``job list|find|run-now`` go through :class:`shardq.inspector.Inspector`.
"""

from __future__ import annotations

import dataclasses
import typing
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import click
import orjson

from shardq import format as fmt
from shardq.cli.connection import open_client, redis_options, redis_settings
from shardq.cli.options import JSON_OPTION, deprecated_alias, parse_payload, queue_option
from shardq.cli.params import (
    DURATION,
    HEADER,
    IDEMPOTENCY_KEY,
    JOB_ID,
    JOB_TYPE,
    MAX_ATTEMPTS,
    UTC_TIME,
    JobStates,
)
from shardq.cli.settings import build_settings, settings_options
from shardq.config import MAX_LIMIT, ProducerSettings, WorkerSettings
from shardq.jobs import DEFAULT_BACKOFF, Backoff, EnqueueResult, JobInfo, JobRequest, JobResult
from shardq.jobs.options import OPTIONS, BackoffKind
from shardq.names import JOB_STATES, Priority

if TYPE_CHECKING:
    from shardq.inspector import JobSummary


def _producer(given: dict[str, Any]) -> Any:
    """A client with the producer limits given as flags (the rest keep their defaults)."""
    from shardq.client import Client

    return Client(redis_settings(), build_settings(ProducerSettings, given))


# A job that sets no max_attempts gets the worker's default: show that figure, not null.
DEFAULT_MAX_ATTEMPTS = WorkerSettings().default_max_attempts


# enqueue ----------------------------------------------------------------------------------


def enqueue_row(result: EnqueueResult, idempotency_key: str | None) -> dict[str, Any]:
    """What ``enqueue --json`` prints: the EnqueueResult, its due time as ISO, and why a job
    that was not created was deduplicated."""
    row: dict[str, Any] = fmt.named(dataclasses.asdict(result))
    row["due"] = fmt.iso(result.due_ms)
    row["deduplicated"] = not result.created
    if not result.created:
        row["deduplicated_by"] = "idempotency_key" if idempotency_key else "job_id"
    return row


# Each job option's flags and their help are declared with the option (shardq.jobs.options);
# here is how the command line reads them (tests/unit/test_job_options.py: every declared flag
# is an option of this command, with its declared help).
FLAG_HELP: dict[str, str] = {
    flag: text for o in OPTIONS for flag, text in zip(o.flags, o.help, strict=True)
}


@click.command()
@queue_option()
@click.argument("job_type", type=JOB_TYPE)
@click.option("--payload", default="null", show_default=True, help="JSON payload.")
@click.option("--delay", "--in", "delay", type=DURATION, default=None, help=FLAG_HELP["--delay"])
@click.option("--at", "run_at", type=UTC_TIME, default=None, help=FLAG_HELP["--at"])
@click.option("--job-id", type=JOB_ID, default=None, help=FLAG_HELP["--job-id"])
@click.option(
    "--idempotency-key", type=IDEMPOTENCY_KEY, default=None, help=FLAG_HELP["--idempotency-key"]
)
@click.option("--max-attempts", type=MAX_ATTEMPTS, default=None, help=FLAG_HELP["--max-attempts"])
@click.option(
    "--backoff",
    type=click.Choice(typing.get_args(BackoffKind)),
    default=None,
    help=FLAG_HELP["--backoff"],
)
@click.option("--backoff-base", type=DURATION, default=None, help=FLAG_HELP["--backoff-base"])
@click.option("--backoff-cap", type=DURATION, default=None, help=FLAG_HELP["--backoff-cap"])
@click.option("--header", "headers", type=HEADER, multiple=True, help=FLAG_HELP["--header"])
@click.option(
    "--durable",
    is_flag=True,
    help="Return only once --durable-replicas replicas hold the job (WAIT).",
)
@click.option("--limit-key", default=None, help=FLAG_HELP["--limit-key"])
@click.option(
    "--priority",
    type=click.Choice(typing.get_args(Priority)),
    default=None,
    help=FLAG_HELP["--priority"],
)
@click.option("--tenant", default=None, help=FLAG_HELP["--tenant"])
@click.option("--keep-result", type=DURATION, default=None, help=FLAG_HELP["--keep-result"])
@click.option("--unique-until-done", is_flag=True, help=FLAG_HELP["--unique-until-done"])
@click.option("--timeout", type=DURATION, default=None, help=FLAG_HELP["--timeout"])
@click.option("--deadline", type=UTC_TIME, default=None, help=FLAG_HELP["--deadline"])
@click.option("--deadline-in", type=DURATION, default=None, help=FLAG_HELP["--deadline-in"])
@JSON_OPTION
@settings_options(ProducerSettings, "SHARDQ_PRODUCER_")
@redis_options
def enqueue(
    queue_name: str,
    job_type: str,
    payload: str,
    durable: bool,
    as_json: bool,
    **given: Any,
) -> None:
    """Enqueue one job of JOB_TYPE; print its id, due time and whether it was new.

    A job whose --idempotency-key was used before is reported as deduplicated: nothing was
    written.  A --job-id already stored with this same job is a resend (reported as created,
    stored once); with another job it is refused."""
    options = job_options(given)  # what is left: the producer limits
    request = JobRequest(job_type, parse_payload(payload), **options)
    with _producer(given) as client:
        result = client.enqueue_detailed(queue_name, request, durable=durable)
        if not result.created and result.due_ms is None:
            # a deduplicated enqueue does not say when the existing job is due: look it up
            existing = client.get(queue_name, result.job_id)
            if existing is not None:
                result = dataclasses.replace(result, due_ms=existing.due_ms)
    idempotency_key = options.get("idempotency_key")
    if as_json:
        fmt.echo_json(enqueue_row(result, idempotency_key))
        return
    if result.created:
        state = "created"
    elif idempotency_key:
        state = "deduplicated (idempotency key already used; nothing written)"
    else:
        state = "deduplicated (job id already stored; nothing written)"
    due, partition = fmt.when(result.due_ms), fmt.partition(result.partition)
    click.echo(f"{result.job_id}  {state}  due {due}  partition {partition}")


def job_options(given: dict[str, Any]) -> dict[str, Any]:
    """The job options ``enqueue``'s flags give, taken out of ``given`` (a flag whose
    parameter is its option's name is read as is; the others are read here)."""
    delay, run_at = given.pop("delay"), given.pop("run_at")
    if delay is not None and run_at is not None:
        raise click.UsageError("give --delay or --at, not both")
    deadline, deadline_in = given.pop("deadline"), given.pop("deadline_in")
    if deadline is not None and deadline_in is not None:
        raise click.UsageError("give --deadline or --deadline-in, not both")
    kind, base, cap = given.pop("backoff"), given.pop("backoff_base"), given.pop("backoff_cap")
    if kind is None and (base is not None or cap is not None):
        kind = "jitter"
    policy = None
    if kind is not None:
        policy = Backoff(
            kind,
            DEFAULT_BACKOFF.base if base is None else base,
            DEFAULT_BACKOFF.cap if cap is None else cap,
        )
    headers = given.pop("headers")
    options: dict[str, Any] = {
        "delay": delay,
        "run_at": run_at,
        "backoff": policy,
        "headers": dict(headers) if headers else None,
        "unique_until": "done" if given.pop("unique_until_done") else None,
        "deadline": deadline if deadline_in is None else timedelta(seconds=deadline_in),
    }
    for o in OPTIONS:
        if o.flags and o.name not in options:
            options[o.name] = given.pop(o.name)
    return options


# jobs -------------------------------------------------------------------------------------


def job_row(info: JobInfo) -> dict[str, Any]:
    """A job as ``--json`` prints it: JobInfo's fields, the due time as ISO, and the
    effective max_attempts (a job that sets none gets the worker's default)."""
    row: dict[str, Any] = fmt.named(dataclasses.asdict(info))
    row["due"] = fmt.iso(info.due_ms)
    row["max_attempts_default"] = info.max_attempts is None
    if info.max_attempts is None:
        row["max_attempts"] = DEFAULT_MAX_ATTEMPTS
    return row


def render_job(info: JobInfo) -> str:
    """A job as ``key: value`` lines for people."""
    attempts: str = str(info.max_attempts)
    if info.max_attempts is None:
        attempts = (
            f"{DEFAULT_MAX_ATTEMPTS} (worker default, unless its --default-max-attempts differs)"
        )
    payload = orjson.dumps(info.payload).decode()
    return fmt.fields(
        [
            ("id", info.id),
            ("queue", info.queue),
            ("partition", fmt.partition(info.partition)),
            ("state", info.state),
            ("type", info.type),
            ("due", fmt.when(info.due_ms)),
            ("attempt", info.attempt),
            ("max attempts", attempts),
            ("idempotency key", info.idempotency_key),
            ("limit key", info.limit_key),
            ("priority", info.priority),
            ("tenant", info.tenant),
            ("payload", payload if len(payload) <= 2000 else payload[:2000] + " ..."),
            ("keeps result", None if info.keep_result is None else fmt.span(info.keep_result)),
            ("timeout", None if info.timeout is None else f"{info.timeout:g} s"),
            ("deadline", None if info.deadline_ms is None else fmt.when(info.deadline_ms)),
            (
                "start within",
                None if info.start_within is None else f"{info.start_within:g} s of due",
            ),
            (
                "progress",
                None
                if info.progress_ms is None
                else f"{orjson.dumps(info.progress).decode()} ({fmt.when(info.progress_ms)})",
            ),
            ("last error", info.last_error),
            *fmt.malformed_fields(info.malformed),
        ]
    )


def show_job(queue_name: str, job_id: str, as_json: bool) -> None:
    """Print one job (shared by ``job get`` and ``dlq show``); a job that completed and kept
    its result shows as completed, with it."""
    with open_client() as client:
        info = client.get(queue_name, job_id)
        kept = client.result_info(queue_name, job_id) if info is None else None
    if info is None and kept is not None:
        click.echo(fmt.json_text(result_row(kept)) if as_json else render_result(kept))
        return
    if info is None:
        raise click.ClickException(
            f"job {job_id!r} not found in {queue_name} (completed without keep_result, "
            "cancelled, its result expired, or unknown)"
        )
    show_info(info, as_json)


def result_row(kept: JobResult) -> dict[str, Any]:
    """A kept result as ``--json`` prints it: JobResult's fields, state completed, the finish
    time as ISO."""
    row: dict[str, Any] = fmt.named({"state": "completed", **dataclasses.asdict(kept)})
    row["finished"] = fmt.iso(kept.finished_ms)
    return row


def render_result(kept: JobResult) -> str:
    value = orjson.dumps(kept.value).decode()
    return fmt.fields(
        [
            ("id", kept.id),
            ("queue", kept.queue),
            ("partition", fmt.partition(kept.partition)),
            ("state", "completed"),
            ("type", kept.type),
            ("attempt", kept.attempt),
            ("finished", fmt.when(kept.finished_ms)),
            ("result", value if len(value) <= 2000 else value[:2000] + " ...")
            if kept.stored
            else ("result", "not kept: " + (kept.error or "")),
        ]
    )


def show_info(info: JobInfo, as_json: bool) -> None:
    click.echo(fmt.json_text(job_row(info)) if as_json else render_job(info))


@click.group()
def job() -> None:
    """Enqueue a job; inspect, cancel, reschedule or run one by id; list and find jobs."""


job.add_command(enqueue)
#: ``shardq enqueue``: the old name, for scripts.
enqueue_alias = deprecated_alias(enqueue, "enqueue", "job enqueue")


@job.command("get")
@queue_option()
@click.argument("job_id", type=JOB_ID)
@JSON_OPTION
@redis_options
def job_get(queue_name: str, job_id: str, as_json: bool) -> None:
    """Show a job: state, due time, attempts, payload, last error."""
    show_job(queue_name, job_id, as_json)


@job.command("result")
@queue_option()
@click.argument("job_id", type=JOB_ID)
@click.option(
    "--wait",
    "wait",
    type=DURATION,
    default=0.0,
    show_default=True,
    help="Wait this long for the job to end (0: answer at once).",
)
@JSON_OPTION
@redis_options
def job_result(queue_name: str, job_id: str, wait: float, as_json: bool) -> None:
    """Print the result a job enqueued with --keep-result returned (its JSON), waiting up to
    --wait for it.  Exits 1 with the reason when there is none: still running after the wait,
    dead (with its last error), kept none, expired or unknown."""
    from shardq.errors import ResultError

    with open_client() as client:
        try:
            value = client.result(queue_name, job_id, timeout=wait)
        except ResultError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
        kept = client.result_info(queue_name, job_id) if as_json else None
    if as_json and kept is not None:
        fmt.echo_json(result_row(kept))
        return
    click.echo(orjson.dumps(value).decode())


@job.command("cancel")
@queue_option()
@click.argument("job_id", type=JOB_ID)
@click.option(
    "--running",
    is_flag=True,
    help="Stop it if it is running too: its worker is told; it ends as cancelled, never retried.",
)
@redis_options
def job_cancel(queue_name: str, job_id: str, running: bool) -> None:
    """Cancel a job that has not started (--running: or one that is running)."""
    with open_client() as client:
        if not client.cancel(queue_name, job_id, running=running):
            raise click.ClickException(f"job {job_id!r} not found in {queue_name}")
    click.echo(f"cancelled {job_id}")


@job.command("reschedule")
@queue_option()
@click.argument("job_id", type=JOB_ID)
@click.option("--delay", "--in", "delay", type=DURATION, default=None, help="Run after this long.")
@click.option("--at", "run_at", type=UTC_TIME, default=None, help="Run at, e.g. 2030-01-01T09:00Z.")
@click.option(
    "--priority",
    type=click.Choice(["high", "default", "low"]),
    default=None,
    help="A new delivery priority (the due time stays unless --delay or --at is given).",
)
@JSON_OPTION
@settings_options(ProducerSettings, "SHARDQ_PRODUCER_")
@redis_options
def job_reschedule(
    queue_name: str,
    job_id: str,
    delay: float | None,
    run_at: datetime | None,
    priority: str | None,
    as_json: bool,
    **limits: Any,
) -> None:
    """Move a waiting job to a new due time (--delay or --at), or give it a new --priority."""
    if delay is not None and run_at is not None:
        raise click.UsageError("give --delay or --at, not both")
    if delay is None and run_at is None and priority is None:
        raise click.UsageError("give --delay, --at or --priority")
    with _producer(limits) as client:
        due = client.reschedule(
            queue_name,
            job_id,
            run_at=run_at,
            delay=delay,
            priority=priority,  # type: ignore[arg-type]  # click.Choice guarantees the literal
        )
    if as_json:
        fmt.echo_json({"job_id": job_id, "due_ms": due, "due": fmt.iso(due)})
        return
    click.echo(f"{job_id} due {fmt.when(due)}")


# listing and finding jobs (the inspector) -------------------------------------------------

STATE = JobStates(JOB_STATES)


def _row(j: JobSummary, now: int) -> list[Any]:
    when = {
        "scheduled": j.due_ms,
        "retrying": j.due_ms,
        "ready": j.due_ms,
        "running": j.started_ms,
    }.get(j.state, j.dead_at_ms)
    detail = j.worker or j.last_error or ""
    when_text = fmt.when(when, now)
    return [j.id, fmt.partition(j.partition), j.type or "?", j.attempt, when_text, detail[:60]]


@job.command("list")
@queue_option()
@click.option(
    "--state",
    type=STATE,
    default="scheduled",
    show_default=True,
    help="scheduled pages the whole due set (retrying jobs too); 'active' is taken for running.",
)
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
                fmt.echo_json_lines(fmt.named(dataclasses.asdict(j)) for j in page.jobs)
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
