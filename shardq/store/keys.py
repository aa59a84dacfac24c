"""Every Redis key name shardq uses.

Nothing else in the package builds a key string: scripts receive all their keys from here in
KEYS, so a script never reaches a key that a reshard could move away from it.  Each partition's
keys share one hash tag, the rule of :mod:`shardq.store.partitioning` (slots, tags, routing,
fleet ids and labels), whose names this module re-exports: callers reach keys and the tags
they stand on through one import.  Where a queue's partitions live now (its generations
during a resize) is :mod:`shardq.store.layout`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from shardq import names
from shardq.store import partitioning

# The partitioning names every caller reaches through this module (see the docstring).
MAX_PARTITIONS = partitioning.MAX_PARTITIONS
SCHEDULE_JOB_PREFIX = partitioning.SCHEDULE_JOB_PREFIX
SEARCHED_PARTITIONS = partitioning.SEARCHED_PARTITIONS
SLOTS = partitioning.SLOTS
fleet_id = partitioning.fleet_id
generation_prefix = partitioning.generation_prefix
label_of_fleet_id = partitioning.label_of_fleet_id
partition_for = partitioning.partition_for
partition_label = partitioning.partition_label
partition_of_key = partitioning.partition_of_key
partition_tag = partitioning.partition_tag
schedule_job_id = partitioning.schedule_job_id
slot_of = partitioning.slot_of
slot_range = partitioning.slot_range
slot_route = partitioning.slot_route
tag_of_queue = partitioning.tag_of_queue

# Bump when the key layout changes; stored with the queue so old data is never misread.
LAYOUT_VERSION = 4
# From this layout on, a waiting job with a timed id is one due-set member '<id> <body>'
# (lua/includes/compact.lua).  Queues created with layout 2 keep every job in the plain layout
# until `shardq queue upgrade` sets 3 (every process must run a version that knows it).
COMPACT_LAYOUT = 3
# From this layout on, every partition keeps its operator flags (paused, lanes) in its control
# hash, which only the operator and admin roles may write (lua/includes/lanes.lua); a queue
# created before it keeps them in its stats hash, which every role writes, until `shardq queue
# upgrade` moves them (lua/control-init-2.lua).  Each partition's control hash says which
# applies to it (its field 'lanes' is there), so processes need not know the queue's layout.
CONTROL_LAYOUT = 4

# The name rules live in shardq.names; their old names here keep working.
QUEUE_NAME_RE = names.QUEUE_NAME_RE
SCHEDULE_NAME_RE = names.SCHEDULE_NAME_RE

# Cross-queue keys (each on its own slot; touched only outside scripts).
QUEUES_KEY = "sq:queues"
#: A key no command touches: it routes a call that reads nothing (lua/can-run-1.lua) when no
#: queue is named; within the key patterns of every role not confined to some queues.
PROBE_KEY = "{sq:probe}"
#: The placement autopilot's keys (``shardq balancer run``), ``{sq:balancer}:<kind>``: its
#: leader lease and fence (the dispatchers' lease scripts, lua/lease-*.lua) and the leader's
#: last report (a hash, advisory: ``shardq balancer status``).
BALANCER_KINDS: tuple[str, ...] = ("lease", "fence", "status")

# The consumer group every worker reads a ready stream through.
WORKER_GROUP = "workers"

# Every key of a queue, by kind: this module alone names them (the ACL patterns of
# shardq.admin.acl, queue deletion and the key tests derive theirs from these lists).
#: A partition's keys, ``{<partition tag>}:<kind>`` (:class:`PartitionKeys` has one attribute
#: each; :meth:`PartitionKeys.all` lists them).
PARTITION_KINDS: tuple[str, ...] = (
    *("jobs", "due", "ready", "dead", "lease", "fence", "stats", "errors"),
    # periodic schedules (shardq.schedules): definitions, next ticks, state
    *("sched", "sched:next", "sched:state"),
    # lanes (lua/includes/lanes.lua): due jobs by fair-queueing score, virtual time
    *("lane", "vtime"),
    # the operator's flags (paused, lanes; sealed by a resize)
    "ctl",
    # a resize (lua/includes/resize.lua): the batch taken out of a partition it empties, and
    # the batch ids a partition of the new generation has stored
    *("moving", "inbound"),
    # running jobs cancelled (lua/cancel-7.lua), for their workers' heartbeats (touch-3)
    "cancels",
    # workflow children's ends, written with their ack (or dead letter) and relayed to their
    # batch by the partition's dispatcher (shardq.dispatcher.relay): job id -> report
    "outbox",
)
#: A partition's idempotency keys, ``{<partition tag>}:idem:<idempotency key>``: one per key,
#: found by SCAN (:func:`queue_tags_pattern`).
IDEM_KIND = "idem"
#: A partition's kept results, ``{<partition tag>}:result:<job id>``: one per job that keeps
#: its result (``keep_result``), expiring after its retention (lua/complete-5.lua); the key's
#: name is also the sharded pub/sub channel a waiting producer hears the job end on.
RESULT_KIND = "result"
#: A running job's last reported progress, ``{<partition tag>}:progress:<job id>``
#: (``job.progress``: lua/progress-2.lua), expiring an hour after its last report; read only
#: while the job runs.
PROGRESS_KIND = "progress"
#: The kinds of a partition's keys kept one per item (found by SCAN, not listed by name).
PER_ITEM_KINDS: tuple[str, ...] = (IDEM_KIND, RESULT_KIND, PROGRESS_KIND)
#: A queue's own keys, ``{sq:<queue>}:<kind>`` (:func:`queue_keys`).
QUEUE_KINDS: tuple[str, ...] = (
    *("meta", "dispatchers", "drain", "workers", "workers:drain", "owners", "limits"),
    # the queue's batches and chains by creation time (shardq.plans.workflows: listings);
    # those not yet settled (the open-batches gauge); those a producer is ending (a seal or
    # cancel whose fires a producer that dies leaves to the relay's sweep)
    *("batches", "batches:live", "batches:firing"),
    # a resize (shardq.admin.resize): its record, and its driver's lease and fence
    *("resize", "resize:lease", "resize:fence"),
)
#: Each limit's state, on the limit's own slot: ``{sq:<queue>:limit:<name>}:<kind>``
#: (``limit``: the next free start; ``running``: the jobs holding running slots); found by
#: SCAN, since a limit's state outlives its definition until it expires.
LIMIT_KINDS: tuple[str, ...] = ("limit", "running")
#: Each batch's (or chain's) keys, on the batch's own slot: ``{sq:<queue>:batch:<id>}:<kind>``
#: (``batch``: the record, a hash of counts, state, callbacks, steps; ``seen``: a bitmap, one
#: bit per child index, set when the child's end was counted: a resent report changes
#: nothing).  Batches spread over the primaries by their ids, not with any partition, so a
#: resize never moves them (:class:`BatchKeys`).
BATCH_KINDS: tuple[str, ...] = ("batch", "seen")


def _queue_key(queue: str, kind: str) -> str:
    return "{sq:" + queue + "}:" + kind


def queue_keys(queue: str) -> list[str]:
    """Every key of the queue itself (not of its partitions or limits), meta first."""
    return [_queue_key(queue, kind) for kind in QUEUE_KINDS]


def queue_meta_key(queue: str) -> str:
    """Hash holding a queue's partition count, layout version and creation time."""
    return _queue_key(queue, "meta")


