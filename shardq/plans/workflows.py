"""The workflows' operations (batches, chains, the relay's round), written once for sync and
asyncio (:mod:`shardq.plans`).

A batch is created open on its own slot (lua/batch-open-2.lua), its children are enqueued
with ids ``<batch id>#<index>`` and the option ``g`` that ties each to its index, and it is
sealed (lua/batch-seal-2.lua); every step may be repeated: a resent create finds the record,
skips the children whose end was already counted and re-sends the others (a stored child is
recognised by its id), and a resent seal answers what is left to fire.  Each child's end is
written into its partition's outbox by the script that ends it and relayed by the
partition's dispatcher (:func:`relay_partition`); what a batch's end calls for (a callback, a
chain's next step, a report to a parent batch) is done by whoever made the call that ended it
(:func:`do_fires`), each fire idempotent, and taken off the record after (batch-fired).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, NamedTuple

import orjson

from shardq.config import ProducerSettings
from shardq.errors import (
    BatchNotFoundError,
    InvalidWorkflowError,
    JobNotFoundError,
    JobNotScheduledError,
    JobRunningError,
    ScriptArgumentError,
    ShardqError,
)
from shardq.jobs import JobRequest
from shardq.plans import Plan, ok, one
from shardq.plans import producer as producer_plans
from shardq.store import keys, producer
from shardq.store import workflows as ops
from shardq.store.producer import QueueCache
from shardq.workflows import (
    CALLBACKS,
    MAX_ADD,
    MAX_CHILDREN,
    MAX_DEPTH,
    MAX_STEPS,
    Batch,
    BatchCancel,
    BatchInfo,
    Chain,
    Child,
    callback_id,
    check_batch_id,
    check_policy,
    check_stored_id,
    child_id,
    nested_id,
    new_batch_id,
    retention_ms,
)

#: Children enqueued per bulk call while creating a batch.
CHUNK = 1000


def _bk(queue: str, batch_id: str) -> keys.BatchKeys:
    return keys.batch_keys(queue, batch_id)


def bit(bits: bytes, index: int) -> bool:
    """Bit ``index`` of a Redis bitmap (SETBIT's order: the highest bit of byte 0 is bit 0)."""
    byte = index >> 3
    return byte < len(bits) and bool(bits[byte] & (0x80 >> (index & 7)))


class _Check(NamedTuple):
    """What a job of the workflow is checked against before anything is written: the queue's
    name and the producer's settings (the same checks as its enqueue makes, later)."""

    queue: str
    settings: ProducerSettings

    def job(self, req: JobRequest, workflow: dict[str, Any]) -> None:
        producer.prepare_enqueue(
            self.queue, 1, replace(req, job_id="w#0", workflow=workflow), self.settings
        )

    def spec(self, req: JobRequest, what: str) -> bytes:
        spec = ops.spec_of(req, what)  # refuses the fields a workflow sets itself
        self.job(req, {"gb": "w"})  # the request as given (JSON would turn NaN into null)
        self.job(ops.request_of(spec, "w#0", {"gb": "w"}, idempotent=True), {"gb": "w"})
        return spec


def _callbacks(
    check: _Check,
    on_success: JobRequest | None,
    on_complete: JobRequest | None,
    on_failure: JobRequest | None,
) -> list[tuple[str, bytes]]:
    fields = []
    for name, req in zip(CALLBACKS, (on_success, on_complete, on_failure), strict=True):
        if req is not None:
            fields.append(("cb:" + name, check.spec(req, f"on_{name}")))
    return fields


def _check_child(child: object, where: str, depth: int) -> None:
    if isinstance(child, JobRequest):
        for name in ("job_id", "idempotency_key", "unique_until", "workflow"):
            if getattr(child, name) is not None:
                raise InvalidWorkflowError(
                    f"{where} sets {name}: a batch names its children itself "
                    "(<batch id>#<index>), so a resent create cannot duplicate them"
                )
        return
    if isinstance(child, Batch | Chain):
        if depth + 1 > MAX_DEPTH:
            raise InvalidWorkflowError(f"{where}: batches nest at most {MAX_DEPTH} deep")
        return
    raise InvalidWorkflowError(
        f"{where} must be a shardq.JobRequest, shardq.Batch or shardq.Chain, got {child!r:.80}"
    )


def _check_tree(check: _Check, children: Sequence[object], depth: int, where: str) -> None:
    """Every child, nested batch and chain of a batch checked, before anything is written."""
    if len(children) > MAX_CHILDREN:
        raise InvalidWorkflowError(
            f"{where}: {len(children)} children in one call, over {MAX_CHILDREN}: open the "
            "batch (seal=False) and add them in parts"
        )
    for i, child in enumerate(children):
        here = f"{where} child {i}"
        _check_child(child, here, depth)
        if isinstance(child, JobRequest):
            check.job(child, {"g": ["w", i, 0]})
        elif isinstance(child, Batch):
            check_policy(child.policy)
            _callbacks(check, child.on_success, child.on_complete, child.on_failure)
            _check_tree(check, list(child.children), depth + 1, here)
        elif isinstance(child, Chain):
            _callbacks(check, child.on_success, child.on_complete, child.on_failure)
            _check_steps(check, list(child.steps), here)


def _check_steps(check: _Check, steps: list[JobRequest], where: str) -> list[bytes]:
    if not 1 <= len(steps) <= MAX_STEPS:
        raise InvalidWorkflowError(f"{where}: a chain has 1..{MAX_STEPS} steps, got {len(steps)}")
    return [check.spec(s, f"{where} step {i}") for i, s in enumerate(steps)]


def _retention(retention: timedelta | float) -> int:
    return retention_ms(retention)


def create_batch(
    cache: QueueCache,
    queue: str,
    children: Sequence[Child],
    *,
    settings: ProducerSettings,
    batch_id: str | None = None,
    on_success: JobRequest | None = None,
    on_complete: JobRequest | None = None,
    on_failure: JobRequest | None = None,
    policy: str = "fail",
    retention: timedelta | float,
    seal: bool = True,
    parent: str = "",
    depth: int = 0,
) -> Plan[str]:
    """Create a batch with these children (``seal`` False: left open for more, see
    :func:`add_children`); its id.  Everything is checked before anything is written."""
    bid = check_batch_id(batch_id) if batch_id is not None and not parent else batch_id
    bid = bid or new_batch_id()
    check_policy(policy)
    children = list(children)
    if not parent:
        _check_tree(_Check(queue, settings), children, depth, "the batch:")
    fields = _callbacks(_Check(queue, settings), on_success, on_complete, on_failure)
    keep = _retention(retention)
    bk = _bk(queue, bid)
    yield from producer_plans.meta(cache, queue)  # UnknownQueueError before anything is written
    created, state, total, kind = yield from one(
        ops.open_batch(
            bk,
            kind="batch",
            policy=policy,
            retention_ms=keep,
            total=len(children),
            sealed=False,
            parent=parent,
            fields=fields,
        )
    )
    if created:
        yield from one(ops.index_add(queue, bid, _now_ms()))
        if not parent:
            yield from _prune_index(queue)
    elif kind != "batch" or total != len(children):
        raise InvalidWorkflowError(
            f"batch id {bid!r} is taken by a {kind} of {total} children in {queue!r} "
            f"(state {state}): pass another batch_id"
        )
    yield from _enqueue_children(cache, queue, bid, 0, children, settings, keep, depth, created)
    if seal:
        fires = yield from one(ops.seal(bk))
        yield from do_fires(cache, queue, bk, fires, settings)
    return bid


def _now_ms() -> int:
    return producer.REDIS_CLOCK.now_ms()


def _enqueue_children(
    cache: QueueCache,
    queue: str,
    bid: str,
    first: int,
    children: list[Child],
    settings: ProducerSettings,
    keep: int,
    depth: int,
    fresh: bool,
) -> Plan[None]:
    """Enqueue children ``first..``; on a resend (not ``fresh``) those already counted are
    skipped (the others are recognised by their ids while stored)."""
    bits = b"" if fresh else (yield from one(ops.seen_bits(_bk(queue, bid))))
    plain: list[JobRequest] = []
    for offset, child in enumerate(children):
        i = first + offset
        if bit(bits, i):
            continue
        if isinstance(child, JobRequest):
            plain.append(replace(child, job_id=child_id(bid, i), workflow={"g": [bid, i, 0]}))
        elif isinstance(child, Batch):
            yield from create_batch(
                cache,
                queue,
                child.children,
                settings=settings,
                batch_id=nested_id(bid, i),
                on_success=child.on_success,
                on_complete=child.on_complete,
                on_failure=child.on_failure,
                policy=child.policy,
                retention=keep / 1000,
                parent=f"{bid}|{i}",
                depth=depth + 1,
            )
        else:
            assert isinstance(child, Chain)
            yield from create_chain(
                cache,
                queue,
                child.steps,
                settings=settings,
                chain_id=nested_id(bid, i),
                on_success=child.on_success,
                on_complete=child.on_complete,
                on_failure=child.on_failure,
                retention=keep / 1000,
                parent=f"{bid}|{i}",
            )
    for lo in range(0, len(plain), CHUNK):
        yield from producer_plans.enqueue_many(
            cache, queue, plain[lo : lo + CHUNK], settings, CHUNK, False
        )


def add_children(
    cache: QueueCache,
    queue: str,
    batch_id: str,
    children: Sequence[Child],
    *,
    settings: ProducerSettings,
) -> Plan[int]:
    """Add children to an open batch; the index of the first.  BatchClosedError once sealed.
    A call that dies half-way leaves the indexes it reserved unfilled: the batch then cannot
    end until it is cancelled (say so to the caller: call again is not enough)."""
    check_stored_id(batch_id)
    children = list(children)
    if not 1 <= len(children) <= MAX_ADD:
        raise InvalidWorkflowError(f"add 1..{MAX_ADD} children per call, got {len(children)}")
    _check_tree(_Check(queue, settings), children, 0, "the batch:")
    bk = _bk(queue, batch_id)
    info = yield from get_batch(cache, queue, batch_id)
    if info is None:
        raise BatchNotFoundError(f"no batch {batch_id!r} in {queue!r}")
    first = yield from one(ops.add(bk, len(children)))
    keep = info.retention_ms
    yield from _enqueue_children(cache, queue, batch_id, first, children, settings, keep, 0, True)
    return first


def seal_batch(
    cache: QueueCache, queue: str, batch_id: str, *, settings: ProducerSettings
) -> Plan[None]:
    """Seal an open batch: it ends once every child has (at once when all already have)."""
    bk = _bk(queue, check_stored_id(batch_id))
    yield from producer_plans.meta(cache, queue)
    fires = yield from one(ops.seal(bk))
    yield from do_fires(cache, queue, bk, fires, settings)


def create_chain(
    cache: QueueCache,
    queue: str,
    steps: Sequence[JobRequest],
    *,
    settings: ProducerSettings,
    chain_id: str | None = None,
    on_success: JobRequest | None = None,
    on_complete: JobRequest | None = None,
    on_failure: JobRequest | None = None,
    retention: timedelta | float,
    parent: str = "",
) -> Plan[str]:
    """Create a chain and enqueue its first step; its id."""
    cid = check_batch_id(chain_id) if chain_id is not None and not parent else chain_id
    cid = cid or new_batch_id()
    check = _Check(queue, settings)
    specs = _check_steps(check, list(steps), "the chain:")
    fields = _callbacks(check, on_success, on_complete, on_failure)
    fields += [(f"step:{i}", spec) for i, spec in enumerate(specs) if i > 0]
    keep = _retention(retention)
    bk = _bk(queue, cid)
    yield from producer_plans.meta(cache, queue)
    created, state, total, kind = yield from one(
        ops.open_batch(
            bk,
            kind="chain",
            policy="fail",
            retention_ms=keep,
            total=len(specs),
            sealed=True,
            parent=parent,
            fields=fields,
        )
    )
    if created:
        yield from one(ops.index_add(queue, cid, _now_ms()))
        if not parent:
            yield from _prune_index(queue)
    elif kind != "chain" or total != len(specs):
        raise InvalidWorkflowError(
            f"chain id {cid!r} is taken by a {kind} of {total} in {queue!r} (state {state}): "
            "pass another chain_id"
        )
    bits = b"" if created else (yield from one(ops.seen_bits(bk)))
    if not bit(bits, 0):
        # Step 0 with its id as its idempotency key: a resent create never runs it twice.
        first = ops.request_of(specs[0], child_id(cid, 0), {"g": [cid, 0, 1]}, idempotent=True)
        yield from producer_plans.enqueue(cache, queue, first, settings, False)
    return cid


def _previous(record: bytes) -> Any:
    """The value a step's result record carries (None when it could not be kept)."""
    if not record:
        return None
    try:
        data = orjson.loads(record)
    except orjson.JSONDecodeError:
        return None
    return data.get("v") if isinstance(data, dict) else None


def do_fires(
    cache: QueueCache,
    queue: str,
    bk: keys.BatchKeys,
    fires: list[ops.Fire],
    settings: ProducerSettings,
) -> Plan[int]:
    """Do what a batch's end calls for, each fire idempotent (a callback's and a step's id is
    derived from the batch's and is its idempotency key; a parent report sets a bit), then take
    them off the record.  Returns how many were done."""
    bid = bk.batch_id
    done: list[str] = []
    for f in fires:
        if f.name in CALLBACKS:
            cid = callback_id(bid, f.name)
            req = ops.request_of(f.body, cid, {"gb": bid}, idempotent=True)
            yield from producer_plans.enqueue(cache, queue, req, settings, False)
        elif f.name.startswith("step:"):
            i = int(f.name[5:])
            workflow = {"g": [bid, i, 1], "pr": _previous(f.extra)}
            req = ops.request_of(f.body, child_id(bid, i), workflow, idempotent=True)
            yield from producer_plans.enqueue(cache, queue, req, settings, False)
        elif f.name == "parent":
            parent, _, index = f.body.decode().partition("|")
            pbk = _bk(queue, parent)
            reported = yield from one(ops.report(pbk, int(index), f.extra.decode(), bid, b""))
            if reported.fires:
                yield from do_fires(cache, queue, pbk, reported.fires, settings)
        done.append(f.name)
    if done:
        yield from one(ops.fired(bk, done))
    return len(done)


class Relayed(NamedTuple):
    """One relay round of a partition: entries relayed and dropped (no batch can take them),
    when each relayed child ended (ms, Redis clock), and the fires done for them."""

    relayed: int
    dropped: int
    ended_ms: list[int]
    fires: list[str]


def relay_partition(
    cache: QueueCache, queue: str, pk: keys.PartitionKeys, settings: ProducerSettings
) -> Plan[Relayed]:
    """Relay one round of a partition's outbox: report each entry to its batch, do what the
    reports call for, and only then delete the entries (a relay that dies before leaves them
    for the next round, and a resent report changes nothing)."""
    entries, bad = yield from one(ops.outbox_read(pk))
    if not entries and not bad:
        return Relayed(0, 0, [], [])
    results = yield [
        ops.report(_bk(queue, e.batch_id), e.child, e.outcome, e.job_id, e.value) for e in entries
    ]
    relayed: list[str] = []
    dropped = list(bad)
    ended: list[int] = []
    fires: list[str] = []
    for e, r in zip(entries, results, strict=True):
        if isinstance(r, ScriptArgumentError | InvalidWorkflowError):
            dropped.append(e.job_id)  # an index past the batch's children: no batch has it
            continue
        if isinstance(r, BaseException):
            continue  # left for the next round
        if r.fires:
            try:
                yield from do_fires(cache, queue, _bk(queue, e.batch_id), r.fires, settings)
            except ShardqError:
                continue  # the report is counted; the resend answers the fires again
            fires += [f.name for f in r.fires]
        relayed.append(e.job_id)
        ended.append(e.ended_ms)
    if relayed or dropped:
        yield from one(ops.outbox_delete(pk, relayed + dropped))
    return Relayed(len(relayed), len(dropped), ended, fires)


def get_batch(cache: QueueCache, queue: str, batch_id: str) -> Plan[BatchInfo | None]:
    """A batch or chain by id (a nested one's too), or None (never created, or expired).
    UnknownQueueError for a queue that does not exist.  Reads only."""
    check_stored_id(batch_id)
    yield from producer_plans.meta(cache, queue)
    return (yield from _read(queue, batch_id))


def _read(queue: str, batch_id: str) -> Plan[BatchInfo | None]:
    bk = _bk(queue, batch_id)
    raw, ttl = ok((yield [ops.read(bk), ops.ttl(bk)]))
    if not raw:
        return None
    return ops.info(queue, batch_id, raw, ttl)


MAX_LIST = 1000


def list_batches(cache: QueueCache, queue: str, limit: int = 50) -> Plan[list[BatchInfo]]:
    """The newest ``limit`` batches and chains of the queue (nested ones too), newest first.
    Reads only (the console's viewer runs it): an id whose record expired is skipped here
    and dropped from the index by a later create (:func:`_prune_index`)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
        raise InvalidWorkflowError(f"limit must be 1..{MAX_LIST}, got {limit!r}")
    yield from producer_plans.meta(cache, queue)
    ids = yield from one(ops.index_newest(queue, limit))
    if not ids:
        return []
    bks = [_bk(queue, bid) for bid, _ in ids]
    results = ok((yield [*(ops.read(bk) for bk in bks), *(ops.ttl(bk) for bk in bks)]))
    n = len(bks)
    return [
        ops.info(queue, bk.batch_id, raw, ttl)
        for bk, raw, ttl in zip(bks, results[:n], results[n:], strict=True)
        if raw
    ]


#: Oldest index entries a create looks at, dropping those whose record expired: each create
#: removes up to this many stale ids, so the index holds the live batches and few others.
PRUNE = 10


def _prune_index(queue: str) -> Plan[int]:
    oldest = yield from one(ops.index_oldest(queue, PRUNE))
    if not oldest:
        return 0
    raws = ok((yield [ops.read(_bk(queue, bid)) for bid, _ in oldest]))
    gone = [bid for (bid, _), raw in zip(oldest, raws, strict=True) if not raw]
    if gone:
        yield from one(ops.index_remove(queue, gone))
    return len(gone)


def cancel_batch(
    cache: QueueCache, queue: str, batch_id: str, *, settings: ProducerSettings
) -> Plan[BatchCancel]:
    """Cancel a batch or chain: no callback fires any more; its waiting children are
    cancelled and counted (nested batches and chains too); running ones end as they will.
    Safe to run again (a second run counts a child whose cancel's report was lost)."""
    check_stored_id(batch_id)
    yield from producer_plans.meta(cache, queue)
    bk = _bk(queue, batch_id)
    done = yield from one(ops.cancel(bk))
    total, kind, was = done.total, done.kind, done.was
    bits = yield from one(ops.seen_bits(bk))
    todo = [i for i in range(total) if not bit(bits, i)]
    if kind == "chain":
        todo = todo[:1]  # only the step that may be waiting or running; later ones never ran
    cancelled, running = done.never_started, 0
    for lo in range(0, len(todo), CHUNK):
        part = todo[lo : lo + CHUNK]
        ids = [child_id(batch_id, i) for i in part]
        results = yield from producer_plans.at_home(cache, queue, ids, producer.cancel)
        reports: list[tuple[int, str, str]] = []
        missing: list[int] = []
        for i, jid, r in zip(part, ids, results, strict=True):
            if r is True:
                reports.append((i, "cancelled", jid))
                cancelled += 1
            elif isinstance(r, JobRunningError):
                running += 1
            elif isinstance(r, JobNotScheduledError):  # E_JOB_DEAD: its death was reported
                reports.append((i, "dead", jid))
            elif r is False or isinstance(r, JobNotFoundError):
                missing.append(i)
        # Not found: a nested batch or chain, a child whose end waits in an outbox, or one
        # cancelled or removed by hand.  Only the last is counted here (as cancelled).
        for i in missing:
            inner = nested_id(batch_id, i)
            if (yield from _read(queue, inner)) is not None:
                sub = yield from cancel_batch(cache, queue, inner, settings=settings)
                cancelled += sub.cancelled_children
                running += sub.running_children
                continue
            jid = child_id(batch_id, i)
            layout = yield from producer_plans.layout(cache, queue)
            waiting = ok((yield [ops.outbox_has(pk, jid) for pk in layout.homes(jid)]))
            if not any(waiting):
                reports.append((i, "cancelled", jid))
                cancelled += 1
        if reports:
            replies = ok((yield [ops.report(bk, i, o, jid, b"") for i, o, jid in reports]))
            for reply in replies:
                if reply.fires:
                    yield from do_fires(cache, queue, bk, reply.fires, settings)
    return BatchCancel(batch_id, was, cancelled, running)
