"""Command-line options generated from the settings dataclasses, so every field of
``WorkerSettings`` and ``DispatcherSettings`` can be set by flag and by environment variable
without being restated: ``--visibility-timeout`` / ``SHARDQ_WORKER_VISIBILITY_TIMEOUT``.

The help text is the field's docstring in shardq/config.py; the default is the dataclass's.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass (the string literal right after each field)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
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


def _param_type(annotation: Any) -> Any:
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
    return click.FLOAT


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
            param_type = _param_type(f.type)
            if param_type is click.BOOL:
                # a bool is a flag pair, --x/--no-x (None when neither is given)
                flag = f"{flag}/--no-{flag[2:]}"
            help_text = docs.get(f.name, "")
            fn = click.option(
                flag,
                f.name,
                type=param_type,
                default=None,
                envvar=f"{env_prefix}{f.name.upper()}",
                help=f"{help_text} [default: {default}; env {env_prefix}{f.name.upper()}]",
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
