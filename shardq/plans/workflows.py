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

import secrets
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, NamedTuple

import orjson

from shardq.config import ProducerSettings
from shardq.errors import (
    BatchNotFoundError,
    CorruptKeyError,
    InvalidJobError,
    InvalidWorkflowError,
    JobNotFoundError,
    JobNotScheduledError,
    JobRunningError,
    LanesOffError,
    MalformedRecordError,
    NotDurableError,
    ScriptArgumentError,
    ShardqError,
    UnknownQueueError,
)
from shardq.jobs import JobRequest
from shardq.plans import Plan, ok, one
from shardq.plans import producer as producer_plans
from shardq.store import keys, producer
from shardq.store import workflows as ops
from shardq.store.clock import REDIS_CLOCK
from shardq.store.meta import QueueCache
from shardq.store.op import Call, Waiting
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
    check_add_id,
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
    durable: bool = False,
) -> Plan[str]:
    """Create a batch with these children (``seal`` False: left open for more, see
    :func:`add_children`); its id.  Everything is checked before anything is written.  With
    ``durable``, the record, every child and the seal are confirmed by
    ``settings.durable_replicas`` replicas (NotDurableError otherwise: calling again with the
    same batch id is safe)."""
    bid = check_batch_id(batch_id) if batch_id is not None and not parent else batch_id
    bid = bid or new_batch_id()
    check_policy(policy)
    children = list(children)
    if not parent:
        _check_tree(_Check(queue, settings), children, depth, "the batch:")
    fields = _callbacks(_Check(queue, settings), on_success, on_complete, on_failure)
    keep = _retention(retention)
    bk = _bk(queue, bid)
    replicas = settings.durable_replicas if durable else 0
    created = yield from _open(
        cache, queue, bk, "batch", policy, keep, len(children), parent, fields, settings,
        replicas, opening=not seal,
    )  # fmt: skip
    yield from _enqueue_children(
        cache, queue, bid, 0, children, settings, keep, depth, created, replicas
    )
    if seal:
        yield from _sealed(cache, queue, bk, settings, replicas)
    return bid


def _open(
    cache: QueueCache,
    queue: str,
    bk: keys.BatchKeys,
    kind: str,
    policy: str,
    keep: int,
    total: int,
    parent: str,
    fields: list[tuple[str, bytes]],
    settings: ProducerSettings,
    replicas: int = 0,
    opening: bool = False,
) -> Plan[bool]:
    """Create a batch's (open) or chain's (sealed) record once, listed as unsettled and in the
    queue's index; whether it was created now (False: a resend, checked to be the same kind
    and size, or, ``opening`` an empty batch for adds, the same kind).  UnknownQueueError
    before anything is written."""
    yield from producer_plans.meta(cache, queue)
    # Listed unsettled before its record exists: a producer that dies between the two leaves
    # an id with no record, which the relay's sweep drops.
    yield from one(ops.live_add(queue, bk.batch_id, _now_ms()))
    opened = ops.open_batch(
        bk,
        kind=kind,
        policy=policy,
        retention_ms=keep,
        total=total,
        sealed=kind == "chain",
        parent=parent,
        fields=fields,
    )
    results = yield from _waited([opened], replicas, settings)
    made: tuple[bool, str, int, str] = ok(results)[0]
    created, state, was_total, was_kind = made
    # A batch opened for adds may have grown since: only its kind must match.
    sized = kind == "chain" or total > 0 or not opening
    if not created and (was_kind != kind or (sized and was_total != total)):
        raise InvalidWorkflowError(
            f"{kind} id {bk.batch_id!r} is taken by a {was_kind} of {was_total} in {queue!r} "
            f"(state {state}): pass another {kind}_id"
        )
    # On a resend too: the first call may have died between the record and the index.
    yield from one(ops.index_add(queue, bk.batch_id, _now_ms()))
    if created and not parent:
        yield from _prune_index(queue)
    return created


