"""Logs: every line a process writes is one JSON object (or, with ``--log-format text``, a line
for humans).

A JSON line always has ``timestamp`` (UTC, ISO 8601), ``level``, ``logger`` and ``event``, then
the context known where it was written (``queue``, ``partition``, ``job_id``, ...).  An event
logged with :func:`log_event` has its name as ``event`` and its fields beside it; any other
record (shardq's plain messages, redis-py's, asyncio's, ``warnings``) has its message as
``event``, the way structlog names it.

The library is python-json-logger, not structlog: shardq and the libraries under it log through
the standard library's ``logging``, and python-json-logger is a formatter on that one handler,
so every record of the process becomes JSON with no call site changed, no processor chain to
wire into foreign loggers, and no second logging system beside the first.  Its orjson
formatter reuses the encoder shardq already depends on, and writes compact separators
(``"event":"lease.acquired"``), which log searches (and tests) match on.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal

import orjson
from pythonjsonlogger.orjson import OrjsonFormatter

LogFormat = Literal["json", "text"]
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "text")

# The context of the code that is running (queue, dispatcher or worker id): asyncio tasks
# inherit a copy when they are created, so a value bound at the top of a worker's run() is on
# every line its loops write, with no logger argument threaded through.
_context: ContextVar[dict[str, Any]] = ContextVar("shardq_log_context", default={})  # noqa: B039


def bind_context(**fields: Any) -> None:
    """Add ``fields`` to every line written from here on in this context (task or thread)."""
    _context.set({**_context.get(), **{k: v for k, v in fields.items() if v is not None}})


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """:func:`bind_context` for the body of a ``with`` block only."""
    token = _context.set({**_context.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


class Event(dict[str, Any]):
    """An event's fields, logged as the record's message.  The JSON formatter writes them as
    the line's own fields; ``str()`` (what ``record.getMessage()`` and pytest's caplog see) is
    the compact JSON of the event, as it was before the formatter existed, and is built only
    when something asks for it."""

    __slots__ = ()

    def __str__(self) -> str:
        return orjson.dumps(self, default=str).decode()


def log_event(
    logger: logging.Logger, event: str, level: int = logging.WARNING, **fields: Any
) -> None:
    """Log one event: ``event`` names it (``lease.acquired``), ``fields`` are its data (None
    fields dropped)."""
    if not logger.isEnabledFor(level):
        return
    record = Event(event=event)
    record.update((k, v) for k, v in fields.items() if v is not None)
    logger.log(level, record)


def _timestamp(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")


class JsonFormatter(OrjsonFormatter):
    """One JSON object per record: timestamp, level, logger, event, context, fields."""

    def __init__(self) -> None:
        super().__init__()

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        # The fixed fields first, so every line starts the same way; an event's own fields
        # (merged by the base class) win over the ambient context.
        log_data["timestamp"] = _timestamp(record.created)
        log_data["level"] = record.levelname.lower()
        log_data["logger"] = record.name
        log_data["event"] = message_dict.get("event") or record.message.rstrip()
        log_data.update(_context.get())
        super().add_fields(log_data, record, message_dict)
        # The message is ``event`` already; Python 3.12's asyncio task name is noise.
        log_data.pop("message", None)
        log_data.pop("taskName", None)


class TextFormatter(logging.Formatter):
    """``timestamp level logger: event key=value ...`` for a person reading a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {**_context.get()}
        if isinstance(record.msg, Event):
            fields.update(record.msg)
            text = str(fields.pop("event", ""))
        else:
            text = record.getMessage()
        pairs = " ".join(f"{k}={v}" for k, v in fields.items())
        line = f"{_timestamp(record.created)} {record.levelname:<7} {record.name}: {text}"
        if pairs:
            line += " " + pairs
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


_HANDLER = "shardq.stderr"


def setup_logging(level: str = "INFO", fmt: LogFormat = "json") -> None:
    """Send every log record of this process to stderr, one line each, as ``fmt``.

    shardq's loggers log at ``level``; other libraries' at WARNING or worse (redis-py's debug
    lines are noise at best).  Python warnings and uncaught exceptions become records too, so
    nothing reaches stderr around the formatter.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if fmt == "text" else JsonFormatter())
    handler.set_name(_HANDLER)
    root = logging.getLogger()
    # Replace only a handler this function installed: a host's own (pytest's capture, an
    # application embedding the CLI) stays.
    root.handlers[:] = [h for h in root.handlers if h.get_name() != _HANDLER] + [handler]
    threshold = logging.getLevelName(level.upper())
    root.setLevel(max(threshold, logging.WARNING) if isinstance(threshold, int) else "WARNING")
    shardq = logging.getLogger("shardq")
    shardq.handlers.clear()
    shardq.setLevel(level.upper())
    shardq.propagate = True
    # Off then on: if something replaced warnings.showwarning since an earlier setup (a test
    # runner does, per test), a bare captureWarnings(True) would keep the stale hook.
    logging.captureWarnings(False)
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_thread_uncaught


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    logging.getLogger("shardq").critical("uncaught exception", exc_info=(kind, exc, tb))


def _log_thread_uncaught(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or issubclass(args.exc_type, SystemExit):
        return
    logging.getLogger("shardq").critical(
        "uncaught exception in thread %s",
        args.thread.name if args.thread else "?",
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )
