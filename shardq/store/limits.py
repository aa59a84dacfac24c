"""Limit operations (rate and concurrency): reserve start times (limit-take), take and give back
running slots (limit-acquire, limit-release), put jobs back in due (defer); and the queue's
limits hash (plain HSET/HGETALL/HDEL on one key; see shardq.limits)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from shardq.connection import as_text
from shardq.limits import Limit
from shardq.store import keys, numbers
from shardq.store.codes import check
from shardq.store.op import Op, op

MAX_DEFER = 1000  # jobs per defer call (lua/defer-4.lua's Max ARGV): callers split


class Starts(NamedTuple):
    """Start times a limit gave: 0 means now, else the Redis ms time a slot was reserved."""

    now_ms: int
    times: list[int]


def _parse_take(reply: Any) -> Starts:
    r = check(reply)
    now = numbers.integer(r[0], 0, what="now ms")
    return Starts(now, [numbers.time_ms(t, what="reserved start") for t in r[1:]])


def take(queue: str, limit: Limit, n: int) -> Op[Starts]:
    """Reserve start times for ``n`` jobs under ``limit``."""
    return op(
        "limit-take",
        [keys.limit_state_key(queue, limit.name)],
        [repr(limit.interval_ms), limit.allowed_burst, n],
        _parse_take,
    )


class Slots(NamedTuple):
    """What limit-acquire gave: per job, whether it holds a running slot; the Redis clock."""

    now_ms: int
    held: list[bool]


def _parse_acquire(reply: Any) -> Slots:
    r = check(reply)
    return Slots(numbers.integer(r[0], 0, what="now ms"), [g == 1 for g in r[1:]])


def acquire(queue: str, limit: Limit, job_ids: list[bytes], hold_ms: int) -> Op[Slots]:
    """Take or renew running slots of ``limit`` for jobs (see lua/limit-acquire-1.lua)."""
    assert limit.concurrency is not None
    return op(
        "limit-acquire",
        [keys.limit_holders_key(queue, limit.name)],
        [limit.concurrency, hold_ms, *job_ids],
        _parse_acquire,
    )


def release(queue: str, limit: Limit, job_ids: list[bytes]) -> Op[int]:
    """Give back running slots; the op returns how many were held."""
    return op(
        "limit-release",
        [keys.limit_holders_key(queue, limit.name)],
        list(job_ids),
        lambda r: int(check(r)[0]),
    )


def defer(pk: keys.PartitionKeys, items: Iterable[tuple[bytes, bytes, int]]) -> Op[int]:
    """Put fetched jobs (entry id, job id, due ms) back in the due set, attempts given back;
    the op returns how many were put back."""
    argv: list[Any] = [keys.WORKER_GROUP, pk.due_hint]
    for entry_id, raw_id, due_ms in items:
        argv += (entry_id, raw_id, due_ms)
    return op("defer", [pk.ready, pk.jobs, pk.due, pk.stats], argv, lambda r: int(check(r)[0]))


def parse_table(raw: dict[Any, Any]) -> list[Limit]:
    """The limits of an HGETALL of the limits hash, by name; InvalidLimitError naming a damaged
    field (workers skip it and log it instead: shardq.worker.limiter)."""
    out = []
    for name, value in sorted(raw.items()):
        text = as_text(name)
        out.append(Limit.from_stored(text, value))
    return out
