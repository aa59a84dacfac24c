"""Resizing a live queue, written once (docs/design/resize.md): the steps a driver
(:mod:`shardq.admin.resize`) runs, each safe to run again after a crash at any point.

1. :func:`begin`: pick the next generation, record the resize (phase ``preparing``), make the
   new generation's partitions (control hash with the queue's flags, consumer group) and name
   it in the meta as the coming one: the fleet serves it from its next read of the meta.
   Then, once the fleet has taken it up (the driver waits), :func:`switch` seals every old
   partition (it takes no new job and points by-id calls at the new generation) and switches
   the meta: producers route to the new generation, the fleet already serves both
   (phase ``moving``).
2. :func:`move_round`, again and again: take a batch of waiting work out of each old partition
   (schedules, due jobs, retrying, compact members, dead letters), store each record in its
   partition of the new generation, drop the batch; then :func:`move_idempotency` copies the
   idempotency records and the kept results (again once the old partitions are empty: a job
   that completed last in the old generation kept its result there).  Ready and running jobs
   are drained in place by the fleet.
3. :func:`commit` once every old partition is empty: the meta stops naming the old generation,
   its keys are deleted but for the sealed control hashes (tombstones that redirect a process
   whose meta is older).
4. :func:`abort`, before the commit: the same resize run backwards (the new generation is
   sealed and drained into the old one, which is unsealed and active again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from shardq.errors import InvalidJobError, QueueConfigConflictError, ShardqError
from shardq.plans import Plan, each, ok, one
from shardq.plans import producer as producer_plans
from shardq.store import fleet, inspection, keys, queues
from shardq.store import resize as ops
from shardq.store.meta import QueueCache, QueueMeta
from shardq.store.op import Call, Waiting

#: Old partitions worked on in one round of calls (each call bounded by ops.BATCH records).
PARTITIONS_PER_ROUND = 64
#: How long a round's puts wait for a replica to confirm them (WAIT); one not confirmed by
#: then stays held in its old partition and is put again (recognised) by the next round.
PUT_WAIT_MS = 500
#: SCAN COUNT of the idempotency pass.
SCAN_COUNT = 1000


class ResizeError(ShardqError):
    """A resize cannot start, go on or be aborted as asked; the message says why and what to
    run instead."""


@dataclass(frozen=True, slots=True)
class State:
    """A queue's resize as recorded in ``{sq:<queue>}:resize`` (empty: never resized)."""

    raw: dict[str, str] = field(default_factory=dict)

    @property
    def phase(self) -> str:
        """'' (none), 'preparing', 'moving', 'retiring', 'done', 'aborted'."""
        return self.raw.get("phase", "")

    @property
    def running(self) -> bool:
        return self.phase in ("preparing", "moving", "retiring")

    def generation(self, which: str) -> tuple[int, int]:
        """``(generation, partitions)`` of 'from' or 'to'."""
        g, _, n = self.raw[which].partition(":")
        return int(g), int(n)

    @property
    def aborting(self) -> bool:
        return self.raw.get("aborting") == "1"


def state(queue: str) -> Plan[State]:
    return State((yield from one(ops.state_read(queue))))


def _check_count(partitions: int) -> None:
    if (
        isinstance(partitions, bool)
        or not isinstance(partitions, int)
        or not 1 <= partitions <= keys.MAX_PARTITIONS
    ):
        raise InvalidJobError(
            f"partitions must be an integer 1..{keys.MAX_PARTITIONS}, got {partitions!r}"
        )


