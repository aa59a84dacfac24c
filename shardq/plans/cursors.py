"""The listings' cursors: a page's position encoded as an opaque string for the caller to pass
back, and decoded with every field checked, so that nothing a caller made up reaches a script
or the merge (:class:`~shardq.errors.InvalidCursorError`: the console answers 400, the CLI one
line)."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

import orjson

from shardq import jobs as jobmod
from shardq.errors import InvalidCursorError
from shardq.store import keys


def encode(state: str, position: Any) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([state, position])).decode().rstrip("=")


# A cursor this inspector hands out is ~200 characters; refuse a long one before decoding it.
MAX_CURSOR = 1024
# Stream entry ids in cursors: a Redis clock in ms (or the lanes' synthetic 9999999999999),
# far below 10**15; Redis refuses an exclusive range start at the largest id, so the bounds
# stay well inside what XRANGE/XPENDING accept.
_ENTRY_ID_RE = re.compile(r"(\d{1,16})-(\d{1,19})")
MAX_ENTRY_MS = 10**15
MAX_ENTRY_SEQ = 2**63


def _is_int(value: Any, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _entry_id(value: Any) -> bool:
    match = _ENTRY_ID_RE.fullmatch(value) if isinstance(value, str) else None
    return match is not None and int(match[1]) <= MAX_ENTRY_MS and int(match[2]) <= MAX_ENTRY_SEQ


def _job_id_or_empty(value: Any) -> bool:
    return isinstance(value, str) and (value == "" or bool(jobmod.JOB_ID_RE.fullmatch(value)))


def _scan_cursor(value: Any) -> bool:
    return isinstance(value, str) and value.isascii() and value.isdigit() and int(value) < 2**64


def _pair(check_a: Callable[[Any], bool], check_b: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def check(position: Any) -> bool:
        return (
            isinstance(position, list)
            and len(position) == 2
            and check_a(position[0])
            and check_b(position[1])
        )

    return check


# What each state's cursor position must be (what the listings of shardq.plans.listing
# encode): anything else is refused here, before a script sees it.
_stream_position = _pair(_entry_id, lambda p: _is_int(p, 0, keys.MAX_PARTITIONS))
_POSITIONS: dict[str, Callable[[Any], bool]] = {
    # (due ms, job id): list-due takes scores within +-1e18
    "scheduled": _pair(lambda d: _is_int(d, -(10**18), 10**18), _job_id_or_empty),
    "ready": _stream_position,
    "running": _stream_position,
    "dead": _stream_position,
    # (partition, HSCAN cursor); the partition is checked against the queue by _list_retrying
    "retrying": _pair(lambda p: _is_int(p, 0, keys.MAX_PARTITIONS), _scan_cursor),
}


def decode(cursor: str, state: str) -> Any:
    """The position a cursor of ``state`` holds, checked: :class:`InvalidCursorError` for any
    cursor this inspector could not have handed out (the console answers 400, the CLI one
    line), so nothing malformed reaches a script or the merge."""
    invalid = InvalidCursorError(
        f"cursor {str(cursor)[:40]!r} is not one this inspector handed out: pass the cursor of "
        "the previous page unchanged, or none for the first page"
    )
    if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR:
        raise invalid
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        decoded = orjson.loads(raw)
    except (ValueError, TypeError):  # binascii.Error and orjson.JSONDecodeError are ValueErrors
        raise invalid from None
    if not (isinstance(decoded, list) and len(decoded) == 2 and isinstance(decoded[0], str)):
        raise invalid
    kind, position = decoded
    if kind != state:
        if kind in _POSITIONS:
            raise InvalidCursorError(f"that cursor pages {kind!r} jobs, not {state!r}")
        raise invalid
    if not _POSITIONS[state](position):
        raise invalid
    return position


def prev_entry_id(entry_id: str) -> str:
    """The stream id just before ``entry_id`` (pages read after an id, exclusive)."""
    ms, _, seq = entry_id.partition("-")
    if int(seq or 0) > 0:
        return f"{ms}-{int(seq) - 1}"
    return f"{int(ms) - 1}-18446744073709551615" if int(ms) > 0 else "0-0"
