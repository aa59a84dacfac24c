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

A script's header may declare ``Flags: <flag> ...`` for ``redis.register_function``:
``no-writes`` for read-only ones; ``allow-oom`` for those that free memory or keep a full Redis
draining (ack, fetch, promote, ...): the others (enqueue, ...) are refused as a whole when Redis
is at maxmemory, before they write anything.

Bounds a script shares with the Python side (how many children a batch may have, how long a
result may be) are declared once, in Python, and reach every function as a Lua local of the
library (:data:`SHARED_LIMITS`): a script names ``MAX_CHILDREN``, never the number.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from shardq import config, jobs, names, workflows
from shardq.errors import ConfigError

_FILE_RE = re.compile(r"^(?P<name>[a-z][a-z-]*)-(?P<keys>\d+)\.lua$")
_INCLUDE_RE = re.compile(r"^--@include\s+(?P<file>[\w.-]+)\s*$", re.MULTILINE)
_ARGV_RE = re.compile(r"^ARGV\[(?P<index>\d+)(?P<more>\.\.)?\]", re.MULTILINE)
_MAX_ARGV_RE = re.compile(r"^Max ARGV:\s*(?P<cap>\d+)\b", re.MULTILINE)
_KEYS_RE = re.compile(r"^KEYS\[(?P<index>\d+)(?P<more>\.\.)?\]", re.MULTILINE)
_MAX_KEYS_RE = re.compile(r"^Max KEYS:\s*(?P<cap>\d+)\b", re.MULTILINE)
_FLAGS_RE = re.compile(r"^Flags:\s*(?P<flags>[a-z -]+?)\s*(\(.*\))?$", re.MULTILINE)
# How the library is assembled (part of its version: the same scripts assembled another way
# are another library).  2: helpers defined once at the library's top; 3: each function
# refuses a KEYS count other than its own and ARGV over its cap first.
LAYOUT = "layout 3"
_KNOWN_FLAGS = {"no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"}

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


def _flags(source: str, name: str) -> tuple[str, ...]:
    header = source.split("]]", 1)[0]
    match = _FLAGS_RE.search(header)
    if match is None and re.search(r"^Flags:", header, re.MULTILINE):
        # (a flag lost to a wrapped line would be a function refused at maxmemory)
        raise ConfigError(f"{name}: its 'Flags:' line must be one line: flags, then (why)")
    flags = tuple(match.group("flags").split()) if match else ()
    unknown = set(flags) - _KNOWN_FLAGS
    if unknown:
        raise ConfigError(f"{name}: unknown function flags {sorted(unknown)}")
    return flags


def _max_argv(source: str, name: str) -> int:
    """The ARGV cap of a script: its header's highest ``ARGV[n]``, or its ``Max ARGV:`` line
    when it takes a variable list (``ARGV[n..]``), which it then must have."""
    header = source.split("]]", 1)[0]
    lines = list(_ARGV_RE.finditer(header))
    fixed = max((int(m.group("index")) for m in lines), default=0)
    cap = _MAX_ARGV_RE.search(header)
    if any(m.group("more") for m in lines):
        if cap is None:
            raise ConfigError(f"{name}: takes ARGV[n..] but its header has no 'Max ARGV: <count>'")
        if int(cap.group("cap")) < fixed:
            raise ConfigError(f"{name}: Max ARGV {cap.group('cap')} is below its ARGV[{fixed}]")
        return int(cap.group("cap"))
    if cap is not None and int(cap.group("cap")) != fixed:
        raise ConfigError(f"{name}: Max ARGV {cap.group('cap')} but its header lists {fixed}")
    return fixed


def _max_keys(source: str, name: str, num_keys: int) -> int:
    """The KEYS cap of a script: its file name's count, or its ``Max KEYS:`` line when its
    header lists a variable list of keys after the fixed ones (``KEYS[n..]``, n = count + 1)."""
    header = source.split("]]", 1)[0]
    more = [m for m in _KEYS_RE.finditer(header) if m.group("more")]
    cap = _MAX_KEYS_RE.search(header)
    if not more:
        if cap is not None:
            raise ConfigError(f"{name}: 'Max KEYS' without a KEYS[n..] line")
        return num_keys
    if int(more[0].group("index")) != num_keys + 1 or cap is None:
        raise ConfigError(
            f"{name}: a variable list of keys is KEYS[{num_keys + 1}..] with a 'Max KEYS: <count>'"
        )
    if int(cap.group("cap")) <= num_keys:
        raise ConfigError(f"{name}: Max KEYS {cap.group('cap')} is not above {num_keys}")
    return int(cap.group("cap"))


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
    bodies: dict[str, tuple[int, str, str, tuple[str, ...], int, int]] = {}
    helpers: dict[str, str] = {}
    for path in sorted(directory.glob("*.lua")):
        match = _FILE_RE.match(path.name)
        if match is None:
            raise ConfigError(f"{path.name}: script files are named <operation>-<numkeys>.lua")
        name = match.group("name")
        raw = path.read_text()
        source = expand_includes(raw, directory / "includes")
        _included(raw, directory / "includes", helpers)
        body = _INCLUDE_RE.sub("", raw)
        num_keys = int(match.group("keys"))
        bodies[name] = (
            num_keys,
            source,
            body,
            _flags(source, path.name),
            _max_argv(raw, path.name),
            _max_keys(raw, path.name, num_keys),
        )
    limits = "".join(f"local {name} = {value}\n" for name, value in SHARED_LIMITS.items())
    digest = hashlib.sha1(
        "\0".join(
            [
                LAYOUT,
                limits,
                *(
                    f"{n}\0{k}\0{s}\0{' '.join(f)}\0{c}" + (f"\0{mk}" if mk != k else "")
                    for n, (k, s, _, f, c, mk) in bodies.items()
                ),
            ]
        ).encode()
    ).hexdigest()[:12]
    lib = f"shardq_{digest}"
    # ARGV: the calling function's, for the helpers (checks.lua's arg_number); each function
    # sets it before anything else.
    parts = [f"#!lua name={lib}\nlocal ARGV\n{limits}"]
    parts += [f"\n-- includes/{name}\n{text}" for name, text in helpers.items()]
    scripts: dict[str, LuaScript] = {}
    for name, (num_keys, source, body, flags, cap, max_keys) in bodies.items():
        function = f"{lib}_{name.replace('-', '_')}"
        scripts[name] = LuaScript(name, num_keys, source, flags, function, cap, max_keys)
        flag_list = ", ".join(f"'{f}'" for f in flags)
        # First of all, before the body (and its first write) runs: E_TOO_MANY_ARGUMENTS.
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
            f"callback=function(KEYS, args)\n{guard}ARGV = args\n{body}\nend}}\n"
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
