"""Shared fixtures: a real 6-node Redis Cluster and a standalone node, private to this session.

Isolation: the session claims its own block of ports (tests/support/ports.py) and its own dev
directory (pidfiles, logs), points ``SHARDQ_DEV_DIR`` at it for any ``shardq dev`` command a test
runs, and at the end stops exactly the servers it started.  Two sessions from two checkouts can
run at once.  ``SHARDQ_TEST_BASE_PORT`` pins the block; with ``SHARDQ_KEEP_TEST_REDIS=1`` as well,
the servers (and the dev directory, ``/tmp/shardq-test-<base>``) are kept for the next run.

Randomness: every test starts with ``random`` seeded from the session seed and its own node id.
The seed is printed in the header and with every failure; ``SHARDQ_TEST_SEED=<seed>`` repeats
a run's choices.  Hypothesis runs derandomized (its examples depend on the test only).

Parallel: ``make test`` runs the suite in pytest-xdist processes (``TEST_WORKERS``, 3); each
one imports this file, so each claims its own port block, dev directory and servers, and they
share only the seed.

Time: deadlines of waits scale with ``SHARDQ_TEST_TIME_FACTOR`` (helpers.TIME_FACTOR).
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import tempfile
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from support.helpers import TIME_FACTOR
from support.ports import BLOCK, TestPorts, claim
from support.procs import own_redis, procs  # noqa: F401 - the fixtures, for every test module
from support.servers import ENV, ServerUnavailable, banner, bin_dir

from shardq.client import Client
from shardq.config import RedisSettings
from shardq.connection import connect
from shardq.dev import devcluster

SEED = int(os.environ.get("SHARDQ_TEST_SEED") or secrets.randbelow(2**32))
# pytest-xdist's worker processes inherit the environment: one seed for the whole run, so the
# rerun line printed with a failure repeats it whichever process ran the test.
os.environ["SHARDQ_TEST_SEED"] = str(SEED)
KEEP = os.environ.get("SHARDQ_KEEP_TEST_REDIS") == "1"

settings.register_profile(
    "shardq",
    derandomize=True,  # reproducible: the same examples on every run
    deadline=None,  # no per-example timing on a shared, noisy machine
    print_blob=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("shardq")

_PORTS, _PORTS_LOCK = claim()
if KEEP and os.environ.get("SHARDQ_TEST_BASE_PORT"):
    _DEV_DIR = Path(tempfile.gettempdir()) / f"shardq-test-{_PORTS.base}"
    _DEV_DIR.mkdir(exist_ok=True)
else:
    _DEV_DIR = Path(tempfile.mkdtemp(prefix=f"shardq-test-{_PORTS.base}-"))
# Subprocesses (`shardq dev ...` run by a test) inherit it; devcluster reads it at call time.
os.environ["SHARDQ_DEV_DIR"] = str(_DEV_DIR)
# The server under test (support/servers.py): every server the session starts is this one.
try:
    os.environ[devcluster.SERVER_BIN_ENV] = str(bin_dir())
except ServerUnavailable as exc:
    raise pytest.UsageError(str(exc)) from exc


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"shardq: seed {SEED} (SHARDQ_TEST_SEED), ports {_PORTS.base}-{_PORTS.base + BLOCK - 1}, "
        f"dev dir {_DEV_DIR}, time factor {TIME_FACTOR}",
        f"shardq: server {banner()} (SHARDQ_TEST_SERVER={os.environ.get(ENV) or 'redis'})",
    ]


@pytest.fixture(autouse=True)
def _seeded_random(request: pytest.FixtureRequest) -> None:
    random.seed(SEED ^ zlib.crc32(request.node.nodeid.encode()))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(
            (
                "shardq seed",
                f"random was seeded with SHARDQ_TEST_SEED={SEED} (per test: seed ^ crc32(nodeid));"
                f" rerun: SHARDQ_TEST_SEED={SEED} make test TEST_ARGS='{item.nodeid}'",
            )
        )


@pytest.fixture(scope="session")
def test_ports() -> TestPorts:
    return _PORTS


@pytest.fixture(scope="session")
def dev_dir() -> Path:
    return _DEV_DIR


@pytest.fixture(scope="session")
def redis_servers(test_ports: TestPorts) -> Iterator[tuple[str, str]]:
    started: list[str] = []
    try:
        cluster = devcluster.cluster_up(test_ports.cluster, root=_DEV_DIR)
        started.append("cluster")
        standalone = devcluster.standalone_up(test_ports.standalone, root=_DEV_DIR)
        started.append("standalone")
        for url in (cluster, standalone):
            conn = connect(RedisSettings.from_url(url))
            try:
                conn.flushall()  # cluster client: every primary
                conn.script_flush()
            finally:
                conn.close()
        yield cluster, standalone
    finally:
        if not KEEP:
            if "cluster" in started:
                devcluster.cluster_down(test_ports.cluster, root=_DEV_DIR)
            if "standalone" in started:
                devcluster.standalone_down(test_ports.standalone, root=_DEV_DIR)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not KEEP:
        # Every server was stopped by its fixture; what is left are logs of failed starts.
        shutil.rmtree(_DEV_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster_url(redis_servers: tuple[str, str]) -> str:
    return redis_servers[0]


@pytest.fixture(scope="session")
def standalone_url(redis_servers: tuple[str, str]) -> str:
    return redis_servers[1]


@pytest.fixture(params=["cluster", "standalone"])
def url(request: pytest.FixtureRequest, redis_servers: tuple[str, str]) -> str:
    """Both topologies, for behaviour that must hold in each."""
    return redis_servers[0] if request.param == "cluster" else redis_servers[1]


@pytest.fixture
def client(url: str) -> Iterator[Client]:
    """A producer client on the topology of ``url`` (so tests using it run on both)."""
    c = Client.from_url(url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def cluster_client(cluster_url: str) -> Iterator[Client]:
    c = Client.from_url(cluster_url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def standalone_client(standalone_url: str) -> Iterator[Client]:
    c = Client.from_url(standalone_url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def queue() -> str:
    """A queue name no other test uses (uuid4: independent of the seeded RNG)."""
    return "t-" + uuid.uuid4().hex[:12]
