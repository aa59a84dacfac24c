"""Rate-limit operations: reserve start times (limit-take), put jobs back until then (defer),
and the queue's limits hash (plain HSET/HGETALL/HDEL on one key; see shardq.limits)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from shardq.limits import RateLimit
from shardq.store import keys
from shardq.store.codes import check
from shardq.store.op import Op, op


class Starts(NamedTuple):
    """Start times a limit gave: 0 means now, else the Redis ms time a slot was reserved."""

    now_ms: int
    times: list[int]


def _parse_take(reply: Any) -> Starts:
    r = check(reply)
    return Starts(int(r[0]), [int(t) for t in r[1:]])


def take(queue: str, limit: RateLimit, n: int) -> Op[Starts]:
    """Reserve start times for ``n`` jobs under ``limit``."""
    return op(
        "limit-take",
        [keys.limit_state_key(queue, limit.name)],
        [repr(limit.interval_ms), limit.allowed_burst, n],
        _parse_take,
    )


def defer(pk: keys.PartitionKeys, items: Iterable[tuple[bytes, bytes, int]]) -> Op[int]:
    """Put fetched jobs (entry id, job id, due ms) back in the due set, attempts given back;
    the op returns how many were put back."""
    argv: list[Any] = [keys.WORKER_GROUP, pk.due_hint]
    for entry_id, raw_id, due_ms in items:
        argv += (entry_id, raw_id, due_ms)
    return op("defer", [pk.ready, pk.jobs, pk.due, pk.stats], argv, lambda r: int(check(r)[0]))


def parse_table(raw: dict[Any, Any]) -> list[RateLimit]:
    """The limits of an HGETALL of the limits hash, by name; a damaged field is skipped by
    workers (they log it) and shown by ``shardq limit list``."""
    out = []
    for name, value in sorted(raw.items()):
        text = name.decode() if isinstance(name, bytes) else str(name)
        out.append(RateLimit.from_stored(text, value))
    return out
