"""The generated parts of the docs site's reference are current (no Redis needed).

- docs/reference/settings.md is what docs/_tools/settings_table.py prints from the settings
  dataclasses (shardq/config.py) and the command tree: every field with its default, its
  environment variable and its option, so a setting added, renamed or given a new default
  fails here until the page is written again (``python docs/_tools/settings_table.py --write``).
- The API reference pages name objects that exist (mkdocstrings' ``::: shardq.X``), and every
  public name of ``shardq`` has a page.
- The CLI reference is rendered from the click tree itself (mkdocs-click), so it needs no check
  beyond the build (`make docs-check`).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "docs" / "_tools" / "settings_table.py"
REFERENCE = ROOT / "docs" / "reference"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_settings_table", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_settings_page_is_the_generated_one() -> None:
    tool = _tool()
    assert (REFERENCE / "settings.md").read_text() == tool.page(), (
        "docs/reference/settings.md is not what the settings classes say: write it again with "
        ".venv/bin/python docs/_tools/settings_table.py --write and review the diff"
    )


def test_the_settings_page_has_every_field_with_its_variable() -> None:
    """The generator is not vacuous: every field has a row, and each role's fields have the
    environment variable and option the CLI gives them."""
    from shardq.config import DispatcherSettings, ProducerSettings, RedisSettings, WorkerSettings

    text = (REFERENCE / "settings.md").read_text()
    for cls in (RedisSettings, ProducerSettings, DispatcherSettings, WorkerSettings):
        for field in dataclasses.fields(cls):
            assert re.search(rf"^\| `{field.name}` \|", text, re.M), (cls.__name__, field.name)
    assert "| `lease_time` | 10 s | `SHARDQ_DISPATCHER_LEASE_TIME` | `--lease-time` |" in text
    assert "`SHARDQ_WORKER_LATENESS_BUDGET`, `SHARDQ_LATENESS_BUDGET`" in text
    assert "| `url` | `redis://127.0.0.1:7000` | `SHARDQ_REDIS_URL` | `--url` |" in text


def test_the_generator_finds_a_renamed_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A field the CLI does not take leaves its row without an option and a variable."""
    tool = _tool()

    @dataclasses.dataclass(frozen=True)
    class Probe:
        concurrency: int = 1
        not_an_option: float = 2.0

    assert tool.cli_options(Probe) == {}
    assert "| `not_an_option` | 2 s | - | - |" in tool.table(Probe)


def api_names() -> list[tuple[str, str]]:
    out = []
    for page in sorted(REFERENCE.glob("*.md")):
        for match in re.finditer(r"^::: (shardq[\w.]*)$", page.read_text(), re.M):
            out.append((page.name, match.group(1)))
    return out


@pytest.mark.parametrize(("page", "name"), api_names())
def test_every_api_reference_entry_exists(page: str, name: str) -> None:
    module_name, obj = name, None
    while True:
        try:
            module = importlib.import_module(module_name)
            break
        except ModuleNotFoundError:
            module_name, _, last = module_name.rpartition(".")
            obj = last if obj is None else f"{last}.{obj}"
            assert module_name, f"{page}: {name} does not exist"
    target = module
    for part in (obj or "").split(".") if obj else []:
        assert hasattr(target, part), f"{page}: {name} does not exist"
        target = getattr(target, part)


def documented_names() -> set[str]:
    """Names the reference documents: each ``::: name``; for a module, its ``members:`` list
    or else every public name it defines; and the settings classes' sections."""
    found: set[str] = set()
    for page in sorted(REFERENCE.glob("*.md")):
        text = page.read_text()
        for match in re.finditer(r"^::: (shardq[\w.]*)\n((?:    .*\n)*)", text, re.M):
            name, options = match.group(1), match.group(2)
            found.add(name.rsplit(".", 1)[-1])
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue  # a class or function, not a module
            members = re.findall(r"^\s+- (\w+)$", options, re.M)
            found |= set(members) or {
                n
                for n, v in vars(module).items()
                if not n.startswith("_") and getattr(v, "__module__", None) == name
            }
    found |= set(re.findall(r"^## (\w+)$", (REFERENCE / "settings.md").read_text(), re.M))
    return found


def test_every_public_name_has_a_reference_entry() -> None:
    import shardq

    documented = documented_names()
    missing = [n for n in shardq.__all__ if n not in documented]
    assert not missing, f"public names with no reference entry (docs/reference/*.md): {missing}"
