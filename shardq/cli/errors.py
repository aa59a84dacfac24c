"""The one place the CLI turns an expected failure into one line and exit code 1: the root group
(:class:`ShardqGroup`) maps what any command below it raises with :func:`to_click`.

Library messages speak Python (``run_at``, ``past_tolerance``, ``client.create_queue(...)``);
:func:`cli_message` says the command-line equivalent instead, so a user is never told to
change an argument the CLI does not have.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Mapping
from typing import Any

import click

from shardq.config import ProducerSettings
from shardq.errors import ShardqError

# Python spellings in shared library messages -> what the CLI user types instead.
_REWRITES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r" or client\.\w+\([^)]*\)"), ""),
    (re.compile(r"`shardq queue create (?!-)(\S+?)( |`)"), r"`shardq queue create --queue \1\2"),
    (re.compile(r"\bdelay=0\b"), "--delay 0"),
    (re.compile(r"\brun_at\b"), "--at"),
    (re.compile(r"\bjob_id\b"), "--job-id"),
    (re.compile(r"\bidempotency_key\b"), "--idempotency-key"),
    (re.compile(r"\bmax_attempts\b"), "--max-attempts"),
    (re.compile(r"\bpartitions must be\b"), "--partitions must be"),
    (re.compile(r"\bdead_letter_cap\b"), "--dead-letter-cap"),
    (re.compile(r"\back_retention\b"), "--ack-retention"),
    (re.compile(r"\berror\.retry_requests\b"), "the jobs that were not stored"),
] + [
    # every producer setting is an `enqueue` flag (see cli/job.py), so "raise max_horizon"
    # becomes "raise --max-horizon"
    (re.compile(rf"\b{f.name}\b"), "--" + f.name.replace("_", "-"))
    for f in dataclasses.fields(ProducerSettings)
]


def cli_message(text: str) -> str:
    """``text`` with Python argument names replaced by the CLI's flags."""
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    return text


def _redis_error_classes() -> tuple[type[BaseException], ...]:
    from redis.exceptions import RedisClusterException, RedisError

    # RedisClusterException ("all nodes unreachable") is not a RedisError.
    return (RedisError, RedisClusterException)


def to_click(exc: BaseException) -> click.ClickException | None:
    """The one-line CLI error for an expected failure, or None for a bug (keep the traceback)."""
    from redis.exceptions import (
        AuthenticationError,
        AuthorizationError,
        NoPermissionError,
        ResponseError,
    )
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    if isinstance(exc, ShardqError):
        return click.ClickException(cli_message(str(exc)))
    if isinstance(exc, AuthenticationError | AuthorizationError):
        return click.ClickException(
            f"Redis refused the credentials ({exc}): check --username and the password "
            "(SHARDQ_REDIS_PASSWORD or --password-file)"
        )
    if isinstance(exc, NoPermissionError):
        return click.ClickException(
            f"the Redis user may not do this ({exc}): run it as a user with that role "
            "(see `shardq acl print`)"
        )
    if isinstance(exc, RedisTimeoutError):
        return click.ClickException(f"Redis did not answer in time ({exc}): check --url")
    if isinstance(exc, RedisConnectionError):
        return click.ClickException(
            f"cannot reach Redis ({exc}): check --url and that the server runs"
        )
    if isinstance(exc, ResponseError):
        return click.ClickException(f"Redis answered an error: {exc}")
    if isinstance(exc, _redis_error_classes()):
        return click.ClickException(f"Redis: {type(exc).__name__}: {exc}")
    return None


class ShardqGroup(click.Group):
    """The root group: an expected failure anywhere below it (Redis unreachable, refused
    credentials, an unknown queue, input the library refuses) becomes one line and exit 1,
    here, instead of a try/except in every command.  Anything else is a bug: its traceback
    stays.

    ``lazy_commands``: command name -> ``"module:attribute"`` of a command imported only when
    it is looked up (it runs, or a help lists it), so a command loads its own module and what
    that imports, never every command's."""

    def __init__(
        self, *args: Any, lazy_commands: Mapping[str, str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            module, _, attribute = self.lazy_commands[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command) or command.name != cmd_name:
                raise TypeError(f"{self.lazy_commands[cmd_name]} is not the command {cmd_name}")
            self.add_command(command)
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            mapped = to_click(exc)
            if mapped is None:
                raise
            raise click.ClickException(" ".join(mapped.message.split())) from None
