"""Loads the Lua scripts in lua/: one file per operation, ``<operation>-<number of KEYS>.lua``.

``--@include name.lua`` lines pull in shared helpers from lua/includes/ (recursively, a cycle is
an error).  Each script is loaded once per process and identified by the SHA1 of its expanded
text, which is what EVALSHA sends; :mod:`shardq.store.transport` resends the text with EVAL to
a node that answers NOSCRIPT.  Only the store's operation modules refer to a script by name.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from shardq.errors import ConfigError

_FILE_RE = re.compile(r"^(?P<name>[a-z][a-z-]*)-(?P<keys>\d+)\.lua$")
_INCLUDE_RE = re.compile(r"^--@include\s+(?P<file>[\w.-]+)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class LuaScript:
    """One operation's script: its name, how many KEYS it takes, its expanded source and SHA1."""

    name: str
    num_keys: int
    source: str
    sha: str

    def args(self, keys: list[str], argv: list[Any]) -> list[Any]:
        """EVAL/EVALSHA arguments after the script: numkeys, keys, argv."""
        if len(keys) != self.num_keys:
            raise ValueError(f"{self.name} takes {self.num_keys} keys, got {len(keys)}")
        return [self.num_keys, *keys, *argv]


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


def expand_includes(source: str, includes: Path, seen: frozenset[str] = frozenset()) -> str:
    """Replace each ``--@include file`` line with that file's text (recursively, once each)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group("file")
        if name in seen:
            raise ConfigError(f"include cycle through {name}")
        path = includes / name
        if not path.is_file():
            raise ConfigError(f"missing Lua include {path}")
        return expand_includes(path.read_text(), includes, seen | {name})

    return _INCLUDE_RE.sub(replace, source)


def load_dir(directory: Path) -> dict[str, LuaScript]:
    """Every script of a directory, by operation name."""
    scripts: dict[str, LuaScript] = {}
    for path in sorted(directory.glob("*.lua")):
        match = _FILE_RE.match(path.name)
        if match is None:
            raise ConfigError(f"{path.name}: script files are named <operation>-<numkeys>.lua")
        source = expand_includes(path.read_text(), directory / "includes")
        sha = hashlib.sha1(source.encode()).hexdigest()
        scripts[match.group("name")] = LuaScript(
            match.group("name"), int(match.group("keys")), source, sha
        )
    return scripts


@cache
def scripts() -> dict[str, LuaScript]:
    """All scripts, loaded once per process."""
    return load_dir(lua_dir())


def script(name: str) -> LuaScript:
    """One script by operation name (e.g. ``"promote"``)."""
    return scripts()[name]
