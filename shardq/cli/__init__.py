"""The ``shardq`` command line: the root group, and where each of its commands is defined.

One grammar: ``shardq NOUN VERB`` (``shardq job enqueue``, ``shardq queue stats``, ``shardq
rebalance drain``); the long-running processes are ``NOUN run``.  A command that deletes or
moves jobs acts only with ``--yes`` (cli/options.py says the rule), and every time option takes
a duration (``90``, ``250ms``, ``5m``).  Old spellings of renamed commands (``shardq enqueue``,
``health``, ``owners``, ``stats``, ``demo``) stay as hidden aliases that say their new name on
stderr (:data:`ALIASES`).

One module per group of commands, each defining its commands and nothing else; this module
names them all in ``COMMANDS`` (no command registers itself by being imported), and the root
imports a command's module only when that command runs or a help lists it: ``shardq job get``
loads cli/job.py, not the worker or the console.  So that ``shardq --help`` stays light too,
a command module imports at its top only what its options need (click, the shared CLI
modules, the IO-free models) and the facades, redis-py and the rest inside the commands that
use them (tests/unit/test_import_cost.py):

- ``process``: ``dispatcher run``, ``worker run``, ``redis check``
- ``queue``: every ``queue ...`` command (its read-only views from ``queue_views``);
  ``job``: every ``job ...`` command
- ``schedule``, ``batch``, ``limit``, ``dlq``; ``rebalance`` (its slot moves from
  ``rebalance_slots``); ``balancer``: ``balancer run|status``
- ``security``: ``acl ...``, ``functions ...``; ``web``
- ``dev``: ``dev ...`` (hidden from the help: development only; these import shardq.dev
  inside the commands, so no other command loads it)

What they share is in ``connection`` (the connection options), ``params`` (parameter types),
``settings`` (the options generated from the settings dataclasses), ``options`` (--queue,
--json, --yes, the old spellings' aliases, ...) and ``errors`` (an expected failure as one
line, exit 1).
"""

from __future__ import annotations

import click

from shardq import __version__
from shardq.cli.connection import (
    redis_options,
    restart_without_password_in_argv,
    warn_password_was_in_argv,
)
from shardq.cli.errors import ShardqGroup
from shardq.cli.params import LOG_LEVELS
from shardq.logs import LOG_FORMATS, LogFormat, setup_logging

__all__ = ["ALIASES", "COMMANDS", "entry", "main"]

# The old names of renamed commands, hidden from the help: each runs its command after a
# one-line note on stderr, so scripts and manifests written for them go on working.
ALIASES = {
    "enqueue": "shardq.cli.job:enqueue_alias",
    "health": "shardq.cli.process:health_alias",
    "owners": "shardq.cli.queue_views:owners_alias",
    "stats": "shardq.cli.queue_views:stats_alias",
    "demo": "shardq.cli.dev:demo_alias",
}
# Every command of the root: its name -> "module:attribute" of the click command.
COMMANDS = {
    "dispatcher": "shardq.cli.process:dispatcher",
    "worker": "shardq.cli.process:worker",
    "redis": "shardq.cli.process:redis_group",
    "queue": "shardq.cli.queue:queue",
    "job": "shardq.cli.job:job",
    "schedule": "shardq.cli.schedule:schedule",
    "batch": "shardq.cli.batch:batch",
    "limit": "shardq.cli.limit:limit",
    "dlq": "shardq.cli.dlq:dlq",
    "rebalance": "shardq.cli.rebalance:rebalance",
    "balancer": "shardq.cli.balancer:balancer_group",
    "acl": "shardq.cli.security:acl_group",
    "functions": "shardq.cli.security:functions_group",
    "web": "shardq.cli.web:web",
    "dev": "shardq.cli.dev:dev",
    **ALIASES,
}


@click.group(cls=ShardqGroup, lazy_commands=COMMANDS)
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

    Commands read `shardq NOUN VERB` (`shardq job enqueue`, `shardq queue info`).  Connection
    options (--url, --username, --password-file, --ca-certs) go here or after any command that
    talks to Redis; every one also reads a SHARDQ_REDIS_* variable.  Commands name their queue
    with --queue/-q (or SHARDQ_QUEUE).  What deletes or moves jobs acts only with --yes.
    """
    setup_logging(log_level, log_format)
    warn_password_was_in_argv()


def entry() -> None:
    """The ``shardq`` command: keeps a password given on the command line off the process
    list, then runs the CLI."""
    restart_without_password_in_argv()
    main()
