"""Nothing leaks the Redis password: not the CLI's output or errors, not a process's logs, not
its process title, not a repr or an exception.  A real ACL user with a random password is
added to the standalone node; every check greps for that password (and for a wrong one)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote, unquote, urlparse

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers import Runs, scaled, wait_for
from support.procs import Proc

from shardq.cli import main as cli
from shardq.cli.connection import scrub_argv
from shardq.client import Client
from shardq.config import RedisSettings, redact_url, split_credentials
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
    # (each command with its exit code: 0 done, 1 one error line, 2 a usage error)
    runs = [
        (0, ("redis", "check", "--url", user.url)),
        (1, ("redis", "check", "--url", user.wrong_url)),
        (1, ("redis", "check", "--queue", queue, "--url", user.url)),  # no such queue yet
        (1, ("redis", "check", "--url", unreachable)),
        (2, ("redis", "check", "--url", f"redis://{user.name}:{user.secret}@127.0.0.1:notaport")),
        (2, ("redis", "check", "--url", f"http://{user.name}:{user.secret}@127.0.0.1:1")),
        (0, ("queue", "list", "--url", user.url)),
        (1, ("queue", "list", "--url", user.wrong_url)),
        (0, ("queue", "create", "--queue", queue, "--partitions", "2", "--url", user.url)),
        (0, ("queue", "stats", "--queue", queue, "--url", user.url)),
        (1, ("job", "get", "--queue", queue, "nope", "--url", user.url)),
        (0, ("redis", "check", "--url", f"redis://{user.hostport}", "--password", user.secret)),
        # no user name: the default user, which has no password, so any password will do
        (0, ("redis", "check", "--url", f"redis://{user.hostport}", "--password", user.wrong)),
        (2, ("job", "enqueue", "--queue", queue, "t", "--payload", "{bad", "--url", user.url)),
    ]
    for code, args in runs:
        done = _cli(*args)
        user.assert_absent(done.stdout + done.stderr, " ".join(args[:2]))
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode == code, (args[:2], done.returncode, done.stderr)
    # A password on the command line is warned about, and the call still works.
    assert "visible to every user" in _cli("redis", "check", "--url", user.url).stderr


def test_password_from_the_environment_or_a_file_gives_no_warning(
    user: User, tmp_path: Path
) -> None:
    url = f"redis://{user.name}@{user.hostport}"
    done = _cli("redis", "check", "--url", url, env={"SHARDQ_REDIS_PASSWORD": user.secret})
    assert done.returncode == 0 and "visible" not in done.stderr, done.stderr
    secret_file = tmp_path / "password"
    secret_file.write_text(user.secret + "\n")
    done = _cli("redis", "check", "--url", url, "--password-file", str(secret_file))
    assert done.returncode == 0 and "visible" not in done.stderr, done.stderr
    done = _cli("redis", "check", "--url", url, "--password-file", str(tmp_path / "missing"))
    assert done.returncode == 2 and "cannot read" in done.stderr, done.stderr


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
                "shardq.dev.handlers:handlers",
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
        # The worker's reads promote, so the jobs may all have run before the dispatcher (a
        # process of its own, slow to start on a loaded box) is up: wait for both to say they
        # started, else a SIGTERM before its handlers exist leaves no log at all.
        wait_for(
            lambda: all("started on" in p.log() for p in procs),
            30,
            lambda: "not started: " + "\n".join(p.log()[-800:] for p in procs),
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


# Any URL shape -------------------------------------------------------------------------------
#
# A password is three marker segments joined by characters a URL parser reads as structure
# ('#' a fragment, '/' a path, '?' a query, '@' the end of the credentials, ':' a port, '[' ']'
# an IPv6 host, '%' an escape, spaces): no output may hold any segment, whatever shape the
# rest of the URL has (missing or bad ports, IPv6, other schemes, unbalanced brackets).

SPECIALS = "#/?@:[]% &="
DOWN = "127.0.0.1:1"  # nothing listens there


class UrlCase(NamedTuple):
    url: str
    password: str  # as Redis must receive it
    segments: list[str]  # markers no output may hold
    live: bool  # a well-formed URL naming the live node, a user and its password


@st.composite
def secret_urls(draw: st.DrawFn, live_hostport: str | None = None) -> UrlCase:
    n = draw(st.integers(0, 10**6))
    segments = [f"Sx{n:07d}{c}q" for c in "abc"]
    seps = [draw(st.text(alphabet=SPECIALS, max_size=3)) for _ in range(4)]
    password = seps[0] + segments[0] + seps[1] + segments[1] + seps[2] + segments[2] + seps[3]
    written = password.replace("%", "%25")  # the one character a URL must escape
    user = draw(st.sampled_from(["", "alice", "svc#1", "a/b", "x?y"]))
    scheme = draw(st.sampled_from(["redis://", "rediss://", "REDIS://", "unix://", "http://", ""]))
    good_hosts = [live_hostport or DOWN, DOWN]
    host = draw(
        st.sampled_from(
            [*good_hosts, "127.0.0.1", "127.0.0.1:notaport", "127.0.0.1:99999", "[::1]:1",
             "[::1:1", "::1]:1", "", ":1", "localhost:1/0"]
        )
    )  # fmt: skip
    suffix = draw(st.sampled_from(["", "/0", "#frag", "?cluster=maybe", "?cluster=false"]))
    if draw(st.booleans()):  # a password given as a query argument instead
        url = f"{scheme}{user}@{host}?cluster=true&password={quote(password, safe='')}"
        return UrlCase(url, password, segments, False)
    url = f"{scheme}{user}:{written}@{host}{suffix}"
    live = (
        live_hostport is not None
        and host == live_hostport
        and scheme.lower() == "redis://"
        and bool(user)
        and suffix != "?cluster=maybe"
    )
    return UrlCase(url, password, segments, live)


def _assert_hidden(segments: list[str], text: str, where: str) -> None:
    for s in segments:
        assert s not in text, f"password segment {s} shows in {where}:\n{text[-3000:]}"


@settings(max_examples=400)
@given(case=secret_urls())
def test_no_url_shape_shows_its_password_in_settings_errors_or_argv(case: UrlCase) -> None:
    """Parsing, redacting and scrubbing any URL: neither the redacted URL, the settings, their
    repr, the error's str/repr nor the scrubbed argv holds the password; and where the URL
    is a valid Redis URL, the password reaches the settings exactly as written."""
    url, password, segments, _ = case
    _assert_hidden(segments, redact_url(url), "redact_url")
    cleaned, found = scrub_argv(["redis", "check", "--url", url])
    _, found_eq = scrub_argv([f"--url={url}"])
    assert found == found_eq
    query = "password=" in url
    if not query:  # (refused below: the process exits at once)
        _assert_hidden(segments, " ".join(cleaned), "the scrubbed argv")
    try:
        parsed = RedisSettings.from_url(url)
    except ConfigError as exc:
        _assert_hidden(segments, f"{exc} {exc!r}", "the ConfigError")
        return
    assert not query, "a password in the query is ignored: it must be refused"
    _assert_hidden(segments, f"{parsed!r} {parsed.url} {parsed.username}", "the settings")
    assert parsed.password == password, (url, parsed.password)
    assert found == password  # what scrub_argv moved to the environment is the password


class _Records(logging.Handler):
    """Every log record of the process, formatted with its traceback (if any)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage() + " " + " ".join(f"{v}" for v in record.__dict__.values())
        if record.exc_info:
            text += "".join(traceback.format_exception(*record.exc_info))
        self.lines.append(text)


