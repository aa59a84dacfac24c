"""``shardq limit set|list|remove``: a queue's rate limits, kept in Redis (shardq.limits).

Workers re-read them every few seconds, so a change applies to the whole fleet without a
restart.
"""

from __future__ import annotations

import click

from shardq import cli_format as fmt
from shardq import limits as limitmod
from shardq.cli_common import open_client, queue_option, redis_options
from shardq.cli_jobs import JSON_OPTION
from shardq.errors import InvalidLimitError

_TARGET = (
    click.option("--type", "job_type", default=None, help="Limit every job of this type."),
    click.option(
        "--key", "limit_key", default=None, help="Limit the jobs enqueued with this --limit-key."
    ),
)


def _target(job_type: str | None, limit_key: str | None) -> tuple[limitmod.LimitKind, str]:
    if (job_type is None) == (limit_key is None):
        raise click.UsageError("give --type JOB_TYPE or --key LIMIT_KEY (one of them)")
    return ("type", job_type) if job_type is not None else ("key", limit_key)  # type: ignore[return-value]


@click.group()
def limit() -> None:
    """Rate limits: at most N job starts per period, per job type or limit key, fleet-wide."""


@limit.command("set")
@queue_option()
@_TARGET[0]
@_TARGET[1]
@click.option("--rate", required=True, help="COUNT/PERIOD: 100/s, 10/min, 5/2s, 1000/h.")
@click.option(
    "--burst",
    type=int,
    default=None,
    help="Starts allowed at once after an idle spell, 1..COUNT [default: COUNT].",
)
@redis_options
def limit_set(
    queue_name: str, job_type: str | None, limit_key: str | None, rate: str, burst: int | None
) -> None:
    """Create or replace a rate limit; workers apply it within a few seconds."""
    kind, match = _target(job_type, limit_key)
    count, per = limitmod.parse_rate(rate)
    new = limitmod.RateLimit(kind, match, count, per, burst)
    with open_client() as client:
        client.set_limit(queue_name, new)
    click.echo(f"limit {new.name}: {new.describe()}")


@limit.command("list")
@queue_option()
@JSON_OPTION
@redis_options
def limit_list(queue_name: str, as_json: bool) -> None:
    """The queue's rate limits."""
    with open_client() as client:
        found = client.limits(queue_name)
    if as_json:
        fmt.echo_json(
            [
                {
                    "name": x.name,
                    "kind": x.kind,
                    "match": x.match,
                    "rate": x.rate,
                    "per": x.per,
                    "burst": x.allowed_burst,
                }
                for x in found
            ]
        )
        return
    if not found:
        click.echo(f"queue {queue_name}: no rate limits")
        return
    click.echo(
        fmt.table(
            ["limit", "rate", "per (s)", "burst", "pace"],
            [
                [x.name, x.rate, f"{x.per:g}", x.allowed_burst, f"1 per {x.interval_ms:g} ms"]
                for x in found
            ],
            right=[1, 2, 3],
        )
    )


@limit.command("remove")
@queue_option()
@_TARGET[0]
@_TARGET[1]
@redis_options
def limit_remove(queue_name: str, job_type: str | None, limit_key: str | None) -> None:
    """Remove a rate limit; its jobs run unlimited within a few seconds."""
    kind, match = _target(job_type, limit_key)
    name = f"{kind}:{match}"
    with open_client() as client:
        if not client.remove_limit(queue_name, name):
            raise InvalidLimitError(
                f"queue {queue_name!r} has no limit {name}: see shardq limit list -q {queue_name}"
            )
    click.echo(f"limit {name}: removed")
