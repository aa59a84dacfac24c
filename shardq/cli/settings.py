"""Options generated from the settings dataclasses: every field of ``WorkerSettings``,
``DispatcherSettings`` and ``ProducerSettings`` can be set by flag and by environment variable
without being restated (``--visibility-timeout`` / ``SHARDQ_WORKER_VISIBILITY_TIMEOUT``); the
help text is the field's docstring in shardq/config.py, the default is the dataclass's."""

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
from pathlib import Path
from typing import Any, TypeVar

import click

from shardq.cli.params import Duration

F = TypeVar("F", bound=Callable[..., Any])


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


class _OptionalDuration(Duration):
    """A duration, or ``none`` for no limit (an option left out stays None: "not given")."""

    name = "duration|none"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None:
            return value
        if str(value).strip().lower() in ("none", "off"):
            return NO_LIMIT
        return super().convert(value, param, ctx)


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
        return _OptionalDuration()
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
