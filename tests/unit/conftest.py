"""Keeps tests/unit free of Redis and of processes, so ``pytest tests/unit`` runs in seconds on a
machine without redis-server.

A unit test that asks for a fixture which starts Redis or a fleet fails before that fixture is
set up (the session's cluster is never started for it), with a message saying where it belongs.
"""

from __future__ import annotations

import pytest

# Fixtures of tests/conftest.py and tests/support/procs.py that start Redis or processes.
NEEDS_REDIS = frozenset(
    {
        "redis_servers",
        "cluster_url",
        "standalone_url",
        "url",
        "client",
        "cluster_client",
        "standalone_client",
        "own_redis",
        "test_ports",
        "dev_dir",
    }
)
NEEDS_PROCESSES = frozenset({"procs"})


def pytest_runtest_setup(item: pytest.Item) -> None:
    # This conftest's hooks run only for items under tests/unit, and before pytest's own
    # setup instantiates any fixture.
    wanted = set(getattr(item, "fixturenames", ()))
    if redis := sorted(wanted & NEEDS_REDIS):
        pytest.fail(
            f"{item.nodeid} is in tests/unit but uses {', '.join(redis)}, which start Redis: "
            "move it to tests/integration/ (or tests/fleet/ if it runs processes or faults)",
            pytrace=False,
        )
    if procs := sorted(wanted & NEEDS_PROCESSES):
        pytest.fail(
            f"{item.nodeid} is in tests/unit but uses {', '.join(procs)}, which starts "
            "workers or dispatchers: move it to tests/fleet/",
            pytrace=False,
        )
