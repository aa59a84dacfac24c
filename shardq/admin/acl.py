"""Least-privilege Redis ACL users for each role, optionally confined to some queues.

Redis checks ACLs on every command a function runs and every key it touches, with the calling
user's permissions; there is no "only from inside a function" permission.  So each role gets:

- ``FCALL``/``FCALL_RO`` of shardq's functions, never ``EVAL``, ``SCRIPT LOAD`` or
  ``FUNCTION LOAD`` (which would let it run arbitrary Lua; the admin loads the library);
- exactly the commands its functions and its few plain commands use, each confined by an ACL
  selector to the key kinds it is used on (``HDEL`` on job and error hashes, not on leases;
  ``XGROUP CREATE``/``DELCONSUMER`` on ready streams, never ``XGROUP DESTROY``);
- with ``queues``, key and channel patterns of those queues only.

What a role can still do by hand is what its functions do: a worker can ``XACK`` a delivery
or ``HDEL`` a job envelope of its queues, because its ack function must.  docs/deploy.md lists
it per role.  ``deploy/redis/acl-users.acl`` is this module's output for every queue
(``shardq acl print``); the tests start Redis with it as it is (``--aclfile``), and check every
role's refusals and its work.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shardq.names import ROLES as ROLES
from shardq.store import keys

# Every role: health, topology detection, slot map, the Redis clock.
BASICS = ("+ping", "+info", "+command", "+cluster|slots", "+cluster|shards", "+time")
FUNCTIONS = ("+fcall", "+fcall_ro")
# Roles that write nothing: FCALL_RO only, which Redis refuses for any function not flagged
# no-writes (the transport sends FCALL_RO for those), and every key read-only.
READ_ONLY_ROLES = ("viewer",)


@dataclass(frozen=True)
class Grant:
    """Commands allowed on one kind of key (a selector), or with no key (``kinds=()``)."""

    kinds: tuple[str, ...]
    commands: tuple[str, ...]
    read_only: bool = False


# Key kinds, as shardq.store.keys names them (the one list of a queue's keys): partition keys
# {sq:<queue>:<p>.<s>}:<kind> (and :idem:<key>), queue keys {sq:<queue>}:<kind>, limits'
# state {sq:<queue>:limit:<name>}:<kind>; plus "registry", the queue registry sq:queues, and
# "balancer", the balancer's last round {sq:balancer}:status.
PARTITION_KINDS: tuple[str, ...] = (*keys.PARTITION_KINDS, *keys.PER_ITEM_KINDS)
QUEUE_KINDS = keys.QUEUE_KINDS
LIMIT_KINDS = keys.LIMIT_KINDS
BATCH_KINDS = keys.BATCH_KINDS
#: What the batch functions (lua/batch-*.lua) run on a batch's record and bitmap.
BATCH_COMMANDS = (
    "+hget", "+hmget", "+hset", "+hsetnx", "+hexists", "+hincrby", "+hgetall", "+setbit",
    "+get", "+exists", "+del", "+pexpire", "+pttl",
)  # fmt: skip
#: ... of which the relay's (batch-report, batch-fired, batch-fires, its sweep's reads) need
#: these: no DEL, and no reading a batch whole.
RELAY_BATCH_COMMANDS = tuple(
    c for c in BATCH_COMMANDS if c not in ("+del", "+hgetall", "+get", "+pttl")
)
#: Enqueueing a job (enqueue-8): the dispatcher enqueues workflow callbacks and chain steps.
ENQUEUE_GRANTS: tuple[Grant, ...] = (
    Grant(("jobs",), ("+hsetnx", "+hget")),
    # PEXPIRETIME: a debounce tells a key made before keys named their owner by its expiry
    Grant(("idem",), ("+get", "+set", "+pexpiretime")),
    Grant(("due",), ("+zadd", "+zrange", "+zscore", "+zcount")),
    Grant(("ready",), ("+xadd",)),
    Grant(("stats",), ("+hincrby", "+hset", "+hget")),
    Grant(("ctl",), ("+hget",), read_only=True),
    Grant(("lane",), ("+zadd",)),
    Grant(("vtime",), ("+hget", "+hset")),
    Grant(("moving",), ("+hexists", "+hget"), read_only=True),
)

MEMBERS = ("+zremrangebyscore", "+zrem", "+zadd", "+zrange", "+zscore", "+smembers", "+srem")

GRANTS: dict[str, tuple[Grant, ...]] = {
    "producer": (
        Grant(("meta",), ("+hget", "+hgetall"), read_only=True),
        Grant(("registry",), ("+smembers",), read_only=True),
        Grant(("jobs",), ("+hsetnx", "+hget", "+hdel")),
        Grant(("idem",), ("+get", "+set", "+pexpiretime")),
        # ZCOUNT: finding a compact waiting job by its id (lua/includes/compact.lua)
        Grant(("due",), ("+zadd", "+zrange", "+zscore", "+zrem", "+zcount")),
        Grant(("ready",), ("+xadd",)),
        Grant(("errors",), ("+hget", "+hdel")),
        Grant(("stats",), ("+hincrby", "+hset", "+hget")),
        # a job due at once goes to the lane when the partition has lanes on
        Grant(("ctl",), ("+hget",), read_only=True),
        Grant(("lane",), ("+zadd",)),
        Grant(("vtime",), ("+hget", "+hset")),
        # client.schedules: add/update, pause, resume, remove, list (schedule-put/read)
        Grant(("sched", "sched:state"), ("+hget", "+hset", "+hdel", "+hscan")),
        Grant(("sched:next",), ("+zadd", "+zrem", "+zrange", "+zscore")),
        # by id during a resize: a job being moved, a sealed partition (lua/includes/resize.lua)
        Grant(("moving",), ("+hexists", "+hget"), read_only=True),
        # client.cancel(running=True): the partition's running cancels, kept bounded
        # (lua/cancel-7.lua)
        Grant(("cancels",), ("+zadd", "+zremrangebyscore", "+zremrangebyrank")),
        # client.result: the job's kept result, read with its snapshot (lua/result-6.lua);
        # client.get: a running job's progress (lua/get-6.lua); GETRANGE: no more than a
        # worker writes, whatever a key holds
        Grant(("result", "progress"), ("+getrange",), read_only=True),
        # client.batches: the batch's record and bitmap (lua/batch-*.lua), the queue's
        # listing of batches, and a cancel's look for a child's end still in an outbox
        Grant(BATCH_KINDS, BATCH_COMMANDS),
        Grant(("batches",), ("+zadd", "+zrange", "+zrem")),
        # the unsettled batches (added at create), those a seal or cancel is ending
        Grant(("batches:live", "batches:firing"), ("+zadd", "+zrem")),
        Grant(("outbox",), ("+hexists",), read_only=True),
    ),
    "dispatcher": (
        Grant(("meta",), ("+hget", "+hgetall"), read_only=True),
        Grant(("owners",), ("+hgetall", "+hset", "+hdel")),
        Grant(("dispatchers", "drain"), MEMBERS),
        Grant(("lease",), ("+get", "+set", "+pexpire", "+pttl", "+del")),
        Grant(("fence",), ("+hincrby", "+hget", "+hset")),
        Grant(("due",), ("+zrange", "+zremrangebyrank", "+zcard", "+zcount")),
        Grant(
            ("ready",),
            ("+xadd", "+exists", "+xlen", "+xinfo|groups", "+xpending", "+xrange", "+xtrim"),
        ),
        Grant(("dead",), ("+exists", "+xlen", "+xrange", "+xdel")),
        # HMGET: the relay counts a child's end only once its job is gone (or dead)
        Grant(("jobs",), ("+hget", "+hmget", "+hdel")),
        Grant(("errors",), ("+hdel",)),
        # schedule-fire stores each tick's job (HSETNX, as enqueue) and advances the schedule
        Grant(("jobs",), ("+hsetnx",)),
        Grant(("sched", "sched:state"), ("+hget", "+hset")),
        Grant(("sched:next",), ("+zadd", "+zrem", "+zrange", "+zscore")),
        Grant(("stats",), ("+hincrby", "+hset", "+hgetall", "+hget", "+hmget")),
        # promote moves due jobs to the lane when the partition has lanes on; the sampler
        # counts it (partition-stats)
        Grant(("ctl",), ("+hmget",), read_only=True),
        Grant(("lane",), ("+zadd", "+zcard")),
        Grant(("vtime",), ("+hget", "+hset")),
        # the relay (shardq.dispatcher.relay): reads and clears the held partitions' outboxes,
        # reports to the batches, enqueues their callbacks and chain steps
        Grant(("outbox",), ("+hscan", "+hdel")),
        Grant(BATCH_KINDS, RELAY_BATCH_COMMANDS),
        # and sweeps the batches (the holder of partition 0): fires a producer left, settled
        # ids dropped, the open-batches gauge
        Grant(("batches:live", "batches:firing"), ("+zrange", "+zrem", "+zcard")),
        *ENQUEUE_GRANTS,
    ),
    "worker": (
        Grant(("meta",), ("+hget", "+hgetall"), read_only=True),
        Grant(("workers", "workers:drain"), MEMBERS),
        Grant(
            ("ready",),
            (
                "+xreadgroup",
                "+xack",
                "+xdel",
                "+xclaim",
                "+xpending",
                "+exists",
                "+xinfo|consumers",
                "+xgroup|create",
                "+xgroup|delconsumer",
            ),
        ),
        Grant(("jobs",), ("+hget", "+hset", "+hdel")),
        Grant(("errors",), ("+hset", "+hdel", "+hlen")),
        Grant(("dead",), ("+xadd",)),
        Grant(("due",), ("+zadd", "+zrange")),
        # a read that promotes first (lua/fetch-9.lua, lua/includes/promote.lua): the due jobs
        # move to the ready stream (a compact job's envelope is stored on the way, with HSET:
        # HSETNX stays the producers', see lua/includes/checks.lua producer_only)
        Grant(("due",), ("+zremrangebyrank",)),
        # ... and its reply counts the jobs due by the worker's next read of the partition
        Grant(("due",), ("+zcount",), read_only=True),
        Grant(("stats",), ("+hincrby", "+hset", "+hget", "+hmget")),
        # fetch moves lane jobs to the ready stream when the stream runs short (and, with lanes
        # turned off, while the lane still holds jobs)
        Grant(("ctl",), ("+hmget",), read_only=True),
        Grant(("lane",), ("+zpopmin", "+exists")),
        Grant(("vtime",), ("+hget", "+hset", "+hdel")),
        Grant(("ready",), ("+xadd",)),
        # rate limits: read the queue's limits, reserve starts (limit-take), defer (defer)
        Grant(("limits",), ("+hgetall",), read_only=True),
        Grant(("limit",), ("+get", "+set")),
        Grant(
            ("running",), ("+zremrangebyscore", "+zcard", "+zscore", "+zadd", "+zrem", "+pexpire")
        ),
        # the heartbeat looks for running cancels (lua/touch-3.lua): whether the partition
        # has any (ZRANGE: what a worker of an older release reads during a rolling upgrade),
        # then whether the jobs it holds still have their envelopes
        Grant(("cancels",), ("+exists", "+zrange"), read_only=True),
        Grant(("jobs",), ("+hexists",), read_only=True),
        # jobs that keep their result: stored with the ack (lua/complete-5.lua); job.progress
        # (lua/progress-2.lua)
        Grant(("result", "progress"), ("+set",)),
        # a workflow child's end, written with its ack or dead letter (lua/includes/outbox.lua;
        # HLEN: the relay is woken only when the outbox was empty)
        Grant(("outbox",), ("+hset", "+hlen")),
    ),
}
# The operator runs the tools (queue create, job, dlq, queue stats, rebalance): everything
# the three roles do, plus creating queues and reading and clearing dead letters.
GRANTS["operator"] = (
    *GRANTS["producer"],
    *GRANTS["dispatcher"],
    *GRANTS["worker"],
    Grant(("meta",), ("+hset",)),
    Grant(("registry",), ("+sadd", "+srem")),
    Grant(("dead",), ("+xrevrange", "+xrange", "+xlen", "+xdel")),
    Grant(("ready",), ("+xgroup|create", "+xrange", "+xlen")),
    Grant(("due",), ("+zrangebyscore", "+zcard")),
    Grant(("lane",), ("+zrange",), read_only=True),  # job list --state ready (list-ready)
    Grant(("drain",), ("+sadd",)),
    Grant(("dispatchers",), ("+zrangebyscore",), read_only=True),
    # the inspector: listing (HSCAN of failed jobs), deleting a queue
    Grant(("errors",), ("+hscan",), read_only=True),
    # the flags (pause, lanes), and moving them out of the stats hash of a queue created before
    # the control hash (control-init)
    Grant(("ctl",), ("+hset", "+hdel", "+hexists", "+hget")),
    Grant(("stats",), ("+hdel",)),
    Grant(("limits",), ("+hset", "+hdel")),  # shardq limit set / remove
    Grant(PARTITION_KINDS + QUEUE_KINDS + LIMIT_KINDS + BATCH_KINDS, ("+unlink",)),
    Grant(("balancer",), ("+hgetall",), read_only=True),  # shardq balancer status
    Grant(("resize",), ("+hgetall",), read_only=True),  # shardq queue info
)
# The admin also runs the balancer (shardq balancer run): its leader lease and fence go through
# the lease functions (lua/lease-*.lua: what they run on those keys), and it writes its last
# round for `balancer status`.
ADMIN_GRANTS: tuple[Grant, ...] = (
    Grant(
        ("balancer",),
        ("+get", "+set", "+pexpire", "+pttl", "+del", "+hget", "+hset", "+hincrby"),
    ),
    # It resizes queues (shardq queue resize: lua/resize-*.lua, shardq.plans.resize): the
    # driver's lease, its record, the meta; taking batches out of the old generation's
    # partitions and putting them into the new one's; the idempotency records, copied.
    Grant(("resize:lease",), ("+get", "+set", "+pexpire", "+pttl", "+del")),
    Grant(("resize:fence",), ("+hincrby", "+hget", "+hset")),
    Grant(("resize",), ("+hgetall", "+hset", "+hincrby")),
    Grant(("meta",), ("+hset", "+hget", "+hgetall")),
    Grant(("owners",), ("+hdel",)),
    Grant(("moving",), ("+hgetall", "+hset", "+hget", "+hlen", "+del")),
    Grant(("inbound",), ("+sismember", "+sadd")),
    Grant(("due",), ("+zrange", "+zrem", "+zadd", "+zcard")),
    Grant(("jobs",), ("+hget", "+hdel", "+hsetnx", "+hlen")),
    Grant(("errors",), ("+hget", "+hdel", "+hset")),
    Grant(("lane",), ("+zrange", "+zrem", "+zcard")),
    Grant(("dead",), ("+xrange", "+xdel", "+xadd", "+xlen")),
    Grant(("sched", "sched:state"), ("+hkeys", "+hget", "+hdel", "+hsetnx", "+hset", "+hlen")),
    Grant(("sched:next",), ("+zscore", "+zrem", "+zadd")),
    Grant(("ctl",), ("+hincrby",)),
    Grant(("stats",), ("+hincrby",)),
    Grant(("ready",), ("+exists", "+xinfo|groups", "+xrange")),
    Grant(("outbox",), ("+hlen",)),  # resize-left: an outbox not yet relayed is not empty
    Grant(("idem", "result"), ("+get", "+pttl", "+set")),
)
# The viewer runs a read-only console (`shardq web` without --allow-actions): exactly what its
# pages read, through the no-writes functions (partition-stats, owner-info, inflight, list-due,
# list-ready, list-running, list-dead, list-retrying, get, schedule-read) and a few plain reads
# (the queue registry and meta, the fleet registries, idempotency keys for the search box).
# Nothing it holds writes: an action is refused by Redis as well as by the console.
GRANTS["viewer"] = (
    Grant(("meta",), ("+hget", "+hgetall"), read_only=True),
    Grant(("registry",), ("+smembers",), read_only=True),
    Grant(("dispatchers", "workers"), ("+zrange",), read_only=True),
    Grant(("drain", "workers:drain"), ("+smembers",), read_only=True),
    Grant(("idem",), ("+get",), read_only=True),
    Grant(("result", "progress"), ("+getrange",), read_only=True),
    Grant(("due",), ("+zcard", "+zcount", "+zrange", "+zscore"), read_only=True),
    Grant(
        ("ready",),
        ("+exists", "+xlen", "+xrange", "+xpending", "+xinfo|groups", "+xinfo|consumers"),
        read_only=True,
    ),
    Grant(("dead",), ("+exists", "+xlen", "+xrange"), read_only=True),
    Grant(("jobs",), ("+hget",), read_only=True),
    Grant(("errors",), ("+hget", "+hscan"), read_only=True),
    Grant(("stats",), ("+hgetall", "+hmget"), read_only=True),
    Grant(("ctl",), ("+hmget",), read_only=True),  # the flags partition-stats shows
    Grant(("lane",), ("+zcard", "+zrange"), read_only=True),
    Grant(("lease",), ("+get", "+pttl"), read_only=True),
    Grant(("fence",), ("+hget",), read_only=True),
    Grant(("sched", "sched:state"), ("+hget", "+hscan"), read_only=True),
    Grant(("sched:next",), ("+zrange", "+zscore"), read_only=True),
    # get during a resize (lua/includes/resize.lua): a job being moved, a sealed partition
    Grant(("moving",), ("+hget",), read_only=True),
    Grant(("ctl",), ("+hget",), read_only=True),
    Grant(("resize",), ("+hgetall",), read_only=True),  # the resize's progress (queue info)
    # the batches' pages and `shardq batch get|list` (and batch-fires, what an end calls for)
    Grant(BATCH_KINDS, ("+hgetall", "+hget", "+hmget", "+pttl", "+get"), read_only=True),
    Grant(("batches",), ("+zrange",), read_only=True),
)
# The admin loads the functions library and moves slots between primaries (MIGRATE moves every
# key of a slot, so its keys are all keys; MEMORY USAGE sizes them for the placement planner).
ADMIN_EXTRA = (
    "+function|load",
    "+function|list",
    "+asking",
    "+cluster|countkeysinslot",
    "+cluster|getkeysinslot",
    "+cluster|myid",
    "+cluster|nodes",
    "+cluster|setslot",
    "+memory|usage",
    "+migrate",
    "+restore",
    "+restore-asking",
    "+select",
    # WAIT: a resize drops a batch from its old partition once a replica has it in the new one
    "+wait",
)
PLAIN_EXTRA: dict[str, tuple[str, ...]] = {
    # WAIT: a durable enqueue waits for its replicas (ProducerSettings.durable_replicas)
    # ssubscribe: client.result waits on the job's result channel
    # CLIENT SETNAME: the TypeScript producer's ioredis names its cluster connections (and
    # ignores a refusal, which would fill ACL LOG)
    "producer": ("+spublish", "+wait", "+ssubscribe", "+sunsubscribe", "+client|setname"),
    # WAIT: the relay deletes an outbox entry once a replica has its batch's count
    "dispatcher": ("+spublish", "+ssubscribe", "+sunsubscribe", "+wait"),
    "worker": ("+spublish", "+ssubscribe", "+sunsubscribe"),
    # SCAN: deleting a queue finds its idempotency keys and limit state by SCAN MATCH
    "operator": ("+spublish", "+ssubscribe", "+sunsubscribe", "+function|list", "+scan"),
    "viewer": (),
}


def key_patterns(kind: str, queues: Sequence[str]) -> list[str]:
    """ACL key patterns of one key kind, for the queues (``["*"]``: every queue)."""
    if kind == "registry":
        return [keys.QUEUES_KEY]
    if kind == "balancer":
        return keys.BALANCER.all()
    out = []
    for q in queues:
        if kind in PARTITION_KINDS:
            out.append(keys.partition_pattern(q, kind))
        elif kind in QUEUE_KINDS:
            out.append(keys.queue_pattern(q, kind))
        elif kind in LIMIT_KINDS:
            out.append(keys.limit_pattern(q, kind))
        elif kind in BATCH_KINDS:
            out.append(keys.batch_pattern(q, kind))
        else:
            raise ValueError(f"unknown key kind {kind!r}")
    return out


def _all_keys(queues: Sequence[str]) -> list[str]:
    """Every key a function of these queues is called with (its declared KEYS)."""
    return [p for q in queues for p in keys.key_patterns(q)]


def rules(role: str, queues: Iterable[str] = ("*",)) -> str:
    """The ACL rules (after ``user <name>``) of a role, confined to ``queues``."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    qs = list(queues) or ["*"]
    channels = " ".join("&" + keys.channel_pattern(q) for q in qs)
    head = ["off", "resetpass", "resetkeys", "resetchannels", channels, "-@all", *BASICS]
    if role == "admin":
        # Slot moves: MIGRATE takes every key of a slot, whatever application wrote it.
        grants = (*GRANTS["operator"], *ADMIN_GRANTS)
        head += ["~*", *FUNCTIONS, *ADMIN_EXTRA, *PLAIN_EXTRA["operator"]]
    else:
        grants = GRANTS[role]
        head += PLAIN_EXTRA[role]
    # FCALL is checked against the keys it declares: the queue's keys, one selector.
    if role in READ_ONLY_ROLES:
        calls = " ".join([*(f"%R~{p}" for p in _all_keys(qs)), "+fcall_ro"])
    else:
        calls = " ".join([*(f"~{p}" for p in _all_keys(qs)), *FUNCTIONS])
    parts = [" ".join(head), f"({calls})"]
    if role == "admin":
        return " ".join(parts[:1] + [_grant(g, qs) for g in _merge(grants)])
    return " ".join(parts + [_grant(g, qs) for g in _merge(grants)])


