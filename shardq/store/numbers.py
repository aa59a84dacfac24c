"""Numbers read back from Redis, checked as numbers: the one place every parser turns a stored
or replied value into an int or a float.

Anything in Redis may have been written by hand or by a buggy release: a counter ``inf``, a due
score ``+inf``, an attempt ``nan``, ``1e400``, ``0x1f``, `` 12``, ``1_000``, ``١٢`` or bytes
that are not UTF-8.  Python's ``int()`` and ``float()`` take several of those (``int(" 12")``,
``int("1_000")``, ``int("١٢")``, ``float("nan")``) and raise OverflowError on others
(``int(float("inf"))``), which escaped as tracebacks from ``shardq queue stats`` and ``job
get``.  So no parser calls them on a value from Redis: it calls :func:`integer`, :func:`real`
or :func:`time_ms`, which accept only a finite integer (ASCII digits, an optional ``-``) or a
finite float, within the field's range, and raise :class:`BadNumber` (a ValueError that carries the
field's name and raw value) for anything else.  :class:`Checked` collects the bad fields of one
record, so a reader can show them (``malformed``) instead of failing.
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeVar

from shardq.config import MAX_TIME_MS as MAX_TIME_MS
from shardq.errors import MalformedRecordError
from shardq.errors import shown as shown

T = TypeVar("T")

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_INTEGER = re.compile(rb"-?[0-9]{1,19}")
_REAL = re.compile(rb"[-+]?(?:[0-9]{1,40}(?:\.[0-9]{0,40})?|\.[0-9]{1,40})(?:[eE][-+]?[0-9]{1,3})?")


class BadNumber(MalformedRecordError):
    """A value from Redis that is not a number the field can hold (a ValueError, and typed:
    one that escapes a reader is one line in the CLI, not a traceback)."""

    def __init__(self, what: str, raw: Any, allowed: str) -> None:
        self.what = what
        self.raw = raw
        self.allowed = allowed
        super().__init__(f"{what} is {shown(raw)}, not {allowed}")


def _bytes(raw: Any) -> bytes | None:
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        return raw.encode("utf-8", errors="surrogateescape")
    return None


def integer(raw: Any, lo: int = INT64_MIN, hi: int = INT64_MAX, *, what: str = "value") -> int:
    """``raw`` as an int in ``lo..hi``: an int (not a bool), an integral finite float (a reply
    redis-py turned into one), or decimal digits with an optional '-'; else BadNumber."""
    value: int | None = None
    if type(raw) is bytes and len(raw) <= 19 and raw.isdigit():
        # The common case first (every fetched delivery has some): ASCII digits, no sign;
        # bytes.isdigit is ASCII-only, so this is what the pattern below accepts of them.
        value = int(raw)
    elif isinstance(raw, bool):
        value = None
    elif isinstance(raw, int):
        value = raw
    elif isinstance(raw, float):
        value = int(raw) if math.isfinite(raw) and raw.is_integer() else None
    else:
        data = _bytes(raw)
        if data is not None and _INTEGER.fullmatch(data):
            value = int(data)
    if value is None or not lo <= value <= hi:
        raise BadNumber(what, raw, f"an integer {lo}..{hi}")
    return value


def real(raw: Any, lo: float, hi: float, *, what: str = "value") -> float:
    """``raw`` as a finite float in ``lo..hi``: an int or float (not a bool), or decimal
    text (digits, a point, an exponent; no 'nan', 'inf', hex or '_'); else BadNumber."""
    value: float | None = None
    if isinstance(raw, bool):
        value = None
    elif isinstance(raw, int | float):
        try:
            value = float(raw)
        except OverflowError:  # an int past the float range
            value = None
    else:
        data = _bytes(raw)
        if data is not None and _REAL.fullmatch(data):
            value = float(data)
    if value is None or not math.isfinite(value) or not lo <= value <= hi:
        raise BadNumber(what, raw, f"a finite number {lo:g}..{hi:g}")
    return value


def time_ms(raw: Any, *, what: str = "time", lo: int = 0, hi: int = MAX_TIME_MS) -> int:
    """An epoch time in ms (a due score, a stream entry's time, a heartbeat): a finite number
    in ``lo..hi`` (by default 1970 to 9999), fractions of a ms dropped; else BadNumber."""
    if type(raw) is bytes and len(raw) <= 19 and raw.isdigit():
        # The common case (a stored ms count), without the float round trip: it is on the
        # path of every fetched delivery.  Anything else takes the full check below.
        value = int(raw)
        if lo <= value <= hi:
            return value
        raise BadNumber(what, raw, f"a time in ms {lo}..{hi}")
    try:
        return math.floor(real(raw, lo, hi, what=what))
    except BadNumber:
        raise BadNumber(what, raw, f"a time in ms {lo}..{hi}") from None


class Checked:
    """The bad fields of one record, by name (raw value as :func:`shown` shows it): a parser
    reads every field through it, keeps ``default`` for a bad one, and reports them all."""

    __slots__ = ("bad",)

    def __init__(self) -> None:
        self.bad: dict[str, str] = {}

    def integer(
        self, name: str, raw: Any, default: T, lo: int = INT64_MIN, hi: int = INT64_MAX
    ) -> int | T:
        try:
            return integer(raw, lo, hi, what=name)
        except BadNumber:
            self.bad[name] = shown(raw)
            return default

    def count(self, name: str, raw: Any) -> int:
        """A count or counter (>= 0); 0 when bad."""
        return self.integer(name, raw, 0, 0)

    def time_ms(self, name: str, raw: Any, default: T = None) -> int | T:  # type: ignore[assignment]
        try:
            return time_ms(raw, what=name)
        except BadNumber:
            self.bad[name] = shown(raw)
            return default

    def optional_time_ms(self, name: str, raw: Any) -> int | None:
        """A time where a negative number (the scripts' -1) or nothing means none."""
        if raw is None or raw == b"" or raw == "":
            return None
        if isinstance(raw, int) and not isinstance(raw, bool) and -1 <= raw < 0:
            return None
        if isinstance(raw, bytes | str) and _bytes(raw) == b"-1":
            return None
        return self.time_ms(name, raw)