def limits_key(queue: str) -> str:
    """Hash of a queue's rate limits: limit name (``type:<job type>`` or ``key:<limit key>``)
    -> its JSON definition (shardq.limits)."""
    return _queue_key(queue, "limits")


def limit_state_key(queue: str, name: str) -> str:
    """String holding one rate limit's next free start time (GCRA), on a slot of its own: each
    limit's state lives where its name hashes, so the limits of a queue spread over the
    primaries and none sits with a partition's hot keys."""
    return _limit_key(queue, name, "limit")


def limit_holders_key(queue: str, name: str) -> str:
    """Sorted set of the jobs holding one concurrency limit's running slots, scored by hold
    expiry (ms); on the same slot as the limit's rate state."""
    return _limit_key(queue, name, "running")


def _limit_tag(queue: str, name: str) -> str:
    return f"sq:{queue}:limit:{name}"


def _limit_key(queue: str, name: str, kind: str) -> str:
    return "{" + _limit_tag(queue, name) + "}:" + kind


def batches_key(queue: str) -> str:
    """Sorted set of the queue's batch and chain ids, scored by creation time (ms): the
    listing of ``shardq batch list``; an id whose record expired is dropped when met."""
    return _queue_key(queue, "batches")


def batches_live_key(queue: str) -> str:
    """Sorted set of the batch and chain ids (nested ones too) not yet settled (ended, and
    what the end called for done), scored by creation time (ms): added before the record is
    created, removed by whoever settles it, and swept by the relay (shardq.dispatcher.relay);
    its size is the open-batches gauge."""
    return _queue_key(queue, "batches:live")


