"""What the ``shardq`` commands share: the connection options (declared once, here), the
``--queue`` and ``--json`` options, the parameter types, and the options generated from the
settings dataclasses.

The connection options belong to the root group (``shardq --url URL stats``); commands that
talk to Redis accept them after their name too (``shardq stats --url URL``), as kubectl does,
because that is how scripts and manifests write them.  Either way the values land in one place
in the click context, and :func:`redis_settings` reads them from there.

Parameter types check input while click parses the command line, so a bad value is a usage
error (exit 2) that names the rule, before anything talks to Redis.

Settings options: every field of ``WorkerSettings``, ``DispatcherSettings`` and
``ProducerSettings`` can be set by flag and by environment variable without being restated
(``--visibility-timeout`` / ``SHARDQ_WORKER_VISIBILITY_TIMEOUT``); the help text is the field's
docstring in shardq/config.py, the default is the dataclass's.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import re
import textwrap
import types
import typing
from collections.abc import Callable
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import orjson
from click.core import ParameterSource

from shardq.config import (
    DEFAULT_URL,
    RedisSettings,
    is_text,
    url_has_password,
    without_password,
)
from shardq.errors import ConfigError, ShardqError
from shardq.jobs import MAX_ATTEMPTS_LIMIT
from shardq.names import (
    BY_CHOICES,
    JOB_ID_RE,
    JOB_STATE_ALIASES,
    JOB_TYPE_RE,
    MAX_IDEMPOTENCY_KEY,
    JobState,
    check_queue_name,
)
from shardq.store.keys import MAX_PARTITIONS

if TYPE_CHECKING:
    from shardq.worker.pool import QueueChoice

F = TypeVar("F", bound=Callable[..., Any])


# Parameter types ---------------------------------------------------------------------------

PARTITIONS = click.IntRange(1, MAX_PARTITIONS)
MAX_ATTEMPTS = click.IntRange(1, MAX_ATTEMPTS_LIMIT)
LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False)


class QueueName(click.ParamType):  # type: ignore[type-arg]
    name = "queue"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            check_queue_name(value)
        except ShardqError as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


class QueueWeight(click.ParamType):  # type: ignore[type-arg]
    """``NAME`` or ``NAME:WEIGHT``: a queue a worker serves (shardq.worker.pool.QueueChoice)."""

    name = "queue[:weight]"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> QueueChoice:
        from shardq.worker.pool import QueueChoice  # the worker package: only `worker run`

        try:
            return QueueChoice.parse(value)
        except ShardqError as exc:
            self.fail(str(exc), param, ctx)


class JobStates(click.Choice):  # type: ignore[type-arg]
    """A job state (:data:`shardq.names.JOB_STATES`) among ``states``; an old word
    (:data:`shardq.names.JOB_STATE_ALIASES`: ``active``) is taken for the state it now names."""

    def __init__(self, states: tuple[JobState, ...]) -> None:
        super().__init__(states)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            value = JOB_STATE_ALIASES.get(value, value)
        return super().convert(value, param, ctx)


class Pattern(click.ParamType):  # type: ignore[type-arg]
    """Text that must fully match a regular expression; the failure says the rule."""

    def __init__(self, name: str, pattern: re.Pattern[str], rule: str) -> None:
        self.name = name
        self.pattern = pattern
        self.rule = rule

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if not self.pattern.fullmatch(str(value)):
            self.fail(f"{value!r} is invalid: {self.rule}", param, ctx)
        return str(value)


MAX_DURATION = 10 * 366 * 86400.0  # past any horizon a setting or a job may have
_UNITS = {"": 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*")


class Duration(click.ParamType):  # type: ignore[type-arg]
    """Seconds from now, >= 0: ``90``, ``1.5``, ``250ms``, ``90s``, ``5m``, ``2h``, ``1d``."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            seconds = float(value)
        else:
            match = _DURATION.fullmatch(str(value))
            if match is None:
                self.fail(
                    f"{value!r} is not a duration: use seconds (90, 1.5) or a unit "
                    "(250ms, 90s, 5m, 2h, 1d), not negative",
                    param,
                    ctx,
                )
            seconds = float(match.group(1)) * _UNITS[match.group(2) or ""]
        if seconds < 0:
            self.fail(f"{value!r} is negative: use 0 to run now", param, ctx)
        if seconds > MAX_DURATION:  # (also inf: 400 digits read as a float)
            text = str(value) if len(str(value)) <= 24 else str(value)[:24] + "..."
            self.fail(f"{text!r} is too long: at most {MAX_DURATION:.0f} s (10 years)", param, ctx)
        return seconds


class UtcTime(click.ParamType):  # type: ignore[type-arg]
    """An ISO 8601 time with its zone: ``2030-01-01T09:00:00Z`` or ``...+02:00``."""

    name = "iso-time"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            moment = datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(
                f"{value!r} is not an ISO 8601 time: use e.g. 2030-01-01T09:00:00Z", param, ctx
            )
        if moment.tzinfo is None:
            self.fail(
                f"{value!r} has no time zone: add one, e.g. {value}Z (UTC) or {value}+02:00",
                param,
                ctx,
            )
        return moment