def _sealed(
    cache: QueueCache,
    queue: str,
    bk: keys.BatchKeys,
    settings: ProducerSettings,
    replicas: int = 0,
) -> Plan[None]:
    """Seal the batch and do what that ends it calls for.  The batch is listed in the firing
    set from before the seal until its fires are done, so if this process dies in between
    (a small batch's children often all end before the seal), the relay's sweep does them."""
    yield from one(ops.firing_add(queue, bk.batch_id, _now_ms()))
    ((ended_ms, fires),) = ok((yield from _waited([ops.seal(bk)], replicas, settings)))
    yield from settle(cache, queue, bk, fires, ended_ms, settings, replicas)
    yield from one(ops.firing_remove(queue, [bk.batch_id]))


def _now_ms() -> int:
    return REDIS_CLOCK.now_ms()


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
    replicas: int = 0,
) -> Plan[None]:
    """Enqueue children ``first..``.  On a resend (not ``fresh``), a child is skipped when its
    end waits in its partition's outbox or was counted; a stored one is recognised by its id.
    The outboxes are read before the bitmap, so a child that ended before the check is found
    in one or the other (the relay deletes an entry only after counting it); what is left is a
    child running at the check that ends in the milliseconds before its resend, which then
    runs again (counted once)."""
    bits = b"" if fresh else (yield from one(ops.seen_bits(_bk(queue, bid))))
    plain: list[tuple[int, JobRequest]] = []
    for offset, child in enumerate(children):
        i = first + offset
        if bit(bits, i):
            continue  # counted (a nested batch's record may have expired since)
        if isinstance(child, JobRequest):
            plain.append((i, replace(child, job_id=child_id(bid, i), workflow={"g": [bid, i, 0]})))
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
                durable=bool(replicas),
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
                durable=bool(replicas),
            )
    for lo in range(0, len(plain), CHUNK):
        part = plain[lo : lo + CHUNK]
        if not fresh:
            part = yield from _not_ended(cache, queue, bid, part)
        if part:
            yield from producer_plans.enqueue_many(
                cache, queue, [req for _, req in part], settings, CHUNK, bool(replicas)
            )


def _not_ended(
    cache: QueueCache, queue: str, bid: str, part: list[tuple[int, JobRequest]]
) -> Plan[list[tuple[int, JobRequest]]]:
    """The children of ``part`` whose end is neither in an outbox nor counted (outboxes first:
    see :func:`_enqueue_children`)."""
    layout = yield from producer_plans.layout(cache, queue)
    asks: list[Call[bool]] = []
    owner: list[int] = []
    for n, (_, req) in enumerate(part):
        assert req.job_id is not None
        for pk in layout.homes(req.job_id):
            asks.append(ops.outbox_has(pk, req.job_id))
            owner.append(n)
    waiting = ok((yield asks))
    ended = {owner[k] for k, w in enumerate(waiting) if w}
    bits = yield from one(ops.seen_bits(_bk(queue, bid)))
    return [(i, req) for n, (i, req) in enumerate(part) if n not in ended and not bit(bits, i)]


def add_children(
    cache: QueueCache,
    queue: str,
    batch_id: str,
    children: Sequence[Child],
    *,
    settings: ProducerSettings,
    add_id: str | None = None,
    durable: bool = False,
) -> Plan[int]:
    """Add children to an open batch; the index of the first.  BatchClosedError once sealed.
    With ``add_id``, the call is safe to repeat: a producer that died half-way calls again with
    the same add id and children, gets the same indexes and fills those it had not (even once
    the batch was sealed).  Without one, a call that dies half-way leaves its indexes unfilled,
    and the batch can then only end by being cancelled."""
    check_stored_id(batch_id)
    # Without the caller's add id, one of this call's own: a resend of the reservation after
    # an ambiguous fault (sent, reply lost) then gets the same indexes instead of new ones.
    token = check_add_id(add_id) if add_id is not None else "a" + secrets.token_hex(8)
    children = list(children)
    if not 1 <= len(children) <= MAX_ADD:
        raise InvalidWorkflowError(f"add 1..{MAX_ADD} children per call, got {len(children)}")
    _check_tree(_Check(queue, settings), children, 0, "the batch:")
    bk = _bk(queue, batch_id)
    info = yield from get_batch(cache, queue, batch_id)
    if info is None:
        raise BatchNotFoundError(f"no batch {batch_id!r} in {queue!r}")
    replicas = settings.durable_replicas if durable else 0
    results = yield from _waited([ops.add(bk, len(children), token)], replicas, settings)
    reserved: tuple[int, bool] = ok(results)[0]
    first, resent = reserved
    keep = info.retention_ms
    yield from _enqueue_children(
        cache, queue, batch_id, first, children, settings, keep, 0, not resent, replicas
    )
    return first


