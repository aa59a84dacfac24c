"""Producer commands: ``shardq queue create|list``, ``enqueue`` and ``job get|cancel|reschedule``.

Each takes the same options as the client call it makes; the producer limits
(``--past-tolerance``, ``--max-payload-bytes``, ...) are generated from ProducerSettings.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import click
import orjson

from shardq import cli_format as fmt
from shardq.cli_common import open_client, queue_option, redis_options, redis_settings
from shardq.cli_params import (
    DURATION,
    HEADER,
    IDEMPOTENCY_KEY,
    JOB_ID,
    JOB_TYPE,
    MAX_ATTEMPTS,
    PARTITIONS,
    UTC_TIME,
)
from shardq.cli_settings import build_settings, settings_options
from shardq.config import ProducerSettings, WorkerSettings
from shardq.errors import ShardqError
from shardq.jobs import DEFAULT_BACKOFF, Backoff, EnqueueResult, JobInfo, JobRequest

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _producer(given: dict[str, Any]) -> Any:
    """A client with the producer limits given as flags (the rest keep their defaults)."""
    from shardq.client import Client

    return Client(redis_settings(), build_settings(ProducerSettings, given))


# A job that sets no max_attempts gets the worker's default: show that figure, not null.
DEFAULT_MAX_ATTEMPTS = WorkerSettings().default_max_attempts


# queues ------------------------------------------------------------------------------------


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


# enqueue -----------------------------------------------------------------------------------


def _payload(text: str) -> Any:
    try:
        # orjson: rejects NaN/Infinity literals and documents nested deeper than 1024 levels
        # with a JSONDecodeError (json.loads would hit RecursionError).
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--payload") from None


def enqueue_row(result: EnqueueResult, idempotency_key: str | None) -> dict[str, Any]:
    """What ``enqueue --json`` prints: the EnqueueResult, its due time as ISO, and why a job
    that was not created was deduplicated."""
    row: dict[str, Any] = dataclasses.asdict(result)
    row["due"] = fmt.iso(result.due_ms)
    row["deduplicated"] = not result.created
    if not result.created:
        row["deduplicated_by"] = "idempotency_key" if idempotency_key else "job_id"
    return row


@click.command()
@queue_option()
@click.argument("job_type", type=JOB_TYPE)
@click.option("--payload", default="null", show_default=True, help="JSON payload.")
@click.option(
    "--delay",
    "--in",
    "delay",
    type=DURATION,
    default=None,
    help="Run after this long (Redis clock): 90, 90s, 5m, 2h, 1d.",
)
@click.option("--at", "run_at", type=UTC_TIME, default=None, help="Run at, e.g. 2030-01-01T09:00Z.")
@click.option("--job-id", type=JOB_ID, default=None, help="Your own job id (default: random).")
@click.option(
    "--idempotency-key",
    type=IDEMPOTENCY_KEY,
    default=None,
    help="A repeat with the same key returns the first job and writes nothing.",
)
@click.option(
    "--max-attempts",
    type=MAX_ATTEMPTS,
    default=None,
    help="Attempts before the job goes dead [default: the worker's --default-max-attempts].",
)
@click.option(
    "--backoff",
    type=click.Choice(["fixed", "exponential", "jitter"]),
    default=None,
    help="Delay between retries [default: jitter, base 1 s, cap 3600 s].",
)
@click.option("--backoff-base", type=DURATION, default=None, help="Backoff base delay.")
@click.option("--backoff-cap", type=DURATION, default=None, help="Longest backoff delay.")
@click.option(
    "--header",
    "headers",
    type=HEADER,
    multiple=True,
    help="A job header name=value (repeat), e.g. traceparent=00-....",
)
@click.option(
    "--durable",
    is_flag=True,
    help="Return only once --durable-replicas replicas hold the job (WAIT).",
)
@click.option(
    "--limit-key",
    default=None,
    help="Put the job under this key's rate limit (shardq limit set --key), e.g. an API host.",
)
@click.option(
    "--priority",
    type=click.Choice(["high", "default", "low"]),
    default=None,
    help="Delivery priority (a queue with lanes on: shardq queue lanes).",
)
@click.option(
    "--tenant",
    default=None,
    help="Tenant (group) the job belongs to: due jobs are shared between tenants (lanes on).",
)
@JSON_OPTION
@settings_options(ProducerSettings, "SHARDQ_PRODUCER_")
@redis_options
def enqueue(
    queue_name: str,
    job_type: str,
    payload: str,
    delay: float | None,
    run_at: datetime | None,
    job_id: str | None,
    idempotency_key: str | None,
    max_attempts: int | None,
    backoff: str | None,
    backoff_base: float | None,
    backoff_cap: float | None,
    headers: tuple[tuple[str, str], ...],
    durable: bool,
    limit_key: str | None,
    priority: str | None,
    tenant: str | None,
    as_json: bool,
    **limits: Any,
) -> None:
    """Enqueue one job of JOB_TYPE; print its id, due time and whether it was new.

    A job that was not new (its --idempotency-key or --job-id was used before) is reported
    as deduplicated: nothing was written."""
    if delay is not None and run_at is not None:
        raise click.UsageError("give --delay or --at, not both")
    if backoff is None and (backoff_base is not None or backoff_cap is not None):
        backoff = "jitter"
    policy = None
    if backoff is not None:
        policy = Backoff(
            backoff,  # type: ignore[arg-type]  # click.Choice guarantees the literal
            DEFAULT_BACKOFF.base if backoff_base is None else backoff_base,
            DEFAULT_BACKOFF.cap if backoff_cap is None else backoff_cap,
        )
    request = JobRequest(
        job_type,
        _payload(payload),
        run_at=run_at,
        delay=delay,
        job_id=job_id,
        idempotency_key=idempotency_key,
        max_attempts=max_attempts,
        backoff=policy,
        headers=dict(headers) if headers else None,
        limit_key=limit_key,
        priority=priority,  # type: ignore[arg-type]  # click.Choice guarantees the literal
        tenant=tenant,
    )
    with _producer(limits) as client:
        result = client.enqueue_detailed(queue_name, request, durable=durable)
        if not result.created and result.due_ms is None:
            # a deduplicated enqueue does not say when the existing job is due: look it up
            existing = client.get(queue_name, result.job_id)
            if existing is not None:
                result = dataclasses.replace(result, due_ms=existing.due_ms)
    if as_json:
        fmt.echo_json(enqueue_row(result, idempotency_key))
        return
    if result.created:
        state = "created"
    elif idempotency_key:
        state = "deduplicated (idempotency key already used; nothing written)"
    else:
        state = "deduplicated (job id already stored; nothing written)"
    click.echo(
        f"{result.job_id}  {state}  due {fmt.when(result.due_ms)}  partition {result.partition}"
    )


# jobs --------------------------------------------------------------------------------------


def job_row(info: JobInfo) -> dict[str, Any]:
    """A job as ``--json`` prints it: JobInfo's fields, the due time as ISO, and the
    effective max_attempts (a job that sets none gets the worker's default)."""
    row: dict[str, Any] = dataclasses.asdict(info)
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
            ("partition", info.partition),
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
            ("last error", info.last_error),
            *fmt.malformed_fields(info.malformed),
        ]
    )


def show_job(queue_name: str, job_id: str, as_json: bool) -> None:
    """Print one job (shared by ``job get`` and ``dlq show``)."""
    with open_client() as client:
        info = client.get(queue_name, job_id)
    if info is None:
        raise click.ClickException(
            f"job {job_id!r} not found in {queue_name} (completed, cancelled or unknown)"
        )
    show_info(info, as_json)


def show_info(info: JobInfo, as_json: bool) -> None:
    click.echo(fmt.json_text(job_row(info)) if as_json else render_job(info))


@click.group()
def job() -> None:
    """Inspect, cancel or reschedule a job by id."""


@job.command("get")
@queue_option()
@click.argument("job_id", type=JOB_ID)
@JSON_OPTION
@redis_options
def job_get(queue_name: str, job_id: str, as_json: bool) -> None:
    """Show a job: state, due time, attempts, payload, last error."""
    show_job(queue_name, job_id, as_json)


@job.command("cancel")
@queue_option()
@click.argument("job_id", type=JOB_ID)
@redis_options
def job_cancel(queue_name: str, job_id: str) -> None:
    """Cancel a job that has not started."""
    with open_client() as client:
        if not client.cancel(queue_name, job_id):
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
