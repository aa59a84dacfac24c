"""Moving a partition's slot to another Redis primary: the node half of rebalancing shards.

Dispatcher leases spread the *work* of draining partitions; where a partition's *data* lives is
the slot its hash tag maps to. When one primary carries more than its share (``shardq queue
stats`` shows the node rates, ``shardq rebalance nodes`` suggests a move), moving one
partition's slot to a cooler primary moves its load with it.

The move is the standard Redis Cluster sequence (IMPORTING on the target, MIGRATING on the
source, MIGRATE, SETSLOT NODE everywhere), with one rule of our own: every key of the slot goes
in **one** MIGRATE call. A partition's scripts touch several keys; while some had moved and
others had not, each call would get TRYAGAIN until the rest followed. With one call the keys are
all on the source or all on the target, so callers see at most one ASK redirect, which
redis-py follows. MIGRATE blocks both primaries while it serialises the keys: about 1.5-2.4 µs
per waiting job (docs/capacity.md §3.2), which the plan states before anything moves.

A move that stops half-way (timeout, lost connection) leaves the slot MIGRATING/IMPORTING;
running the same move again finishes it.

**Why the CLUSTER commands are not store calls.**  Every data command on shardq's keys is an op
of :mod:`shardq.store`, routed by its key's slot and driven through the facades' runner.  The
commands of a move are of another kind: ``CLUSTER SETSLOT``, ``GETKEYSINSLOT``,
``COUNTKEYSINSLOT``, ``NODES``, ``MYID`` and ``MIGRATE`` address one named node (the source,
the target, each primary in turn), not the node a key's slot maps to, and mid-move the slot map
is exactly what is changing; resending one after a fault would be wrong (a SETSLOT on the
wrong node) or pointless.  So they run here, on the node they name, once, and
:func:`_admin` turns their failures into typed errors (:class:`SlotMoveError`, or
RedisUnavailableError for a node that does not answer), one line in the CLI.  The few data
reads a plan needs (the partition's backlog counts) are store calls too, sent to the source
node itself (:func:`shardq.store.inspection.backlog_counts`): mid-move a key already on the target
answers ASK there, and is counted as moved.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from redis.cluster import PRIMARY, ClusterNode

from shardq.client import Client
from shardq.connection import as_text, is_cluster
from shardq.errors import ShardqError
from shardq.store import faults, functions, inspection, keys
from shardq.store.layout import Layout
from shardq.store.transport import SyncTransport

#: Estimated pause per waiting job while MIGRATE runs (upper end of docs/capacity.md §3.2).
PAUSE_SECONDS_PER_JOB = 2.4e-6


class SlotMoveError(ShardqError):
    """A partition's slot cannot be moved as asked (not a cluster, unknown node, Redis refused)."""


class SlotMovesUnavailableError(SlotMoveError):
    """This Redis does not let shardq's user move slots: the commands of a move are missing
    (renamed or removed) or refused by ACL, as on managed services.  Nothing was changed."""


#: What a slot move runs (:func:`move`), as lua/can-run-1.lua asks about it: the words of each
#: call, a key of the queue's where the real call names keys.
MOVE_COMMANDS = (
    "CLUSTER SETSLOT 0 STABLE",
    "CLUSTER COUNTKEYSINSLOT 0",
    "CLUSTER GETKEYSINSLOT 0 1",
    "MIGRATE 127.0.0.1 6379 {key} 0 1",
)
MANAGED_HINT = (
    "Managed services (ElastiCache, MemoryDB, Memorystore) move slots only through their own "
    "resharding (ElastiCache: modify-replication-group-shard-configuration or the console's "
    "'rebalance slots'; Memorystore: its shard scaling): move the slots the plan above lists "
    "that way (`shardq rebalance plan` prints it, `--json` for a script). shardq's "
    "processes follow the new slot map by themselves, nothing to restart"
)


def slot_moves_unavailable(client: Client, queue: str | None = None) -> str | None:
    """Why this Redis does not let this user move slots (each command of a move that the
    server lacks or its ACL refuses), or None when it does.  One read-only call, on the node
    of ``queue``'s meta (a user confined to some queues may name it), else of
    :data:`keys.PROBE_KEY`."""
    cluster = _cluster(client)
    route_key = keys.PROBE_KEY if queue is None else keys.queue_meta_key(queue)
    lines = [c.replace("{key}", route_key) for c in MOVE_COMMANDS]
    try:
        answers = SyncTransport(cluster).run(functions.can_run(route_key, lines))
    except Exception as exc:
        typed = faults.translate(exc, "asking which commands this user may run")
        if typed is exc:
            raise
        raise typed from exc
    why = {0: "refused by this user's ACL", -1: "not a command of this server"}
    missing = [
        f"{' '.join(line.split()[:2]) if line.startswith('CLUSTER') else line.split()[0]} "
        f"({why[a]})"
        for line, a in zip(lines, answers, strict=True)
        if a != 1
    ]
    return "; ".join(missing) or None