def begin(cache: QueueCache, queue: str, partitions: int) -> Plan[State]:
    """Start resizing ``queue`` to ``partitions`` (or finish starting one a crash cut short);
    returns the recorded state: phase ``preparing`` (the driver runs :func:`switch` once the
    fleet serves the new generation), or the phase a running resize is in."""
    _check_count(partitions)
    was = yield from state(queue)
    read = yield from producer_plans.read_meta(cache, queue)
    if was.running:
        to = was.generation("to")
        if to[1] != partitions and not was.aborting:
            raise ResizeError(
                f"queue {queue!r} is being resized to {to[1]} partitions: finish it with "
                f"`shardq queue resize --queue {queue} --resume` (or --abort) first"
            )
        if was.phase == "preparing":
            yield from _prepare(cache, queue, read, was.generation("from"), to)
            return (yield from state(queue))
        return was
    if read.draining is not None:
        raise ResizeError(
            f"queue {queue!r} has generation {read.draining[0]} draining but no resize recorded "
            f"({keys.resize_key(queue)} was deleted by hand?): run `shardq queue resize "
            f"--queue {queue} --partitions {read.partitions} --resume`"
        )
    if partitions == read.partitions:
        raise QueueConfigConflictError(
            f"queue {queue!r} already has {partitions} partitions: nothing to resize"
        )
    last = yield from one(ops.meta_field(queue, ops.LAST_GENERATION_FIELD))
    used = max(read.generation, int(last) if last and last.isdigit() else 0)
    old, new = (read.generation, read.partitions), (used + 1, partitions)
    yield from one(
        ops.state_write(
            queue,
            {
                "phase": "preparing",
                "from": f"{old[0]}:{old[1]}",
                "to": f"{new[0]}:{new[1]}",
                "aborting": "0",
                "started_ms": int(time.time() * 1000),
                "moved": 0,
                "idempotency_moved": 0,
                "results_moved": 0,
                "rounds": 0,
            },
        )
    )
    yield from _prepare(cache, queue, read, old, new)
    return (yield from state(queue))


def _prepare(
    cache: QueueCache, queue: str, read: QueueMeta, old: tuple[int, int], new: tuple[int, int]
) -> Plan[None]:
    """Make the new generation's partitions and name them in the meta as the coming ones
    (each step safe to repeat); :func:`switch` goes on once the fleet serves them."""
    old_pks = keys.all_partition_keys(queue, old[1], old[0])
    new_pks = keys.all_partition_keys(queue, new[1], new[0])
    yield from producer_plans.control(new_pks)
    lanes = yield from one(queues.meta_field(queue, "lanes"))
    if lanes == "1":
        yield from each([inspection.lanes(pk, True) for pk in new_pks])
    snaps = yield from each([inspection.partition_stats(pk, "") for pk in old_pks])
    if snaps and all(s.paused for s in snaps):
        yield from each([inspection.pause(pk, True) for pk in new_pks])
    queues.groups_made((yield [queues.group_create(pk) for pk in new_pks]))
    # An abort moves jobs back into partitions a crash may have left sealed: open them first.
    yield from each([ops.seal(pk, None) for pk in new_pks])
    if new[0] != read.generation:
        # (An abort before the switch goes back to the active generation: served already.)
        yield from one(ops.announce_meta(queue, new))
    announced: dict[str, str | int] = {"announced_ms": int(time.time() * 1000)}
    yield from one(ops.state_write(queue, announced))


def unserved(queue: str, was: State, among: list[int] | None = None) -> Plan[list[int]]:
    """The new generation's partitions (of ``among``, indexes; default all) no dispatcher
    holds the lease of yet; none when no dispatcher holds an old one either (a queue no
    dispatcher serves has nothing to wait for)."""
    old, new = was.generation("from"), was.generation("to")
    new_pks = keys.all_partition_keys(queue, new[1], new[0])
    chosen = [new_pks[p] for p in among] if among is not None else new_pks
    infos = yield from each([fleet.lease_info(pk) for pk in chosen])
    waiting = [pk.partition for pk, info in zip(chosen, infos, strict=True) if info.owner is None]
    if not waiting:
        return []
    old_pks = keys.all_partition_keys(queue, old[1], old[0])
    held = yield from each([fleet.lease_info(pk) for pk in old_pks])
    return waiting if any(info.owner is not None for info in held) else []


def switch(cache: QueueCache, queue: str, was: State) -> Plan[State]:
    """Seal the old generation and make the new one the queue's (phase ``moving``): producers
    route there from now on.  Run once the fleet serves the new generation (the driver waits
    for that after :func:`begin`); safe to repeat."""
    old, new = was.generation("from"), was.generation("to")
    old_pks = keys.all_partition_keys(queue, old[1], old[0])
    yield from each([ops.seal(pk, new) for pk in old_pks])
    yield from one(ops.begin_meta(queue, new, old))
    moving: dict[str, str | int] = {"phase": "moving", "moving_ms": int(time.time() * 1000)}
    yield from one(ops.state_write(queue, moving))
    cache.forget(queue)
    return (yield from state(queue))


@dataclass(slots=True)
class Round:
    """What one :func:`move_round` did."""

    moved: int = 0  # records stored in the new generation
    batches: int = 0
    longest_ms: float = 0.0  # the slowest round of calls (each call is one bounded script)


