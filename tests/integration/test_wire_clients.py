"""The wire's call vectors (wire/vectors/calls.json, docs/wire.md) on both topologies: results,
typed errors and the Redis state each step leaves, and on the standalone node the exact calls
sent (MONITOR).  The Python client always; the TypeScript producer (clients/node) through its
driver, with its own test suite (pure vectors, and Python reading back what Node enqueued and
the reverse), when Node is installed (.ci/run installs it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.nodeclient import built_node_client, driver_command

from wire import runner


def test_python_client_passes_the_call_vectors(url: str) -> None:
    driver = runner.PythonDriver()
    try:
        done = runner.run(driver, url)
    finally:
        driver.close()
    assert "enqueue_many" in done and len(done) >= 9


@pytest.fixture(scope="session")
def node_client() -> Path:
    return built_node_client()


def test_node_client_passes_the_call_vectors(url: str, node_client: Path) -> None:
    driver = runner.SubprocessDriver(driver_command(node_client))
    try:
        done = runner.run(driver, url)
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


def test_node_client_never_shows_the_password_of_a_url_it_refuses(node_client: Path) -> None:
    """The audit's case: the TypeScript producer put the whole URL, password and all, in the
    message of a URL it could not parse.  Through its driver, each URL below is refused with a
    ConfigError that shows it as shardq.config.redact_url does (and the Python client agrees that
    it cannot be used)."""
    from shardq.config import RedisSettings, redact_url
    from shardq.errors import ConfigError

    secret = "Xy9-s3cret"
    bad = [
        f"redis://user:{secret}@host:notaport",
        f"http://user:{secret}@host:6379",
        f"user:{secret}@host:6379",
        f"redis://user:{secret}@",
        f"redis://host:6379/?password={secret}",
    ]
    driver = runner.SubprocessDriver(driver_command(node_client))
    try:
        for url in bad:
            with pytest.raises(ConfigError):
                RedisSettings.from_url(url)
            with pytest.raises(runner.StepError) as caught:
                driver.run(url, {"name": "q", "partitions": 1}, {"op": "get", "job_id": "j"})
            assert caught.value.name == "ConfigError", str(caught.value)
            message = str(caught.value)
            assert secret not in message, message
            assert redact_url(url) in message, (redact_url(url), message)
    finally:
        driver.close()