def require_slot_moves(client: Client, queue: str | None = None) -> None:
    """SlotMovesUnavailableError, before anything changed, when :func:`slot_moves_unavailable`
    finds a reason."""
    missing = slot_moves_unavailable(client, queue)
    if missing is not None:
        raise SlotMovesUnavailableError(
            f"this Redis does not let shardq move slots: {missing}. {MANAGED_HINT}"
        )


class SlotMidMoveError(SlotMoveError):
    """A slot holding a queue's partition is MIGRATING: a move stopped half-way (its driver
    was killed, MIGRATE timed out).  Moving ``partition`` of ``queue`` to ``target`` again
    finishes it (the balancer does so by itself)."""

    def __init__(self, message: str, queue: str, partition: int, slot: int, target: str) -> None:
        super().__init__(message)
        self.queue = queue
        self.partition = partition
        self.slot = slot
        self.target = target


@dataclass(frozen=True, slots=True)
class SlotMove:
    """What moving one partition's slot would do (asked, not done): from :func:`prepare_move`;
    :func:`move` does it."""

    queue: str
    partition: int
    slot: int
    source: str  # "host:port" of the primary serving the slot now
    target: str  # "host:port" of the primary it moves to
    keys_in_slot: int  # every key of the slot, this partition's and any others'
    other_keys: int  # keys of the slot that belong to something else (they move too)
    waiting_jobs: int  # due + ready + dead entries of the partition: what MIGRATE serialises
    in_progress: bool  # the slot is already MIGRATING to the target (an earlier move stopped)

    @property
    def estimated_pause_s(self) -> float:
        return self.waiting_jobs * PAUSE_SECONDS_PER_JOB

    @property
    def needed(self) -> bool:
        return self.source != self.target


@dataclass(frozen=True, slots=True)
class MoveResult:
    move: SlotMove
    keys_moved: int
    migrate_seconds: float  # wall time of the MIGRATE call(s): the pause both primaries saw


def _cluster(client: Client) -> Any:
    if not is_cluster(client.redis):
        raise SlotMoveError(
            "this Redis is a single node: there are no slots to move. Slot moves need a "
            "Redis Cluster URL"
        )
    return client.redis


def primary_addresses(client: Client) -> list[str]:
    """``host:port`` of every primary, as the cluster reports them now."""
    return sorted(_primaries(_cluster(client)))


def _primaries(cluster: Any) -> dict[str, Any]:
    try:
        cluster.nodes_manager.initialize()  # the slot map as the cluster sees it now
    except Exception as exc:
        if faults.is_transient(exc):
            raise faults.translate(exc, "reading the slot map") from exc
        raise
    found = {f"{n.host}:{n.port}": n for n in cluster.get_primaries()}
    # CLUSTER SLOTS, where redis-py learns its nodes, lists only primaries serving a slot: a
    # primary just added to the cluster is not there until a slot moves to it, yet it is the
    # first place a balanced plan puts slots.  Every primary's CLUSTER NODES line names it;
    # but one node's view can lag (a replica of a cluster just formed still shows as a master
    # without slots there), so the candidate itself must say it is a primary.
    if found:
        any_node = cluster.get_redis_connection(next(iter(found.values())))
        for addr, info in _admin(any_node, "CLUSTER NODES").items():
            flags = str(info.get("flags", ""))
            if addr in found or "master" not in flags or info.get("slots"):
                continue
            if any(bad in flags for bad in ("fail", "handshake", "noaddr")):
                continue
            if not info.get("connected", True) or not addr.rsplit(":", 1)[-1].isdigit():
                continue
            host, port = addr.rsplit(":", 1)
            node = ClusterNode(host, int(port), PRIMARY)  # type: ignore[no-untyped-call]
            try:
                role = cluster.get_redis_connection(node).info("replication").get("role")
            except Exception:
                # Not answering, or not to us (a node the cluster's users are not set on yet):
                # no place to move slots to.
                continue
            if role == "master":
                found[addr] = node
    return found


