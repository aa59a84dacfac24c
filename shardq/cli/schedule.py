"""``shardq schedule add|list|show|pause|resume|remove|next``: periodic jobs (shardq.schedules).

Each command makes the ``client.schedules`` call of the same name; reads take ``--json``.
Times print as ISO 8601 UTC with a relative form; ``next`` prints them in the schedule's zone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from shardq import format as fmt
from shardq.cli.connection import open_client, redis_options
from shardq.cli.options import JSON_OPTION, parse_payload, queue_option
from shardq.cli.params import DURATION, HEADER, JOB_TYPE, MAX_ATTEMPTS, UTC_TIME
from shardq.errors import ScheduleNotFoundError
from shardq.jobs import DEFAULT_BACKOFF, Backoff
from shardq.schedules import (
    DEFAULT_CATCH_UP,
    DEFAULT_GRACE,
    MAX_CATCH_UP,
    MAX_NEXT,
    MISFIRE_POLICIES,
    ScheduleInfo,
)

NAME = click.argument("name")


def row(s: ScheduleInfo) -> dict[str, Any]:
    """What ``--json`` prints for a schedule: its fields plus the times as ISO 8601."""
    out = fmt.named(s.to_dict())
    for key in ("next_fire", "last_fire", "last_tick", "start", "end"):
        out[key] = fmt.iso(out[f"{key}_ms"])
    return out


def _when(s: ScheduleInfo) -> str:
    return s.cron if s.cron is not None else f"every {fmt.span(s.every or 0)}"


def _show(s: ScheduleInfo) -> None:
    click.echo(
        fmt.fields(
            [
                ("name", s.name),
                ("queue", f"{s.queue} (partition {fmt.partition(s.partition)})"),
                ("schedule", _when(s) + (f" ({s.tz})" if s.cron is not None else "")),
                ("job type", s.job_type),
                ("payload", fmt.json_text(s.payload)),
                ("state", "paused" if s.paused else "active"),
                ("next fire", fmt.when(s.next_fire_ms)),
                ("last fire", fmt.when(s.last_fire_ms)),
                ("last tick job", s.job_ids.get("last")),
                ("fires", s.fires),
                ("misfires", s.misfires),
                ("misfire policy", s.misfire),
                ("start", fmt.when(s.start_ms)),
                ("end", fmt.when(s.end_ms)),
            ]
        )
    )


@click.group()
def schedule() -> None:
    """Periodic jobs: named cron or interval schedules fired once per tick by the dispatchers."""


@schedule.command("add")
@queue_option()
@NAME
@click.argument("job_type", type=JOB_TYPE)
@click.option("--cron", default=None, help="Cron expression: 5 fields, or 6 with seconds first.")
@click.option("--every", type=DURATION, default=None, help="Fixed interval (at least 1s): 30s, 5m.")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone of --cron.")
@click.option("--payload", default="null", show_default=True, help="JSON payload of each job.")
@click.option("--max-attempts", type=MAX_ATTEMPTS, default=None, help="Attempts per job.")
@click.option("--backoff", type=click.Choice(["fixed", "exponential", "jitter"]), default=None)
@click.option("--backoff-base", type=DURATION, default=None, help="Backoff base delay.")
@click.option("--backoff-cap", type=DURATION, default=None, help="Longest backoff delay.")
@click.option("--header", "headers", type=HEADER, multiple=True, help="name=value (repeat).")
@click.option(
    "--start", type=UTC_TIME, default=None, help="No tick before, e.g. 2030-01-01T09:00Z."
)
@click.option("--end", type=UTC_TIME, default=None, help="No tick after this time.")
@click.option(
    "--misfire",
    type=click.Choice(MISFIRE_POLICIES),
    default="run_once",
    show_default=True,
    help="Ticks missed while no dispatcher ran: skip them, run the latest once, or catch up.",
)
@click.option(
    "--catch-up-limit",
    type=click.IntRange(1, MAX_CATCH_UP),
    default=DEFAULT_CATCH_UP,
    show_default=True,
    help="With --misfire catch_up: most missed ticks run.",
)
@click.option(
    "--misfire-grace",
    type=DURATION,
    default=DEFAULT_GRACE,
    show_default=True,
    help="With --misfire skip: a tick this late still runs.",
)
@JSON_OPTION
@redis_options
def schedule_add(
    queue_name: str,
    name: str,
    job_type: str,
    cron: str | None,
    every: float | None,
    tz: str,
    payload: str,
    max_attempts: int | None,
    backoff: str | None,
    backoff_base: float | None,
    backoff_cap: float | None,
    headers: tuple[tuple[str, str], ...],
    start: datetime | None,
    end: datetime | None,
    misfire: Any,
    catch_up_limit: int,
    misfire_grace: float,
    as_json: bool,
) -> None:
    """Add schedule NAME enqueueing JOB_TYPE at each tick (the same NAME updates it)."""
    if (cron is None) == (every is None):
        raise click.UsageError("give --cron or --every (one of them)")
    if backoff is None and (backoff_base is not None or backoff_cap is not None):
        backoff = "jitter"
    policy = None
    if backoff is not None:
        policy = Backoff(
            backoff,  # type: ignore[arg-type]  # click.Choice guarantees the literal
            DEFAULT_BACKOFF.base if backoff_base is None else backoff_base,
            DEFAULT_BACKOFF.cap if backoff_cap is None else backoff_cap,
        )
    with open_client() as client:
        s = client.schedules.add(
            queue_name,
            name,
            job_type,
            parse_payload(payload),
            cron=cron,
            every=every,
            tz=tz,
            max_attempts=max_attempts,
            backoff=policy,
            headers=dict(headers) if headers else None,
            start=start,
            end=end,
            misfire=misfire,
            catch_up_limit=catch_up_limit,
            misfire_grace=misfire_grace,
        )
    if as_json:
        fmt.echo_json(row(s))
        return
    state = "paused" if s.paused else f"next fire {fmt.when(s.next_fire_ms)}"
    click.echo(f"schedule {s.name}: saved ({_when(s)}), {state}")


@schedule.command("list")
@queue_option()
@JSON_OPTION
@redis_options
def schedule_list(queue_name: str, as_json: bool) -> None:
    """List the queue's schedules with their next and last fire (JSON lines with --json)."""
    with open_client() as client:
        found = client.schedules.list(queue_name)
    if as_json:
        fmt.echo_json_lines(row(s) for s in found)
        return
    if not found:
        click.echo("no schedules: add one with `shardq schedule add`")
        return
    now = fmt.now_ms()
    click.echo(
        fmt.table(
            [
                "name",
                "schedule",
                "tz",
                "type",
                "state",
                "next fire",
                "last fire",
                "fires",
                "misfires",
            ],
            [
                [
                    s.name,
                    _when(s),
                    s.tz if s.cron is not None else "-",
                    s.job_type,
                    "paused" if s.paused else "active",
                    fmt.relative(s.next_fire_ms, now),
                    fmt.relative(s.last_fire_ms, now),
                    s.fires,
                    s.misfires,
                ]
                for s in found
            ],
            right=[7, 8],
        )
    )


