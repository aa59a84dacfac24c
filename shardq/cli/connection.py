"""How a command connects to Redis: the connection options (declared once, here), the settings
and the client they make, and keeping a password given on the command line off the process list.

The connection options belong to the root group (``shardq --url URL stats``); commands that
talk to Redis accept them after their name too (``shardq queue list --url URL``), as kubectl
does,
because that is how scripts and manifests write them.  Either way the values land in one place
in the click context, and :func:`redis_settings` reads them from there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from shardq.config import (
    DEFAULT_URL,
    RedisSettings,
    is_text,
    url_has_password,
    without_password,
)
from shardq.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


_CONNECTION = "shardq.connection"  # ctx.meta key: {option name: (value, source)}
_ARGV_WARNING = (
    "warning: a password on the command line is visible to every user of this machine "
    "(ps, /proc/<pid>/cmdline): pass it in SHARDQ_REDIS_PASSWORD or with --password-file"
)
# Where a value came from, weakest first: a flag after the command beats one before it,
# which beats the environment, which beats the default.
_RANK = {
    ParameterSource.DEFAULT: 0,
    ParameterSource.DEFAULT_MAP: 1,
    ParameterSource.ENVIRONMENT: 2,
    ParameterSource.PROMPT: 3,
    ParameterSource.COMMANDLINE: 4,
}


def _read_password_file(value: str) -> str:
    try:
        secret = Path(value).read_text().strip()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {value}: {exc.strerror}") from None
    if not secret:
        raise click.BadParameter(f"{value} is empty: write the password into it")
    return secret


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """Keep the strongest value seen for this option in the context shared by the command
    chain (ctx.meta is one dict for the root group and its subcommands)."""
    assert param.name is not None
    source = ctx.get_parameter_source(param.name) or ParameterSource.DEFAULT
    if value is not None and param.name == "password_file":
        value = _read_password_file(value)
    store: dict[str, tuple[Any, ParameterSource]] = ctx.meta.setdefault(_CONNECTION, {})
    old = store.get(param.name)
    if old is None or (value is not None and _RANK[source] >= _RANK[old[1]]):
        store[param.name] = (value, source)


_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (
        ("--url",),
        {
            "envvar": "SHARDQ_REDIS_URL",
            "default": DEFAULT_URL,
            "show_default": True,
            "help": "Redis URL, cluster or standalone (detected); rediss:// for TLS. "
            "Env: SHARDQ_REDIS_URL.",
        },
    ),
    (
        ("--username",),
        {"envvar": "SHARDQ_REDIS_USERNAME", "help": "Redis ACL user. Env: SHARDQ_REDIS_USERNAME."},
    ),
    (
        ("--password",),
        {
            "envvar": "SHARDQ_REDIS_PASSWORD",
            "help": "Redis password (or ACL password). Env: SHARDQ_REDIS_PASSWORD.",
        },
    ),
    (
        ("--password-file",),
        {
            "envvar": "SHARDQ_REDIS_PASSWORD_FILE",
            "help": "Read the Redis password from this file (a mounted secret). "
            "Env: SHARDQ_REDIS_PASSWORD_FILE.",
        },
    ),
    (
        ("--ca-certs",),
        {
            "envvar": "SHARDQ_REDIS_SSL_CA_CERTS",
            "type": click.Path(dir_okay=False),
            "help": "CA bundle that signed the server's TLS certificate (with rediss://). "
            "Env: SHARDQ_REDIS_SSL_CA_CERTS.",
        },
    ),
]


def redis_options(fn: F) -> F:
    """The connection options (declared once, in _OPTIONS), for the root group and for every
    command that talks to Redis; read them back with :func:`redis_settings`."""
    for decls, kwargs in reversed(_OPTIONS):
        fn = click.option(*decls, expose_value=False, callback=_remember, **kwargs)(fn)
    return fn


def _given(name: str) -> tuple[Any, ParameterSource]:
    ctx = click.get_current_context()
    store: dict[str, tuple[Any, ParameterSource]] = ctx.meta.get(_CONNECTION, {})
    return store.get(name, (None, ParameterSource.DEFAULT))


def redis_settings() -> RedisSettings:
    """Settings from the connection options, with SHARDQ_REDIS_CLUSTER read from the
    environment as RedisSettings.from_env does."""
    ctx = click.get_current_context()
    url, url_source = _given("url")
    password, password_source = _given("password")
    from_file, _ = _given("password_file")
    username, _ = _given("username")
    ca_certs, _ = _given("ca_certs")
    url = url or DEFAULT_URL
    on_argv = password_source == ParameterSource.COMMANDLINE or (
        url_source == ParameterSource.COMMANDLINE and url_has_password(url)
    )
    if on_argv and not ctx.meta.get(_ARGV_WARNING):
        ctx.meta[_ARGV_WARNING] = True
        click.echo(_ARGV_WARNING, err=True)
    try:
        env = RedisSettings.env_overrides()
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    overrides: dict[str, Any] = {"ssl_ca_certs": ca_certs or env.get("ssl_ca_certs")}
    if env.get("cluster") is not None:
        overrides["cluster"] = env["cluster"]
    if username:
        overrides["username"] = username
    if password or from_file:
        overrides["password"] = password or from_file
    for name, hint in (("username", "'--username'"), ("password", "'--password'")):
        if not is_text(overrides.get(name)):
            raise click.BadParameter(
                "is not valid text (it holds bytes that are not UTF-8): write it in UTF-8",
                param_hint=hint,
            )
    try:
        return RedisSettings.from_url(url, **overrides)
    except ConfigError as exc:
        # A URL the user gave that cannot be one is a usage error (exit 2), named where it
        # came from; the message shows the URL redacted (config.redact_url).
        hint = "SHARDQ_REDIS_URL" if url_source == ParameterSource.ENVIRONMENT else "'--url'"
        raise click.BadParameter(str(exc), param_hint=hint) from None


def open_client() -> Any:
    """A sync :class:`~shardq.Client` on the connection options (use it in ``with``)."""
    from shardq.client import Client

    return Client(redis_settings())


# Keeping passwords off the process list -----------------------------------------------------

_SCRUBBED = "SHARDQ_ARGV_SCRUBBED"
_WARN = "SHARDQ_ARGV_WARNING"  # set for the restarted process only: it logs the warning


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
            url, found = without_password(args[i + 1])
            secret = secret or found
            cleaned += [arg, url]
            i += 2
            continue
        if arg.startswith("--url=") and url_has_password(arg[6:]):
            url, found = without_password(arg[6:])
            secret = secret or found
            cleaned.append("--url=" + url)
            i += 1
            continue
        cleaned.append(arg)
        i += 1
    return cleaned, secret


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
    os.environ["SHARDQ_REDIS_PASSWORD"] = secret
    os.environ[_SCRUBBED] = "1"
    os.environ[_WARN] = "1"
    prefix = sys.orig_argv[: len(sys.orig_argv) - len(sys.argv) + 1]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *prefix[1:], *cleaned])


def warn_password_was_in_argv() -> None:
    """Log the warning of :func:`restart_without_password_in_argv` once logging is set up in
    the restarted process (so it is a log line in the chosen format like every other), and
    only there: processes this one starts do not repeat it."""
    import logging
    import os

    if os.environ.pop(_WARN, None) == "1":
        logging.getLogger("shardq.cli").warning(_ARGV_WARNING)
