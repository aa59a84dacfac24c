"""The options many ``shardq`` commands share: ``--queue``, ``--json`` and a JSON ``--payload``,
and the placement autopilot's.  The parameter types are :mod:`shardq.cli.params`, the
connection options :mod:`shardq.cli.connection`, the options generated from the settings
dataclasses :mod:`shardq.cli.settings`."""

from __future__ import annotations

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
