"""What many ``shardq`` commands share: ``--queue``, ``--json`` and a JSON ``--payload``,
``--yes`` (the one rule for commands that delete or move jobs), the placement autopilot's
options, and the old spellings kept for scripts (:func:`deprecated_alias`).  The parameter
types are :mod:`shardq.cli.params`, the connection options :mod:`shardq.cli.connection`, the
options generated from the settings dataclasses :mod:`shardq.cli.settings`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click
import orjson

from shardq.cli.params import QUEUE_NAME
from shardq.names import BY_CHOICES

F = TypeVar("F", bound=Callable[..., Any])


def queue_option(
    required: bool = True, help: str = "Queue name. Env: SHARDQ_QUEUE."
) -> Callable[[F], F]:
    """``--queue/-q``: how every command names its queue (env SHARDQ_QUEUE)."""
    return click.option(
        "--queue",
        "-q",
        "queue_name",
        type=QUEUE_NAME,
        required=required,
        envvar="SHARDQ_QUEUE",
        help=help,
    )


# --yes ------------------------------------------------------------------------------------------
# Every command that deletes or moves jobs (or the leases and slots that serve them) takes --yes
# and, without it, changes nothing.  Those that can say exactly what they would do (how many
# dead letters, which leases, which slot moves) print it and exit 0: a dry run.  The others
# (emptying, cancelling or deleting a queue's jobs, a resize, cancelling a batch) refuse with a
# usage error (exit 2), so a script that leaves --yes out fails instead of doing nothing.
# A command that names one job by id (job cancel, job run-now, job reschedule) needs none: the
# id is the confirmation.


def yes_option(help: str = "Do it (without it, nothing changes).") -> Callable[[F], F]:
    return click.option("--yes", is_flag=True, help=help)


def require_yes(yes: bool, what: str) -> None:
    """A usage error unless ``--yes`` was given; ``what`` says what would happen."""
    if not yes:
        raise click.UsageError(f"{what}: add --yes to go ahead")


# Old spellings ----------------------------------------------------------------------------------


def deprecated_alias(command: click.Command, old: str, new: str) -> click.Command:
    """``shardq OLD``, kept so that scripts written for it go on working: ``command`` under its
    old name, hidden from the help, saying on stderr (one line) that ``shardq NEW`` is the name
    now.  Its parameters are the command's own, so the two cannot drift apart."""
    callback = command.callback
    assert callback is not None

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        click.echo(f"note: `shardq {old}` is now `shardq {new}`; the old name will go", err=True)
        return callback(*args, **kwargs)

    return click.Command(
        old.rpartition(" ")[2],
        params=list(command.params),
        callback=run,
        help=f"Deprecated: the old name of `shardq {new}`.",
        hidden=True,
        context_settings=command.context_settings,
    )


# --json and a JSON payload -----------------------------------------------------------------

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def parse_payload(text: str) -> Any:
    """A ``--payload`` value as JSON, or a usage error."""
    try:
        # orjson: rejects NaN/Infinity literals and documents nested deeper than 1024 levels
        # with a JSONDecodeError (json.loads would hit RecursionError).
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--payload") from None


# The placement autopilot's options (`rebalance --nodes --apply`, `balancer run`) -------------


def move_budget_options(fn: F) -> F:
    """``--max-moves``, ``--concurrency``, ``--bytes-per-second``: what carrying out a plan of
    slot moves may do (shardq.admin.balancer.Budget)."""
    for option in reversed(
        [
            click.option(
                "--max-moves",
                type=click.IntRange(1),
                default=10,
                show_default=True,
                help="Moves carried out per plan (the rest wait for the next run or plan).",
            ),
            click.option(
                "--concurrency",
                type=click.IntRange(1, 64),
                default=1,
                show_default=True,
                help="Moves at once (never two on one primary).",
            ),
            click.option(
                "--bytes-per-second",
                type=click.FloatRange(min=1.0),
                default=None,
                help="Average bytes/s of the moves started (default: no limit).",
            ),
        ]
    ):
        fn = option(fn)
    return fn


def balance_by_option(fn: F) -> F:
    """``--by``: the load a placement plan evens out."""
    return click.option(
        "--by",
        "balance_by",
        type=click.Choice(BY_CHOICES),
        default="load",
        show_default=True,
        help="Load to even out: jobs/s over --window, bytes in the slots, or load: each "
        "slot's share of both, counting equally.",
    )(fn)
