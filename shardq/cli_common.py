"""Options and error handling shared by every ``shardq`` command that talks to Redis."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from shardq.config import RedisSettings
from shardq.errors import ShardqError

F = TypeVar("F", bound=Callable[..., Any])


def redis_options(fn: F) -> F:
    """Connection options shared by every command that talks to Redis (env vars too)."""
    fn = click.option(
        "--password",
        envvar="SHARDQ_REDIS_PASSWORD",
        default=None,
        help="Redis password (or ACL password). Env: SHARDQ_REDIS_PASSWORD.",
    )(fn)
    fn = click.option(
        "--username", envvar="SHARDQ_REDIS_USERNAME", default=None, help="Redis ACL user."
    )(fn)
    fn = click.option(
        "--url",
        envvar="SHARDQ_REDIS_URL",
        default="redis://127.0.0.1:7000",
        show_default=True,
        help="Redis URL, cluster or standalone (detected). Env: SHARDQ_REDIS_URL.",
    )(fn)
    return fn


def settings_from(url: str, username: str | None, password: str | None) -> RedisSettings:
    """Settings from the command line, with the other SHARDQ_REDIS_* variables (cluster mode,
    TLS CA file) read from the environment as RedisSettings.from_env does."""
    env = RedisSettings.from_env()
    overrides: dict[str, Any] = {"ssl_ca_certs": env.ssl_ca_certs}
    if env.cluster is not None:
        overrides["cluster"] = env.cluster
    if username:
        overrides["username"] = username
    if password:
        overrides["password"] = password
    return RedisSettings.from_url(url, **overrides)


def friendly_errors(fn: F) -> F:
    """Show shardq's typed errors as one clear line instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ShardqError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None

    return wrapper  # type: ignore[return-value]
