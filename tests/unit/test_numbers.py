"""shardq.store.numbers: the fast path for stored digits (taken on every fetched delivery)
accepts exactly what the full check accepts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardq.store import numbers


def _outcome(parse, raw):  # type: ignore[no-untyped-def]
    try:
        return parse(raw)
    except numbers.BadNumber:
        return "bad"


@pytest.mark.parametrize(
    ("raw", "as_int", "as_time"),
    [
        (b"0", 0, 0),
        (b"007", 7, 7),
        (b"1796171884123", 1796171884123, 1796171884123),
        (b"9223372036854775807", 9223372036854775807, "bad"),  # past year 9999
        (b"9223372036854775808", "bad", "bad"),  # past int64
        (b"1" * 20, "bad", "bad"),
        (b"9" * 5000, "bad", "bad"),  # never reaches int(): no ValueError past 4,300 digits
        (b"0" * 25, "bad", 0),  # the full check's pattern takes 40 digits for a time
        (b"", "bad", "bad"),
        (b"-5", -5, "bad"),
        ("\u0663".encode(), "bad", "bad"),  # a non-ASCII digit
        (b"\xd9\xa3", "bad", "bad"),
        (b"12 ", "bad", "bad"),
    ],
)
def test_stored_digits(raw: bytes, as_int: object, as_time: object) -> None:
    assert _outcome(numbers.integer, raw) == as_int
    assert _outcome(numbers.time_ms, raw) == as_time


@given(st.one_of(st.binary(max_size=24), st.from_regex(rb"[-0]?[0-9]{0,25}", fullmatch=True)))
def test_bytes_parse_as_their_text_does(raw: bytes) -> None:
    """The same bytes as str take the full check (no fast path): both agree on every input."""
    text = raw.decode("latin-1")
    as_str = text.encode("latin-1").decode("utf-8", errors="surrogateescape")
    assert _outcome(numbers.integer, raw) == _outcome(numbers.integer, as_str)
    assert _outcome(numbers.time_ms, raw) == _outcome(numbers.time_ms, as_str)