def _admin(conn: Any, *command: Any) -> Any:
    """One cluster admin command on the node ``conn`` talks to; its failure as a typed error
    (see the module docstring): a node that does not answer is RedisUnavailableError, a
    refusal (no permission, a bad slot state) SlotMoveError saying which command."""
    try:
        return conn.execute_command(*command)
    except Exception as exc:
        if faults.is_transient(exc):
            raise faults.translate(exc, str(command[0])) from exc
        if faults.is_no_permission(exc):
            raise SlotMoveError(
                f"this Redis user may not run {command[0]} ({exc}): slot moves need the "
                "shardq-admin user (docs/deploy.md)"
            ) from exc
        raise SlotMoveError(f"{command[0]} failed: {exc}") from exc


def _node_id(conn: Any) -> str:
    return as_text(_admin(conn, "CLUSTER MYID"))


def _resolve_target(cluster: Any, primaries: dict[str, Any], target: str) -> str:
    """A primary by ``host:port``, or by node id (a unique prefix of at least 6 characters)."""
    if target in primaries:
        return target
    if len(target) >= 6:
        matches = [
            addr
            for addr, node in primaries.items()
            if _node_id(cluster.get_redis_connection(node)).startswith(target)
        ]
        if len(matches) == 1:
            return matches[0]
    raise SlotMoveError(
        f"{target!r} is not a primary of this cluster: use host:port as CLUSTER NODES shows "
        f"it, one of {sorted(primaries)}"
    )


def _claims(conn: Any, slot: int) -> bool:
    """Whether the node serves ``slot`` by its own account (the "myself" line of CLUSTER NODES)."""
    nodes = _admin(conn, "CLUSTER NODES")  # parsed by redis-py: {addr: {...}}
    for info in nodes.values():
        if "myself" not in str(info.get("flags", "")):
            continue
        for span in info.get("slots", []):
            if int(span[0]) <= slot <= int(span[-1]):
                return True
    return False


def _source_of(cluster: Any, primaries: dict[str, Any], slot: int) -> str:
    """The primary serving ``slot``, asked of the primaries themselves.

    Not the client's slot map: that comes from whichever node answered CLUSTER SLOTS, and a
    replica learns of a finished move by gossip, up to a second or so later.
    """
    claimed = [
        addr
        for addr, node in primaries.items()
        if _claims(cluster.get_redis_connection(node), slot)
    ]
    if len(claimed) == 1:
        return claimed[0]
    node = cluster.nodes_manager.get_node_from_slot(slot)
    addr = f"{node.host}:{node.port}"
    if addr not in claimed:
        raise SlotMoveError(
            f"slot {slot} is claimed by {claimed or 'no primary'} (a failover or a move in "
            "progress?): check `redis-cli cluster nodes` and try again in a moment"
        )
    return addr


def _migrating_to(conn: Any, slot: int) -> str | None:
    """Node id the node is MIGRATING ``slot`` to, from its own CLUSTER NODES line, or None."""
    nodes = _admin(conn, "CLUSTER NODES")  # parsed by redis-py: {addr: {...}}
    for info in nodes.values():
        if "myself" not in str(info.get("flags", "")):
            continue
        for m in info.get("migrations", []):
            if int(m.get("slot", -1)) == slot and m.get("state") == "migrating":
                return str(m.get("node_id"))
    return None


def move_argument(layout: Layout, partition: int) -> int | None:
    """What ``shardq rebalance move-partition`` takes for the partition of fleet id
    ``partition``: its number in the active generation (None for a draining one's)."""
    generation, number = divmod(partition, keys.MAX_PARTITIONS)
    return number if generation == layout.generation else None


