"""Ops of batches and chains (lua/batch-*.lua) and of the partitions' outboxes.

A batch's record and bitmap live on the batch's own slot (:class:`keys.BatchKeys`); a child's
end is written into its own partition's outbox by the script that ends it
(lua/includes/outbox.lua) and relayed from there (:func:`outbox_read`, :func:`report`,
:func:`outbox_delete`).  The callbacks and a chain's later steps are stored in the record as
specs (:func:`spec_of`) and enqueued by whoever does the fire (:mod:`shardq.plans.workflows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, NamedTuple

import orjson

from shardq.connection import as_text
from shardq.errors import InvalidWorkflowError
from shardq.jobs.body import decode_backoff
from shardq.jobs.models import JobRequest
from shardq.jobs.options import Backoff
from shardq.store import keys
from shardq.store.codes import check
from shardq.store.op import Command, Op, cmd, op
from shardq.workflows import CALLBACKS, BatchInfo

#: Outbox entries one relay round reads per partition.
OUTBOX_READ = 200


class Fire(NamedTuple):
    """One thing a batch calls for: ``success``/``complete``/``failure`` (``body``: the
    callback's spec), ``step:<i>`` (``body``: the step's spec, ``extra``: the previous step's
    result record), ``parent`` (``body``: the parent's ``<batch id>|<index>``, ``extra``: ok
    or dead)."""

    name: str
    body: bytes
    extra: bytes


def _fires(items: list[Any]) -> list[Fire]:
    out = []
    for i in range(0, len(items) - 2, 3):
        name, body, extra = items[i], items[i + 1], items[i + 2]
        out.append(Fire(as_text(name), _bytes(body), _bytes(extra)))
    return out


def _bytes(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    return str(v).encode() if v is not None else b""


class Reported(NamedTuple):
    """A report's answer: ``known`` False for a batch that no longer exists; how many of the
    call's children were counted now (the others: resends), when the batch ended (ms, 0 while
    it runs), the positions in the call of children no batch has (an index past its
    children: dropped), and the fires still to do."""

    known: bool
    counted: int
    ended_ms: int
    skipped: list[int]
    fires: list[Fire]


class ChildEnd(NamedTuple):
    """One child's end as reported to its batch: its index (``child``),
    ``ok``/``dead``/``cancelled``, its job id, and its value (a chain step's result record, or
    the error)."""

    child: int
    outcome: str
    job_id: str
    value: bytes = b""


class Pending(NamedTuple):
    """A batch's state, when it ended (ms, 0 while it runs) and the fires still to do."""

    state: str
    ended_ms: int
    fires: list[Fire]


# -- specs of jobs the record holds (callbacks, a chain's steps) ---------------------------------


#: How a workflow's stored spec (a callback or a chain step, enqueued later by whoever does the
#: fire) keeps each job option (shardq.jobs.options): under its key, in this order, or None:
#: refused, the workflow chooses it.
SPEC_KEYS: dict[str, str | None] = {
    "job_id": None,
    "idempotency_key": None,
    "run_at": None,
    "unique_until": None,
    "workflow": None,
    "max_attempts": "m",
    "backoff": "b",
    "headers": "h",
    "limit_key": "l",
    "priority": "pri",
    "tenant": "tn",
    "keep_result": "r",
    "timeout": "o",
    "delay": "dl",
    "deadline": "wd",
}
# Kept as seconds (a timedelta's total_seconds).
_SECONDS = ("keep_result", "timeout", "delay", "deadline")


