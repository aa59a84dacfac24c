"""What starting shardq imports (issue 52 point 7): every CLI call and every ``import shardq``
paid for the client, the roles, the metrics and redis-py, 0.7-0.9 s on the project's box.

Now ``import shardq`` loads none of its modules until a public name is used (the package's
``__getattr__``), the root command imports a command's module only when that command is looked
up (``shardq.cli.COMMANDS``), and a command module imports at its top only what its options
need.  Checked by what a fresh interpreter has in ``sys.modules`` afterwards, never by timing
(the box is shared, a time bound would be noise); tests/integration/test_cli.py checks a real
``shardq job get`` the same way.  No Redis.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import shardq
from shardq.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]

# Never needed to parse a command line or print a help: redis-py (and the asyncio and
# OpenTelemetry it loads), the metrics, the console's stack, and shardq's facades and roles.
HEAVY = (
    "redis",
    "asyncio",
    "prometheus_client",
    "starlette",
    "jinja2",
    "uvicorn",
    "opentelemetry",
    "shardq.client",
    "shardq.aio",
    "shardq.inspector",
    "shardq.admin",
    "shardq.worker",
    "shardq.dispatcher",
    "shardq.metrics",
    "shardq.runtime",
    "shardq.web",
    "shardq.dev",
)

PROBE = """
import json, sys
argv = json.loads(sys.argv[1])
if argv is not None:
    from click.testing import CliRunner
    from shardq.cli import main
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, (argv, result.output, result.exception)
print(json.dumps(sorted(sys.modules)))
"""


def loaded_after(argv: list[str] | None, code: str = "import shardq") -> list[str]:
    """The modules a fresh interpreter holds after ``code`` and, unless None, ``shardq ARGV``."""
    out = subprocess.run(
        [sys.executable, "-c", code + "\n" + PROBE, json.dumps(argv)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    modules: list[str] = json.loads(out.stdout)
    return modules


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]


def test_import_shardq_loads_none_of_its_modules() -> None:
    modules = loaded_after(None)
    assert [m for m in modules if m.startswith("shardq")] == ["shardq"]
    assert heavy(modules) == []


def test_a_public_name_imports_its_module_when_used() -> None:
    modules = loaded_after(None, "from shardq import RetryAfter")
    assert "shardq.errors" in modules and heavy(modules) == []
    for name in shardq.__all__:
        value = getattr(shardq, name)
        assert getattr(value, "__name__", name) == name
    assert set(shardq.__all__) <= set(dir(shardq))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = shardq.Nope  # type: ignore[attr-defined]


def test_the_lazy_names_are_the_type_checkers_names() -> None:
    """``_EXPORTS`` (what runs) and the ``TYPE_CHECKING`` imports (what type checkers see)
    name the same objects, and ``__all__`` lists them."""
    tree = ast.parse((ROOT / "shardq" / "__init__.py").read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    seen: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names:
            assert alias.asname == alias.name, "re-exported as itself (`import X as X`)"
            seen[alias.name] = node.module
    exports: dict[str, str] = shardq._EXPORTS
    assert seen == exports
    assert sorted(shardq.__all__) == sorted(exports)


def _helps() -> list[list[str]]:
    return [["--help"], *([name, "--help"] for name in COMMANDS), ["job", "get", "--help"]]


@pytest.mark.parametrize("argv", _helps(), ids=" ".join)
def test_a_help_loads_no_heavy_module(argv: list[str]) -> None:
    assert heavy(loaded_after(argv)) == []


# What every command module may load besides itself: the modules the commands share.
SHARED = {
    "shardq.cli.errors",
    "shardq.cli.options",
    "shardq.cli.params",
    "shardq.cli.connection",
    "shardq.cli.settings",
}


def test_a_command_loads_its_own_module_and_no_other_command() -> None:
    modules = loaded_after(["job", "get", "--help"])
    commands = {m for m in modules if m.startswith("shardq.cli.")}
    assert commands == SHARED | {"shardq.cli.job"}


def test_the_root_finds_every_command_where_it_says() -> None:
    from shardq.cli import main

    ctx: Any = None
    assert main.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name
