"""Loads lua/: one file per operation, ``<operation>-<number of KEYS>.lua``, as one Redis Functions
library.

``--@include <file>`` lines pull in shared helpers from lua/includes/ (recursively, a cycle is
an error).  Every operation becomes one function of the library ``shardq_<version>``, named
``shardq_<version>_<operation>``; the version is a hash of the whole library, so two releases'
libraries can be loaded side by side during a rolling upgrade.

In the library the helpers are defined once, at its top, not inside each function: a function's
body runs on every call, and defining a dozen helper closures (and their tables) per call cost
every call a microsecond or two, which a call carrying one job in steady state feels.  The
helpers see the calling function's ARGV through one library-level variable each function sets
first (Redis runs one function at a time).  :attr:`LuaScript.source` stays the script with its
includes expanded, as one would read it.

Why Functions rather than EVAL/EVALSHA: a library is loaded once per primary (FUNCTION LOAD),
replicated to its replicas and persisted with the data, so it survives failovers and restarts;
and the roles that run shardq need only ``FCALL``, never ``EVAL`` or ``SCRIPT LOAD``, which
would let them run arbitrary Lua on the server.  A node that lacks the library (a new node, a
FUNCTION FLUSH) answers "Function not found"; :mod:`shardq.store.transport` loads it there when
the user may (``shardq functions load`` does it as an admin otherwise) and resends.

Every function refuses a call with another number of KEYS than its file name says (or, for one
taking a variable list of keys, a ``KEYS[n..]`` line, fewer than that or more than its ``Max
KEYS: <count>`` line), or more ARGV than its cap, before anything else (E_TOO_MANY_ARGUMENTS,
-15): a script's own limits bound what it does per item, not how many items one FCALL carries,
and a single call of 1.4M jobs held a primary for 5 s (BUSY, then UNKILLABLE once it had
written). The cap is the highest ``ARGV[n]`` of the header, or for a script taking a variable
list (an ``ARGV[n..]`` line) its ``Max ARGV: <count>`` line; :func:`shardq.store.op.op` refuses
to build a longer call, so a caller that does not chunk fails before sending, and the callers
chunk by the same numbers.

Then it refuses arguments that fail the checks its header declares (``ARGV[3] max entries to
read  number 1..1000``: E_BAD_ARGUMENT, -11), so a script states each bound once, in its header,
and its body starts with valid arguments: :mod:`shardq.store.contracts` reads the header (its
grammar and the replies every function may give are in lua/README.md) and writes these checks.

A script's header may declare ``Flags: <flag> ...`` for ``redis.register_function``:
``no-writes`` for read-only ones; ``allow-oom`` for those that free memory or keep a full Redis
draining (ack, fetch, promote, ...): the others (enqueue, ...) are refused as a whole when Redis
is at maxmemory, before they write anything.

Bounds a script shares with the Python side (how many children a batch may have, how long a
result may be) are declared once, in Python, and reach every function as a Lua local of the
library (:data:`SHARED_LIMITS`): a script and its header name ``MAX_CHILDREN``, never the
number.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from shardq import config, jobs, names, workflows
from shardq.errors import ConfigError
from shardq.store import contracts

_FILE_RE = re.compile(r"^(?P<name>[a-z][a-z-]*)-(?P<keys>\d+)\.lua$")
_INCLUDE_RE = re.compile(r"^--@include\s+(?P<file>[\w.-]+)\s*$", re.MULTILINE)
# How the library is assembled (part of its version: the same scripts assembled another way
# are another library).  2: helpers defined once at the library's top; 3: each function
# refuses a KEYS count other than its own and ARGV over its cap first; 4: then the ARGV checks
# of its header.
LAYOUT = "layout 4"

#: Bounds the scripts check, each the Python constant the callers check against: locals of the
#: same names at the library's top (so a script and its caller cannot disagree).
SHARED_LIMITS: dict[str, int] = {
    # children of a batch created in one call, of one add, in all; steps of a chain
    "MAX_CHILDREN": workflows.MAX_CHILDREN,
    "MAX_ADD": workflows.MAX_ADD,
    "MAX_TOTAL": workflows.MAX_TOTAL,
    "MAX_STEPS": workflows.MAX_STEPS,
    # a progress value, a result record and an error text as a worker writes them
    "MAX_PROGRESS_BYTES": jobs.MAX_PROGRESS_BYTES,
    "STAMP_BYTES": jobs.STAMP_BYTES,
    "MAX_RESULT_BYTES": config.MAX_RESULT_BYTES,
    "MAX_ERROR_BYTES": config.MAX_ERROR_BYTES,
    # a member id, consumer name, lease owner or limit holder
    "MAX_NAME_BYTES": names.MAX_MEMBER_BYTES,
}


@dataclass(frozen=True, slots=True)
class LuaScript:
    """One operation: its name, KEYS count, expanded source, flags and function name."""

    name: str
    num_keys: int
    source: str
    flags: tuple[str, ...]
    function: str
    max_argv: int
    """The most ARGV a call may carry (the header's; the function refuses more)."""
    max_keys: int = 0
    """The most KEYS a call may carry: ``num_keys`` (the file name's) unless the script takes
    a variable list of keys after its fixed ones (``KEYS[n..]``, then its ``Max KEYS:``)."""
    contract: contracts.Contract | None = None
    """What its header declares, the ARGV checks the function makes first among it."""

    def __post_init__(self) -> None:
        if self.max_keys < self.num_keys:
            object.__setattr__(self, "max_keys", self.num_keys)

    @property
    def read_only(self) -> bool:
        return "no-writes" in self.flags


@dataclass(frozen=True, slots=True)
class Library:
    """Every operation as one Redis Functions library."""

    name: str
    code: str
    scripts: dict[str, LuaScript]


def lua_dir() -> Path:
    """Where the scripts are: inside the installed package, or lua/ beside it in a checkout."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "lua"
    if packaged.is_dir():
        return packaged
    checkout = package.parent / "lua"
    if checkout.is_dir():
        return checkout
    raise ConfigError(
        f"Lua scripts not found in {packaged} or {checkout}: reinstall shardq (the wheel ships "
        "them as shardq/lua)"
    )


def expand_includes(
    source: str, includes: Path, seen: frozenset[str] = frozenset(), done: set[str] | None = None
) -> str:
    """Replace each ``--@include file`` line with that file's text (recursively; a file named
    again, by the script or by another include, expands only the first time)."""
    done = set() if done is None else done

    def replace(match: re.Match[str]) -> str:
        name = match.group("file")
        if name in seen:
            raise ConfigError(f"include cycle through {name}")
        path = includes / name
        if not path.is_file():
            raise ConfigError(f"missing Lua include {path}")
        if name in done:
            return ""
        done.add(name)
        return expand_includes(path.read_text(), includes, seen | {name}, done)

    return _INCLUDE_RE.sub(replace, source)


def _included(source: str, includes: Path, out: dict[str, str]) -> None:
    """Add every include ``source`` names to ``out``, recursively, each after the ones it
    includes (``expand_includes`` has checked for cycles and missing files)."""
    for match in _INCLUDE_RE.finditer(source):
        name = match.group("file")
        if name not in out:
            text = (includes / name).read_text()
            _included(text, includes, out)
            out[name] = _INCLUDE_RE.sub("", text)


def build(directory: Path) -> Library:
    """The library of every script in ``directory``."""
    # name -> (KEYS count, expanded source, body, contract, its checks as Lua)
    read: dict[str, tuple[int, str, str, contracts.Contract, str]] = {}
    helpers: dict[str, str] = {}
    for path in sorted(directory.glob("*.lua")):
        match = _FILE_RE.match(path.name)
        if match is None:
            raise ConfigError(f"{path.name}: script files are named <operation>-<numkeys>.lua")
        name = match.group("name")
        raw = path.read_text()
        source = expand_includes(raw, directory / "includes")
        _included(raw, directory / "includes", helpers)
        num_keys = int(match.group("keys"))
        contract = contracts.parse(raw, path.name, num_keys, SHARED_LIMITS)
        body = _INCLUDE_RE.sub("", raw)
        read[name] = (num_keys, source, body, contract, contracts.check_code(contract))
    limits = "".join(f"local {name} = {value}\n" for name, value in SHARED_LIMITS.items())
    digest = hashlib.sha1(
        "\0".join(
            [
                LAYOUT,
                limits,
                *(
                    f"{n}\0{k}\0{s}\0{' '.join(c.flags)}\0{c.max_argv}\0{c.max_keys}\0{checks}"
                    for n, (k, s, _, c, checks) in read.items()
                ),
            ]
        ).encode()
    ).hexdigest()[:12]
    lib = f"shardq_{digest}"
    # ARGV: the calling function's, for the helpers (lua/includes/*.lua); each function sets
    # it before its body runs.
    parts = [f"#!lua name={lib}\nlocal ARGV\n{limits}"]
    parts += [f"\n-- includes/{name}\n{text}" for name, text in helpers.items()]
    scripts: dict[str, LuaScript] = {}
    for name, (num_keys, source, body, contract, checks) in read.items():
        function = f"{lib}_{name.replace('-', '_')}"
        cap, max_keys = contract.max_argv, contract.max_keys
        scripts[name] = LuaScript(
            name, num_keys, source, contract.flags, function, cap, max_keys, contract
        )
        flag_list = ", ".join(f"'{f}'" for f in contract.flags)
        # First of all, before the body (and its first write) runs: E_TOO_MANY_ARGUMENTS,
        # then the header's ARGV checks (E_BAD_ARGUMENT).
        keys_guard = (
            f"if #KEYS ~= {num_keys} then return {{-15, 'KEYS', #KEYS, {num_keys}}} end\n"
            if max_keys == num_keys
            else f"if #KEYS < {num_keys} or #KEYS > {max_keys} then "
            f"return {{-15, 'KEYS', #KEYS, {max_keys}}} end\n"
        )
        guard = keys_guard + f"if #args > {cap} then return {{-15, 'ARGV', #args, {cap}}} end\n"
        parts.append(
            f"\n-- {name}-{num_keys}.lua\n"
            f"redis.register_function{{function_name='{function}', flags={{{flag_list}}}, "
            f"callback=function(KEYS, args)\n{guard}{checks}ARGV = args\n{body}\nend}}\n"
        )
    return Library(lib, "".join(parts), scripts)


@cache
def library() -> Library:
    """The library, built once per process."""
    return build(lua_dir())


def scripts() -> dict[str, LuaScript]:
    """Every operation by name."""
    return library().scripts


def script(name: str) -> LuaScript:
    """One operation by name (e.g. ``"promote"``)."""
    return scripts()[name]
