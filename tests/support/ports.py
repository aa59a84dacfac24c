"""A private block of ports for one test session, so two sessions on one machine never meet.

Each session claims a block of ``BLOCK`` ports by holding an exclusive ``flock`` on a lock file
named after the block's first port, for as long as the session runs; the lock goes away with the
process, so a crashed session never leaves a block claimed.  A block is used only when every
port in it, and every cluster bus port (port + 10,000), accepts a bind.

Blocks come from 12000-21999, so bus ports stay in 22000-31999: below Linux's ephemeral range
(32768+), where an outgoing connection could take a port a node wants.  Blocks overlapping
17000-17399 are skipped: those are the bus ports of the clusters below.  The demo (7200-7205),
the benchmarks (7300-7335) and a developer's own cluster (7000-7005) are outside it.

``SHARDQ_TEST_BASE_PORT`` pins the block (still locked); with ``SHARDQ_KEEP_TEST_REDIS=1`` a
session then leaves its servers running for the next one to reuse.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import IO

BLOCK = 112
FIRST = 12000
LAST = 22000  # exclusive
BUS_OFFSET = 10000
LOCK_DIR = Path(os.environ.get("SHARDQ_TEST_LOCK_DIR", "/tmp/shardq-test-ports"))


@dataclass(frozen=True)
class TestPorts:
    """Where each server of the session lives, as offsets in the claimed block."""

    __test__ = False  # not a test class, despite the name

    base: int

    @property
    def cluster(self) -> int:
        """The shared 6-node cluster (base .. base+5)."""
        return self.base

    @property
    def standalone(self) -> int:
        return self.base + 10

    @property
    def chaos(self) -> int:
        """The cluster that chaos tests kill nodes of and move slots on (+20 .. +25)."""
        return self.base + 20

    @property
    def aof(self) -> int:
        """A standalone node with AOF, restarted by a test."""
        return self.base + 30

    @property
    def devcluster(self) -> int:
        """The cluster test_devcluster starts and stops (+40 .. +45)."""
        return self.base + 40

    @property
    def dev_standalone(self) -> int:
        return self.base + 50

    @property
    def failover(self) -> int:
        """Fresh clusters that failover tests kill and pause nodes of (+60 .. +65)."""
        return self.base + 60

    @property
    def deploy(self) -> int:
        """The cluster test_deploy forms with deploy/redis's config and init script (+70..75)."""
        return self.base + 70

    @property
    def spare(self) -> list[int]:
        """Ports a test may bind for itself (metrics endpoints, fake servers)."""
        return list(range(self.base + 80, self.base + 96))

    @property
    def managed(self) -> int:
        """The cluster whose nodes lack what managed services take away (+96 .. +101)."""
        return self.base + 96

    @property
    def hostnames(self) -> int:
        """The cluster whose nodes announce a hostname, not their IP (+104 .. +109)."""
        return self.base + 104


def _remember(ports: TestPorts) -> TestPorts:
    global _SESSION
    _SESSION = ports
    return ports


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _block_free(base: int) -> bool:
    return all(_bindable(p) and _bindable(p + BUS_OFFSET) for p in range(base, base + BLOCK))


# The cluster bus ports (port + 10,000) of a developer's cluster (7000-7005), the demo
# (7200-7205) and the benchmarks (7300-7335): a block holding one would take it from a
# cluster started after the session claimed the block (a benchmark restarting its cluster).
RESERVED = range(17000, 17400)


def _reserved(base: int) -> bool:
    return base < RESERVED.stop and RESERVED.start < base + BLOCK


def _try_lock(base: int) -> IO[str] | None:
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    handle = open(LOCK_DIR / f"{base}.lock", "a+")  # noqa: SIM115 - held for the session
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


_SESSION: TestPorts | None = None


def session_ports() -> TestPorts:
    """The block this session claimed (conftest claims it before any test module loads)."""
    if _SESSION is None:
        raise RuntimeError("no port block claimed: tests/conftest.py claims one at start-up")
    return _SESSION


def claim() -> tuple[TestPorts, IO[str]]:
    """Lock a free block; returns its layout and the lock file (keep it open)."""
    pinned = os.environ.get("SHARDQ_TEST_BASE_PORT")
    if pinned:
        base = int(pinned)
        handle = _try_lock(base)
        if handle is None:
            raise RuntimeError(
                f"SHARDQ_TEST_BASE_PORT={base}: another test session holds that block; "
                "unset it to get a free block"
            )
        return _remember(TestPorts(base)), handle
    bases = [b for b in range(FIRST, LAST - BLOCK + 1, BLOCK) if not _reserved(b)]
    # Not the tests' seeded RNG: two sessions started with the same seed must still spread out.
    random.SystemRandom().shuffle(bases)
    for base in bases:
        handle = _try_lock(base)
        if handle is None:
            continue
        if _block_free(base):
            return _remember(TestPorts(base)), handle
        with contextlib.suppress(OSError):
            handle.close()
    raise RuntimeError(
        f"no free block of {BLOCK} ports in {FIRST}-{LAST - 1} (and their bus ports)"
    )
