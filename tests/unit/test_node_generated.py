"""The Node producer's generated modules (clients/node/src/*.generated.ts: error classes,
script codes and messages, name rules, caps, settings, key names, the Functions library) are
what clients/node/scripts/generate.py writes from this checkout now: a new error code, cap or
Lua change fails here until they are regenerated and committed, so it reaches both producers."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

from shardq.store import codes

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "clients" / "node" / "scripts" / "generate.py"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("node_generate", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_files_are_current() -> None:
    assert generator().stale() == [], (
        "clients/node's generated modules are not what this checkout's Python declares: run "
        "`.venv/bin/python clients/node/scripts/generate.py` and commit them"
    )


def test_every_code_and_error_reaches_the_node_producer() -> None:
    text = (REPO / "clients" / "node" / "src" / "constants.generated.ts").read_text()
    errors = (REPO / "clients" / "node" / "src" / "errors.generated.ts").read_text()
    for code, refusal in codes.REFUSALS.items():
        assert f"  {code.name}: {int(code)}," in text
        assert f"[Code.{code.name}]: {{" in text
        for message in refusal.messages:
            assert message.replace('"', '\\"') in text
    for name in generator().generated_errors():
        assert re.search(rf"^export class {name.__name__} extends \w+ {{", errors, re.M), name


def test_the_node_package_builds_without_python() -> None:
    """`npm ci && npm run build && npm test` needs Node alone: the build is the TypeScript
    compiler, and nothing regenerates before it."""
    scripts = json.loads((REPO / "clients" / "node" / "package.json").read_text())["scripts"]
    assert scripts["build"] == "tsc -p tsconfig.json"
    assert not [name for name in scripts if name.startswith(("pre", "post"))]
