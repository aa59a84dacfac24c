"""What `make demo` installs on a fresh machine: Redis alone, not the test suite's tools.

`make -n -B <target>` prints every recipe the target would run, prerequisites included, without
running any; the demo's and the benchmarks' must not install the browser or openssl that only
the tests need (issue 50 item 6), while `make test`'s still do.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST_ONLY = ("chromium", "openssl")

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _recipes(target: str) -> str:
    return subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize("target", ["demo", "bench-cluster-up"])
def test_the_demo_and_the_bench_install_only_redis(target: str) -> None:
    recipes = _recipes(target)
    assert "redis-server" in recipes
    assert [tool for tool in TEST_ONLY if tool in recipes] == []


@pytest.mark.parametrize("target", ["test", "test-lowest"])
def test_the_suite_installs_its_tools(target: str) -> None:
    recipes = _recipes(target)
    assert [tool for tool in TEST_ONLY if tool not in recipes] == []


def test_the_suite_builds_the_docs_site_strictly() -> None:
    """`make test` builds the docs site with --strict: a broken link, anchor, page or included
    example file fails it (mkdocs.yml)."""
    recipes = _recipes("test")
    assert "mkdocs build --strict" in recipes