def prepare_move(client: Client, queue: str, partition: int, target: str) -> SlotMove:
    """Describe moving ``partition`` (a fleet id: :func:`keys.fleet_id`) of ``queue`` to the
    primary ``target``; changes nothing."""
    cluster = _cluster(client)
    layout = client.layout(queue)  # UnknownQueueError for a queue never created
    pk = {p.fleet_id: p for p in layout.every()}.get(partition)
    if pk is None:
        first, last = layout.active()[0].label, layout.active()[-1].label
        raise SlotMoveError(
            f"queue {queue!r} has partitions {first}-{last}; "
            f"{keys.label_of_fleet_id(partition)} is not one of them"
        )
    slot = keys.slot_of(pk.due)
    primaries = _primaries(cluster)
    target_addr = _resolve_target(cluster, primaries, target)
    source_addr = _source_of(cluster, primaries, slot)
    src = cluster.get_redis_connection(primaries[source_addr])
    count = int(_admin(src, "CLUSTER COUNTKEYSINSLOT", slot))
    names = [as_text(k) for k in _admin(src, "CLUSTER GETKEYSINSLOT", slot, count + 16)]
    ours = "{" + pk.tag + "}"
    other = sum(1 for name in names if not name.startswith(ours))
    # On the source itself (a plain client of it): mid-move, a key already on the target
    # answers ASK here, and only what is still to move is counted.
    counts = SyncTransport(src).run_many(inspection.backlog_counts(pk))
    waiting = sum(n for n in counts if not isinstance(n, BaseException))
    dst_id = _node_id(cluster.get_redis_connection(primaries[target_addr]))
    return SlotMove(
        queue=queue,
        partition=partition,
        slot=slot,
        source=source_addr,
        target=target_addr,
        keys_in_slot=len(names),
        other_keys=other,
        waiting_jobs=waiting,
        in_progress=_migrating_to(src, slot) == dst_id,
    )


def move(client: Client, step: SlotMove, migrate_timeout_ms: int = 60_000) -> MoveResult:
    """Carry out ``step``: the slot and all its keys end on ``step.target``.

    Safe under load: producers, dispatchers and workers keep running; a call that arrives while
    the keys are moving gets ASK (or, for a moment, TRYAGAIN) and redis-py follows or retries.
    Raises SlotMoveError when Redis refuses a step; running the same move again resumes it.
    """
    cluster = _cluster(client)
    if not step.needed:
        return MoveResult(step, 0, 0.0)
    require_slot_moves(client, step.queue)
    primaries = _primaries(cluster)
    for addr in (step.source, step.target):
        if addr not in primaries:
            raise SlotMoveError(f"{addr} is no longer a primary; plan the move again")
    if _source_of(cluster, primaries, step.slot) != step.source:
        raise SlotMoveError(
            f"slot {step.slot} is no longer served by {step.source}; plan the move again"
        )
    src = cluster.get_redis_connection(primaries[step.source])
    dst = cluster.get_redis_connection(primaries[step.target])
    src_id, dst_id = _node_id(src), _node_id(dst)
    host, port = step.target.rsplit(":", 1)
    # The source opens its own connection to the target: it must log in as we do.
    conn_kwargs = cluster.nodes_manager.connection_kwargs
    username, password = conn_kwargs.get("username"), conn_kwargs.get("password")
    auth: list[Any] = []
    if password:
        auth = ["AUTH2", username, password] if username else ["AUTH", password]
    moved = 0
    seconds = 0.0
    try:
        _admin(dst, "CLUSTER SETSLOT", step.slot, "IMPORTING", src_id)
        _admin(src, "CLUSTER SETSLOT", step.slot, "MIGRATING", dst_id)
        while True:
            # All the slot's keys in one call (see the module docstring); the loop only catches
            # a key created between the count and the MIGRATE, which the MIGRATING state makes
            # rare (a script whose keys are all missing is sent to the target).
            count = int(_admin(src, "CLUSTER COUNTKEYSINSLOT", step.slot))
            if count == 0:
                break
            names = _admin(src, "CLUSTER GETKEYSINSLOT", step.slot, count + 16)
            started = time.perf_counter()
            _admin(
                src, "MIGRATE", host, int(port), "", 0, migrate_timeout_ms, *auth, "KEYS", *names
            )
            seconds += time.perf_counter() - started
            moved += len(names)
        # The target first, so the slot is never owned by no one; then the source (which stops
        # redirecting with ASK and answers MOVED); then every other primary.
        others = [n for a, n in primaries.items() if a not in (step.source, step.target)]
        for conn in (dst, src, *(cluster.get_redis_connection(n) for n in others)):
            _admin(conn, "CLUSTER SETSLOT", step.slot, "NODE", dst_id)
    except Exception as exc:  # (_admin's typed errors too: this message says what to do)
        raise SlotMoveError(
            f"moving slot {step.slot} from {step.source} to {step.target} stopped: {exc}. "
            "The slot may be left MIGRATING/IMPORTING with its keys on either side; run the "
            "same move again to finish it"
        ) from exc
    finally:
        cluster.nodes_manager.initialize()
    return MoveResult(step, moved, seconds)