def move_round(
    queue: str,
    was: State,
    partitions: list[int] | None = None,
    batch: int = ops.BATCH,
    replicas: int = 0,
) -> Plan[Round]:
    """Take one batch (up to ``batch`` records) out of each old partition (``partitions``:
    some of them), store it in the new generation, drop it.  ``replicas``: a batch is dropped
    only once that many replicas have its puts (WAIT; at most as many as the target's primary
    has, :class:`~shardq.store.op.Waiting` ``per_node``), so a primary killed just after a put
    cannot take moved jobs with it; a batch left held is put again (and recognised) by the
    next round."""
    old, new = was.generation("from"), was.generation("to")
    old_pks = keys.all_partition_keys(queue, old[1], old[0])
    chosen = [old_pks[p] for p in partitions] if partitions is not None else old_pks
    done = Round()
    for start in range(0, len(chosen), PARTITIONS_PER_ROUND):
        group = chosen[start : start + PARTITIONS_PER_ROUND]
        t0 = time.perf_counter()
        stored, batches = yield from _carry(queue, new, group, batch, replicas)
        done.moved += stored
        done.batches += batches
        done.longest_ms = max(done.longest_ms, (time.perf_counter() - t0) * 1000)
    if done.moved:
        yield from one(ops.state_add(queue, "moved", done.moved))
    return done


def move_idempotency(
    queue: str, was: State, routes: list[str], kind: str = keys.IDEM_KIND
) -> Plan[int]:
    """Copy every idempotency record of the old generation to the key's partition in the new
    one (with its remaining retention), then delete the old record; returns how many moved.
    With ``kind`` ``result``: the kept results, each to its job id's partition (where a
    by-id read looks once the old generation is gone).  ``routes``: one key per primary
    (``primary_routes()`` of :mod:`shardq.store.transport`)."""
    old, new = was.generation("from"), was.generation("to")
    pattern = ops.idem_pattern(queue, old[0], kind)
    cursors = dict.fromkeys(routes, "0")
    moved = 0
    while cursors:
        steps = ok((yield [queues.scan(r, c, pattern, SCAN_COUNT) for r, c in cursors.items()]))
        found: list[str] = []
        following: dict[str, str] = {}
        for route, (cursor, names) in zip(cursors, steps, strict=True):
            found += [n for n in names if _in_generation(queue, n, old[0])]
            if cursor != "0":
                following[route] = cursor
        cursors = following
        if not found:
            continue
        read_calls: list[Call[Any]] = []
        for n in found:
            read_calls += [ops.idem_read(n), ops.idem_ttl(n)]
        reads = ok((yield read_calls))
        copies: list[Call[Any]] = []
        copied: list[str] = []
        for i, name in enumerate(found):
            job_id, ttl = reads[2 * i], reads[2 * i + 1]
            key = ops.idem_key_of(name, kind)
            if key is None or job_id is None:
                continue
            target = keys.partition_keys(queue, keys.partition_for(key, new[1]), new[1], new[0])
            to = target.idem(key) if kind == keys.IDEM_KIND else target.result(key)
            copies.append(ops.idem_copy(to, job_id, ttl if ttl > 0 else 1))
            copied.append(name)
        ok((yield copies))
        yield from each([queues.unlink([name]) for name in copied])
        moved += len(copied)
    if moved:
        counter = "idempotency_moved" if kind == keys.IDEM_KIND else "results_moved"
        yield from one(ops.state_add(queue, counter, moved))
    return moved


def _in_generation(queue: str, name: str, generation: int) -> bool:
    found = keys.partition_of_key(name)
    return found is not None and found[0] == queue and found[1] // keys.MAX_PARTITIONS == generation


def left(queue: str, was: State) -> Plan[list[ops.Left]]:
    """What each old partition still holds."""
    old = was.generation("from")
    return (
        yield from each([ops.left(pk) for pk in keys.all_partition_keys(queue, old[1], old[0])])
    )


def commit(cache: QueueCache, queue: str, was: State) -> Plan[State]:
    """End the resize once the old generation is empty (checked again here; ResizeError when
    it is not): the meta stops naming it, so the fleet stops serving it (phase 'retiring':
    :func:`retire` deletes its keys once every process has read the meta again)."""
    holding = [i for i, lf in enumerate((yield from left(queue, was))) if not lf.empty]
    if holding:
        raise ResizeError(
            f"old partitions {holding[:10]} of queue {queue!r} still hold jobs: move on "
            "(`shardq queue resize --resume`) before committing"
        )
    yield from one(ops.end_meta(queue))
    yield from one(
        ops.state_write(queue, {"phase": "retiring", "committed_ms": int(time.time() * 1000)})
    )
    cache.forget(queue)
    return (yield from state(queue))