def _merge(grants: Sequence[Grant]) -> list[Grant]:
    """One selector per key kind set and access, commands merged (operator = union)."""
    merged: dict[tuple[tuple[str, ...], bool], list[str]] = {}
    for g in grants:
        commands = merged.setdefault((g.kinds, g.read_only), [])
        # TYPE: every function checks the types of the keys it writes before writing.
        commands.extend(c for c in (*g.commands, "+type") if c not in commands)
    return [Grant(kinds, tuple(cmds), ro) for (kinds, ro), cmds in merged.items()]


def _grant(g: Grant, queues: Sequence[str]) -> str:
    prefix = "%R~" if g.read_only else "~"
    keys = [f"{prefix}{p}" for kind in g.kinds for p in key_patterns(kind, queues)]
    return "(" + " ".join([*keys, *g.commands]) + ")"


def acl_file(queues: Iterable[str] = ("*",)) -> str:
    """Every role as an ACL file: users off and without a password, safe to load as is.

    Only ``user`` lines: Redis 7.0 refuses an ACL file with any other line, ``#`` comments
    included (``--aclfile`` aborts start-up, ``ACL LOAD`` refuses the whole file), so what the
    file is and how to turn its users on is written in docs/deploy.md instead."""
    qs = list(queues)
    return "".join(f"user shardq-{role} {rules(role, qs)}\n" for role in ROLES)


