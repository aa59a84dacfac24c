"""The wire's call vectors (wire/vectors/calls.json, docs/wire.md) on both topologies: results,
typed errors and the Redis state each step leaves, and on the standalone node the exact calls
sent (MONITOR).  The Python client always; the TypeScript producer (clients/node) through its
driver, with its own test suite (pure vectors, and Python reading back what Node enqueued and
the reverse), when Node is installed (.ci/run installs it)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shardq.devtools import wire_runner
from shardq.store import functions

NODE_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "node"


def test_python_client_passes_the_call_vectors(url: str) -> None:
    driver = wire_runner.PythonDriver()
    try:
        done = wire_runner.run(driver, url)
    finally:
        driver.close()
    assert "enqueue_many" in done and len(done) >= 9


@pytest.fixture(scope="session")
def node_client() -> Path:
    """clients/node installed (npm ci, from its lock file) and built (which exports this
    checkout's library into it first)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed (.ci/run installs them)")
    # make test's xdist workers each run this: one installs and builds at a time.
    with open(NODE_CLIENT / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (NODE_CLIENT / "node_modules" / "ioredis").is_dir():
            subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_CLIENT, check=True, timeout=600
            )
        env = dict(os.environ, PYTHON=sys.executable)
        subprocess.run(
            ["npm", "run", "--silent", "build"], cwd=NODE_CLIENT, check=True, env=env, timeout=600
        )
    generated = (NODE_CLIENT / "src" / "library.generated.ts").read_text()
    assert f'"{functions.name()}"' in generated  # the library this checkout's lua/ builds
    return NODE_CLIENT


def test_node_client_passes_the_call_vectors(url: str, node_client: Path) -> None:
    driver = wire_runner.SubprocessDriver(["node", str(node_client / "dist" / "src" / "driver.js")])
    try:
        done = wire_runner.run(driver, url)
    finally:
        driver.close()
    assert "enqueue_many" in done and len(done) >= 9


def test_node_client_suite(cluster_url: str, standalone_url: str, node_client: Path) -> None:
    """The Node package's own tests (node --test): every vector file, and its jobs read back
    by the Python client identically (and the reverse), on both topologies."""
    env = dict(
        os.environ,
        SHARDQ_NODE_TEST_CLUSTER_URL=cluster_url,
        SHARDQ_NODE_TEST_STANDALONE_URL=standalone_url,
        SHARDQ_PYTHON=sys.executable,
    )
    out = subprocess.run(
        ["node", "--test", "dist/test/"],
        cwd=node_client,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "# fail 0" in out.stdout and "# skipped 0" in out.stdout, out.stdout[-2000:]