def _hostport(url: str) -> str:
    parsed = urlparse(url)
    return f"{parsed.hostname}:{parsed.port}"


@contextlib.contextmanager
def _acl_user_of(admin: Client, case: UrlCase) -> Iterator[None]:
    """The ACL user the URL names, with its password, for as long as the block runs."""
    _, userinfo, _ = split_credentials(case.url)
    name = unquote((userinfo or "").partition(":")[0])
    if name:
        admin.redis.execute_command(
            "ACL", "SETUSER", name, "reset", "on", f">{case.password}", "~*", "&*", "+@all"
        )
    try:
        yield
    finally:
        if name:
            admin.redis.execute_command("ACL", "DELUSER", name)


@settings(max_examples=40)
@given(data=st.data())
def test_cli_never_shows_a_url_password_of_any_shape(standalone_url: str, data: Any) -> None:
    """health, queue info and enqueue, with the URL on the command line or in SHARDQ_REDIS_URL,
    against a live node (as a real ACL user with that password), a port nothing listens on,
    and broken URLs: stdout, stderr and log records never hold the password, nothing escapes
    as an exception, and a well-formed URL gets in whatever its password holds."""
    case = data.draw(secret_urls(_hostport(standalone_url)))
    admin = Client.from_url(standalone_url)
    queue = "leak-q"
    records = _Records()
    logging.getLogger().addHandler(records)
    runner = CliRunner()
    try:
        admin.create_queue(queue, 1)
        with _acl_user_of(admin, case):
            for args in (
                ["redis", "check"],
                ["queue", "info", "-q", queue],
                ["job", "enqueue", "-q", queue, "t"],
            ):
                for how in ("argv", "env"):
                    if how == "argv":
                        done = runner.invoke(cli, [*args, "--url", case.url])
                    else:
                        done = runner.invoke(cli, args, env={"SHARDQ_REDIS_URL": case.url})
                    where = f"{' '.join(args)} ({how}) for {redact_url(case.url)}"
                    text = done.output + done.stderr
                    _assert_hidden(case.segments, text, where)
                    _assert_hidden(case.segments, "\n".join(records.lines), f"logs of {where}")
                    assert "Traceback" not in text, (where, text)
                    assert done.exception is None or isinstance(done.exception, SystemExit), (
                        where,
                        text,
                    )
                    if case.live:
                        assert done.exit_code == 0, (where, text)
    finally:
        logging.getLogger().removeHandler(records)
        admin.close()


