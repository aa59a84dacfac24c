"""Dispatcher operations: membership, leases with fencing, promotion and trimming."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from shardq.connection import as_text
from shardq.errors import FencedError
from shardq.store import keys, numbers
from shardq.store.codes import Code, check, error_for, is_code
from shardq.store.numbers import Checked
from shardq.store.op import Command, Op, cmd, op

# Owners one lease-acquire may displace (lua/lease-acquire-2.lua's Max ARGV).  More dead or
# paused dispatchers than this at once are displaced over the following rounds.
MAX_DISPLACE = 1024


class Members(NamedTuple):
    """The live members of a fleet (heartbeat not expired) and those asked to drain."""

    now_ms: int
    live: list[str]
    draining: list[str]


def _parse_members(reply: Any) -> Members:
    r = check(reply)
    return Members(
        numbers.integer(r[0], 0, what="now ms"),
        [as_text(m) for m in r[1]],
        [as_text(m) for m in r[2]],
    )


def members(
    members_key: str, drain_key: str, member: str, timeout_ms: int, leaving: bool = False
) -> Op[Members]:
    """Heartbeat ``member`` (or remove it when ``leaving``) and read the live membership."""
    return op(
        "members",
        [members_key, drain_key],
        [member, timeout_ms, "1" if leaving else "0"],
        _parse_members,
    )


class Grant(NamedTuple):
    """A lease-acquire answer: ``won`` with the fencing ``token``; ``new`` when this call
    granted it (not an extension of ours); ``takeover`` when the previous owner did not release
    it (expired or displaced); else ``owner`` holds it."""

    won: bool
    token: str
    new: bool
    takeover: bool
    owner: str | None


def _parse_grant(reply: Any) -> Grant:
    r = check(reply)
    if r[0] == 1:
        return Grant(True, as_text(r[1]), r[2] == 1, len(r) > 3 and r[3] == 1, None)
    return Grant(False, as_text(r[1]), False, False, as_text(r[2]))


def lease_acquire(
    pk: keys.LeaseKeys, owner: str, ttl_ms: int, displace: Iterable[str] = ()
) -> Op[Grant]:
    """Take or extend a partition's lease; ``displace`` names owners whose unexpired lease may
    be taken over (their membership expired, or they are this process's predecessor).  At most
    :data:`MAX_DISPLACE` are named; the rest wait
    for a later round."""
    names = list(displace)[:MAX_DISPLACE]
    return op("lease-acquire", [pk.lease, pk.fence], [owner, ttl_ms, *names], _parse_grant)


def _parse_renew(reply: Any) -> bool:
    """True when renewed, False when the token is stale (fenced)."""
    if is_code(reply, Code.FENCED):
        return False
    check(reply)
    return True


def lease_renew(pk: keys.LeaseKeys, token: str, ttl_ms: int) -> Op[bool]:
    """Extend a lease while ``token`` is current; the op returns False when fenced."""
    return op("lease-renew", [pk.lease], [token, ttl_ms], _parse_renew)


def lease_release(pk: keys.LeaseKeys, token: str) -> Op[bool]:
    """Give a lease back while it is still ours; True when released."""
    return op("lease-release", [pk.lease, pk.fence], [token], lambda r: check(r)[0] == 1)


def lease_revoke(pk: keys.LeaseKeys, owner: str) -> Op[bool]:
    """An operator takes a partition from ``owner`` (fenced from its next write)."""
    return op("lease-revoke", [pk.lease, pk.fence], [owner], lambda r: check(r)[0] == 1)


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """Who holds a partition's lease and when its next job is due, on the Redis clock."""

    now_ms: int
    owner: str | None
    token: int | None
    ttl_ms: int | None
    granted_ms: int | None
    next_due_ms: int | None
    malformed: dict[str, str] = field(default_factory=dict)
    """Fields that were not numbers in range (name -> raw value), read as None."""


def _parse_lease_info(reply: Any) -> LeaseInfo:
    r = list(check(reply)) + [None] * 5  # (a script that met a bad value may reply short)
    c = Checked()
    lease = as_text(r[1]) if r[1] is not None else ""
    owner: str | None = None
    token: int | None = None
    if lease:
        token_text, _, owner = lease.partition(":")
        token = c.integer("token", token_text, None, 0)
    ttl = c.integer("ttl_ms", r[2], None, -2) if lease else None
    return LeaseInfo(
        now_ms=c.integer("now_ms", r[0], 0, 0),
        owner=owner,
        token=token,
        # PTTL: -1 no expiry, -2 no key
        ttl_ms=ttl if ttl is not None and ttl >= 0 else None,
        granted_ms=c.optional_time_ms("granted_ms", r[3]),
        next_due_ms=c.optional_time_ms("next_due_ms", r[4]),
        malformed=c.bad,
    )


def lease_info(pk: keys.PartitionKeys) -> Op[LeaseInfo]:
    return op("owner-info", [pk.lease, pk.fence, pk.due], [], _parse_lease_info)


class Promoted(NamedTuple):
    """Jobs moved due -> ready, the earliest remaining due time (None: none left) and the Redis
    clock, so the dispatcher can sleep exactly until the next one."""

    moved: int
    next_due_ms: int | None
    now_ms: int
    lanes: bool = False
    """The partition has lanes on: only the dispatcher promotes it (workers' reads do not)."""
    oldest_moved_ms: int | None = None
    """The due time of the first job moved (how late the promote came), None when none."""


def _parse_promote(reply: Any) -> Promoted:
    r = check(reply)  # raises FencedError for a stale token
    # A next due time that is not one (a score of +inf, written by hand) reads as none: the
    # dispatcher then sleeps its longest sleep and asks again.
    checked = Checked()
    next_due = checked.optional_time_ms("next_due_ms", r[1])
    oldest = checked.optional_time_ms("oldest_moved_ms", r[4]) if len(r) > 4 else None
    return Promoted(
        numbers.integer(r[0], 0),
        next_due,
        numbers.integer(r[2], 0),
        len(r) > 3 and r[3] == 1,
        oldest,
    )


def promote(pk: keys.PartitionKeys, token: str, batch: int, lease_ms: int) -> Op[Promoted]:
    """Move at most ``batch`` due jobs to the ready stream, fenced by ``token``; also extends
    the lease by ``lease_ms``."""
    return op(
        "promote",
        [pk.due, pk.ready, pk.lease, pk.stats, pk.jobs, pk.lane, pk.vtime, pk.ctl],
        [token, batch, pk.ready_hint, lease_ms],
        _parse_promote,
    )


class Trimmed(NamedTuple):
    ready_trimmed: int
    dead_dropped: int
    #: The ready stream still holds a job owed a run (pending or undelivered).
    owed: bool = False


def _parse_trim(reply: Any) -> Trimmed:
    r = check(reply)
    return Trimmed(numbers.integer(r[0], 0), numbers.integer(r[1], 0), len(r) > 2 and r[2] == 1)


def trim(
    pk: keys.PartitionKeys, token: str, ack_retention_ms: int, dead_cap: int, limit: int
) -> Op[Trimmed]:
    """Bound a partition's streams without dropping anything still owed a run (fenced)."""
    return op(
        "trim",
        [pk.ready, pk.dead, pk.jobs, pk.errors, pk.stats, pk.lease],
        [token, keys.WORKER_GROUP, ack_retention_ms, dead_cap, limit],
        _parse_trim,
    )


def fenced(token: str, lease: str = "") -> FencedError:
    """The error a stale token meets (for callers that learn it without a script)."""
    err = error_for(Code.FENCED, [token, lease])
    assert isinstance(err, FencedError)
    return err


# The advisory owners hash (partition -> '<owner> <token>'): plain commands, not scripts.


def parse_owners(
    raw: dict[Any, Any], partitions: int, skipped: list[str] | None = None
) -> dict[int, str]:
    """Partition -> owner from the owners hash; fields that are not a partition of this queue,
    or values that are not '<owner> <token>', are skipped (the hash is advisory) and, when
    ``skipped`` is given, their field names appended to it."""
    owners: dict[int, str] = {}
    for field_raw, value_raw in raw.items():
        field, value = as_text(field_raw), as_text(value_raw)
        owner, _, token = value.partition(" ")
        try:
            partition = numbers.integer(field_raw, 0, partitions - 1, what="partition")
        except numbers.BadNumber:
            partition = None
        if partition is None or not owner:
            if skipped is not None:
                skipped.append(field)
            continue
        try:
            numbers.integer(token, 0, what="token")
        except numbers.BadNumber:
            if skipped is not None:
                skipped.append(field)  # still an owner name: worth knowing who holds it
        owners[partition] = owner
    return owners


async def read_owners(
    client: Any, queue: str, partitions: int, skipped: list[str] | None = None
) -> dict[int, str]:
    raw = await client.hgetall(keys.owners_key(queue))
    return parse_owners(raw, partitions, skipped)


async def write_owners(client: Any, queue: str, owner: str, tokens: dict[int, str]) -> None:
    if tokens:
        mapping = {str(p): f"{owner} {t}" for p, t in tokens.items()}
        await client.hset(keys.owners_key(queue), mapping=mapping)


async def forget_owners(client: Any, queue: str, partitions: Iterable[int]) -> None:
    fields = [str(p) for p in partitions]
    if fields:
        await client.hdel(keys.owners_key(queue), *fields)


# The member registries (sorted sets by heartbeat expiry, drain sets) and the owners hash, as
# the inspector and the operator's tools read and steer them: plain commands, run by the
# facades' runner like every call (so they ride out a failover alike).


def _time_ms(reply: Any) -> int:
    seconds, micros = reply  # TIME: [seconds, microseconds]
    return numbers.integer(seconds, 0, what="seconds") * 1000 + numbers.integer(micros, 0) // 1000


def clock(route: str) -> Command[int]:
    """The Redis clock in ms (TIME) of the node serving ``route``: the clock the heartbeat
    scores of the registries on that node are written in."""
    return cmd("TIME", route=route, parse=_time_ms)


def _score_pairs(reply: Any) -> list[tuple[str, float]]:
    items = list(reply or [])
    if items and isinstance(items[0], list | tuple):
        return [(as_text(m), float(s)) for m, s in items]
    return [(as_text(m), float(s)) for m, s in zip(items[0::2], items[1::2], strict=True)]


def member_scores(members_key: str) -> Command[list[tuple[str, float]]]:
    """Every member of a registry with its heartbeat expiry (ms; ``inf`` when set by hand)."""
    return cmd("ZRANGE", members_key, 0, -1, "WITHSCORES", parse=_score_pairs)


#: The longest a heartbeat can keep a member live: lua/members-2.lua's MAX_TIMEOUT, beyond
#: which it removes a member (only a buggy writer stores a later expiry, or +inf).
MEMBER_MAX_TIMEOUT_MS = 3_600_000


def live_members(members_key: str, now_ms: int) -> Command[list[str]]:
    """The members of a registry whose heartbeat expires at or after ``now_ms``, and no later
    than a heartbeat can set (members-2 drops the others at its next call)."""
    return cmd(
        "ZRANGEBYSCORE",
        members_key,
        now_ms,
        now_ms + MEMBER_MAX_TIMEOUT_MS,
        parse=lambda r: [as_text(m) for m in r],
    )


def member_set(set_key: str) -> Command[set[str]]:
    """A drain set's members."""
    return cmd("SMEMBERS", set_key, parse=lambda r: {as_text(m) for m in r})


def request_drain(queue: str, dispatcher: str) -> Command[int]:
    """Ask a dispatcher to hand back every partition (its drain set entry)."""
    return cmd("SADD", keys.drain_key(queue), dispatcher, parse=int)


def cancel_drain(queue: str, dispatcher: str) -> Command[int]:
    return cmd("SREM", keys.drain_key(queue), dispatcher, parse=int)


def owners_forget(queue: str, partitions: Iterable[int]) -> Command[int]:
    """Drop partitions from the advisory owners hash (their leases were revoked)."""
    return cmd("HDEL", keys.owners_key(queue), *[str(p) for p in partitions], parse=int)


def balancer_report(fields: dict[str, str | int | float]) -> Command[int]:
    """The balancer leader's last round (advisory: ``shardq balancer status``)."""
    # Every round writes every field, so no field of an older round survives.
    flat = [x for k, v in fields.items() for x in (k, v)]
    return cmd("HSET", keys.BALANCER.status, *flat, parse=int)


def balancer_status() -> Command[dict[str, str]]:
    """The balancer leader's last report (empty when none was written)."""
    return cmd(
        "HGETALL",
        keys.BALANCER.status,
        parse=lambda r: {as_text(k): as_text(v) for k, v in r.items()},
    )
