"""Nothing leaks the Redis password: not the CLI's output or errors, not a process's logs, not
its process title, not a repr or an exception.  A real ACL user with a random password is
added to the standalone node; every check greps for that password (and for a wrong one)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from helpers import Runs, scaled, wait_for
from procs import Proc

from shardq.client import Client
from shardq.config import RedisSettings, redact_url
from shardq.connection import connect_async
from shardq.errors import ConfigError
from shardq.worker import Worker

SHARDQ = [sys.executable, "-m", "shardq.cli"]


class User:
    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        self.name = "leak-" + secrets.token_hex(3)
        self.secret = "pw-" + secrets.token_hex(12)
        self.wrong = "pw-" + secrets.token_hex(12)
        self.hostport = f"{parsed.hostname}:{parsed.port}"
        self.url = f"redis://{self.name}:{self.secret}@{self.hostport}"
        self.wrong_url = f"redis://{self.name}:{self.wrong}@{self.hostport}"

    def assert_absent(self, text: str, where: str) -> None:
        assert self.secret not in text, f"the password shows in {where}:\n{text[-2000:]}"
        assert self.wrong not in text, f"the wrong password shows in {where}:\n{text[-2000:]}"


@pytest.fixture
def user(standalone_client: Client, standalone_url: str) -> Iterator[User]:
    u = User(standalone_url)
    r = standalone_client.redis
    r.execute_command("ACL", "SETUSER", u.name, "on", f">{u.secret}", "~*", "&*", "+@all")
    try:
        yield u
    finally:
        r.execute_command("ACL", "DELUSER", u.name)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        [*SHARDQ, *args], capture_output=True, text=True, timeout=scaled(60), env=full
    )


def test_cli_output_and_errors_never_show_the_password(user: User, queue: str) -> None:
    unreachable = f"redis://{user.name}:{user.secret}@127.0.0.1:1"
    runs = [
        ("health", "--url", user.url),
        ("health", "--url", user.wrong_url),
        ("health", "--queue", queue, "--url", user.url),
        ("health", "--url", unreachable),
        ("health", "--url", f"redis://{user.name}:{user.secret}@127.0.0.1:notaport"),
        ("health", "--url", f"http://{user.name}:{user.secret}@127.0.0.1:1"),
        ("queue", "list", "--url", user.url),
        ("queue", "list", "--url", user.wrong_url),
        ("queue", "create", "--queue", queue, "--partitions", "2", "--url", user.url),
        ("stats", "--queue", queue, "--url", user.url),
        ("job", "get", "--queue", queue, "nope", "--url", user.url),
        ("health", "--url", f"redis://{user.hostport}", "--password", user.secret),
        ("health", "--url", f"redis://{user.hostport}", "--password", user.wrong),
        ("enqueue", "--queue", queue, "t", "--payload", "{bad", "--url", user.url),
    ]
    outcomes = []
    for args in runs:
        done = _cli(*args)
        user.assert_absent(done.stdout + done.stderr, " ".join(args[:2]))
        outcomes.append(done.returncode)
        assert "Traceback" not in done.stderr, done.stderr
    assert outcomes[0] == 0 and outcomes[1] != 0 and outcomes[3] != 0
    # A password on the command line is warned about, and the call still works.
    assert "visible to every user" in _cli("health", "--url", user.url).stderr


def test_password_from_the_environment_or_a_file_gives_no_warning(
    user: User, tmp_path: Path
) -> None:
    url = f"redis://{user.name}@{user.hostport}"
    done = _cli("health", "--url", url, env={"SHARDQ_REDIS_PASSWORD": user.secret})
    assert done.returncode == 0 and "visible" not in done.stderr, done.stderr
    secret_file = tmp_path / "password"
    secret_file.write_text(user.secret + "\n")
    done = _cli("health", "--url", url, "--password-file", str(secret_file))
    assert done.returncode == 0 and "visible" not in done.stderr, done.stderr
    done = _cli("health", "--url", url, "--password-file", str(tmp_path / "missing"))
    assert done.returncode != 0 and "cannot read" in done.stderr


def test_long_running_processes_keep_the_password_off_their_title_and_logs(
    user: User, standalone_client: Client, queue: str
) -> None:
    standalone_client.create_queue(queue, 2)
    base = ["--queue", queue, "--url", user.url]
    procs = [
        Proc([*SHARDQ, "--log-level", "DEBUG", "dispatcher", "run", *base]),
        Proc(
            [
                *SHARDQ,
                "--log-level",
                "DEBUG",
                "worker",
                "run",
                *base,
                "--handlers",
                "shardq.bench:handlers",
            ]
        ),
    ]
    try:
        ids = [standalone_client.enqueue(queue, "demo", {"i": i}, delay=0.2) for i in range(20)]
        wait_for(
            lambda: all(standalone_client.get(queue, j) is None for j in ids),
            30,
            lambda: "jobs did not run: " + "\n".join(p.log()[-800:] for p in procs),
        )
        for p in procs:
            title = Path(f"/proc/{p.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            user.assert_absent(title, f"the process title of pid {p.pid}")
            assert queue in title  # it is the same process, started again without the password
    finally:
        for p in procs:
            p.signal(15)
        for p in procs:
            p.popen.wait(scaled(30))
    for p in procs:
        log = p.log()
        user.assert_absent(log, "a process log")
        assert_json_lines(log, queue)


def assert_json_lines(log: str, queue: str) -> None:
    """Every line a process wrote is one JSON object with the fixed fields; its loops' lines
    name the queue."""
    lines = log.splitlines()
    assert lines, "the process wrote nothing"
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(record, dict), line
        missing = {"timestamp", "level", "logger", "event"} - record.keys()
        assert not missing, f"{missing} missing from {line}"
        records.append(record)
    # The argv warning too is a log line (written by the restarted process).
    assert any("visible to every user" in r["event"] for r in records), log[-2000:]
    assert any(r.get("queue") == queue and r["logger"].startswith("shardq.") for r in records)


def test_settings_errors_and_reprs_never_show_the_password(user: User) -> None:
    settings = RedisSettings.from_url(user.url)
    assert settings.password == user.secret
    user.assert_absent(repr(settings), "repr(RedisSettings)")
    assert user.secret not in redact_url(user.url) and user.name in redact_url(user.url)
    for bad in (
        f"redis://{user.name}:{user.secret}@127.0.0.1:notaport",
        f"http://{user.name}:{user.secret}@127.0.0.1:1",
        f"redis://{user.name}:{user.secret}@",
        f"redis://{user.name}:{user.secret}@[::1",
    ):
        with pytest.raises(ConfigError) as caught:
            RedisSettings.from_url(bad)
        user.assert_absent(str(caught.value), f"ConfigError for {redact_url(bad)}")
    with pytest.raises(Exception) as failed:
        Client.from_url(user.wrong_url).redis.ping()
    user.assert_absent(str(failed.value) + repr(failed.value), "an authentication error")


def test_a_worker_in_process_logs_no_password(
    user: User, standalone_client: Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    standalone_client.create_queue(queue, 1)
    runs = Runs()
    caplog.set_level("DEBUG")

    async def go() -> None:
        redis = await connect_async(RedisSettings.from_url(user.url))
        worker = Worker(redis, queue, handlers={"t": runs.add})
        task = asyncio.create_task(worker.run())
        job = standalone_client.enqueue(queue, "t", 1)
        deadline = time.monotonic() + scaled(20)
        while job not in runs.count() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        worker.stop()
        await task
        await redis.aclose()

    asyncio.run(go())
    assert runs.count()
    user.assert_absent(caplog.text, "the worker's log")
