"""docs/architecture-modules.md's module map stays true of shardq/ (issue 23 item 9).

The map is the table under "## Modules": one row per module and package of ``shardq/``, its
first cell the path in backticks (``shardq/store/keys.py``; a package as ``shardq/store/``, for
its ``__init__.py``), its second the module's layer (``L3``), as the layers contract
(tests/test_layers.py) places it.  The test fails when a module is missing from the map, when
the map names one that does not exist or names one twice, when a row says nothing, or when a
row's layer is not the contract's.  No Redis needed.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest


def _repo_root() -> Path:
    # Found by walking up, so the test keeps working if it moves into a tests/ subfolder.
    here = Path(__file__).resolve().parent
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "shardq").is_dir():
            return folder
    raise RuntimeError(f"no repository root above {here}")


ROOT = _repo_root()
PACKAGE = ROOT / "shardq"
DOC = ROOT / "docs" / "architecture-modules.md"
# The layers table stays on the first architecture page.
LAYERS_DOC = ROOT / "docs" / "architecture.md"
SECTION = "## Modules"
_ROW = re.compile(r"^\|\s*`(?P<path>shardq/[^`]*)`\s*\|\s*(?P<layer>[^|]*?)\s*\|(?P<owns>.*)\|\s*$")


def _layers_contract() -> ModuleType:
    """tests/test_layers.py (wherever under tests/ it lives), loaded as a module."""
    found = sorted((ROOT / "tests").rglob("test_layers.py"))
    assert found, "tests/test_layers.py (the layers contract) not found under tests/"
    spec = importlib.util.spec_from_file_location("_layers_contract", found[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def modules_on_disk(package: Path = PACKAGE) -> set[str]:
    """Every module and package under ``package``, as the map writes them."""
    out = set()
    for path in package.rglob("*.py"):
        rel = path.relative_to(package.parent)
        if path.name == "__init__.py":
            out.add(rel.parent.as_posix() + "/")
        else:
            out.add(rel.as_posix())
    return out


def map_rows(text: str) -> list[tuple[str, str, str]]:
    """(path, layer, what it owns) of each row of the table under "## Modules" in ``text``."""
    start = text.find("\n" + SECTION + "\n")
    assert start != -1, f"{DOC.name} has no {SECTION!r} section"
    body = text[start + len(SECTION) + 2 :]
    following = re.search(r"^## ", body, re.MULTILINE)
    if following:
        body = body[: following.start()]
    rows = []
    for line in body.splitlines():
        match = _ROW.match(line)
        if match:
            owns = match.group("owns").strip()
            rows.append((match.group("path"), match.group("layer"), owns))
    return rows


def dotted(path: str) -> str:
    """``shardq/store/keys.py`` -> ``shardq.store.keys``; ``shardq/store/`` -> ``shardq.store``."""
    return path.removesuffix("/").removesuffix(".py").replace("/", ".")


def map_problems(rows: list[tuple[str, str, str]], on_disk: set[str]) -> list[str]:
    """What is wrong with the map against the modules on disk (empty: nothing)."""
    problems = []
    named = [path for path, _, _ in rows]
    for path in sorted({p for p in named if named.count(p) > 1}):
        problems.append(f"{path} has more than one row")
    for path in sorted(on_disk - set(named)):
        problems.append(f"{path} is missing from the module map: add a row saying what it owns")
    for path in sorted(set(named) - on_disk):
        problems.append(f"{path} is in the module map but does not exist: remove or fix its row")
    for path, _, owns in rows:
        if not owns.strip(" |"):
            problems.append(f"{path}: the row does not say what the module owns")
    return problems


def layer_problems(rows: list[tuple[str, str, str]], contract: ModuleType) -> list[str]:
    problems = []
    for path, layer, _ in rows:
        expected = contract.layer_of(dotted(path))
        want = f"L{expected}" if expected is not None else "(no layer in tests/test_layers.py)"
        if layer != want:
            problems.append(f"{path}: the map says {layer!r}, the layers contract {want!r}")
    return problems


# -- the map --------------------------------------------------------------------------------


def test_the_module_map_names_every_module_and_only_those() -> None:
    rows = map_rows(DOC.read_text())
    problems = map_problems(rows, modules_on_disk())
    assert not problems, f"{DOC} module map:\n" + "\n".join(f"  {p}" for p in problems)


def test_the_module_map_gives_each_module_its_layer() -> None:
    problems = layer_problems(map_rows(DOC.read_text()), _layers_contract())
    assert not problems, f"{DOC} module map:\n" + "\n".join(f"  {p}" for p in problems)


def test_the_layers_table_names_the_contracts_layers() -> None:
    """The "## Layers" table lists the contract's layers, in its order and by its names."""
    text = LAYERS_DOC.read_text()
    start = text.index("\n## Layers\n")
    end = text.index("\n## ", start + 1)
    names = re.findall(r"^\| (L\d [a-z]+) \|", text[start:end], re.MULTILINE)
    assert names == _layers_contract().LAYER_NAMES


# -- the checker can fail -------------------------------------------------------------------

_SAMPLE = """# x

## Modules

| module | layer | what it owns |
|---|---|---|
| `shardq/` | L6 | the public names |
| `shardq/store/` | L3 | the store |
| `shardq/store/keys.py` | L3 | key names |
| `shardq/store/keys.py` | L3 | key names again |
| `shardq/gone.py` | L0 | a module that moved |
| `shardq/jobs.py` | L3 |  |

## Keys

| `shardq/store/op.py` | L3 | after the section: not part of the map |
"""


@pytest.mark.parametrize(
    ("disk", "expected"),
    [
        (
            {"shardq/", "shardq/store/", "shardq/store/keys.py", "shardq/store/op.py",
             "shardq/jobs.py"},
            [
                "shardq/store/keys.py has more than one row",
                "shardq/store/op.py is missing from the module map: add a row saying what it owns",
                "shardq/gone.py is in the module map but does not exist: remove or fix its row",
                "shardq/jobs.py: the row does not say what the module owns",
            ],
        ),
    ],
)  # fmt: skip
def test_the_checker_finds_missing_stale_and_empty_rows(
    disk: set[str], expected: list[str]
) -> None:
    assert map_problems(map_rows(_SAMPLE), disk) == expected


def test_the_checker_finds_a_wrong_layer() -> None:
    rows = map_rows(_SAMPLE)
    problems = layer_problems(rows, _layers_contract())
    assert "shardq/jobs.py: the map says 'L3', the layers contract 'L2'" in problems
    assert not any(p.startswith("shardq/store/keys.py") for p in problems)


def test_modules_on_disk_reads_packages_and_modules(tmp_path: Path) -> None:
    package = tmp_path / "shardq"
    (package / "store").mkdir(parents=True)
    for name in ("__init__.py", "client.py", "store/__init__.py", "store/keys.py"):
        (package / name).write_text("")
    (package / "store" / "notes.txt").write_text("")
    assert modules_on_disk(package) == {
        "shardq/",
        "shardq/client.py",
        "shardq/store/",
        "shardq/store/keys.py",
    }


def test_the_map_is_read_from_the_real_doc() -> None:
    """A parser that found nothing would pass the checks above vacuously."""
    rows = map_rows(DOC.read_text())
    assert len(rows) == len(modules_on_disk()) > 80
    assert ("shardq/store/numbers.py", "L0") in {(p, layer) for p, layer, _ in rows}