def spec_of(req: JobRequest, what: str) -> bytes:
    """A callback's or step's request as the record stores it (JSON).  Its id, idempotency key
    and due time are the workflow's to choose: a request that sets them is refused."""
    if not isinstance(req, JobRequest):
        raise InvalidWorkflowError(f"{what} must be a shardq.JobRequest, got {req!r:.80}")
    for name, key in SPEC_KEYS.items():
        if key is None and getattr(req, name) is not None:
            raise InvalidWorkflowError(
                f"{what} sets {name}: a workflow chooses its jobs' ids and start times (pass "
                "delay= for a later start)"
            )
    spec: dict[str, Any] = {"t": req.job_type, "p": req.payload}
    for name, key in SPEC_KEYS.items():
        value = getattr(req, name)
        if key is None or value is None:
            continue
        if name == "backoff":
            if not isinstance(value, Backoff):
                raise InvalidWorkflowError(f"{what}: backoff must be a shardq.Backoff")
            value = value.encode()
        elif name == "deadline" and not isinstance(value, timedelta):
            raise InvalidWorkflowError(
                f"{what}: a workflow job's deadline must be relative (a timedelta: how late "
                "after its start it may still run), since its start is not known in advance"
            )
        elif name in _SECONDS and isinstance(value, timedelta):
            value = value.total_seconds()
        spec[key] = value
    try:
        return orjson.dumps(spec)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise InvalidWorkflowError(f"{what} cannot be stored as JSON: {exc}") from None


def request_of(
    spec: bytes, job_id: str, workflow: dict[str, Any], *, idempotent: bool
) -> JobRequest:
    """The request a stored spec stands for, with the workflow's id and options.
    InvalidWorkflowError for one that does not decode (written by hand, or by a bug): no
    resend can mend it, so whoever does its fire gives it up (plans.workflows.GIVE_UP)."""
    try:
        s = orjson.loads(spec)
        options: dict[str, Any] = {
            name: s.get(key) for name, key in SPEC_KEYS.items() if key is not None
        }
        if options["backoff"] is not None:
            options["backoff"] = decode_backoff(options["backoff"])
        if options["deadline"] is not None:
            options["deadline"] = timedelta(seconds=options["deadline"])
        return JobRequest(
            s["t"],
            s.get("p"),
            job_id=job_id,
            idempotency_key=job_id if idempotent else None,
            workflow=workflow,
            **options,
        )
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise InvalidWorkflowError(
            f"the stored spec of {job_id} does not decode ({type(exc).__name__}: {exc}; "
            f"{bytes(spec)[:80]!r}): it was not written by shardq"
        ) from None


# -- the batch's own slot ----------------------------------------------------------------------


def open_batch(
    bk: keys.BatchKeys,
    *,
    kind: str,
    policy: str,
    retention_ms: int,
    total: int,
    sealed: bool,
    parent: str,
    fields: list[tuple[str, bytes]],
) -> Op[tuple[bool, str, int, str]]:
    """Create the record once: (created, state, total, kind) (a resend: False and what is
    there)."""

    def parse(reply: Any) -> tuple[bool, str, int, str]:
        r = check(reply)
        if r[0] == 1:
            return True, "open" if not sealed else "running", total, kind
        return False, as_text(r[1]), int(r[2]), as_text(r[3])

    argv: list[Any] = [kind, policy, retention_ms, total, "1" if sealed else "0", parent]
    for name, value in fields:
        argv += [name, value]
    return op("batch-open", bk.all(), argv, parse)


def add(bk: keys.BatchKeys, n: int, add_id: str = "") -> Op[tuple[int, bool]]:
    """Reserve ``n`` child indexes of an open batch: (the first one, whether this add id had
    reserved them before)."""

    def parse(reply: Any) -> tuple[int, bool]:
        r = check(reply)
        return int(r[1]), r[0] == 2

    return op("batch-add", bk.all(), [n, bk.batch_id, add_id], parse)


def seal(bk: keys.BatchKeys) -> Op[tuple[int, list[Fire]]]:
    """Seal it: (when it ended, ms, 0 while it runs; the fires to do now)."""

    def parse(reply: Any) -> tuple[int, list[Fire]]:
        r = check(reply)
        return int(r[1] or 0), _fires(r[2:])

    return op("batch-seal", bk.all(), [bk.batch_id], parse)


#: Children one report call carries (lua/batch-report-2.lua's Max ARGV / 4).
REPORT_MAX = 1000


