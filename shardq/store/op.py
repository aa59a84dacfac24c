"""One script call as data: the script, its KEYS and ARGV, and how to read its reply.

Every operation module of the store builds :class:`Op` values; the transport runs them (alone,
pipelined per node, or with WAIT) and hands each reply to the op's ``parse``, which returns a
named type or raises the typed error the script's return code stands for.  Nothing outside
the store names a script or parses a reply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from shardq.store.loader import LuaScript, script

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
U = TypeVar("U")


@dataclass(frozen=True, slots=True)
class Op(Generic[T_co]):
    """A script call and the parser of its reply."""

    script: LuaScript
    keys: list[str]
    argv: list[Any]
    parse: Callable[[Any], T_co]

    @property
    def name(self) -> str:
        return self.script.name

    @property
    def route_key(self) -> str:
        """The key whose slot decides which node runs the call (all KEYS share one slot)."""
        return self.keys[0]

    def command(self) -> tuple[Any, ...]:
        """The FCALL that runs this op (see :mod:`shardq.store.loader`): FCALL_RO for a
        function flagged no-writes, so a read-only ACL user (the viewer: ``+fcall_ro`` only)
        can run the reads and Redis itself refuses it every writing function."""
        verb = "FCALL_RO" if self.script.read_only else "FCALL"
        return (verb, self.script.function, self.script.num_keys, *self.keys, *self.argv)


def op(name: str, keys: list[str], argv: list[Any], parse: Callable[[Any], T]) -> Op[T]:
    """Build an op for the script ``name``; its KEYS count is checked against the file name and
    its ARGV against the script's cap (the function refuses more: callers chunk)."""
    lua = script(name)
    if len(keys) != lua.num_keys:
        raise ValueError(f"{name} takes {lua.num_keys} keys, got {len(keys)}")
    if len(argv) > lua.max_argv:
        raise ValueError(
            f"{name} takes at most {lua.max_argv} arguments, got {len(argv)}: split the call"
        )
    return Op(lua, keys, argv, parse)


def raw(reply: Any) -> Any:
    """A parser that returns the reply as it came (for tests and tools reading raw state)."""
    return reply


def result(reply: Any, parse: Callable[[Any], U]) -> U | BaseException:
    """``parse(reply)``, or the exception the reply is or the parser raised."""
    if isinstance(reply, BaseException):
        return reply
    try:
        return parse(reply)
    except Exception as exc:
        return exc