def batches_firing_key(queue: str) -> str:
    """Sorted set of the batch ids a producer is ending (seal, cancel), scored by when it
    began (ms): added before the call that may end the batch and removed once its fires were
    done, so the relay's sweep does the fires of a producer that died in between."""
    return _queue_key(queue, "batches:firing")


@dataclass(frozen=True, slots=True)
class BatchKeys:
    """The keys of one batch or chain, ``{sq:<queue>:batch:<id>}:<kind>`` (:data:`BATCH_KINDS`):
    one slot, so every batch script touches that slot only."""

    queue: str
    batch_id: str

    @property
    def tag(self) -> str:
        return f"sq:{self.queue}:batch:{self.batch_id}"

    @property
    def record(self) -> str:
        """Hash: kind, state, counts, policy, callbacks, a chain's steps (lua/batch-*.lua)."""
        return "{" + self.tag + "}:batch"

    @property
    def seen(self) -> str:
        """Bitmap: bit i set once child i's end was counted."""
        return "{" + self.tag + "}:seen"

    def all(self) -> list[str]:
        return [self.record, self.seen]


def batch_keys(queue: str, batch_id: str) -> BatchKeys:
    return BatchKeys(queue, batch_id)


def dispatchers_key(queue: str) -> str:
    """Sorted set of live dispatchers, scored by heartbeat expiry (ms, Redis clock)."""
    return _queue_key(queue, "dispatchers")


def workers_key(queue: str) -> str:
    """Sorted set of live workers, scored by heartbeat expiry (ms, Redis clock)."""
    return _queue_key(queue, "workers")


def workers_drain_key(queue: str) -> str:
    """Set of worker ids an operator asked to stop taking work (the workers' drain set)."""
    return _queue_key(queue, "workers:drain")


def drain_key(queue: str) -> str:
    """Set of dispatcher ids an operator asked to hand back every partition."""
    return _queue_key(queue, "drain")


def resize_key(queue: str) -> str:
    """Hash: the queue's resize, running or last finished (from, to, phase, counts)."""
    return _queue_key(queue, "resize")


def resize_lease_key(queue: str) -> str:
    """The resize driver's lease: one process drives a resize at a time."""
    return _queue_key(queue, "resize:lease")


def resize_fence_key(queue: str) -> str:
    return _queue_key(queue, "resize:fence")


def owners_key(queue: str) -> str:
    """Hash partition -> '<owner> <token>': who holds each lease.  Advisory (the lease itself
    decides); it lets a dispatcher find free partitions without reading every lease."""
    return _queue_key(queue, "owners")


class LeaseKeys(Protocol):
    """What the lease scripts (lua/lease-*.lua) touch: a lease and its fence.  A partition's
    keys have them, and so has the balancer's leader lease."""

    @property
    def lease(self) -> str: ...

    @property
    def fence(self) -> str: ...


@dataclass(frozen=True, slots=True)
class BalancerKeys:
    """The placement autopilot's keys (:data:`BALANCER_KINDS`), on one slot of their own."""

    lease: str = "{sq:balancer}:lease"
    fence: str = "{sq:balancer}:fence"
    status: str = "{sq:balancer}:status"

    def all(self) -> list[str]:
        return ["{sq:balancer}:" + kind for kind in BALANCER_KINDS]


BALANCER = BalancerKeys()