@dataclass(frozen=True, slots=True)
class NodeLoad:
    node: str
    partitions: list[int]
    rate_per_s: float
    share: float  # of the queue's rate; 1 / nodes when perfectly even


@dataclass(frozen=True, slots=True)
class Suggestion:
    partition: int
    source: str
    target: str
    rate_per_s: float
    busiest_before: float  # the busiest primary's rate now
    busiest_after: float  # the busiest of the two after the move


def node_loads(stats: dict[str, Any], primaries: list[str]) -> list[NodeLoad]:
    """Per primary: the queue's partitions on it and their rate, from ``admin.queue_stats``.

    Primaries holding none of the queue's partitions are listed too (as candidates)."""
    by_node: dict[str, list[dict[str, Any]]] = {addr: [] for addr in primaries}
    for row in stats["partitions"]:
        by_node.setdefault(row["node"], []).append(row)
    total = sum(float(r["rate_per_s"]) for r in stats["partitions"])
    loads = []
    for node, rows in sorted(by_node.items()):
        rate = sum(float(r["rate_per_s"]) for r in rows)
        loads.append(
            NodeLoad(
                node,
                sorted(int(r["partition"]) for r in rows),
                round(rate, 1),
                round(rate / total, 3) if total else 0.0,
            )
        )
    return loads


def suggest(stats: dict[str, Any], loads: list[NodeLoad]) -> Suggestion | None:
    """The one partition move that lowers the busiest primary's rate the most, or None.

    Only moves from the busiest primary to the least busy one are considered, and only if the
    target stays below the source's current rate (otherwise the hot spot just moves)."""
    if len(loads) < 2:
        return None
    hot = max(loads, key=lambda n: n.rate_per_s)
    cold = min(loads, key=lambda n: n.rate_per_s)
    if hot.rate_per_s <= 0 or hot.node == cold.node:
        return None
    rates = {int(r["partition"]): float(r["rate_per_s"]) for r in stats["partitions"]}
    best: Suggestion | None = None
    for p in hot.partitions:
        after = max(hot.rate_per_s - rates.get(p, 0.0), cold.rate_per_s + rates.get(p, 0.0))
        if after < hot.rate_per_s and (best is None or after < best.busiest_after):
            best = Suggestion(p, hot.node, cold.node, rates.get(p, 0.0), hot.rate_per_s, after)
    return best


# Placement: the input of shardq.admin.placement.place, measured -----------------------------

#: MEMORY USAGE calls per pipeline: one round trip per this many keys.
_MEMORY_BATCH = 1000


@dataclass(frozen=True, slots=True)
class SlotUsage:
    slot: int
    node: str  # the primary serving it, by its own account
    keys: int  # every key of the slot (this queue's partition and whatever shares the slot)
    bytes: int  # MEMORY USAGE summed over those keys: what a move of the slot carries
    partitions: tuple[tuple[str, int], ...]  # every queue's partitions with keys in the slot


def _sizes(conn: Any, names: list[str]) -> list[int]:
    """MEMORY USAGE of each key, store calls pipelined to the node ``conn`` talks to (batches
    of :data:`_MEMORY_BATCH`); a refusal as SlotMoveError, a node that does not answer as
    RedisUnavailableError."""
    out: list[int] = []
    for i in range(0, len(names), _MEMORY_BATCH):
        for r in SyncTransport(conn).run_many(
            [inspection.memory_usage(k) for k in names[i : i + _MEMORY_BATCH]]
        ):
            if isinstance(r, BaseException):
                if faults.is_transient(r):
                    raise faults.translate(r, "MEMORY USAGE") from r
                if faults.is_no_permission(r):
                    raise SlotMoveError(
                        f"this Redis user may not run MEMORY USAGE ({r}): planning slot moves "
                        "needs the shardq-admin user of this release (docs/deploy.md)"
                    ) from r
                raise SlotMoveError(f"MEMORY USAGE failed: {r}") from r
            out.append(r)
    return out


