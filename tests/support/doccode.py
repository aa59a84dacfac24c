"""The code the docs show: README.md and every page of docs/, with the files of examples/ that
the pages include (pymdownx.snippets, ``--8<-- "examples/x.py:section"``) put in their place,
as the built site shows them.  Read by the docs checker (tests/unit/test_docs_names.py) and
the runners of the guides' code (tests/examples/test_guides.py)."""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# `--8<-- "path"` or `--8<-- "path:section"` alone on a line (the block form of snippets).
INCLUDE = re.compile(r'^(?P<indent>[ \t]*)--8<-- "(?P<target>[^"]+)"[ \t]*$', re.M)
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<lang>[\w+-]*)[^\n]*\n"
    r"(?P<code>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.M | re.S,
)
INLINE = re.compile(r"(?<!`)`(?!`)([^`\n]+)`(?!`)")
SHELL = {"sh", "bash", "shell", "console"}


def pages() -> list[Path]:
    """README.md and every Markdown page of the docs site (not docs/_tools)."""
    found = [p for p in sorted(DOCS.rglob("*.md")) if "_tools" not in p.relative_to(DOCS).parts]
    return [ROOT / "README.md", *found]


def section(path: Path, name: str) -> str:
    """The lines between ``--8<-- [start:name]`` and ``--8<-- [end:name]`` in ``path``,
    dedented (as mkdocs.yml's ``dedent_subsections`` shows them)."""
    lines = path.read_text().splitlines(keepends=True)
    start = next((i for i, x in enumerate(lines) if f"--8<-- [start:{name}]" in x), None)
    end = next((i for i, x in enumerate(lines) if f"--8<-- [end:{name}]" in x), None)
    if start is None or end is None or end < start:
        raise LookupError(f"{path.relative_to(ROOT)} has no section {name!r}")
    body = [x for x in lines[start + 1 : end] if "--8<-- [" not in x]
    return textwrap.dedent("".join(body))


def included(target: str) -> str:
    """What ``--8<-- "target"`` puts in a page."""
    path, _, name = target.partition(":")
    file = ROOT / path
    if not file.is_file():
        raise LookupError(f"{path} does not exist")
    if name:
        return section(file, name)
    return "".join(x for x in file.read_text().splitlines(keepends=True) if "--8<-- [" not in x)


def includes(text: str) -> list[str]:
    return [m.group("target") for m in INCLUDE.finditer(text)]


def expand(text: str) -> str:
    """``text`` with every include replaced by what it includes (indented as the include)."""

    def one(match: re.Match[str]) -> str:
        body = included(match.group("target"))
        return textwrap.indent(body, match.group("indent")).rstrip("\n")

    return INCLUDE.sub(one, text)


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # 1-based line of the opening fence


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a page (dedented: some sit inside list items)."""
    out = []
    for m in FENCE.finditer(text):
        code = textwrap.dedent(m.group("code"))
        out.append(Block(m.group("lang").lower(), code, text.count("\n", 0, m.start()) + 1))
    return out


def without_blocks(text: str) -> str:
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def inline_code(text: str) -> list[str]:
    """Inline code spans outside the fenced blocks."""
    return INLINE.findall(without_blocks(text))


def command_lines(code: str) -> list[str]:
    """A shell block's commands: continuations joined, prompts and comments dropped."""
    out = []
    for raw in code.replace("\\\n", " ").splitlines():
        line = raw.strip().removeprefix("$ ")
        if line and not line.startswith("#"):
            out.append(line)
    return out


@dataclass(frozen=True)
class Command:
    env: dict[str, str]
    argv: list[str]  # after "shardq"
    line: str


def shardq_command(line: str) -> Command | None:
    """A ``shardq ...`` command line (with ``VAR=value`` prefixes, a trailing ``&``), or None
    for anything else.  ``cmd && shardq ...`` is not one: shell blocks keep one command a line."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if words and words[-1] == "&":
        words.pop()
    if not words or words[0] != "shardq":
        return None
    return Command(env, words[1:], line)


def shardq_commands(code: str) -> list[Command]:
    return [c for c in map(shardq_command, command_lines(code)) if c is not None]