def report(bk: keys.BatchKeys, ends: Sequence[ChildEnd]) -> Op[Reported]:
    """Count each child's end (``ok``, ``dead``, ``cancelled``) once; at most
    :data:`REPORT_MAX` children per call."""

    def parse(reply: Any) -> Reported:
        r = check(reply)
        if r[0] == 0:
            return Reported(False, 0, 0, [], [])
        return Reported(
            True, int(r[1]), int(r[2] or 0), [int(i) for i in r[3] or []], _fires(r[4:])
        )

    argv: list[Any] = []
    for e in ends:
        argv += [e.child, e.outcome, e.job_id, e.value]
    return op("batch-report", bk.all(), argv, parse)


def fired(
    bk: keys.BatchKeys, names: Sequence[str], errors: dict[str, str] | None = None
) -> Op[tuple[int, int]]:
    """Take these fires off the record (done); those in ``errors`` were given up, their error
    kept in the record.  (How many are still to do, when the batch ended: ms, 0 while it
    runs.)"""

    def parse(reply: Any) -> tuple[int, int]:
        r = check(reply)
        return int(r[0]), int(r[1] or 0) if len(r) > 1 else 0

    argv = [n for n in names if not errors or n not in errors]
    argv += [f"{n}!{e}" for n, e in (errors or {}).items()]
    return op("batch-fired", bk.all(), argv, parse)


def pending(bk: keys.BatchKeys) -> Op[Pending | None]:
    """What the batch's end still calls for (read only), or None for no such batch."""

    def parse(reply: Any) -> Pending | None:
        r = check(reply)
        if not r:
            return None
        return Pending(as_text(r[0]), int(r[1] or 0), _fires(r[2:]))

    return op("batch-fires", bk.all(), [], parse)


class Cancelled(NamedTuple):
    """A batch-cancel's answer: cancelled now or before, its children, kind, the state it had,
    and a chain's steps never enqueued that the cancel counted cancelled."""

    now: bool
    total: int
    kind: str
    was: str
    never_started: int


def cancel(bk: keys.BatchKeys) -> Op[Cancelled]:
    """Mark it cancelled (a resend answers "cancelled before": safe to repeat)."""

    def parse(reply: Any) -> Cancelled:
        r = check(reply)
        never = int(r[4]) if r[0] == 1 and len(r) > 4 else 0
        return Cancelled(r[0] == 1, int(r[1] or 0), as_text(r[2]), as_text(r[3]), never)

    return op("batch-cancel", bk.all(), [bk.batch_id], parse)


def _int(v: Any) -> int | None:
    if v is None or v == b"" or v == "":
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def info(queue: str, batch_id: str, raw: dict[Any, Any], ttl_ms: int | None) -> BatchInfo:
    d = {as_text(k): v for k, v in raw.items()}
    text = {k: as_text(v) for k, v in d.items() if not k.startswith(("cb:", "step:", "pv"))}
    fires = tuple(text.get("fires", "").split())
    return BatchInfo(
        batch_id=batch_id,
        queue=queue,
        kind="chain" if text.get("kind") == "chain" else "batch",
        state=text.get("state", "running"),  # type: ignore[arg-type]
        total=_int(text.get("total")) or 0,
        completed=_int(text.get("ok")) or 0,
        dead=_int(text.get("dead")) or 0,
        cancelled=_int(text.get("cancelled")) or 0,
        policy=text.get("policy", "fail"),  # type: ignore[arg-type]
        created_ms=_int(text.get("created")) or 0,
        sealed_ms=_int(text.get("sealed")),
        ended_ms=_int(text.get("ended")),
        reason=text.get("reason") or None,
        parent=text.get("parent") or None,
        callbacks=tuple(c for c in CALLBACKS if "cb:" + c in d),
        fires_pending=fires,
        retention_ms=_int(text.get("retention")) or 0,
        ttl_ms=ttl_ms if ttl_ms is not None and ttl_ms >= 0 else None,
        fired_ms=_int(text.get("fired")),
        fire_errors=tuple(line for line in text.get("fire_errors", "").split("\n") if line),
    )


