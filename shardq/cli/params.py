"""The CLI's parameter types: each checks its input while click parses the command line, so a bad
value is a usage error (exit 2) that names the rule, before anything talks to Redis."""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from shardq.errors import ShardqError
from shardq.jobs import MAX_ATTEMPTS_LIMIT
from shardq.names import (
    JOB_ID_RE,
    JOB_STATE_ALIASES,
    JOB_TYPE_RE,
    MAX_IDEMPOTENCY_KEY,
    JobState,
    check_queue_name,
)
from shardq.store.keys import MAX_PARTITIONS

if TYPE_CHECKING:
    from shardq.worker.pool import QueueChoice

PARTITIONS = click.IntRange(1, MAX_PARTITIONS)
MAX_ATTEMPTS = click.IntRange(1, MAX_ATTEMPTS_LIMIT)
LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False)


class QueueName(click.ParamType):  # type: ignore[type-arg]
    name = "queue"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            check_queue_name(value)
        except ShardqError as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


class QueueWeight(click.ParamType):  # type: ignore[type-arg]
    """``NAME`` or ``NAME:WEIGHT``: a queue a worker serves (shardq.worker.pool.QueueChoice)."""

    name = "queue[:weight]"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> QueueChoice:
        from shardq.worker.pool import QueueChoice  # the worker package: only `worker run`

        try:
            return QueueChoice.parse(value)
        except ShardqError as exc:
            self.fail(str(exc), param, ctx)


class JobStates(click.Choice):  # type: ignore[type-arg]
    """A job state (:data:`shardq.names.JOB_STATES`) among ``states``; an old word
    (:data:`shardq.names.JOB_STATE_ALIASES`: ``active``) is taken for the state it now names."""

    def __init__(self, states: tuple[JobState, ...]) -> None:
        super().__init__(states)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            value = JOB_STATE_ALIASES.get(value, value)
        return super().convert(value, param, ctx)


class Pattern(click.ParamType):  # type: ignore[type-arg]
    """Text that must fully match a regular expression; the failure says the rule."""

    def __init__(self, name: str, pattern: re.Pattern[str], rule: str) -> None:
        self.name = name
        self.pattern = pattern
        self.rule = rule

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if not self.pattern.fullmatch(str(value)):
            self.fail(f"{value!r} is invalid: {self.rule}", param, ctx)
        return str(value)


MAX_DURATION = 10 * 366 * 86400.0  # past any horizon a setting or a job may have
_UNITS = {"": 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*")


def span_text(seconds: float) -> str:
    """``seconds`` in the largest unit that holds it whole: ``250ms``, ``90s``, ``10m``, ``1d``."""
    if seconds == 0:
        return "0s"
    for unit in ("d", "h", "m", "s"):
        count = seconds / _UNITS[unit]
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds * 1000:g}ms"


class Duration(click.ParamType):  # type: ignore[type-arg]
    """A length of time, ``lo`` to ``hi`` seconds: ``90``, ``1.5``, ``250ms``, ``90s``, ``5m``,
    ``2h``, ``1d`` (plain numbers are seconds).  Every option that takes a time span takes one."""

    name = "duration"

    def __init__(self, lo: float = 0.0, hi: float = MAX_DURATION) -> None:
        self.lo = lo
        self.hi = hi

    def to_info_dict(self) -> dict[str, Any]:  # type: ignore[override]  # (+ the bounds)
        return {**super().to_info_dict(), "min": self.lo, "max": self.hi}

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            seconds = float(value)
        else:
            match = _DURATION.fullmatch(str(value))
            if match is None:
                self.fail(
                    f"{value!r} is not a duration: use seconds (90, 1.5) or a unit "
                    "(250ms, 90s, 5m, 2h, 1d), not negative",
                    param,
                    ctx,
                )
            seconds = float(match.group(1)) * _UNITS[match.group(2) or ""]
        bounded = (self.lo, self.hi) != (0.0, MAX_DURATION)
        if bounded and not self.lo <= seconds <= self.hi:
            text = str(value) if len(str(value)) <= 24 else str(value)[:24] + "..."
            self.fail(
                f"{text!r} is out of range: use {span_text(self.lo)} to {span_text(self.hi)}",
                param,
                ctx,
            )
        if seconds < 0:
            self.fail(f"{value!r} is negative: use 0 to run now", param, ctx)
        if seconds > MAX_DURATION:  # (also inf: 400 digits read as a float)
            text = str(value) if len(str(value)) <= 24 else str(value)[:24] + "..."
            self.fail(f"{text!r} is too long: at most {MAX_DURATION:.0f} s (10 years)", param, ctx)
        return seconds


class UtcTime(click.ParamType):  # type: ignore[type-arg]
    """An ISO 8601 time with its zone: ``2030-01-01T09:00:00Z`` or ``...+02:00``."""

    name = "iso-time"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            moment = datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(
                f"{value!r} is not an ISO 8601 time: use e.g. 2030-01-01T09:00:00Z", param, ctx
            )
        if moment.tzinfo is None:
            self.fail(
                f"{value!r} has no time zone: add one, e.g. {value}Z (UTC) or {value}+02:00",
                param,
                ctx,
            )
        return moment


class Header(click.ParamType):  # type: ignore[type-arg]
    """``name=value`` (a job header, e.g. a W3C traceparent)."""

    name = "name=value"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        key, sep, text = str(value).partition("=")
        if not sep or not key:
            self.fail(f"{value!r}: use name=value, e.g. traceparent=00-...", param, ctx)
        return key, text


QUEUE_NAME = QueueName()
QUEUE_CHOICE = QueueWeight()
JOB_TYPE = Pattern("type", JOB_TYPE_RE, "use 1-128 characters of letters, digits and '_.:/-'")
JOB_ID = Pattern("job-id", JOB_ID_RE, "use 1-128 printable ASCII characters, no spaces")
IDEMPOTENCY_KEY = Pattern(
    "key", re.compile(rf"[^\x00]{{1,{MAX_IDEMPOTENCY_KEY}}}", re.S), "use 1-256 characters"
)
DURATION = Duration()
UTC_TIME = UtcTime()
HEADER = Header()