def seal_batch(
    cache: QueueCache,
    queue: str,
    batch_id: str,
    *,
    settings: ProducerSettings,
    durable: bool = False,
) -> Plan[None]:
    """Seal an open batch: it ends once every child has (at once when all already have)."""
    bk = _bk(queue, check_stored_id(batch_id))
    yield from producer_plans.meta(cache, queue)
    yield from _sealed(cache, queue, bk, settings, settings.durable_replicas if durable else 0)


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
    durable: bool = False,
) -> Plan[str]:
    """Create a chain and enqueue its first step; its id (``durable``: as
    :func:`create_batch`)."""
    cid = check_batch_id(chain_id) if chain_id is not None and not parent else chain_id
    cid = cid or new_batch_id()
    check = _Check(queue, settings)
    specs = _check_steps(check, list(steps), "the chain:")
    fields = _callbacks(check, on_success, on_complete, on_failure)
    fields += [(f"step:{i}", spec) for i, spec in enumerate(specs) if i > 0]
    keep = _retention(retention)
    bk = _bk(queue, cid)
    replicas = settings.durable_replicas if durable else 0
    created = yield from _open(
        cache, queue, bk, "chain", "fail", keep, len(specs), parent, fields, settings, replicas
    )
    bits = b"" if created else (yield from one(ops.seen_bits(bk)))
    if not bit(bits, 0):
        # Step 0 with its id as its idempotency key: a resent create never runs it twice.
        first = ops.request_of(specs[0], child_id(cid, 0), {"g": [cid, 0, 1]}, idempotent=True)
        yield from producer_plans.enqueue(cache, queue, first, settings, durable)
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


#: Errors that no resend of a fire can mend (the callback's request is refused for good: its
#: queue was deleted, its lanes turned off under a priority callback, a limit removed): the
#: fire is given up and the error kept in the record (``BatchInfo.fire_errors``), instead of
#: being retried with every relay round for ever.
GIVE_UP = (InvalidJobError, UnknownQueueError, LanesOffError, BatchNotFoundError)


class Settled(NamedTuple):
    """What :func:`settle` did: the fires done, those given up (name -> error), how many are
    left, and when the batch ended (ms; 0 while it runs)."""

    done: list[str]
    given_up: dict[str, str]
    left: int
    ended_ms: int


def _waited(
    calls: Sequence[Call[Any]], replicas: int, settings: ProducerSettings
) -> Plan[list[Any]]:
    """Each call's result; with ``replicas``, each node's calls followed by a WAIT (up to
    ``settings.durable_timeout``), and a call its node's replicas did not confirm answers
    NotDurableError (what it wrote stands on the primary: every workflow call is safe to
    repeat)."""
    if not replicas:
        return list((yield list(calls)))
    wait_ms = round(settings.durable_timeout * 1000)
    results, acked = yield Waiting(list(calls), replicas, wait_ms)
    return [
        r
        if isinstance(r, BaseException) or (n or 0) >= replicas
        else NotDurableError(
            f"{c.name} was written on the primary but only {n or 0} of {replicas} replica(s) "
            f"confirmed it within {wait_ms} ms. Calling again is safe (every workflow "
            "call is idempotent); check that the primary has a replica in sync.",
            [],
            [],
        )
        for c, r, n in zip(calls, results, acked, strict=True)
    ]


def settle(
    cache: QueueCache,
    queue: str,
    bk: keys.BatchKeys,
    fires: list[ops.Fire],
    ended_ms: int | None,
    settings: ProducerSettings,
    replicas: int = 0,
) -> Plan[Settled]:
    """Do what a batch's end calls for, each fire idempotent (a callback's and a step's id is
    derived from the batch's and is its idempotency key; a parent report sets a bit), take
    them off the record, and once the batch ended with nothing left, drop it from the
    unsettled set.  A fire refused for good (:data:`GIVE_UP`) is given up with its error kept;
    any other error is raised, the fires left listed for a resend.  With ``replicas``, each
    enqueue and report waits for that many replicas (the relay's: see docs/workflows.md)."""
    bid = bk.batch_id
    done: list[str] = []
    given_up: dict[str, str] = {}
    for f in fires:
        try:
            yield from _fire(cache, queue, bid, f, settings, replicas)
        except GIVE_UP as exc:
            given_up[f.name] = f"{type(exc).__name__}: {exc}"
            continue
        done.append(f.name)
    left, ended = 0, ended_ms or 0
    if fires:
        left, ended = yield from one(ops.fired(bk, done, given_up))
    if ended and not left:
        yield from one(ops.live_remove(queue, [bid]))
    return Settled(done, given_up, left, ended)


