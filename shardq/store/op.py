"""One Redis call as data: what to send, where it goes, and how to read its reply.

Two kinds, with one interface (:class:`Call`): :class:`Op`, a call of one of shardq's functions
(its script, KEYS and ARGV), and :class:`Command`, a plain command on shardq's keys (the queue
meta, the registry, a limits table, a member registry, a deletion).  Every operation module of
the store builds them; the transport runs them (alone, pipelined per node, or with WAIT) and
hands each reply to the call's ``parse``, which returns a named type or raises the typed error
the reply stands for.  Nothing outside the store names a script or a command, or parses a reply.

``safe_to_repeat`` says whether the call may be sent again after an ambiguous fault (sent, reply
lost): reads and enqueues may (a resent enqueue is recognised), a cancel may not (a resend would
answer "not found" for the job the first call cancelled).  The one retry layer
(:mod:`shardq.store.retry`) reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

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
    safe_to_repeat: bool = True

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
        return (verb, self.script.function, len(self.keys), *self.keys, *self.argv)


@dataclass(frozen=True, slots=True)
class Command(Generic[T_co]):
    """A plain command on shardq's keys and the parser of its reply (see :func:`cmd`)."""

    args: tuple[Any, ...]
    route_key: str
    parse: Callable[[Any], T_co]
    safe_to_repeat: bool = True

    @property
    def name(self) -> str:
        return str(self.args[0]).lower()

    def command(self) -> tuple[Any, ...]:
        return self.args


class Call(Protocol[T_co]):
    """What the transport and the retry layer need of a call: :class:`Op` or :class:`Command`."""

    @property
    def name(self) -> str: ...

    @property
    def route_key(self) -> str: ...

    @property
    def parse(self) -> Callable[[Any], T_co]: ...

    @property
    def safe_to_repeat(self) -> bool: ...

    def command(self) -> tuple[Any, ...]: ...


def cmd(
    *args: Any,
    parse: Callable[[Any], T],
    route: str | None = None,
    safe_to_repeat: bool = True,
) -> Command[T]:
    """A plain command; it goes to the node serving ``route`` (default: its first key,
    ``args[1]``).  Every key it names must share that key's slot."""
    return Command(tuple(args), route if route is not None else str(args[1]), parse, safe_to_repeat)


def op(
    name: str,
    keys: list[str],
    argv: list[Any],
    parse: Callable[[Any], T],
    *,
    safe_to_repeat: bool = True,
) -> Op[T]:
    """Build an op for the script ``name``; its KEYS count is checked against the file name and
    its ARGV against the script's cap (the function refuses more: callers chunk)."""
    lua = script(name)
    if not lua.num_keys <= len(keys) <= lua.max_keys:
        wanted = lua.num_keys if lua.max_keys == lua.num_keys else f"{lua.num_keys}..{lua.max_keys}"
        raise ValueError(f"{name} takes {wanted} keys, got {len(keys)}: split the call")
    if len(argv) > lua.max_argv:
        raise ValueError(
            f"{name} takes at most {lua.max_argv} arguments, got {len(argv)}: split the call"
        )
    return Op(lua, keys, argv, parse, safe_to_repeat)


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


# Batches: what a plan (shardq.plans) yields for the retry layer to send --------------------


@dataclass(frozen=True, slots=True)
class Waiting:
    """Calls each node's batch of which is followed by ``WAIT replicas timeout_ms`` on the
    connection that wrote it (a durable enqueue).  Its reply is ``(results, acked)``: per call
    its result, and how many replicas acknowledged its node's batch (None: not answered).

    ``per_node``: ``replicas`` is the most a node's batch waits for, capped at the replicas
    that node has per the slot map (none: no WAIT), and a batch every replica of its node
    confirmed counts as confirmed by ``replicas``.  For shardq's own background writes (the
    relay's reports, a resize's moves): right after a failover one primary may have no replica
    left, and that should not make the writes on every other primary go unconfirmed.  A
    producer's durable enqueue asks for its replicas strictly (not per node)."""

    calls: list[Call[Any]]
    replicas: int
    timeout_ms: int
    per_node: bool = False


@dataclass(frozen=True, slots=True)
class Rounds:
    """Several batches sent one after another, each round written before the previous one's
    replies are read (so Redis works on one while this process parses the last).  Its reply is
    each round's results, in order."""

    rounds: list[list[Call[Any]]]


@dataclass(frozen=True, slots=True)
class Pause:
    """No call: the runner sleeps ``seconds`` (time.sleep or asyncio.sleep) and replies None.
    A plan waiting out something brief (a job a resize is moving) yields it."""

    seconds: float


Batch = list[Call[Any]] | Waiting | Rounds | Pause