def _long_running(args: list[str], env: dict[str, str], seconds: float) -> tuple[int | None, str]:
    """Run a CLI process that serves until told to stop: give it ``seconds`` (it exits sooner
    on a bad URL), then SIGTERM; (exit code, everything it wrote)."""
    proc = Proc([*SHARDQ, *args], env)
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(scaled(seconds))
        code = proc.stop(scaled(20))
        return code, proc.log()
    finally:
        proc.cleanup()


@settings(max_examples=6)
@given(data=st.data())
def test_long_running_commands_never_show_a_url_password(
    standalone_url: str, test_ports: Any, data: Any
) -> None:
    """worker run, dispatcher run and web (argv and SHARDQ_REDIS_URL) on a live node, on a port
    nothing listens on and on broken URLs: their output and logs never hold the password; a
    broken URL is one usage line (exit 2), not a traceback."""
    case = data.draw(secret_urls(_hostport(standalone_url)))
    how = data.draw(st.sampled_from(["argv", "env"]))
    admin = Client.from_url(standalone_url)
    queue = "leak-long"
    try:
        admin.create_queue(queue, 1)
        with _acl_user_of(admin, case):
            for args in (
                ["worker", "run", "-q", queue, "--handlers", "shardq.dev.handlers:handlers"],
                ["dispatcher", "run", "-q", queue],
                ["web", "--port", str(test_ports.spare[-1])],
            ):
                env = {"SHARDQ_REDIS_URL": case.url} if how == "env" else {}
                argv = [*args, "--url", case.url] if how == "argv" else args
                try:
                    RedisSettings.from_url(case.url)
                    broken = False
                except ConfigError:
                    broken = True
                # A broken URL must end the process by itself; others run until stopped.
                code, log = _long_running(argv, env, 30.0 if broken else 1.5)
                where = f"{' '.join(args[:2])} ({how}) for {redact_url(case.url)}"
                _assert_hidden(case.segments, log, where)
                assert "Traceback" not in log, (where, log)
                if broken:
                    assert code == 2, (where, code, log)
                    errors = [line for line in log.splitlines() if line.startswith("Error:")]
                    assert len(errors) == 1 and "URL" in errors[0], (where, log)
    finally:
        admin.close()