@schedule.command("show")
@queue_option()
@NAME
@JSON_OPTION
@redis_options
def schedule_show(queue_name: str, name: str, as_json: bool) -> None:
    """One schedule: definition, next and last fire, fires and misfires."""
    with open_client() as client:
        s = client.schedules.get(queue_name, name)
    if as_json:
        fmt.echo_json(row(s))
    else:
        _show(s)


@schedule.command("pause")
@queue_option()
@NAME
@redis_options
def schedule_pause(queue_name: str, name: str) -> None:
    """Stop firing NAME from its next tick on (until resume)."""
    with open_client() as client:
        client.schedules.pause(queue_name, name)
    click.echo(f"schedule {name}: paused")


@schedule.command("resume")
@queue_option()
@NAME
@redis_options
def schedule_resume(queue_name: str, name: str) -> None:
    """Fire NAME again from its first tick after now (ticks while paused are not run)."""
    with open_client() as client:
        s = client.schedules.resume(queue_name, name)
    click.echo(f"schedule {name}: resumed, next fire {fmt.when(s.next_fire_ms)}")


@schedule.command("remove")
@queue_option()
@NAME
@click.option("--yes", is_flag=True, help="Do it (without it, only say what would go).")
@redis_options
def schedule_remove(queue_name: str, name: str, yes: bool) -> None:
    """Delete schedule NAME (jobs it already enqueued stay)."""
    with open_client() as client:
        if not yes:
            s = client.schedules.get(queue_name, name)
            click.echo(f"would remove schedule {s.name} ({_when(s)}): run again with --yes")
            return
        if not client.schedules.remove(queue_name, name):
            raise ScheduleNotFoundError(f"no periodic schedule {name!r} on queue {queue_name!r}")
    click.echo(f"schedule {name}: removed")


@schedule.command("next")
@queue_option()
@NAME
@click.option("-n", "--count", type=click.IntRange(1, MAX_NEXT), default=5, show_default=True)
@JSON_OPTION
@redis_options
def schedule_next(queue_name: str, name: str, count: int, as_json: bool) -> None:
    """The next tick times of NAME, in its time zone (after the Redis clock's now)."""
    with open_client() as client:
        ticks = client.schedules.next(queue_name, name, count)
    if as_json:
        fmt.echo_json([t.isoformat() for t in ticks])
        return
    for t in ticks:
        click.echo(t.isoformat())
