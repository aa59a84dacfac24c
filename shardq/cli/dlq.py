"""``shardq dlq list|show|replay|purge``: the dead-letter stream (:mod:`shardq.admin.dlq`),
the one path for dead jobs: ``queue retry-dead`` and ``queue empty --state dead`` are old
spellings of ``dlq replay --all`` and ``dlq purge --all``.

Replay and purge print what they would do and act only with ``--yes``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import click

from shardq import format as fmt
from shardq.cli.connection import open_client, redis_options
from shardq.cli.job import show_job
from shardq.cli.options import JSON_OPTION, queue_option, yes_option
from shardq.cli.params import JOB_ID, JOB_TYPE
from shardq.store import keys

if TYPE_CHECKING:
    from shardq import admin


@click.group()
def dlq() -> None:
    """The dead-letter stream: list, show, replay, purge."""


@dlq.command("list")
@queue_option()
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.option("--partition", type=click.IntRange(0), default=None)
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one dead letter each.")
@redis_options
def dlq_list(queue_name: str, limit: int, partition: int | None, as_json: bool) -> None:
    """Newest dead letters first."""
    from shardq import admin

    with open_client() as client:
        if partition is not None:
            # partition P of the active generation (named gG.P after a resize)
            layout = client.layout(queue_name)
            if partition >= layout.partitions:
                raise click.ClickException(
                    f"queue {queue_name!r} has partitions 0-{layout.partitions - 1}; "
                    f"{partition} is not one of them"
                )
            partition = keys.fleet_id(layout.generation, partition)
        letters = admin.dead_letters(client, queue_name, limit, partition)
        total = admin.dead_count(client, queue_name)
    if as_json:
        fmt.echo_json_lines(
            fmt.named({**dataclasses.asdict(d), "died": fmt.iso(_died_ms(d))}) for d in letters
        )
        return
    click.echo(f"{total} dead letter(s) in {queue_name}; newest {len(letters)}:")
    if not letters:
        return
    click.echo(
        fmt.table(
            ["died", "part", "job", "attempt", "error"],
            [
                [
                    fmt.when(_died_ms(d)),
                    fmt.partition(d.partition),
                    d.job_id or "(malformed)",
                    d.attempt,
                    (d.error.splitlines()[0] if d.error else "")[:120],
                ]
                for d in letters
            ],
            right=[1, 3],
        )
    )

    fmt.echo_malformed((f"dead letter {d.entry_id}", d.malformed) for d in letters)


def _died_ms(d: admin.DeadLetter) -> int | None:
    """When the job went dead: the record's own time, else its stream entry id's."""
    return d.at_ms if d.at_ms is not None else fmt.stream_id_ms(d.entry_id)


@dlq.command("show")
@queue_option()
@click.argument("job_id", type=JOB_ID)
@JSON_OPTION
@redis_options
def dlq_show(queue_name: str, job_id: str, as_json: bool) -> None:
    """A dead job in full: payload, attempts and last error."""
    show_job(queue_name, job_id, as_json)


def _job_ids(job_ids: tuple[str, ...], all_jobs: bool) -> list[str] | None:
    if all_jobs == bool(job_ids):
        raise click.UsageError("name job ids or pass --all (not both)")
    return None if all_jobs else list(job_ids)


@dlq.command("replay")
@queue_option()
@click.argument("job_ids", nargs=-1, type=JOB_ID)
@click.option("--all", "all_jobs", is_flag=True, help="Every dead job of the queue.")
@click.option(
    "--type", "job_type", type=JOB_TYPE, default=None, help="With --all: only jobs of this type."
)
@yes_option("Do it (without it, only count).")
@redis_options
def dlq_replay(
    queue_name: str, job_ids: tuple[str, ...], all_jobs: bool, job_type: str | None, yes: bool
) -> None:
    """Put dead jobs back, due now, with attempts reset; says how many moved."""
    from shardq import admin

    wanted = _job_ids(job_ids, all_jobs)
    if job_type is not None:
        if wanted is not None:
            raise click.UsageError("--type goes with --all (named jobs are replayed as named)")
        _replay_type(queue_name, job_type, yes)
        return
    with open_client() as client:
        if not yes:
            n = admin.dead_count(client, queue_name) if wanted is None else len(wanted)
            click.echo(f"would replay {n} dead job(s) of {queue_name}; add --yes to do it")
            return
        moved, skipped = admin.replay(client, queue_name, wanted)
    click.echo(f"replayed {moved} job(s); skipped {skipped} (malformed or no longer dead)")


def _replay_type(queue_name: str, job_type: str, yes: bool) -> None:
    """``--all --type T``: every dead job of one type, page by page with progress."""
    from shardq.inspector import Inspector

    if not yes:
        click.echo(
            f"would replay every dead job of type {job_type} in {queue_name}; add --yes to do it"
        )
        return

    def show(done: int) -> None:
        click.echo(f"\rreplayed: {done:,}", nl=False, err=True)

    with open_client() as client:
        n = Inspector(client).retry_dead(queue_name, job_type, progress=show)
    click.echo(f"replayed {n} dead job(s) of type {job_type}")


@dlq.command("purge")
@queue_option()
@click.argument("job_ids", nargs=-1, type=JOB_ID)
@click.option("--all", "all_jobs", is_flag=True, help="Every dead letter of the queue.")
@yes_option("Do it (without it, only count).")
@redis_options
def dlq_purge(queue_name: str, job_ids: tuple[str, ...], all_jobs: bool, yes: bool) -> None:
    """Delete dead letters and their dead jobs for good."""
    from shardq import admin

    wanted = _job_ids(job_ids, all_jobs)
    with open_client() as client:
        if not yes:
            n = admin.dead_count(client, queue_name) if wanted is None else len(wanted)
            click.echo(f"would purge {n} dead letter(s) of {queue_name}; add --yes to do it")
            return
        n = admin.purge(client, queue_name, wanted)
    click.echo(f"purged {n} dead letter(s)")