def read(bk: keys.BatchKeys) -> Command[dict[Any, Any]]:
    return cmd("HGETALL", bk.record, parse=lambda r: dict(r or {}))


def ttl(bk: keys.BatchKeys) -> Command[int]:
    return cmd("PTTL", bk.record, parse=int)


def seen_bits(bk: keys.BatchKeys) -> Command[bytes]:
    """The bitmap of counted children (bit i: child i's end was counted)."""
    return cmd("GET", bk.seen, parse=lambda r: r if isinstance(r, bytes) else (r or "").encode())


def index_add(queue: str, batch_id: str, created_ms: int) -> Command[int]:
    return cmd("ZADD", keys.batches_key(queue), "NX", created_ms, batch_id, parse=int)


def index_oldest(queue: str, limit: int) -> Command[list[tuple[str, int]]]:
    def parse(r: Any) -> list[tuple[str, int]]:
        return _pairs(list(r or []))

    return cmd(
        "ZRANGE", keys.batches_key(queue), 0, limit - 1, "WITHSCORES", parse=parse
    )  # fmt: skip


def _pairs(items: list[Any]) -> list[tuple[str, int]]:
    if items and isinstance(items[0], list | tuple):  # RESP3: [member, score] pairs
        return [(as_text(m), int(float(sc))) for m, sc in items]
    return [(as_text(items[i]), int(float(items[i + 1]))) for i in range(0, len(items), 2)]


def index_remove(queue: str, batch_ids: list[str]) -> Command[int]:
    return cmd("ZREM", keys.batches_key(queue), *batch_ids, parse=int)


def index_newest(queue: str, limit: int) -> Command[list[tuple[str, int]]]:
    def parse(r: Any) -> list[tuple[str, int]]:
        return _pairs(list(r or []))

    return cmd(
        "ZRANGE", keys.batches_key(queue), "+inf", "-inf", "BYSCORE", "REV", "LIMIT", 0, limit,
        "WITHSCORES", parse=parse,
    )  # fmt: skip


def live_add(queue: str, batch_id: str, created_ms: int) -> Command[int]:
    return cmd("ZADD", keys.batches_live_key(queue), "NX", created_ms, batch_id, parse=int)


def live_remove(queue: str, batch_ids: Sequence[str]) -> Command[int]:
    return cmd("ZREM", keys.batches_live_key(queue), *batch_ids, parse=int)


def live_count(queue: str) -> Command[int]:
    return cmd("ZCARD", keys.batches_live_key(queue), parse=int)


def live_after(queue: str, score: int, skip: int, limit: int) -> Command[list[tuple[str, int]]]:
    """Up to ``limit`` unsettled ids scored ``score`` or later, oldest first, past the first
    ``skip`` of them (a cursor: the ids of ``score`` already read)."""

    def parse(r: Any) -> list[tuple[str, int]]:
        return _pairs(list(r or []))

    return cmd(
        "ZRANGE", keys.batches_live_key(queue), score, "+inf", "BYSCORE", "LIMIT", skip, limit,
        "WITHSCORES", parse=parse,
    )  # fmt: skip


def firing_add(queue: str, batch_id: str, now_ms: int) -> Command[int]:
    return cmd("ZADD", keys.batches_firing_key(queue), now_ms, batch_id, parse=int)


def firing_remove(queue: str, batch_ids: Sequence[str]) -> Command[int]:
    return cmd("ZREM", keys.batches_firing_key(queue), *batch_ids, parse=int)


def firing_before(queue: str, before_ms: int, limit: int) -> Command[list[tuple[str, int]]]:
    """Up to ``limit`` ids a producer began ending before ``before_ms``, oldest first."""

    def parse(r: Any) -> list[tuple[str, int]]:
        return _pairs(list(r or []))

    return cmd(
        "ZRANGE", keys.batches_firing_key(queue), "-inf", before_ms, "BYSCORE", "LIMIT", 0,
        limit, "WITHSCORES", parse=parse,
    )  # fmt: skip


