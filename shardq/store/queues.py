"""Plain commands on a queue's own keys: its meta, the queue registry, its limits table, the
consumer groups, idempotency-key lookups, member registries, and deletion.

The scripted operations live beside this one (producer, delivery, fleet, inspection, limits,
schedules); these are the few reads and writes that need no script, as
:class:`~shardq.store.op.Command` values, so they travel the same transport and the same retry
layer as every script call.  Replies are raw (RESP2, no redis-py response callbacks): a hash is
a flat ``[field, value, ...]`` list, a set a list, scores are text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redis.exceptions import ResponseError

from shardq.connection import as_text
from shardq.limits import Limit
from shardq.store import keys
from shardq.store import limits as store_limits
from shardq.store.meta import QueueMeta, parse_meta
from shardq.store.op import Command, cmd


def as_dict(reply: Any) -> dict[Any, Any]:
    """A hash reply (a flat field/value list, or a dict) as a dict."""
    if isinstance(reply, dict):
        return reply
    items = list(reply or [])
    return dict(zip(items[0::2], items[1::2], strict=True))


def pairs(reply: Any) -> list[tuple[Any, Any]]:
    """A WITHSCORES reply (flat member/score list, or pairs) as (member, score) pairs."""
    items = list(reply or [])
    if items and isinstance(items[0], list | tuple):
        return [(m, s) for m, s in items]
    return list(zip(items[0::2], items[1::2], strict=True))


# the queue's meta ------------------------------------------------------------------------------


def read_meta(queue: str) -> Command[QueueMeta]:
    """The queue's settings; UnknownQueueError (raised by the parser) when never created."""
    return cmd("HGETALL", keys.queue_meta_key(queue), parse=lambda r: parse_meta(queue, as_dict(r)))


def meta_field(queue: str, field: str) -> Command[str | None]:
    return cmd(
        "HGET",
        keys.queue_meta_key(queue),
        field,
        parse=lambda r: None if r is None else as_text(r),
    )


def set_meta_field(queue: str, field: str, value: str | int) -> Command[int]:
    return cmd("HSET", keys.queue_meta_key(queue), field, value, parse=int)


# the registry of queues (its own slot) ---------------------------------------------------------


def register(queue: str) -> Command[int]:
    return cmd("SADD", keys.QUEUES_KEY, queue, parse=int)


def unregister(queue: str) -> Command[int]:
    return cmd("SREM", keys.QUEUES_KEY, queue, parse=int)


def registered() -> Command[list[str]]:
    return cmd("SMEMBERS", keys.QUEUES_KEY, parse=lambda r: sorted(as_text(q) for q in r))


# consumer groups -------------------------------------------------------------------------------


def _group_made(reply: Any) -> bool:
    return True


def group_create(pk: keys.PartitionKeys) -> Command[bool]:
    """XGROUP CREATE of the partition's ready stream (MKSTREAM, from the start).  Its BUSYGROUP
    refusal (the group is there) comes back as the call's exception: :func:`groups_made`."""
    return cmd(
        "XGROUP", "CREATE", pk.ready, keys.WORKER_GROUP, "0", "MKSTREAM",
        route=pk.ready, parse=_group_made,
    )  # fmt: skip


def groups_made(results: Iterable[Any]) -> None:
    """Raise the first failure of :func:`group_create` calls other than BUSYGROUP (made before:
    re-running create_queue finishes an interrupted creation)."""
    for r in results:
        if isinstance(r, ResponseError) and "BUSYGROUP" in str(r):
            continue
        if isinstance(r, BaseException):
            raise r


# limits ----------------------------------------------------------------------------------------


def limits_table(queue: str) -> Command[list[Limit]]:
    """The queue's limits by name; InvalidLimitError naming a damaged field."""
    return cmd(
        "HGETALL", keys.limits_key(queue), parse=lambda r: store_limits.parse_table(as_dict(r))
    )


def limits_fields(queue: str) -> Command[dict[str, Any]]:
    """The queue's limits hash as stored (name -> raw JSON), for a reader that skips a damaged
    entry rather than failing on it (the worker's limiter)."""
    return cmd(
        "HGETALL",
        keys.limits_key(queue),
        parse=lambda r: {as_text(k): v for k, v in as_dict(r).items()},
    )


def set_limit(queue: str, limit: Limit) -> Command[int]:
    return cmd("HSET", keys.limits_key(queue), limit.name, limit.to_json(), parse=int)


def remove_limit(queue: str, name: str) -> Command[bool]:
    return cmd("HDEL", keys.limits_key(queue), name, parse=bool)


# idempotency keys ------------------------------------------------------------------------------


def idempotent_job(pk: keys.PartitionKeys, idempotency_key: str) -> Command[str | None]:
    """The job id an idempotency key maps to while it is retained, else None.  (A debounce's
    key holds ``<job id> d:<type>@<tenant>``, lua/enqueue-8.lua; ids have no spaces.)"""
    return cmd(
        "GET",
        pk.idem(idempotency_key),
        parse=lambda r: None if r is None else as_text(r).split(" ", 1)[0],
    )


# deletion ----------------------------------------------------------------------------------------


def unlink(names: list[str]) -> Command[int]:
    """UNLINK of keys of one slot, in one call (atomic: all go at once); how many existed.
    Safe to repeat: a resent deletion deletes nothing more (its count is then too low)."""
    return cmd("UNLINK", *names, parse=int)


def _scan_reply(reply: Any) -> tuple[str, list[str]]:
    cursor, found = reply  # [cursor, [key, ...]]
    return as_text(cursor), [as_text(k) for k in found]


def scan(route: str, cursor: str, match: str, count: int) -> Command[tuple[str, list[str]]]:
    """One SCAN step on the node serving ``route`` (a :func:`keys.slot_route` key): the next
    cursor ("0": done) and the keys found matching ``match``.  A read; COUNT bounds each step's
    work on the node."""
    return cmd("SCAN", cursor, "MATCH", match, "COUNT", count, route=route, parse=_scan_reply)