def _fire(
    cache: QueueCache,
    queue: str,
    bid: str,
    f: ops.Fire,
    settings: ProducerSettings,
    replicas: int,
) -> Plan[None]:
    if f.name in CALLBACKS:
        req = ops.request_of(f.body, callback_id(bid, f.name), {"gb": bid}, idempotent=True)
        yield from producer_plans.enqueue(
            cache, queue, req, _durable(settings, replicas), bool(replicas)
        )
    elif f.name.startswith("step:"):
        i = _stored_index(f.name[5:], f"fire {f.name!r} of {bid}")
        workflow = {"g": [bid, i, 1], "pr": _previous(f.extra)}
        req = ops.request_of(f.body, child_id(bid, i), workflow, idempotent=True)
        yield from producer_plans.enqueue(
            cache, queue, req, _durable(settings, replicas), bool(replicas)
        )
    elif f.name == "parent":
        parent, _, index = f.body.decode(errors="replace").partition("|")
        pbk = _bk(queue, check_stored_id(parent))
        end = ops.ChildEnd(_stored_index(index, f"parent {parent!r} of {bid}"), "dead", bid)
        if f.extra == b"ok":
            end = end._replace(outcome="ok")
        (reported,) = ok((yield from _waited([ops.report(pbk, [end])], replicas, settings)))
        if reported.known:
            yield from settle(
                cache, queue, pbk, reported.fires, reported.ended_ms, settings, replicas
            )


def _stored_index(text: str, what: str) -> int:
    """An index stored in a batch's record; InvalidWorkflowError (given up) for one no script
    writes."""
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        raise InvalidWorkflowError(f"{what}: index {text[:40]!r} is not one shardq writes")
    return int(text)


def _durable(settings: ProducerSettings, replicas: int) -> ProducerSettings:
    if not replicas or settings.durable_replicas == replicas:
        return settings
    return replace(settings, durable_replicas=replicas)


class Relayed(NamedTuple):
    """One relay round of a partition: entries relayed and dropped (no batch can take them),
    left for a later round (a fault), when each relayed child ended (ms, Redis clock), the
    fires done for them, for each callback enqueued when its batch had ended (ms), the fires
    given up (``<batch id> <fire>: <error>``), and where the next round reads the outbox
    (its HSCAN cursor: 0, from the start)."""

    relayed: int
    dropped: int
    left: int
    ended_ms: list[int]
    fires: list[str]
    callbacks_ended_ms: list[int]
    given_up: list[str]
    cursor: int = 0


#: A report's errors that no resend mends (its batch's record is not one shardq wrote): its
#: entries are dropped, as for a batch that no longer exists, rather than read again with
#: every round.
REPORT_REFUSED = (ScriptArgumentError, CorruptKeyError, MalformedRecordError)


