"""Options and error handling shared by every ``shardq`` command that talks to Redis."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from shardq.config import RedisSettings, url_has_password
from shardq.errors import ShardqError

F = TypeVar("F", bound=Callable[..., Any])


_PASSWORD_FROM_FILE = "shardq.password_file"
_ARGV_WARNING = (
    "warning: a password on the command line is visible to every user of this machine "
    "(ps, /proc/<pid>/cmdline): pass it in SHARDQ_REDIS_PASSWORD or with --password-file"
)


def _read_password_file(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    try:
        secret = Path(value).read_text().strip()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {value}: {exc.strerror}") from None
    if not secret:
        raise click.BadParameter(f"{value} is empty: write the password into it")
    ctx.meta[_PASSWORD_FROM_FILE] = secret


def redis_options(fn: F) -> F:
    """Connection options shared by every command that talks to Redis (env vars too)."""
    fn = click.option(
        "--password-file",
        envvar="SHARDQ_REDIS_PASSWORD_FILE",
        default=None,
        expose_value=False,
        callback=_read_password_file,
        help="Read the Redis password from this file (a mounted secret). "
        "Env: SHARDQ_REDIS_PASSWORD_FILE.",
    )(fn)
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
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        from_file = ctx.meta.get(_PASSWORD_FROM_FILE)
        if from_file and not password:
            password = from_file
        on_argv = ctx.get_parameter_source("password") == ParameterSource.COMMANDLINE or (
            ctx.get_parameter_source("url") == ParameterSource.COMMANDLINE and url_has_password(url)
        )
        if on_argv and not ctx.meta.get(_ARGV_WARNING):
            ctx.meta[_ARGV_WARNING] = True
            click.echo(_ARGV_WARNING, err=True)
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
        from redis.exceptions import (
            AuthenticationError,
            AuthorizationError,
            NoPermissionError,
            RedisError,
        )
        from redis.exceptions import ConnectionError as RedisConnectionError

        try:
            return fn(*args, **kwargs)
        except ShardqError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
        except (AuthenticationError, AuthorizationError) as exc:
            raise click.ClickException(
                f"Redis refused the credentials ({exc}): check --username and the password "
                "(SHARDQ_REDIS_PASSWORD or --password-file)"
            ) from None
        except NoPermissionError as exc:
            raise click.ClickException(
                f"the Redis user may not do this ({exc}): run it as a user with that role "
                "(see `shardq acl print`)"
            ) from None
        except RedisConnectionError as exc:
            raise click.ClickException(
                f"cannot reach Redis ({exc}): check --url and that the server runs"
            ) from None
        except RedisError as exc:
            raise click.ClickException(
                f"Redis answered an error: {type(exc).__name__}: {exc}"
            ) from None

    return wrapper  # type: ignore[return-value]


# Keeping passwords off the process list -----------------------------------------------------

_SCRUBBED = "SHARDQ_ARGV_SCRUBBED"


def scrub_argv(args: list[str]) -> tuple[list[str], str | None]:
    """``args`` without a Redis password in them, and the password they held (or None).

    ``--password X`` / ``--password=X`` are dropped and a password in a ``--url`` value is cut
    out of it (the username stays).
    """
    cleaned: list[str] = []
    secret: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--password" and i + 1 < len(args):
            secret = args[i + 1]
            i += 2
            continue
        if arg.startswith("--password="):
            secret = arg.split("=", 1)[1]
            i += 1
            continue
        if arg in ("--url",) and i + 1 < len(args) and url_has_password(args[i + 1]):
            url, found = _without_password(args[i + 1])
            secret = secret or found
            cleaned += [arg, url]
            i += 2
            continue
        if arg.startswith("--url=") and url_has_password(arg[6:]):
            url, found = _without_password(arg[6:])
            secret = secret or found
            cleaned.append("--url=" + url)
            i += 1
            continue
        cleaned.append(arg)
        i += 1
    return cleaned, secret


def _without_password(url: str) -> tuple[str, str | None]:
    from urllib.parse import unquote, urlparse

    parsed = urlparse(url)
    password = unquote(parsed.password) if parsed.password is not None else None
    host = parsed.netloc.rsplit("@", 1)[1]
    netloc = f"{parsed.username}@{host}" if parsed.username else host
    return parsed._replace(netloc=netloc).geturl(), password


def restart_without_password_in_argv() -> None:
    """When this process was started with the Redis password in its arguments, start it again
    (exec, same pid) with the password moved into its environment, so ``ps`` and
    ``/proc/<pid>/cmdline`` do not show it for the life of a worker or dispatcher.  The
    arguments were visible for a moment, and are in the shell history: a warning says so."""
    import os
    import sys

    if os.environ.get(_SCRUBBED) == "1":
        return
    cleaned, secret = scrub_argv(sys.argv[1:])
    if secret is None:
        return
    click.echo(_ARGV_WARNING, err=True)
    os.environ["SHARDQ_REDIS_PASSWORD"] = secret
    os.environ[_SCRUBBED] = "1"
    prefix = sys.orig_argv[: len(sys.orig_argv) - len(sys.argv) + 1]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *prefix[1:], *cleaned])
