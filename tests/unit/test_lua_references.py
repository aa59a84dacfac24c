"""Every reference to a Lua file names one that exists: a script's file name carries its KEYS
count, so when a script takes another key its file is renamed (``<op>-<n>.lua``), and every
comment, docstring and document that named the old file went stale without a test noticing.

Read: shardq/, tests/, docs/, README.md, lua/ and clients/ (not installed or built files).  A
reference is a path or name ending in ``.lua`` (``lua/x-3.lua``, ``includes/y.lua``, ``y.lua``),
or an operation's name with a KEYS count (``<op>-<n>``, with or without ``.lua``).  No Redis.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "lua"
SEARCHED = ("shardq", "tests", "docs", "README.md", "lua", "clients")
SKIPPED_DIRS = {"node_modules", "dist", "__pycache__", ".venv", ".mypy_cache", ".ruff_cache"}
TEXT = {".py", ".md", ".lua", ".ts", ".js", ".json", ".toml", ".yml", ".yaml", ".sh", ".txt"}
# Made-up scripts the loader's own tests build in a temporary folder, and this file's examples
# (their names are not references to lua/); their <op>-<n> names are still checked.
MADE_UP = {"tests/unit/test_scripts_loader.py", "tests/unit/test_lua_references.py"}

SCRIPTS = {p.name.rsplit("-", 1)[0]: p.name for p in LUA.glob("*-[0-9]*.lua")}
INCLUDES = {p.name for p in (LUA / "includes").glob("*.lua")}
# A file name or path ending in .lua: at least one character of a name before the suffix.
LUA_NAME = re.compile(r"[\w./-]*\w\.lua\b")
OP_COUNT = re.compile(
    r"(?<![\w-])(" + "|".join(sorted(map(re.escape, SCRIPTS), key=len, reverse=True)) + r")-(\d+)"
    r"(?![\w-])"
)


def _files() -> Iterator[Path]:
    for name in SEARCHED:
        top = ROOT / name
        if top.is_file():
            yield top
            continue
        for path in sorted(top.rglob("*")):
            rel = path.relative_to(ROOT)
            if path.is_file() and path.suffix in TEXT and not SKIPPED_DIRS & set(rel.parts):
                yield path


def _stale(rel: str, text: str) -> Iterator[str]:
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{rel}:{number}"
        for match in OP_COUNT.finditer(line):
            op, keys = match.groups()
            if f"{op}-{keys}.lua" != SCRIPTS[op]:
                yield f"{where}: {match.group(0)} (the file is {SCRIPTS[op]})"
        if rel in MADE_UP:
            continue
        for match in LUA_NAME.finditer(line):
            name = match.group(0).rsplit("/", 1)[-1]
            if re.fullmatch(r"[a-z][a-z-]*-\d+\.lua", name):
                known = name in SCRIPTS.values() and "includes/" not in match.group(0)
            else:
                known = name in INCLUDES
            if not known:
                yield f"{where}: {match.group(0)} (no such file in lua/)"


def test_every_reference_to_a_lua_file_names_one_that_exists() -> None:
    stale = [
        found
        for path in _files()
        for found in _stale(path.relative_to(ROOT).as_posix(), path.read_text(errors="replace"))
    ]
    assert not stale, "references to Lua files that do not exist:\n" + "\n".join(stale)


def test_the_check_finds_a_renamed_file() -> None:
    op, file = next(iter(SCRIPTS.items()))
    keys = int(file.removesuffix(".lua").rsplit("-", 1)[1])
    old = f"{op}-{keys + 1}"
    found = list(_stale("x.md", f"see lua/{old}.lua, {old} and includes/gone.lua; {file}"))
    assert len(found) == 4, found  # <op>-<n> twice, the old file, the missing include