def settled_state(bk: keys.BatchKeys) -> Command[tuple[str | None, int, bool]]:
    """(state, or None when there is no record; when it ended, ms, 0 while it runs; whether
    fires are listed)."""

    def parse(r: Any) -> tuple[str | None, int, bool]:
        state, ended, fires = [*list(r or []), None, None, None][:3]
        return (
            as_text(state) if state is not None else None,
            _int(as_text(ended)) or 0 if ended is not None else 0,
            bool(fires is not None and as_text(fires).strip()),
        )

    return cmd("HMGET", bk.record, "state", "ended", "fires", parse=parse)


# -- a partition's outbox ----------------------------------------------------------------------


class OutboxEntry(NamedTuple):
    """One child's end waiting to be relayed: its job id, batch, index (``child``), outcome,
    value."""

    job_id: str
    batch_id: str
    child: int
    outcome: str
    value: bytes
    ended_ms: int = 0


#: How a child may end (lua/batch-report-2.lua counts nothing else).
OUTCOMES = (b"ok", b"dead", b"cancelled")


def _entry(job_id: Any, raw: Any) -> OutboxEntry | None:
    """One outbox entry, or None for one no script writes (refused alone: the relay drops
    it, and the batch's other entries still count)."""
    parts = _bytes(raw).split(b"|", 4)
    if len(parts) != 5 or not parts[1].isdigit() or not parts[3].isdigit():
        return None
    if parts[2] not in OUTCOMES:
        return None
    return OutboxEntry(
        as_text(job_id), as_text(parts[0]), int(parts[1]), as_text(parts[2]), parts[4],
        int(parts[3]),
    )  # fmt: skip


def outbox_read(
    pk: keys.PartitionKeys, count: int = OUTBOX_READ, cursor: int = 0
) -> Command[tuple[list[OutboxEntry], list[str], int]]:
    """Up to about ``count`` entries from ``cursor`` (HSCAN: the relay deletes what it
    relayed, so a read from the start finds the rest; it reads on from the cursor it got past
    entries a fault left); the fields that are no report (written by hand); the next cursor
    (0: the whole outbox was read)."""

    def parse(reply: Any) -> tuple[list[OutboxEntry], list[str], int]:
        next_cursor, items = reply
        if isinstance(items, dict):
            pairs = list(items.items())
        else:
            items = list(items or [])
            pairs = [(items[i], items[i + 1]) for i in range(0, len(items), 2)]
        good, bad = [], []
        for field_, value in pairs:
            e = _entry(field_, value)
            if e is None:
                bad.append(as_text(field_))
            else:
                good.append(e)
        return good, bad, int(next_cursor)

    return cmd("HSCAN", pk.outbox, cursor, "COUNT", count, parse=parse)


def job_states(pk: keys.PartitionKeys, job_ids: Sequence[str]) -> Command[list[bytes | None]]:
    """Each job's state letter as its envelope in ``pk`` says (``D``: dead; ``S``, ``A``, ...:
    still to run or running), or None where the partition stores none (it completed, was
    cancelled, or never was here)."""

    def parse(reply: Any) -> list[bytes | None]:
        return [_bytes(v)[:1] if v is not None else None for v in reply]

    return cmd("HMGET", pk.jobs, *job_ids, parse=parse)


def outbox_delete(pk: keys.PartitionKeys, job_ids: list[str]) -> Command[int]:
    return cmd("HDEL", pk.outbox, *job_ids, parse=int)


def outbox_has(pk: keys.PartitionKeys, job_id: str) -> Command[bool]:
    return cmd("HEXISTS", pk.outbox, job_id, parse=lambda r: bool(int(r)))


def outbox_len(pk: keys.PartitionKeys) -> Command[int]:
    return cmd("HLEN", pk.outbox, parse=int)