class PartitionKeys:
    """The keys of one partition of one queue; all share one hash tag, hence one slot.

    Names are built once per partition (instances are cached), since enqueue, promote and
    fetch use them for every call.
    """

    __slots__ = (
        "cancels",
        "ctl",
        "dead",
        "due",
        "due_hint",
        "errors",
        "fence",
        "generation",
        "inbound",
        "jobs",
        "lane",
        "lease",
        "moving",
        "outbox",
        "partition",
        "queue",
        "ready",
        "ready_hint",
        "schedule_next",
        "schedule_state",
        "schedules",
        "stats",
        "tag",
        "vtime",
    )

    def __init__(self, queue: str, partition: int, tag: str, generation: int = 0) -> None:
        self.queue = queue
        self.partition = partition
        self.generation = generation
        self.tag = tag
        base = "{" + tag + "}:"
        #: Sorted set: job id scored by due time in ms (Redis clock).
        self.due = base + "due"
        #: Hash: job id -> envelope (header + JSON body).
        self.jobs = base + "jobs"
        #: Stream of due jobs, read by workers through the WORKER_GROUP consumer group.
        self.ready = base + "ready"
        #: Sorted set: with lanes on, due jobs waiting for a worker as '<due> <flow> <job id>',
        #: scored by fair-queueing virtual time (lua/includes/lanes.lua).
        self.lane = base + "lane"
        #: Hash: the lane's virtual time ('V') and each waiting flow's last score.
        self.vtime = base + "vtime"
        #: Stream of dead-lettered jobs with the reason.
        self.dead = base + "dead"
        #: String with expiry: '<token>:<owner>' of the dispatcher draining this partition.
        self.lease = base + "lease"
        #: Hash: token (only grows: the fencing tokens), released, granted.  Never expires.
        self.fence = base + "fence"
        #: Hash of per-partition counters kept by the scripts.
        self.stats = base + "stats"
        #: Hash: the partition's operator flags ('paused', 'lanes': there once in use); only the
        #: operator and admin roles may write it (lua/includes/lanes.lua).
        self.ctl = base + "ctl"
        #: Hash: job id -> last error text, only for jobs that have failed at least once.
        self.errors = base + "errors"
        #: Hash: periodic schedule name -> definition JSON (see shardq.schedules).
        self.schedules = base + "sched"
        #: Sorted set: active schedule name scored by its next tick in ms (paused ones absent).
        self.schedule_next = base + "sched:next"
        #: Hash: schedule name -> 'last fire ms|last tick ms|fires|misfires|paused'.
        self.schedule_state = base + "sched:state"
        #: Hash: the batch a resize took out of this partition, not yet dropped (job id ->
        #: record, '' -> batch id): lua/resize-take-10.lua.
        self.moving = base + "moving"
        #: Set: the resize batch ids this partition has stored (lua/resize-put-9.lua).
        self.inbound = base + "inbound"
        #: Sorted set: running jobs cancelled, by cancel time (a day kept: lua/cancel-7.lua).
        self.cancels = base + "cancels"
        #: Hash: workflow children's ends not yet relayed to their batch, job id ->
        #: '<batch id>|<index>|<outcome>|<value>' (lua/includes/outbox.lua).
        self.outbox = base + "outbox"
        #: Sharded pub/sub channel: the due head moved earlier (wakes the dispatcher).
        self.due_hint = base + "hint:due"
        #: Sharded pub/sub channel: jobs landed in the ready stream (wakes workers).
        self.ready_hint = base + "hint:ready"

    def all(self) -> list[str]:
        """Every key of the partition with a fixed name (:data:`PARTITION_KINDS`), for deleting
        it in one call; its idempotency keys and kept results, one key each, are found by
        SCAN."""
        return ["{" + self.tag + "}:" + kind for kind in PARTITION_KINDS]

    def idem(self, idempotency_key: str) -> str:
        """String: idempotency key -> job id, expiring after the retention window."""
        return "{" + self.tag + "}:" + IDEM_KIND + ":" + idempotency_key

    def result(self, job_id: str) -> str:
        """String: a job's kept result, expiring after its retention; also the channel its
        end is published on."""
        return "{" + self.tag + "}:" + RESULT_KIND + ":" + job_id

    def progress(self, job_id: str) -> str:
        """String: a running job's last reported progress, '<ms>|<JSON>'."""
        return "{" + self.tag + "}:" + PROGRESS_KIND + ":" + job_id

    @property
    def idem_placeholder(self) -> str:
        """Passed in KEYS when an enqueue has no idempotency key (the script does not touch it)."""
        return "{" + self.tag + "}:" + IDEM_KIND + ":"

    @property
    def fleet_id(self) -> int:
        """The partition's number among every generation's (:func:`fleet_id`)."""
        return fleet_id(self.generation, self.partition)

    @property
    def label(self) -> str:
        """How logs, metrics and listings name it: ``5`` (generation 0), ``g1.5`` (a resize's)."""
        return partition_label(self.generation, self.partition)

    def __repr__(self) -> str:
        return f"PartitionKeys({self.queue!r}, {self.label}, {self.tag!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PartitionKeys) and other.tag == self.tag

    def __hash__(self) -> int:
        return hash(self.tag)


