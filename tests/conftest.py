"""Shared fixtures: a real 6-node Redis Cluster on 7100-7105 and a standalone node on 7110.

Both are started once per session with shardq.devcluster (idempotent: an already healthy
deployment is reused), flushed at the start, and stopped at the end unless
``SHARDQ_KEEP_TEST_REDIS=1`` (handy when iterating on a single test).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from shardq import devcluster
from shardq.client import Client
from shardq.config import RedisSettings
from shardq.connection import connect

CLUSTER_PORT = 7100
STANDALONE_PORT = 7110


@pytest.fixture(scope="session")
def redis_servers() -> Iterator[tuple[str, str]]:
    cluster = devcluster.cluster_up(CLUSTER_PORT)
    standalone = devcluster.standalone_up(STANDALONE_PORT)
    for url in (cluster, standalone):
        conn = connect(RedisSettings.from_url(url))
        try:
            conn.flushall()  # cluster client: every primary
            conn.script_flush()
        finally:
            conn.close()
    try:
        yield cluster, standalone
    finally:
        if os.environ.get("SHARDQ_KEEP_TEST_REDIS") != "1":
            devcluster.cluster_down(CLUSTER_PORT)
            devcluster.standalone_down(STANDALONE_PORT)


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
    """A queue name no other test uses."""
    return "t-" + uuid.uuid4().hex[:12]
