"""The TypeScript producer (clients/node), installed and built for a test: skipped without
node/npm (.ci/run installs them)."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

import pytest

from shardq.store import functions

NODE_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "node"


def built_node_client() -> Path:
    """clients/node installed (npm ci, from its lock file) and built (with Node alone: its
    generated modules are committed, and tests/unit/test_node_generated.py holds them to this
    checkout's); pytest.skip when Node is not installed."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed (.ci/run installs them)")
    # make test's xdist workers each get here: one installs and builds at a time.
    with open(NODE_CLIENT / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (NODE_CLIENT / "node_modules" / "ioredis").is_dir():
            subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_CLIENT, check=True, timeout=600
            )
        subprocess.run(
            ["npm", "run", "--silent", "build"], cwd=NODE_CLIENT, check=True, timeout=600
        )
    generated = (NODE_CLIENT / "src" / "library.generated.ts").read_text()
    # the library this checkout's lua/ builds
    assert f'"{functions.name()}"' in generated, "run clients/node/scripts/generate.py"
    return NODE_CLIENT


def driver_command(client: Path) -> list[str]:
    """The wire runner's driver of the Node client (docs/wire.md, Conformance)."""
    return ["node", str(client / "dist" / "src" / "driver.js")]