def _slot_map(
    cluster: Any, primaries: dict[str, Any], layout: Layout, wanted: dict[int, int]
) -> dict[int, str]:
    """The primary serving each wanted slot (slot -> the queue's partition in it), from each
    primary's own CLUSTER NODES line; SlotMoveError if one is mid-move (saying the command
    that finishes it) or claimed by none or by two."""
    owner: dict[int, list[str]] = {s: [] for s in wanted}
    for addr, node in sorted(primaries.items()):
        nodes = _admin(cluster.get_redis_connection(node), "CLUSTER NODES")
        for info in nodes.values():
            if "myself" not in str(info.get("flags", "")):
                continue
            for m in info.get("migrations", []):
                slot = int(m.get("slot", -1))
                if slot in wanted and m.get("state") == "migrating":
                    to = next(
                        (a for a, i in nodes.items() if i.get("node_id") == m.get("node_id")),
                        str(m.get("node_id")),
                    )
                    queue, number = layout.queue, move_argument(layout, wanted[slot])
                    how = (
                        f"`shardq rebalance move-partition --queue {queue} {number} --to {to} "
                        "--yes`"
                        if number is not None
                        else "`shardq balancer run` (a partition a resize is emptying)"
                    )
                    raise SlotMidMoveError(
                        f"slot {slot} (partition {keys.label_of_fleet_id(wanted[slot])}) is "
                        f"mid-move from {addr} to {to} (a move that stopped half-way): finish "
                        f"it with {how}, then plan again",
                        queue,
                        wanted[slot],
                        slot,
                        to,
                    )
            for span in info.get("slots", []):
                lo, hi = int(span[0]), int(span[-1])
                for s in wanted:
                    if lo <= s <= hi:
                        owner[s].append(addr)
    out: dict[int, str] = {}
    for s, claimed in owner.items():
        if len(claimed) != 1:
            raise SlotMoveError(
                f"slot {s} is claimed by {claimed or 'no primary'} (a failover or a move in "
                "progress?): check `redis-cli cluster nodes` and try again in a moment"
            )
        out[s] = claimed[0]
    return out


def slot_usage(client: Client, queue: str) -> tuple[list[str], dict[int, SlotUsage]]:
    """The primaries, and per partition of ``queue``: its slot's primary, keys and bytes.

    Costs one CLUSTER NODES per primary, a COUNTKEYSINSLOT and a GETKEYSINSLOT round trip per
    slot, and a MEMORY USAGE per key, pipelined per primary (it samples 5 elements of a big
    hash, sorted set or stream: an estimate, and cheap).  MEMORY USAGE is a store call (the
    key is on the node asked), the CLUSTER commands are not (see the module docstring)."""
    cluster = _cluster(client)
    layout = client.layout(queue)  # UnknownQueueError for a queue never created
    # By fleet id (keys.fleet_id): both generations while a resize runs.
    slot_of_partition = {pk.fleet_id: keys.slot_of(pk.due) for pk in layout.every()}
    primaries = _primaries(cluster)
    where = _slot_map(cluster, primaries, layout, {s: p for p, s in slot_of_partition.items()})
    usage: dict[int, SlotUsage] = {}
    for addr in sorted(primaries):
        mine = sorted(s for s, a in where.items() if a == addr)
        if not mine:
            continue
        conn = cluster.get_redis_connection(primaries[addr])
        names: list[list[str]] = []
        for s in mine:
            count = int(_admin(conn, "CLUSTER COUNTKEYSINSLOT", s))
            names.append([as_text(k) for k in _admin(conn, "CLUSTER GETKEYSINSLOT", s, count + 16)])
        flat = [k for group in names for k in group]
        sizes = _sizes(conn, flat)
        at = 0
        for s, group in zip(mine, names, strict=True):
            n = len(group)
            owned = {owner for k in flat[at : at + n] if (owner := keys.partition_of_key(k))}
            usage[s] = SlotUsage(
                slot=s,
                node=addr,
                keys=n,
                bytes=sum(sizes[at : at + n]),
                partitions=tuple(sorted(owned)),
            )
            at += n
    by_partition = {p: usage[s] for p, s in slot_of_partition.items()}
    return sorted(primaries), by_partition


def execute(
    client: Client, moves: list[tuple[str, int, str, str]], migrate_timeout_ms: int = 60_000
) -> Iterator[MoveResult]:
    """Carry out planned moves ``(queue, partition, source, target)`` one by one through
    :func:`move`, yielding each result; stops with SlotMoveError at the first that fails, or
    whose slot is no longer where the plan found it (the plan is stale: plan again)."""
    for queue, partition, source, target in moves:
        step = prepare_move(client, queue, partition, target)
        if step.source != source and not step.in_progress:
            raise SlotMoveError(
                f"partition {keys.label_of_fleet_id(partition)} of {queue} is on {step.source}, "
                f"not {source} as "
                "planned (something else moved it): plan again"
            )
        yield move(client, step, migrate_timeout_ms)