def retire(cache: QueueCache, queue: str, was: State) -> Plan[State]:
    """Delete the emptied generation's keys but its sealed control hashes (the tombstones that
    redirect a process whose meta is older), its owners entries and the new generation's
    inbound sets; the resize is done."""
    old, new = was.generation("from"), was.generation("to")
    old_pks = keys.all_partition_keys(queue, old[1], old[0])
    yield from each([ops.retire(pk) for pk in old_pks])
    yield from one(ops.owners_forget(queue, [pk.fleet_id for pk in old_pks]))
    new_pks = keys.all_partition_keys(queue, new[1], new[0])
    yield from each([queues.unlink([pk.inbound]) for pk in new_pks])
    phase = "aborted" if was.aborting else "done"
    yield from one(ops.state_write(queue, {"phase": phase, "finished_ms": int(time.time() * 1000)}))
    cache.forget(queue)
    return (yield from state(queue))


def abort(cache: QueueCache, queue: str) -> Plan[State]:
    """Turn a running resize around: its jobs go back to the old generation, which becomes the
    active one again; the driver then moves them as for any resize and commits."""
    was = yield from state(queue)
    if not was.running:
        raise ResizeError(f"queue {queue!r} has no resize running to abort")
    if was.phase == "retiring":
        raise ResizeError(
            f"the resize of {queue!r} is committed (its old partitions are being deleted): "
            f"resize again to go back (`shardq queue resize --queue {queue} --partitions N`)"
        )
    if was.aborting:
        return was
    old, new = was.generation("from"), was.generation("to")
    read = yield from producer_plans.read_meta(cache, queue)
    if was.phase == "moving":
        # Batches a killed driver left taken out of old partitions go where they were going.
        old_pks = keys.all_partition_keys(queue, old[1], old[0])
        stuck = [i for i, lf in enumerate((yield from left(queue, was))) if lf.moving]
        if stuck:
            yield from _flush(queue, was, [old_pks[i] for i in stuck])
    yield from one(
        ops.state_write(
            queue,
            {
                "phase": "preparing",
                "from": f"{new[0]}:{new[1]}",
                "to": f"{old[0]}:{old[1]}",
                "aborting": "1",
            },
        )
    )
    yield from _prepare(cache, queue, read, new, old)
    return (yield from state(queue))


def _carry(
    queue: str,
    new: tuple[int, int],
    pks: list[keys.PartitionKeys],
    batch: int = ops.BATCH,
    replicas: int = 0,
) -> Plan[tuple[int, int]]:
    """Take a batch out of each of ``pks``, store each record in its partition of ``new`` (one
    put per batch and target: the target's inbound set then recognises a resend), drop the
    batches whose puts ``replicas`` replicas confirmed; returns (records stored now, batches
    dropped)."""
    taken = yield from each([ops.take(pk, batch) for pk in pks])
    puts: list[Call[int]] = []
    owner: list[int] = []  # the taken batch (index into pks) of each put
    for i, t in enumerate(taken):
        if t.batch is None:
            continue
        by_target: dict[int, list[ops.Record]] = {}
        for r in t.records:
            by_target.setdefault(keys.partition_for(r.key, new[1]), []).append(r)
        for p, records in by_target.items():
            target = keys.partition_keys(queue, p, new[1], new[0])
            puts.append(ops.put(target, t.batch, records))
            owner.append(i)
    unconfirmed: set[int] = set()
    if replicas and puts:
        # Per node: a target primary left without a replica (a failover) waits for none, and
        # does not make every other primary's puts go unconfirmed.
        results, acked = yield Waiting(puts, replicas, PUT_WAIT_MS, per_node=True)
        stored = ok(results)
        unconfirmed = {i for i, n in zip(owner, acked, strict=True) if (n or 0) < replicas}
    else:
        stored = yield from each(puts)
    held = [
        (pk, t.batch)
        for i, (pk, t) in enumerate(zip(pks, taken, strict=True))
        if t.batch and i not in unconfirmed
    ]
    yield from each([ops.ack(pk, batch) for pk, batch in held])
    return sum(stored), len(held) + len(unconfirmed)


def _flush(queue: str, was: State, pks: list[keys.PartitionKeys]) -> Plan[None]:
    """Carry on the batches taken out of ``pks`` and not dropped (a take answers the held
    batch again)."""
    yield from _carry(queue, was.generation("to"), pks)
