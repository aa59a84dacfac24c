"""Processes the tests start (and kill by their own pid): workers and dispatchers.

Each writes its log to a file (a pipe nobody reads could fill up and stall it), read back with
:meth:`Proc.log`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from shardq.dev.demo import cli_command

HELPER = Path(__file__).with_name("proc_helper.py")


class Proc:
    """A process this test started; killed (by its own pid) if the test leaves it running."""

    def __init__(
        self, argv: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.logfile = tempfile.NamedTemporaryFile(  # noqa: SIM115 - the process writes it
            prefix="shardq-proc-", suffix=".log", delete=False
        )
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.popen = subprocess.Popen(
            argv, stdout=self.logfile, stderr=subprocess.STDOUT, env=full_env, cwd=cwd
        )
        self.logfile.close()
        self.pid = self.popen.pid

    @classmethod
    def helper(cls, *args: str, env: Mapping[str, str] | None = None) -> Proc:
        """tests/support/proc_helper.py: a worker or dispatcher with a recording handler."""
        return cls([sys.executable, str(HELPER), *args], env)

    @classmethod
    def dispatcher(
        cls, url: str, queue: str, *extra: str, env: Mapping[str, str] | None = None
    ) -> Proc:
        """`shardq dispatcher run`, logging lease events (INFO)."""
        command = cli_command("dispatcher", "run", "--queue", queue, "--url", url, *extra)
        command[command.index("--log-level") + 1] = "INFO"
        return cls(command, env)

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.pid, sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.popen.wait(10)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise AssertionError(f"process exited with {self.popen.returncode}:\n{self.log()}")

    def log(self) -> str:
        with open(self.logfile.name, errors="replace") as f:
            return f.read()

    def stop(self, timeout: float = 30) -> int | None:
        """SIGCONT (in case it was stopped) and SIGTERM; SIGKILL if it does not exit."""
        if self.popen.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.popen.returncode

    def cleanup(self) -> None:
        self.stop(10)
        with contextlib.suppress(OSError):
            os.unlink(self.logfile.name)


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.cleanup()


class OwnRedis:
    """A standalone redis-server of one test (a spare port of the session's block), for
    settings the shared nodes must not get: a memory limit, a TLS port.  Killed by its pid."""

    def __init__(self, *config: str, port: int | None = None) -> None:
        from support import servers
        from support.helpers import free_port, wait_for

        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="shardq-own-redis-"))
        self.popen = subprocess.Popen(
            [servers.server(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), *config],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = f"redis://127.0.0.1:{self.port}"

        def up() -> bool:
            import socket

            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for(up, 15, f"redis-server on {self.port} did not start")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def own_redis() -> Iterator[Callable[..., OwnRedis]]:
    """Start standalone redis-servers with the given config arguments; all stopped after."""
    started: list[OwnRedis] = []

    def start(*config: str) -> OwnRedis:
        server = OwnRedis(*config)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