class Header(click.ParamType):  # type: ignore[type-arg]
    """``name=value`` (a job header, e.g. a W3C traceparent)."""

    name = "name=value"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        key, sep, text = str(value).partition("=")
        if not sep or not key:
            self.fail(f"{value!r}: use name=value, e.g. traceparent=00-...", param, ctx)
        return key, text


QUEUE_NAME = QueueName()
QUEUE_CHOICE = QueueWeight()
JOB_TYPE = Pattern("type", JOB_TYPE_RE, "use 1-128 characters of letters, digits and '_.:/-'")
JOB_ID = Pattern("job-id", JOB_ID_RE, "use 1-128 printable ASCII characters, no spaces")
IDEMPOTENCY_KEY = Pattern(
    "key", re.compile(rf"[^\x00]{{1,{MAX_IDEMPOTENCY_KEY}}}", re.S), "use 1-256 characters"
)
DURATION = Duration()
UTC_TIME = UtcTime()
HEADER = Header()


# Settings options --------------------------------------------------------------------------


@cache
def _class_bodies(source_file: str) -> dict[str, list[ast.stmt]]:
    """The top-level classes of a module's source, parsed once (``inspect.getsource`` would
    scan the file again for every class, on every start of a command)."""
    tree = ast.parse(Path(source_file).read_text())
    return {node.name: node.body for node in tree.body if isinstance(node, ast.ClassDef)}


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass (the string literal right after each field)."""
    source_file = inspect.getsourcefile(cls)
    assert source_file is not None, cls
    body = _class_bodies(source_file).get(cls.__qualname__)
    if body is None:  # a class not at a module's top (a test's): its own source, parsed alone
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        body = next(n.body for n in tree.body if isinstance(n, ast.ClassDef))
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


NO_LIMIT = "none"


class _OptionalFloat(click.ParamType):  # type: ignore[type-arg]
    """Seconds, or ``none`` for no limit (an option left out stays None: "not given")."""

    name = "seconds|none"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, float | int):
            return value
        if str(value).strip().lower() in ("none", "off"):
            return NO_LIMIT
        try:
            return float(value)
        except ValueError:
            self.fail(f"{value!r} is not a number of seconds or 'none'", param, ctx)


#: Settings that are a number but not seconds (every other float setting takes a duration:
#: ``--lateness-budget 20ms``, ``--lease-time 10s``, or plain seconds).
NOT_SECONDS = frozenset({"hot_multiple"})
#: Settings shared by the dispatcher and the worker: also read from SHARDQ_<NAME>, after the
#: role's own variable (one value for the whole fleet).
SHARED_SETTINGS = frozenset({"lateness_budget"})


def _param_type(annotation: Any, name: str = "") -> Any:
    hints = annotation
    if isinstance(hints, str):
        hints = eval(hints, vars(typing) | {"float": float, "int": int, "bool": bool})
    origin = typing.get_origin(hints)
    args = typing.get_args(hints)
    if origin in (types.UnionType, typing.Union) and type(None) in args:
        return _OptionalFloat()
    if hints is bool:
        return click.BOOL
    if hints is int:
        return click.INT
    return click.FLOAT if name in NOT_SECONDS else Duration()


def settings_options(cls: type, env_prefix: str, skip: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Add one option per field of ``cls`` (default None: "not given"); the command receives
    them as keyword arguments, and :func:`build_settings` turns them into ``cls``."""
    docs = field_docs(cls)

    def decorate(fn: F) -> F:
        for f in reversed(dataclasses.fields(cls)):
            if f.name in skip:
                continue
            default = f.default
            flag = "--" + f.name.replace("_", "-")
            param_type = _param_type(f.type, f.name)
            if param_type is click.BOOL:
                # a bool is a flag pair, --x/--no-x (None when neither is given)
                flag = f"{flag}/--no-{flag[2:]}"
            help_text = docs.get(f.name, "")
            envvars = [f"{env_prefix}{f.name.upper()}"]
            if f.name in SHARED_SETTINGS:
                envvars.append(f"SHARDQ_{f.name.upper()}")
            fn = click.option(
                flag,
                f.name,
                type=param_type,
                default=None,
                envvar=envvars,
                help=f"{help_text} [default: {default}; env {' or '.join(envvars)}]",
            )(fn)
        return fn

    return decorate


def build_settings(cls: type, given: dict[str, Any]) -> Any:
    """``cls`` with the options that were given (the rest keep the dataclass defaults)."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {
        k: (None if v == NO_LIMIT else v) for k, v in given.items() if k in names and v is not None
    }
    return cls(**values)


def pop_settings(cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take the settings fields out of a command's keyword arguments."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: kwargs.pop(k) for k in list(kwargs) if k in names}


# Connection options ------------------------------------------------------------------------

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
    (("--username",), {"envvar": "SHARDQ_REDIS_USERNAME", "help": "Redis ACL user."}),
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
