"""A script's header is its contract: what it declares and the Lua that enforces it.

The header is the ``--[[ ... ]]`` comment at the top of each lua/<operation>-<n>.lua; its
grammar and the replies every function may give (which headers do not repeat) are in
lua/README.md.  Read from it here, for :mod:`shardq.store.loader`:

- the KEYS cap (the file name's count, or ``KEYS[n..]`` with ``Max KEYS: <count>``);
- the ARGV cap (the highest ``ARGV[n]``, or ``ARGV[n..]`` with ``Max ARGV: <count>``);
- ``Flags:`` for ``redis.register_function``;
- the ARGV checks: a line ``ARGV[3] max entries to read      number 1..1000`` ends in the
  check of its value, after two spaces or more.  The loader puts the checks at the top of the
  function, before its body runs, so the script does not state them again, and a refused
  call writes nothing.  :func:`check_code` is that Lua.

A bound is a number as Lua writes it (``1e13``, ``-1``, ``0.000001``) or the name of one of the
library's shared limits (``MAX_NAME_BYTES``: the loader's ``SHARED_LIMITS``).  A refused value
gets ``{-11, argv index, value, lo, hi}`` (E_BAD_ARGUMENT), as ``arg_number`` in
lua/includes/checks.lua answered when the scripts checked by hand.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from shardq.errors import ConfigError

_ARGV_RE = re.compile(r"^ARGV\[(?P<index>\d+)(?P<more>\.\.)?\]", re.MULTILINE)
_MAX_ARGV_RE = re.compile(r"^Max ARGV:\s*(?P<cap>\d+)\b", re.MULTILINE)
_KEYS_RE = re.compile(r"^KEYS\[(?P<index>\d+)(?P<more>\.\.)?\]", re.MULTILINE)
_MAX_KEYS_RE = re.compile(r"^Max KEYS:\s*(?P<cap>\d+)\b", re.MULTILINE)
_FLAGS_RE = re.compile(r"^Flags:\s*(?P<flags>[a-z -]+?)\s*(\(.*\))?$", re.MULTILINE)
_KNOWN_FLAGS = {"no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"}

# An ARGV line: ARGV[3], a list ARGV[6..], or a member of a list's groups ARGV[i], ARGV[i+2].
_LINE_RE = re.compile(r"^ARGV\[(?P<at>\d+(?P<more>\.\.)?|i(?:\+(?P<offset>\d+))?)\]\s(?P<rest>.*)$")
# What may end such a line after two spaces or more: a check (the kinds are in lua/README.md).
_KIND_WORDS = ("number ", "int ", "bytes ", "one of ", "groups of ", "each ", "at least ")
_BOUNDED_RE = re.compile(
    r"^(?P<kind>number|int|bytes) (?P<lo>\S+)\.\.(?P<hi>\S+)(?: as (?P<local>[A-Za-z_]\w*))?$"
)
# Names a header may not give a checked number: Lua's words, and what the function holds.
_TAKEN = {
    *("and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in"),
    *("local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"),
    *("KEYS", "ARGV", "args"),
}
_NUMBER_RE = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")
_CHOICE_RE = re.compile(r"^([\w:.-]+|'')$")
_LIST_RE = re.compile(r"^(?:groups of (?P<size>\d+)|each (?P<each>.+?))?(?:,? ?at least 1)?$")


@dataclass(frozen=True, slots=True)
class ArgCheck:
    """The check of one value: a fixed ``ARGV[index]``, or, in a list's groups, the member at
    ``index`` (0 for ``ARGV[i]``, 2 for ``ARGV[i+2]``)."""

    index: int
    kind: str
    """``number``, ``int``, ``bytes``, ``one of``, ``flag`` or ``name``."""
    lo: str = ""
    """The lower bound as Lua reads it (a number, or a shared limit's name); a count of
    bytes for ``bytes``; '' for the kinds without bounds."""
    hi: str = ""
    lo_value: float = 0.0
    hi_value: float = 0.0
    choices: tuple[str, ...] = ()
    """``one of``: the values taken ('' for the empty text)."""
    local: str = ""
    """``number`` and ``int`` ``... as <local>``: the Lua local of the script's body that holds
    the checked number (converted once, by the check)."""


@dataclass(frozen=True, slots=True)
class ArgList:
    """``ARGV[start..]``: values to the end of the call, in groups of ``size``."""

    start: int
    size: int = 1
    at_least_one: bool = False
    members: tuple[ArgCheck, ...] = ()
    """The checks of a group's values (index: the place in the group)."""


@dataclass(frozen=True, slots=True)
class Contract:
    """What one script's header declares."""

    max_argv: int
    max_keys: int
    flags: tuple[str, ...]
    checks: tuple[ArgCheck, ...]
    """The fixed arguments' checks, by index."""
    arg_list: ArgList | None
    """The variable list of arguments, when its header has a check of it or of its values."""


def header_of(source: str) -> str:
    """The header of a script: its text up to the first ``]]``."""
    return source.split("]]", 1)[0]


def parse(source: str, name: str, num_keys: int, limits: Mapping[str, int]) -> Contract:
    """The contract of script file ``name`` (KEYS count ``num_keys``), its bounds' names looked
    up in ``limits``.  A header that says something the loader cannot hold to is a
    :class:`ConfigError`."""
    header = header_of(source)
    max_argv = _max_argv(header, name)
    checks, arg_list = _checks(header, name, limits, max_argv)
    return Contract(
        max_argv, _max_keys(header, name, num_keys), _flags(header, name), checks, arg_list
    )


def _flags(header: str, name: str) -> tuple[str, ...]:
    match = _FLAGS_RE.search(header)
    if match is None and re.search(r"^Flags:", header, re.MULTILINE):
        # (a flag lost to a wrapped line would be a function refused at maxmemory)
        raise ConfigError(f"{name}: its 'Flags:' line must be one line: flags, then (why)")
    flags = tuple(match.group("flags").split()) if match else ()
    unknown = set(flags) - _KNOWN_FLAGS
    if unknown:
        raise ConfigError(f"{name}: unknown function flags {sorted(unknown)}")
    return flags


def _max_argv(header: str, name: str) -> int:
    """The ARGV cap of a script: its header's highest ``ARGV[n]``, or its ``Max ARGV:`` line
    when it takes a variable list (``ARGV[n..]``), which it then must have."""
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


def _max_keys(header: str, name: str, num_keys: int) -> int:
    """The KEYS cap of a script: its file name's count, or its ``Max KEYS:`` line when its
    header lists a variable list of keys after the fixed ones (``KEYS[n..]``, n = count + 1)."""
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


def _spec_of(rest: str) -> str | None:
    """The check that ends an ARGV line's text, if it ends in one."""
    parts = re.split(r"\s{2,}", rest.rstrip())
    tail = parts[-1] if len(parts) > 1 else ""
    if tail.startswith(_KIND_WORDS) or tail in ("flag", "name"):
        return tail
    return None


def _bound(text: str, name: str, limits: Mapping[str, int]) -> float:
    if _NUMBER_RE.match(text):
        return float(text)
    if text in limits:
        return float(limits[text])
    raise ConfigError(f"{name}: bound {text!r} is neither a number nor one of {sorted(limits)}")


def _check(spec: str, index: int, name: str, limits: Mapping[str, int]) -> ArgCheck:
    """One value's check, from its spec (``number 1..1000``, ``flag``, ...)."""
    bounded = _BOUNDED_RE.match(spec)
    if bounded:
        kind, lo, hi, local = bounded.group("kind", "lo", "hi", "local")
        lo_value, hi_value = _bound(lo, name, limits), _bound(hi, name, limits)
        if lo_value > hi_value:
            raise ConfigError(f"{name}: ARGV check {spec!r} bounds nothing")
        if local and (kind == "bytes" or local in _TAKEN):
            raise ConfigError(f"{name}: {spec!r}: a number (not bytes) as a name Lua leaves free")
        return ArgCheck(index, kind, lo, hi, lo_value, hi_value, local=local or "")
    if spec in ("flag", "name"):
        return ArgCheck(index, spec)
    if spec.startswith("one of "):
        choices = spec.removeprefix("one of ").split("|")
        if len(choices) < 2 or not all(_CHOICE_RE.match(c) for c in choices):
            raise ConfigError(f"{name}: {spec!r}: choices are words split by '|' ('' for none)")
        return ArgCheck(index, "one of", choices=tuple("" if c == "''" else c for c in choices))
    raise ConfigError(f"{name}: unknown ARGV check {spec!r} (lua/README.md lists the kinds)")


def _checks(
    header: str, name: str, limits: Mapping[str, int], max_argv: int
) -> tuple[tuple[ArgCheck, ...], ArgList | None]:
    checks: list[ArgCheck] = []
    arg_list: ArgList | None = None
    list_start = 0
    places: set[int] = set()  # of a group, listed so far
    for line in header.splitlines():
        match = _LINE_RE.match(line)
        if match is None:
            continue
        spec = _spec_of(match.group("rest"))
        at = match.group("at")
        if at.endswith(".."):
            list_start = int(at[:-2])
            if spec is None:
                continue
            if spec.startswith("at least ") and spec != "at least 1":
                raise ConfigError(f"{name}: a list is 'at least 1' or takes any count")
            shape = _LIST_RE.match(spec)
            if shape is None:
                raise ConfigError(f"{name}: unknown list check {spec!r} (lua/README.md)")
            each = shape.group("each")
            members = (_check(each, 0, name, limits),) if each else ()
            size = int(shape.group("size") or 1)
            if size < 1 or (max_argv - list_start + 1) % size:
                raise ConfigError(f"{name}: Max ARGV {max_argv} holds no whole groups of {size}")
            arg_list = ArgList(list_start, size, spec.endswith("at least 1"), members)
        elif at.startswith("i"):
            if arg_list is None or arg_list.size < 2:
                raise ConfigError(f"{name}: ARGV[i] lines follow an ARGV[n..] of 'groups of K'")
            offset = int(match.group("offset") or 0)
            if offset >= arg_list.size or offset in places:
                raise ConfigError(f"{name}: {line.split()[0]} is not a new place in a group")
            places.add(offset)
            if spec is not None:
                member = _check(spec, offset, name, limits)
                if member.local:
                    raise ConfigError(f"{name}: a value of a group has no local ({spec!r})")
                arg_list = replace(arg_list, members=(*arg_list.members, member))
        elif spec is not None:
            if list_start:
                raise ConfigError(f"{name}: ARGV[{at}] is listed after the ARGV[n..] list")
            check = _check(spec, int(at), name, limits)
            if check.local and any(c.local == check.local for c in checks):
                raise ConfigError(f"{name}: two arguments as {check.local}")
            checks.append(check)
    return tuple(checks), arg_list


# The Lua: one line per check, each in a block of its own (its locals end there). --------------


def _lua_text(text: str) -> str:
    return "'" + text + "'"


def _value_check(check: ArgCheck, at: str) -> str:
    """The Lua that refuses ``args[at]`` unless it passes ``check`` (``at`` a Lua expression).
    A number checked ``as`` a local is left in that local, for the body; every other check's
    locals end with its block."""
    lo, hi = check.lo, check.hi
    refused = f"return {{-11, {at}, tostring(args[{at}]), tostring({lo}), tostring({hi})}}"
    v = check.local or "v"
    if check.kind == "number":
        # arg_number's test (lua/includes/checks.lua): a finite number within the bounds.
        return (
            f"local {v} = tonumber(args[{at}]) "
            f"if {v} == nil or {v} ~= {v} or {v} < {lo} or {v} > {hi} then {refused} end"
        )
    if check.kind == "int":
        # int_of's test: decimal digits only, a whole number within the bounds.
        return (
            f"local {v} = args[{at}] {v} = type({v}) == 'string' and #{v} <= 17 "
            f"and string.find({v}, '^%-?%d+$') and tonumber({v}) "
            f"if not {v} or {v} < {lo} or {v} > {hi} then {refused} end"
        )
    if check.kind == "bytes":
        # (a value left out is empty, as a script reading it with "or ''" takes it)
        short = f"n < {lo} or " if check.lo_value > 0 else ""
        return (
            f"local n = #(args[{at}] or '') if {short}n > {hi} then "
            f"return {{-11, {at}, n .. ' bytes', tostring({lo}), tostring({hi})}} end"
        )
    if check.kind == "name":
        # A member id, consumer, owner or job id a script may keep: the scripts that keep one
        # run at maxmemory (allow-oom), so what they add must be bounded.
        return (
            f"local s = args[{at}] if not s or #s == 0 or #s > MAX_NAME_BYTES then "
            f"return {{-11, {at}, string.sub(tostring(s), 1, 80), '1 byte', "
            f"MAX_NAME_BYTES .. ' bytes'}} end"
        )
    choices = ("0", "1") if check.kind == "flag" else check.choices
    test = " and ".join(f"s ~= {_lua_text(c)}" for c in choices)
    named = [c for c in choices if c]  # the reply's lo..hi: the first and last listed
    # (a value left out is empty, where '' is one of the choices)
    value = f"args[{at}] or ''" if "" in choices else f"args[{at}]"
    return (
        f"local s = {value} if {test} then "
        f"return {{-11, {at}, tostring(s), {_lua_text(named[0])}, {_lua_text(named[-1])}}} end"
    )


def check_code(contract: Contract) -> str:
    """The Lua that refuses a call whose arguments fail the header's checks, before the body:
    each fixed argument in order, then the list's count and each of its groups' values."""
    lines = [
        f"{_value_check(c, str(c.index))}\n"
        if c.local
        else f"do {_value_check(c, str(c.index))} end\n"
        for c in contract.checks
    ]
    arg_list = contract.arg_list
    if arg_list is not None:
        before = arg_list.start - 1
        if arg_list.size > 1:
            lines.append(
                f"if (#args - {before}) % {arg_list.size} ~= 0 then "
                f"return {{-11, #args, 'argument count', {before}, {arg_list.size}}} end\n"
            )
        if arg_list.at_least_one:
            least = before + arg_list.size
            lines.append(
                f"if #args < {least} then "
                f"return {{-11, #args, 'argument count', {least}, {contract.max_argv}}} end\n"
            )
        if arg_list.members:
            at = ["i", *(f"i + {k}" for k in range(1, arg_list.size))]
            body = " ".join(f"do {_value_check(m, at[m.index])} end" for m in arg_list.members)
            lines.append(f"for i = {arg_list.start}, #args, {arg_list.size} do {body} end\n")
    return "".join(lines)
