"""``shardq limit set|list|remove``: a queue's limits (rate and concurrency), kept in Redis
(shardq.limits).

Workers re-read them every few seconds, so a change applies to the whole fleet without a
restart.
"""

from __future__ import annotations

import click

from shardq import format as fmt
from shardq import limits as limitmod
from shardq.cli.connection import open_client, redis_options
from shardq.cli.options import JSON_OPTION, queue_option
from shardq.errors import InvalidLimitError

_TARGET = (
    click.option("--type", "job_type", default=None, help="Limit every job of this type."),
    click.option(
        "--key", "limit_key", default=None, help="Limit the jobs enqueued with this --limit-key."
    ),
    click.option(
        "--tenant",
        default=None,
        help="Limit the jobs enqueued with this --tenant; '*': every tenant, each on its own.",
    ),
)


def _target(
    job_type: str | None, limit_key: str | None, tenant: str | None
) -> tuple[limitmod.LimitKind, str]:
    given = [(k, v) for k, v in (("type", job_type), ("key", limit_key), ("tenant", tenant)) if v]
    if len(given) != 1:
        raise click.UsageError(
            "give --type JOB_TYPE, --key LIMIT_KEY or --tenant TENANT (one of them)"
        )
    return given[0]  # type: ignore[return-value]


@click.group()
def limit() -> None:
    """Limits, per job type, limit key or tenant, fleet-wide: N starts per period (--rate) and
    M running at once (--concurrency)."""


@limit.command("set")
@queue_option()
@_TARGET[0]
@_TARGET[1]
@_TARGET[2]
@click.option("--rate", default=None, help="COUNT/PERIOD: 100/s, 10/min, 5/2s, 1000/h.")
@click.option(
    "--concurrency", type=int, default=None, help="At most this many running at once, fleet-wide."
)
@click.option(
    "--burst",
    type=int,
    default=None,
    help="Starts allowed at once after an idle spell, 1..COUNT [default: COUNT].",
)
@redis_options
def limit_set(
    queue_name: str,
    job_type: str | None,
    limit_key: str | None,
    tenant: str | None,
    rate: str | None,
    concurrency: int | None,
    burst: int | None,
) -> None:
    """Create or replace a limit (--rate and/or --concurrency); workers apply it within a few
    seconds."""
    kind, match = _target(job_type, limit_key, tenant)
    count, per = limitmod.parse_rate(rate) if rate is not None else (None, 1.0)
    new = limitmod.Limit(kind, match, count, per, burst, concurrency)
    with open_client() as client:
        client.set_limit(queue_name, new)
    click.echo(f"limit {new.name}: {new.describe()}")


@limit.command("list")
@queue_option()
@JSON_OPTION
@redis_options
def limit_list(queue_name: str, as_json: bool) -> None:
    """The queue's limits."""
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
                    "per": x.per if x.rate is not None else None,
                    "burst": x.allowed_burst if x.rate is not None else None,
                    "concurrency": x.concurrency,
                }
                for x in found
            ]
        )
        return
    if not found:
        click.echo(f"queue {queue_name}: no limits")
        return
    click.echo(
        fmt.table(
            ["limit", "rate", "per (s)", "burst", "pace", "concurrency"],
            [
                [x.name, None, None, None, None, x.concurrency]
                if x.rate is None
                else [
                    x.name,
                    x.rate,
                    f"{x.per:g}",
                    x.allowed_burst,
                    f"1 per {x.interval_ms:g} ms",
                    x.concurrency,
                ]
                for x in found
            ],
            right=[1, 2, 3, 5],
        )
    )


@limit.command("remove")
@queue_option()
@_TARGET[0]
@_TARGET[1]
@_TARGET[2]
@redis_options
def limit_remove(
    queue_name: str, job_type: str | None, limit_key: str | None, tenant: str | None
) -> None:
    """Remove a limit; its jobs run unlimited within a few seconds."""
    kind, match = _target(job_type, limit_key, tenant)
    name = f"{kind}:{match}"
    with open_client() as client:
        if not client.remove_limit(queue_name, name):
            raise InvalidLimitError(
                f"queue {queue_name!r} has no limit {name}: see shardq limit list -q {queue_name}"
            )
    click.echo(f"limit {name}: removed")