@lru_cache(maxsize=65536)
def partition_keys(
    queue: str, partition: int, partitions: int, generation: int = 0
) -> PartitionKeys:
    """Keys of one partition (its tag: :func:`~shardq.store.partitioning.partition_tag`)."""
    tag = partition_tag(queue, partition, partitions, generation)
    return PartitionKeys(queue, partition, tag, generation)


def all_partition_keys(queue: str, partitions: int, generation: int = 0) -> list[PartitionKeys]:
    """Keys of every partition of one generation of a queue, in partition order."""
    return [partition_keys(queue, p, partitions, generation) for p in range(partitions)]


# Patterns: the keys of a queue (or of every queue: queue "*") as glob patterns, for ACL key
# selectors (shardq.admin.acl) and SCAN MATCH (deleting a queue).  Queue names hold no glob
# characters (QUEUE_NAME_RE), so a queue's patterns match its keys and no other queue's.


def partition_pattern(queue: str, kind: str) -> str:
    """Every key of one kind of the queue's partitions (``idem``: its idempotency keys)."""
    if kind in PER_ITEM_KINDS:
        return "{sq:" + queue + ":*}:" + kind + ":*"
    if kind not in PARTITION_KINDS:
        raise ValueError(f"unknown partition key kind {kind!r}")
    return "{sq:" + queue + ":*}:" + kind


def queue_pattern(queue: str, kind: str) -> str:
    """The queue's own key of one kind (a name when ``queue`` is a name)."""
    if kind not in QUEUE_KINDS:
        raise ValueError(f"unknown queue key kind {kind!r}")
    return _queue_key(queue, kind)


def batch_pattern(queue: str, kind: str) -> str:
    """Every batch's key of one kind (:data:`BATCH_KINDS`) of the queue."""
    if kind not in BATCH_KINDS:
        raise ValueError(f"unknown batch key kind {kind!r}")
    return "{sq:" + queue + ":batch:*}:" + kind


def limit_pattern(queue: str, kind: str) -> str:
    """Every limit's key of one kind (:data:`LIMIT_KINDS`) of the queue."""
    if kind not in LIMIT_KINDS:
        raise ValueError(f"unknown limit key kind {kind!r}")
    return _limit_key(queue, "*", kind)


def queue_tags_pattern(queue: str) -> str:
    """Every key whose hash tag is one of the queue's partitions' or limits' (``{sq:<queue>:``
    and more): the partitions' keys, idempotency keys and limit state, not the queue's own
    keys (``{sq:<queue>}:...``, :func:`queue_keys`).  SCAN MATCH of a queue deletion."""
    return "{sq:" + queue + ":*"


def key_patterns(queue: str) -> list[str]:
    """Every key of the queue, its own and its partitions' and limits' (for queue ``*``: every
    key of shardq's queues; ``{sq:*`` covers both forms)."""
    if queue == "*":
        return ["{sq:*"]
    return [queue_tags_pattern(queue), "{sq:" + queue + "}:*"]


def channel_pattern(queue: str) -> str:
    """The queue's sharded pub/sub channels (its partitions' hints, ``{<tag>}:hint:...``)."""
    return "{sq:" + queue + ":*"