def relay_partition(
    cache: QueueCache,
    queue: str,
    pk: keys.PartitionKeys,
    settings: ProducerSettings,
    replicas: int = 0,
    cursor: int = 0,
) -> Plan[Relayed]:
    """Relay one round of a partition's outbox: report each batch's entries in one call, do
    what the reports call for, and only then delete the entries (a relay that dies before
    leaves them for the next round, and a resent report changes nothing).  With
    ``replicas``, an entry is deleted only once its report was confirmed by that many replicas
    (a failover of the batch's primary cannot lose a count whose entry is gone).  Each batch
    stands alone: one whose report or fires fail leaves its own entries (a fault) or drops
    them (:data:`REPORT_REFUSED`), and the round reads on from ``cursor`` (``Relayed.cursor``
    for the next), so entries left behind never hold the others back."""
    read, bad, after = yield from one(ops.outbox_read(pk, cursor=cursor))
    if not read and not bad:
        return Relayed(0, 0, 0, [], [], [], [], after)
    entries, forged = yield from _ended(cache, queue, pk, read)
    by_batch: dict[str, list[ops.OutboxEntry]] = {}
    for e in entries:
        by_batch.setdefault(e.batch_id, []).append(e)
    calls = [
        ops.report(
            _bk(queue, bid), [ops.ChildEnd(e.child, e.outcome, e.job_id, e.value) for e in group]
        )
        for bid, group in by_batch.items()
    ]
    results = yield from _waited(calls, replicas, settings)
    relayed: list[ops.OutboxEntry] = []
    dropped = list(bad) + forged
    fires: list[str] = []
    callbacks: list[int] = []
    given_up: list[str] = []
    for (bid, group), r in zip(by_batch.items(), results, strict=True):
        if isinstance(r, REPORT_REFUSED):
            dropped += [e.job_id for e in group]  # a report no script takes, logged
            continue
        if isinstance(r, BaseException):
            continue  # left for the next round
        if not r.known:
            dropped += [e.job_id for e in group]  # its batch expired or never existed
            continue
        skipped = set(r.skipped)  # an index past the batch's children: no batch has it
        dropped += [e.job_id for n, e in enumerate(group) if n in skipped]
        if r.fires:
            try:
                done = yield from settle(
                    cache, queue, _bk(queue, bid), r.fires, r.ended_ms, settings, replicas
                )
            except ShardqError:
                continue  # the report is counted; the resend answers the fires again
            fires += done.done
            callbacks += [done.ended_ms for name in done.done if name in CALLBACKS]
            given_up += [f"{bid} {name}: {err}" for name, err in done.given_up.items()]
        elif r.ended_ms and r.counted:
            yield from one(ops.live_remove(queue, [bid]))  # ended, calling for nothing
        relayed += [e for n, e in enumerate(group) if n not in skipped]
    if relayed or dropped:
        yield from one(ops.outbox_delete(pk, [e.job_id for e in relayed] + dropped))
    left = len(read) + len(bad) - len(relayed) - len(dropped)
    return Relayed(
        len(relayed),
        len(dropped),
        left,
        [e.ended_ms for e in relayed],
        fires,
        callbacks,
        given_up,
        after,
    )


def _ended(
    cache: QueueCache, queue: str, pk: keys.PartitionKeys, entries: list[ops.OutboxEntry]
) -> Plan[tuple[list[ops.OutboxEntry], list[str]]]:
    """The entries that stand for a child's end, and the job ids of the others.  An entry
    counts only for the child it names (its field is ``<batch id>#<index>``), in the child's
    own partition, once the child's job is gone from there (completed: no envelope) or dead
    (then as dead, whatever the entry says).  The scripts that end a child write its entry
    and remove or bury its envelope in one call, so only a hand (a worker's raw HSET) writes
    one for a child still waiting or running: it is dropped, and counts nothing."""
    layout = yield from producer_plans.layout(cache, queue)
    named = [e for e in entries if e.job_id == child_id(e.batch_id, e.child)]
    here = [e for e in named if layout.is_home(pk, e.job_id)]
    states = (yield from one(ops.job_states(pk, [e.job_id for e in here]))) if here else []
    ended: list[ops.OutboxEntry] = []
    for e, state in zip(here, states, strict=True):
        if state is None:
            ended.append(e)
        elif state == b"D":
            ended.append(e if e.outcome == "dead" else e._replace(outcome="dead", value=b"dead"))
    kept = {e.job_id for e in ended}
    return ended, [e.job_id for e in entries if e.job_id not in kept]


#: A batch a producer began ending (seal, cancel) this long ago whose fires are still listed:
#: the producer died or hangs, and the sweep does them (each fire is idempotent, so a slow
#: producer doing them too changes nothing).  ms.
FIRING_GRACE_MS = 30_000
#: An unsettled id with no record this long after it was listed: its producer died between
#: listing it and creating the record (or the record expired): dropped.  ms.
LIVE_GRACE_MS = 60_000
#: Ids the sweep reads per round, in each set.
SWEEP_PAGE = 200


