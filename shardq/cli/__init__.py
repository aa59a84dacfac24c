"""The ``shardq`` command line: the root group, and every command group added to it here.

One module per group of commands, each defining its commands and nothing else; this module
adds them all with ``add_command`` (no command registers itself by being imported):

- ``process``: ``dispatcher run``, ``worker run``, ``health``
- ``queue``: every ``queue ...`` command; ``job``: every ``job ...`` command and ``enqueue``
- ``schedule``, ``batch``, ``limit``; ``ops``: ``owners``, ``rebalance``, ``stats``, ``dlq ...``;
  ``balancer``: ``balancer run|status``
- ``security``: ``acl ...``, ``functions ...``; ``web``
- ``dev``: ``dev ...``, ``demo`` (these import shardq.dev inside the commands, so no other
  command loads it)

What they share is in ``options`` (connection options, --queue, parameter types, settings
options) and ``errors`` (an expected failure as one line, exit 1).
"""

from __future__ import annotations

import click

from shardq import __version__
from shardq.cli import (
    balancer,
    batch,
    dev,
    job,
    limit,
    ops,
    process,
    queue,
    schedule,
    security,
    web,
)
from shardq.cli.errors import ShardqGroup
from shardq.cli.options import (
    LOG_LEVELS,
    redis_options,
    restart_without_password_in_argv,
    warn_password_was_in_argv,
)
from shardq.logs import LOG_FORMATS, LogFormat, setup_logging

__all__ = ["entry", "main"]


@click.group(cls=ShardqGroup)
@click.version_option(__version__, "--version", prog_name="shardq")
@click.option(
    "--log-level",
    type=LOG_LEVELS,
    default="INFO",
    show_default=True,
    envvar="SHARDQ_LOG_LEVEL",
    help="Logging threshold (logs go to stderr). Env: SHARDQ_LOG_LEVEL.",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS, case_sensitive=False),
    default="json",
    show_default=True,
    envvar="SHARDQ_LOG_FORMAT",
    help="json: one JSON object per line (for log collectors); text: for a terminal. "
    "Env: SHARDQ_LOG_FORMAT.",
)
@redis_options
def main(log_level: str, log_format: LogFormat) -> None:
    """shardq: delayed jobs over the partitions of a Redis Cluster.

    Connection options (--url, --username, --password-file, --ca-certs) go here or after any
    command that talks to Redis; every one also reads a SHARDQ_REDIS_* variable.  Commands
    name their queue with --queue/-q (or SHARDQ_QUEUE).
    """
    setup_logging(log_level, log_format)
    warn_password_was_in_argv()


for _command in (
    process.dispatcher,
    process.worker,
    process.health,
    queue.queue,
    job.enqueue,
    job.job,
    schedule.schedule,
    batch.batch,
    limit.limit,
    ops.owners,
    ops.rebalance,
    balancer.balancer_group,
    ops.stats,
    ops.dlq,
    security.acl_group,
    security.functions_group,
    web.web,
    dev.dev,
    dev.demo,
):
    main.add_command(_command)


def entry() -> None:
    """The ``shardq`` command: keeps a password given on the command line off the process
    list, then runs the CLI."""
    restart_without_password_in_argv()
    main()
