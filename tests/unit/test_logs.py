"""Log lines: one JSON object each (events and plain messages alike, any library's), with
timestamp, level, logger, event and the context; ``--log-format text`` for people."""

from __future__ import annotations

import gc
import io
import json
import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator

import pytest

from shardq.logs import Event, LogFormat, log_context, log_event, setup_logging


def setup(buffer: io.StringIO, level: str, fmt: LogFormat = "json") -> None:
    """setup_logging, its handler then writing to ``buffer`` (pytest swaps sys.stderr itself
    around each test phase, so patching it would not hold)."""
    setup_logging(level, fmt)
    [handler] = [h for h in logging.getLogger().handlers if h.get_name() == "shardq.stderr"]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(buffer)


@pytest.fixture
def stderr() -> Iterator[io.StringIO]:
    """A buffer for the log lines; the loggers are put back afterwards."""
    buffer = io.StringIO()
    root, shardq = logging.getLogger(), logging.getLogger("shardq")
    saved = (root.handlers[:], root.level, shardq.handlers[:], shardq.level, shardq.propagate)
    hooks = (sys.excepthook, __import__("threading").excepthook)
    try:
        yield buffer
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        shardq.handlers[:], shardq.propagate = saved[2], saved[4]
        shardq.setLevel(saved[3])
        sys.excepthook, __import__("threading").excepthook = hooks
        logging.captureWarnings(False)


def test_every_record_is_one_json_object_with_the_fixed_fields(stderr: io.StringIO) -> None:
    gc.collect()  # earlier tests' garbage is collected (and warned about) before, not during
    setup(stderr, "DEBUG")
    log = logging.getLogger("shardq.worker")
    with log_context(queue="q1", worker="w1"):
        log_event(log, "job.failed", queue="q1", partition=3, job_id="j1", error="boom")
        log.info("worker %s started", "w1")
        try:
            raise ValueError("bad\nvalue")
        except ValueError:
            log.exception("handler crashed")
    logging.getLogger("redis.cluster").warning("a library's line")
    with warnings.catch_warnings():
        # UserWarning only: "always" for every category would also log ResourceWarnings of
        # objects that earlier tests left for the garbage collector, whenever it runs here.
        warnings.simplefilter("always", UserWarning)
        warnings.warn("a Python warning", UserWarning, stacklevel=1)
    log.debug("outside the context")
    lines = stderr.getvalue().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 6, lines
    for r in records:
        assert list(r)[:4] == ["timestamp", "level", "logger", "event"], r
        assert r["timestamp"].endswith("+00:00")
    event, plain, crash, library, warned, outside = records
    assert event == {
        "timestamp": event["timestamp"],
        "level": "warning",
        "logger": "shardq.worker",
        "event": "job.failed",
        "queue": "q1",
        "worker": "w1",
        "partition": 3,
        "job_id": "j1",
        "error": "boom",
    }
    assert lines[0].startswith('{"timestamp":') and '"event":"job.failed"' in lines[0]
    assert plain["event"] == "worker w1 started" and plain["queue"] == "q1"
    assert crash["level"] == "error" and "ValueError: bad" in crash["exc_info"]
    assert library["logger"] == "redis.cluster" and "queue" not in library
    assert warned["logger"] == "py.warnings" and "a Python warning" in warned["event"]
    assert outside["level"] == "debug" and "queue" not in outside


def test_an_events_message_stays_its_json_for_code_that_reads_records() -> None:
    """caplog and other handlers see ``record.getMessage()``: the event as compact JSON."""
    record = Event(event="loop.error", failures=3)
    assert json.loads(str(record)) == {"event": "loop.error", "failures": 3}
    assert logging.makeLogRecord({"msg": record}).getMessage() == str(record)


def test_text_format_for_people(stderr: io.StringIO) -> None:
    setup(stderr, "INFO", "text")
    log = logging.getLogger("shardq.dispatcher")
    with log_context(queue="q2"):
        log_event(log, "lease.acquired", logging.INFO, partition=5)
        log.info("plain %d", 7)
    log.debug("below the threshold")
    first, second = stderr.getvalue().splitlines()
    assert first.endswith("INFO    shardq.dispatcher: lease.acquired queue=q2 partition=5")
    assert second.endswith("shardq.dispatcher: plain 7 queue=q2")


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_the_cli_writes_its_warning_in_the_chosen_format(fmt: str) -> None:
    """A real process with a password on its command line: the warning it logs after
    restarting is a JSON line (or text with SHARDQ_LOG_FORMAT=text), and holds no secret."""
    env = {**os.environ, "SHARDQ_LOG_FORMAT": fmt}
    env.pop("SHARDQ_REDIS_PASSWORD", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardq.cli",
            "redis",
            "check",
            "--url",
            "redis://u:s3cret-pw@127.0.0.1:1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert "s3cret-pw" not in done.stdout + done.stderr
    assert done.returncode == 1 and "cannot reach Redis" in done.stderr, done.stderr
    warning = next(line for line in done.stderr.splitlines() if "visible to every user" in line)
    if fmt == "json":
        record = json.loads(warning)
        assert record["level"] == "warning" and record["logger"] == "shardq.cli"
    else:
        assert warning.split()[1] == "WARNING" and not warning.startswith("{")