def markdown_table() -> str:
    """The roles as the table in docs/deploy.md (the tests check the two agree)."""
    rows = ["| role | key kind | commands |", "|---|---|---|"]
    for role in ROLES[:-1]:
        for g in _merge(GRANTS[role]):
            kinds = ", ".join(g.kinds) + (" (read only)" if g.read_only else "")
            commands = " ".join(
                c.lstrip("+").upper().replace("|", " ") for c in g.commands if c != "+type"
            )
            rows.append(f"| {role} | {kinds} | `{commands}` |")
        if role in READ_ONLY_ROLES:
            rows.append(f"| {role} | (functions) | `FCALL_RO` only: the no-writes functions |")
            continue
        plain = " ".join(c.lstrip("+").upper().replace("|", " ") for c in PLAIN_EXTRA[role])
        rows.append(f"| {role} | (no key; channels `{{sq:*`) | `{plain}` |")
    admin = ", ".join(c.lstrip("+").upper().replace("|", " ") for c in ADMIN_EXTRA)
    rows.append(f"| admin | every key (`~*`) | the operator's, plus `{admin}` |")
    for g in ADMIN_GRANTS:
        commands = " ".join(c.lstrip("+").upper() for c in g.commands)
        rows.append(f"| admin | {', '.join(g.kinds)} | `{commands}` |")
    return "\n".join(rows)