class Swept(NamedTuple):
    """One sweep round: batches and chains unsettled (the open-batches gauge), batches whose
    fires it did, ids it dropped from the unsettled set, where the next round goes on
    ((score, ids of that score already read)), and for each callback it enqueued when its
    batch had ended (ms)."""

    unsettled: int
    fired: int
    dropped: int
    cursor: tuple[int, int]
    callbacks_ended_ms: list[int]


def sweep(
    cache: QueueCache,
    queue: str,
    settings: ProducerSettings,
    now_ms: int,
    cursor: tuple[int, int] = (0, 0),
    replicas: int = 0,
) -> Plan[Swept]:
    """One round of the relay's sweep over a queue's batches (run by one dispatcher: the holder
    of the queue's first partition).  It does the fires of batches a producer began ending
    and left (:data:`FIRING_GRACE_MS`), and walks the unsettled set a page per round from
    ``cursor``, dropping ids that settled (their remover died) or never got a record, and
    doing the fires of any that ended long ago with fires listed.  Bounded: two pages."""
    fired = 0
    callbacks: list[int] = []
    stuck = yield from one(ops.firing_before(queue, now_ms - FIRING_GRACE_MS, SWEEP_PAGE))
    for bid, _ in stuck:
        bk = _bk(queue, bid)
        left = yield from one(ops.pending(bk))
        if left is not None and (left.fires or left.ended_ms):
            done = yield from settle(
                cache, queue, bk, left.fires, left.ended_ms, settings, replicas
            )
            fired += bool(left.fires)
            callbacks += [done.ended_ms for name in done.done if name in CALLBACKS]
        yield from one(ops.firing_remove(queue, [bid]))
    score, skip = cursor
    page = yield from one(ops.live_after(queue, score, skip, SWEEP_PAGE))
    states = ok((yield [ops.settled_state(_bk(queue, bid)) for bid, _ in page])) if page else []
    gone: list[str] = []
    for (bid, listed), (state, ended_ms, listed_fires) in zip(page, states, strict=True):
        if state is None:
            if listed < now_ms - LIVE_GRACE_MS:
                gone.append(bid)
        elif ended_ms and not listed_fires:
            gone.append(bid)
        elif ended_ms and ended_ms < now_ms - FIRING_GRACE_MS:
            bk = _bk(queue, bid)
            left = yield from one(ops.pending(bk))
            if left is not None:
                done = yield from settle(
                    cache, queue, bk, left.fires, left.ended_ms, settings, replicas
                )
                fired += 1
                callbacks += [done.ended_ms for name in done.done if name in CALLBACKS]
    if gone:
        yield from one(ops.live_remove(queue, gone))
    if len(page) < SWEEP_PAGE:
        cursor = (0, 0)  # the end: the next round starts over
    else:
        # Past the ids of the last score this round kept (those it dropped are gone, so the
        # next round's offset must not count them).
        last = page[-1][1]
        kept = sum(1 for bid, sc in page if sc == last and bid not in gone)
        cursor = (last, kept + (skip if last == score else 0))
    unsettled = yield from one(ops.live_count(queue))
    return Swept(unsettled, fired, len(gone), cursor, callbacks)


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
    # Listed as being ended from before the cancel until its fires (a parent report) are done:
    # a producer that dies in between leaves them to the relay's sweep.
    yield from one(ops.firing_add(queue, batch_id, _now_ms()))
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
        reports: list[ops.ChildEnd] = []
        missing: list[int] = []
        for i, jid, r in zip(part, ids, results, strict=True):
            if r is True:
                reports.append(ops.ChildEnd(i, "cancelled", jid))
                cancelled += 1
            elif isinstance(r, JobRunningError):
                running += 1
            elif isinstance(r, JobNotScheduledError):  # E_JOB_DEAD: its death was reported
                reports.append(ops.ChildEnd(i, "dead", jid))
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
                reports.append(ops.ChildEnd(i, "cancelled", jid))
                cancelled += 1
        if reports:  # CHUNK children at most: one call (ops.REPORT_MAX)
            yield from one(ops.report(bk, reports))
    # What the cancel calls for (a parent report, once every child ended), whichever call
    # above ended it.
    left = yield from one(ops.pending(bk))
    if left is not None:
        yield from settle(cache, queue, bk, left.fires, left.ended_ms, settings)
    yield from one(ops.firing_remove(queue, [batch_id]))
    return BatchCancel(batch_id, was, cancelled, running)
