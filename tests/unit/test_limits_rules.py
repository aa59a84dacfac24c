"""Limit definitions without Redis: rates parse, bad limits and concurrency limits are refused
with what to do.  Limits kept and enforced in Redis: tests/integration/test_limits.py."""

from __future__ import annotations

import pytest

from shardq import limits
from shardq.errors import InvalidLimitError


def test_rates_parse_and_bad_limits_are_refused_with_what_to_do() -> None:
    assert limits.parse_rate("100/s") == (100, 1.0)
    assert limits.parse_rate("10/min") == (10, 60.0)
    assert limits.parse_rate("5/2s") == (5, 2.0)
    assert limits.parse_rate(" 1000 / h ") == (1000, 3600.0)
    limit = limits.for_type("send", "100/s")
    assert limit.name == "type:send" and limit.interval_ms == 10.0 and limit.allowed_burst == 100
    assert limits.for_key("api.example.com", 5, 2.0, burst=1).describe() == "5/2s, burst 1"
    for bad in ("0x/s", "100", "100/fortnight", "/s", "-1/s", ""):
        with pytest.raises(InvalidLimitError, match="COUNT/PERIOD"):
            limits.parse_rate(bad)
    with pytest.raises(InvalidLimitError, match="pause the queue instead"):
        limits.for_type("send", 0)
    with pytest.raises(InvalidLimitError, match="whole number"):
        limits.for_type("send", -5)
    with pytest.raises(InvalidLimitError, match="period"):
        limits.for_type("send", 5, 0)
    with pytest.raises(InvalidLimitError, match="burst"):
        limits.for_type("send", 5, 1.0, burst=6)
    with pytest.raises(InvalidLimitError, match="limit key"):
        limits.for_key("has {braces}", 5)
    with pytest.raises(InvalidLimitError, match="job type"):
        limits.for_type("bad type", 5)
    with pytest.raises(InvalidLimitError, match="'type', a 'key' or a 'tenant'"):
        limits.Limit("group", "x", 5)  # type: ignore[arg-type]


def test_concurrency_limits_are_validated() -> None:
    assert limits.for_type("call", concurrency=10).describe() == "10 at once"
    assert limits.for_key("api", "5/s", concurrency=2).describe() == "5/s, 2 at once"
    with pytest.raises(InvalidLimitError, match="neither a rate nor a concurrency"):
        limits.Limit("type", "call")
    with pytest.raises(InvalidLimitError, match="concurrency must be"):
        limits.for_type("call", concurrency=0)
    with pytest.raises(InvalidLimitError, match="burst must be"):
        limits.for_type("call", burst=2, concurrency=1)
