"""Every table of measured figures in README.md and docs/ names the stored output it came from.

A figure in the docs must come from a command in the repository whose output is kept under
``bench/reference/``.  The rule checked here, without Redis:

- a *measurement table* is a Markdown table whose header names a measured quantity (µs, ms,
  jobs/s, p50/p99, lateness, CPU, RSS, B/job, MiB, req/s, "figure"); a table of settings
  (first header cell "setting") or of files is not one;
- the section holding a measurement table (from its heading to the next heading) names at
  least one file under ``bench/reference/`` -- or says, with the marker
  ``<!-- figures-unsourced: why -->``, that its figures have no stored output yet, so a reader
  sees it and the marker can be searched for;
- every ``bench/reference/...`` path named anywhere in those docs exists (``*`` in a path
  stands for the varying part of a family of files, e.g. ``profile*-5802aba.txt``; at least
  one file must match).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest


def _repo_root() -> Path:
    here = Path(__file__).resolve().parent
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "shardq").is_dir():
            return folder
    raise RuntimeError(f"no repository root above {here}")


ROOT = _repo_root()
REFERENCE = ROOT / "bench" / "reference"
MEASURED = re.compile(
    r"µs|\bms\b|jobs/s|\bp50\b|\bp99\b|lateness|\bCPU\b|\bRSS\b|B/job|MiB|req/s|\bfigure\b",
    re.IGNORECASE,
)
NOT_MEASURED = re.compile(r"^\|\s*(setting|file)\b", re.IGNORECASE)
SEPARATOR = re.compile(r"^\|[\s:|-]+\|\s*$")
PATH = re.compile(r"bench/reference/[\w./*-]*[\w*]")
UNSOURCED = re.compile(r"<!--\s*figures-unsourced:\s*\S.*?-->", re.DOTALL)


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Table:
    doc: Path
    line: int  # 1-based, of the header row
    header: str
    section: str  # the text from the heading above the table to the next heading

    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line} ({self.header[:60]}...)"


def tables_of(doc: Path) -> list[Table]:
    lines = doc.read_text().split("\n")
    fenced = False
    headings = [0]
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            headings.append(i)
    headings.append(len(lines))
    found: list[Table] = []
    i = 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and SEPARATOR.match(lines[i + 1]):
            start = i
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            top = max(h for h in headings if h <= start)
            bottom = min(h for h in headings if h > start)
            section = "\n".join(lines[top:bottom])
            found.append(Table(doc, start + 1, lines[start], section))
        else:
            i += 1
    return found


def measurement_tables() -> list[Table]:
    return [
        t
        for doc in _docs()
        for t in tables_of(doc)
        if MEASURED.search(t.header) and not NOT_MEASURED.match(t.header)
    ]


def test_the_docs_hold_measurement_tables() -> None:
    # The rule below would pass vacuously if the table finder broke.
    tables = measurement_tables()
    assert len(tables) >= 10, [t.where() for t in tables]
    assert any(t.doc.name == "capacity.md" for t in tables)
    assert any(t.doc.name == "benchmarks.md" for t in tables)


@pytest.mark.parametrize("table", measurement_tables(), ids=lambda t: t.where())
def test_every_measurement_table_names_its_stored_output(table: Table) -> None:
    sourced = PATH.search(table.section) is not None
    declared = UNSOURCED.search(table.section) is not None
    assert sourced or declared, (
        f"{table.where()}: a table of measured figures with no stored output named in its "
        "section: store the run's output under bench/reference/ and name it (the command "
        "beside it in bench/reference/README.md), or mark the section "
        "<!-- figures-unsourced: why --> until it is measured again"
    )


def named_paths() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for doc in _docs():
        for n, line in enumerate(doc.read_text().split("\n"), 1):
            for match in PATH.finditer(line):
                out.append((f"{doc.relative_to(ROOT)}:{n}", match.group(0)))
    return out


def test_the_docs_name_stored_outputs() -> None:
    assert len(named_paths()) >= 10


@pytest.mark.parametrize(("where", "path"), named_paths(), ids=lambda v: str(v))
def test_every_named_stored_output_exists(where: str, path: str) -> None:
    relative = path.removeprefix("bench/reference/")
    matches = list(REFERENCE.glob(relative)) if relative else [REFERENCE]
    assert matches, f"{where}: names {path}, which does not exist under bench/reference/"


def test_the_finder_sees_a_table_and_its_section(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "# A\n\ntext\n\n## B\n\nfrom bench/reference/a.txt\n\n| jobs/s | p99 ms |\n|---|---|\n"
        "| 1 | 2 |\n\n## C\n\n| setting | default |\n|---|---|\n| a | 1 ms |\n"
    )
    tables = tables_of(doc)
    assert [t.line for t in tables] == [9, 15]
    assert "bench/reference/a.txt" in tables[0].section
    assert "## C" not in tables[0].section
    assert MEASURED.search(tables[0].header) and NOT_MEASURED.match(tables[1].header)
