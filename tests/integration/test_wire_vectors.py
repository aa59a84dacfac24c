"""The Python client passes the wire's call vectors (wire/vectors/calls.json, docs/wire.md) on
both topologies: results, typed errors and the Redis state each step leaves, and on the
standalone node the exact calls it sends (MONITOR).  The TypeScript producer (clients/node)
runs the same vectors through its driver when Node is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from shardq.devtools import wire_runner

NODE_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "node"


def test_python_client_passes_the_call_vectors(url: str) -> None:
    driver = wire_runner.PythonDriver()
    try:
        done = wire_runner.run(driver, url)
    finally:
        driver.close()
    assert "enqueue_many" in done and len(done) >= 9


@pytest.fixture(scope="module")
def node_driver() -> list[str]:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed (.ci/run installs them)")
    if not (NODE_CLIENT / "node_modules").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_CLIENT, check=True)
    subprocess.run(["npm", "run", "--silent", "build"], cwd=NODE_CLIENT, check=True)
    return ["node", str(NODE_CLIENT / "dist" / "src" / "driver.js")]


def test_node_client_passes_the_call_vectors(url: str, node_driver: list[str]) -> None:
    driver = wire_runner.SubprocessDriver(node_driver)
    try:
        done = wire_runner.run(driver, url)
    finally:
        driver.close()
    assert "enqueue_many" in done and len(done) >= 9
