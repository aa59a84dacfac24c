"""The ``shardq`` command line without Redis: the failures a user meets when Redis is down or the
input is bad, as one line with exit 1 (exit 2 for usage errors, as click does), the messages,
``--version`` and ``--help``, and the time helpers.  The commands against the real local
cluster are in tests/integration/test_cli.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.cli import assert_one_line_error, ok, run
from support.helpers import scaled

from shardq import __version__
from shardq import format as fmt
from shardq.cli.errors import cli_message

REFUSED = "redis://127.0.0.1:1"  # nothing listens on port 1


def test_connection_refused_is_one_line_exit_1_in_a_real_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "shardq.cli", "queue", "stats", "--url", REFUSED],
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env={**os.environ},
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach Redis" in lines[0], done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["queue", "stats"],
        ["queue", "list"],
        ["job", "get", "-q", "q", "x"],
        ["job", "enqueue", "-q", "q", "t"],
        ["queue", "owners", "-q", "q"],
        ["dlq", "list", "-q", "q"],
        ["functions", "status"],
    ],
)
def test_connection_refused_for_every_command(args: list[str]) -> None:
    # the connection option works before the command and after it
    assert "cannot reach Redis" in assert_one_line_error(run("--url", REFUSED, *args))
    assert_one_line_error(run(*args, "--url", REFUSED))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--log-level", "bogus", "queue", "list"], "--log-level"),
        (["queue", "create", "-q", "bad:name"], "1-64 characters"),
        (["queue", "create", "-q", "ok", "--partitions", "20000"], "1<=x<=16384"),
        (["job", "enqueue", "-q", "q", "bad type!"], "1-128 characters"),
        (["job", "enqueue", "-q", "q", "t", "--at", "2030-01-01T00:00:00"], "no time zone"),
        (["job", "enqueue", "-q", "q", "t", "--delay", "-5"], "not negative"),
        (["job", "enqueue", "-q", "q", "t", "--max-attempts", "0"], "--max-attempts"),
        (["job", "enqueue", "-q", "q", "t", "--backoff", "random"], "--backoff"),
        (["job", "enqueue", "-q", "q", "t", "--header", "novalue"], "name=value"),
        (["job", "enqueue", "-q", "q", "t", "--payload", "{bad"], "not JSON"),
        (["job", "enqueue", "t"], "--queue"),
        (["worker", "run", "-q", "q", "--handlers", "x:y", "--concurrency", "many"], "many"),
    ],
)
def test_usage_errors_exit_2_and_name_the_rule(args: list[str], needle: str) -> None:
    result = run(*args, "--url", REFUSED)
    assert result.exit_code == 2, result.output
    assert needle in result.stderr, result.stderr
    assert "Error" not in result.stderr.replace("Error:", ""), result.stderr  # no class names


def test_library_messages_speak_flags_not_python() -> None:
    text = (
        "run time 1 ms is more than 300000 ms before the Redis clock (2 ms): pass a time in "
        "the future, use delay=0 to run now, or raise past_tolerance"
    )
    said = cli_message(text)
    assert "--delay 0" in said and "--past-tolerance" in said and "past_tolerance" not in said
    said = cli_message("create it first with `shardq queue create q1` or client.create_queue('q1')")
    assert said == "create it first with `shardq queue create --queue q1`"


def test_version_and_help() -> None:
    assert ok("--version").strip() == f"shardq, version {__version__}"
    assert "--url" in ok("--help") and "--url" in ok("queue", "stats", "--help")


def test_time_helpers() -> None:
    assert fmt.iso(0) == "1970-01-01T00:00:00.000Z"
    assert fmt.relative(10_000 + 300_000, now=10_000) == "in 5m"
    assert fmt.relative(10_000 - 3_000, now=10_000) == "3s ago"
    assert fmt.relative(10_000, now=10_000) == "now"
    assert fmt.span(3600 * 2 + 5 * 60 + 7) == "2h5m"
    assert fmt.span(86400 + 3600) == "1d1h"
    assert fmt.stream_id_ms("1714000000000-3") == 1714000000000
