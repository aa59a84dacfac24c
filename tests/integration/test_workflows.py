"""Batches and chains (shardq.workflows) on both topologies, against the raw Redis state: every
callback fires exactly once, counts are exact, results travel along chains, the outbox is
relayed idempotently (a resent report changes nothing, a relay killed between report and
delete loses and doubles nothing), and bad input writes nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any, TypeVar

import pytest
from support.helpers import Runner, wait_for

from shardq import Batch, Chain, JobRequest, PermanentError
from shardq.client import AsyncClient, Client
from shardq.errors import (
    BatchClosedError,
    BatchNotFoundError,
    InvalidJobError,
    InvalidWorkflowError,
    NotDurableError,
    ScriptArgumentError,
    UnknownQueueError,
)
from shardq.jobs import Job
from shardq.plans import Plan, one
from shardq.plans import workflows as workflow_plans
from shardq.store import keys
from shardq.store import workflows as ops

T = TypeVar("T")


class Seen:
    """What the handlers saw, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: Counter[str] = Counter()
        self.callbacks: list[tuple[str, str | None, Any]] = []
        self.previous: dict[str, Any] = {}

    def handlers(self) -> dict[str, Any]:
        def child(job: Job) -> Any:
            with self.lock:
                self.runs[job.id] += 1
            if isinstance(job.payload, dict) and job.payload.get("fail"):
                raise PermanentError("asked to fail")
            return {"n": job.payload.get("n") if isinstance(job.payload, dict) else None}

        def step(job: Job) -> Any:
            with self.lock:
                self.runs[job.id] += 1
                self.previous[job.id] = job.previous
            if job.payload.get("fail"):
                raise PermanentError("step failed")
            before = job.previous["total"] if job.previous else 0
            return {"total": before + job.payload["add"]}

        def callback(job: Job) -> None:
            with self.lock:
                self.callbacks.append((job.payload["name"], job.batch_id, job.id))

        return {"child": child, "step": step, "callback": callback}

    def fired(self, name: str) -> int:
        with self.lock:
            return sum(1 for n, _, _ in self.callbacks if n == name)


def cb(name: str) -> JobRequest:
    return JobRequest("callback", {"name": name})


def done(client: Client, queue: str, bid: str) -> Any:
    info = client.batches.get(queue, bid)
    return info is not None and info.ended and not info.fires_pending


def test_batch_success_fires_each_callback_once(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=8)
    seen = Seen()
    with Runner(url, queue, seen.handlers()):
        bid = client.batches.create(
            queue,
            [JobRequest("child", {"n": i}) for i in range(300)],
            on_success=cb("success"),
            on_complete=cb("complete"),
            on_failure=cb("failure"),
        )
        wait_for(lambda: done(client, queue, bid), 30, "the batch did not end")
        wait_for(lambda: seen.fired("success") and seen.fired("complete"), 10, "no callbacks")
        info = client.batches.get(queue, bid)
        assert info is not None
        assert (info.state, info.total, info.completed, info.dead, info.pending) == (
            "succeeded",
            300,
            300,
            0,
            0,
        )
        assert info.ttl_ms is not None and info.ttl_ms > 0  # expires after its retention
        # Children spread over every partition (their ids route by CRC32).
        parts = {keys.partition_for(f"{bid}#{i}", 8) for i in range(300)}
        assert parts == set(range(8))
    assert seen.fired("success") == 1 and seen.fired("complete") == 1
    assert seen.fired("failure") == 0
    assert all(b == bid for _, b, _ in seen.callbacks)
    assert sum(seen.runs.values()) == 300
    # Every outbox is empty once relayed.
    layout = client.layout(queue)
    assert all(client.redis.hlen(pk.outbox) == 0 for pk in layout.active())


@pytest.mark.parametrize("policy", ["fail", "continue", "ignore"])
def test_failed_child_policies(url: str, client: Client, queue: str, policy: str) -> None:
    client.create_queue(queue, partitions=4)
    seen = Seen()
    children = [JobRequest("child", {"n": i, "fail": i == 3}) for i in range(20)]
    with Runner(url, queue, seen.handlers()):
        bid = client.batches.create(
            queue,
            children,
            policy=policy,  # type: ignore[arg-type]
            on_success=cb("success"),
            on_complete=cb("complete"),
            on_failure=cb("failure"),
        )
        wait_for(lambda: done(client, queue, bid), 30, "the batch did not end")
        want = {"fail": ("failure", "complete"), "continue": ("failure", "complete")}
        names = want.get(policy, ("success", "complete"))
        wait_for(lambda: all(seen.fired(n) for n in names), 10, "callbacks missing")
        info = client.batches.get(queue, bid)
    assert info is not None and (info.completed, info.dead) == (19, 1)
    assert info.state == ("succeeded" if policy == "ignore" else "failed")
    assert info.reason is not None and info.reason.startswith(f"{bid}#3: ")
    assert "asked to fail" in info.reason
    for name in ("success", "complete", "failure"):
        assert seen.fired(name) == (1 if name in names else 0), name


def test_chain_passes_results_and_a_dead_step_stops_it(
    url: str, client: Client, queue: str
) -> None:
    client.create_queue(queue, partitions=8)
    seen = Seen()
    with Runner(url, queue, seen.handlers()):
        good = client.batches.chain(
            queue,
            [JobRequest("step", {"add": n}) for n in (1, 2, 3, 4)],
            on_success=cb("success"),
        )
        bad = client.batches.chain(
            queue,
            [JobRequest("step", {"add": 1}), JobRequest("step", {"fail": True, "add": 0})]
            + [JobRequest("step", {"add": 9})] * 3,
            on_success=cb("success"),
            on_failure=cb("failure"),
            on_complete=cb("complete"),
        )
        for cid in (good, bad):
            wait_for(lambda cid=cid: done(client, queue, cid), 30, f"chain {cid} did not end")
        wait_for(lambda: len(seen.callbacks) == 3, 10, "callbacks missing")
        g, b = client.batches.get(queue, good), client.batches.get(queue, bad)
    assert g is not None and (g.kind, g.state, g.completed, g.total) == ("chain", "succeeded", 4, 4)
    assert [seen.previous[f"{good}#{i}"] for i in range(4)] == [
        None,
        {"total": 1},
        {"total": 3},
        {"total": 6},
    ]
    assert b is not None and (b.state, b.completed, b.dead, b.cancelled) == ("failed", 1, 1, 3)
    assert b.reason is not None and "step failed" in b.reason
    assert seen.runs[f"{bad}#2"] == 0  # steps after the dead one never run
    assert sorted(n for n, _, _ in seen.callbacks) == ["complete", "failure", "success"]
    assert {b_ for n, b_, _ in seen.callbacks if n == "success"} == {good}


def test_nested_batches_and_a_chain_in_a_batch(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=8)
    seen = Seen()
    with Runner(url, queue, seen.handlers()):
        bid = client.batches.create(
            queue,
            [
                JobRequest("child", {"n": 0}),
                Batch([JobRequest("child", {"n": i}) for i in range(10)], on_success=cb("inner")),
                Chain([JobRequest("step", {"add": 5}), JobRequest("step", {"add": 6})]),
            ],
            on_success=cb("outer"),
        )
        wait_for(lambda: done(client, queue, bid), 30, "the outer batch did not end")
        wait_for(lambda: seen.fired("outer") and seen.fired("inner"), 10, "callbacks missing")
        outer = client.batches.get(queue, bid)
        inner = client.batches.get(queue, f"{bid}~1")
        chain = client.batches.get(queue, f"{bid}~2")
    assert outer is not None and (outer.state, outer.completed, outer.total) == ("succeeded", 3, 3)
    assert inner is not None and inner.parent == f"{bid}|1" and inner.state == "succeeded"
    assert chain is not None and chain.kind == "chain" and chain.state == "succeeded"
    assert seen.previous[f"{bid}~2#1"] == {"total": 5}
    assert seen.fired("outer") == 1 and seen.fired("inner") == 1


def test_open_batch_add_and_seal(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=4)
    seen = Seen()
    with Runner(url, queue, seen.handlers()):
        bid = client.batches.open(queue, batch_id="nightly-1", on_complete=cb("complete"))
        assert (
            client.batches.add(queue, bid, [JobRequest("child", {"n": i}) for i in range(5)]) == 0
        )
        wait_for(lambda: sum(seen.runs.values()) == 5, 20, "children did not run")
        wait_for(
            lambda: (i := client.batches.get(queue, bid)) is not None and i.completed == 5,
            10,
            "the children's ends were not counted",
        )
        info = client.batches.get(queue, bid)
        # Every child ended, but an open batch does not end before it is sealed.
        assert info is not None and info.state == "open" and info.completed == 5 and not info.ended
        assert client.batches.add(queue, bid, [JobRequest("child", {"n": 9})]) == 5
        client.batches.seal(queue, bid)
        client.batches.seal(queue, bid)  # safe to repeat
        with pytest.raises(BatchClosedError):
            client.batches.add(queue, bid, [JobRequest("child", {})])
        wait_for(lambda: done(client, queue, bid), 20, "the batch did not end")
        wait_for(lambda: seen.fired("complete"), 10, "no complete callback")
    assert seen.fired("complete") == 1
    info = client.batches.get(queue, bid)
    assert info is not None and (info.total, info.completed) == (6, 6)


def test_empty_sealed_batch_ends_at_once(client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=4)
    bid = client.batches.create(queue, [], on_complete=cb("complete"))
    info = client.batches.get(queue, bid)
    assert info is not None and info.state == "succeeded" and info.ended
    # Its callback was enqueued by the create itself, with a derived id.
    job = client.get(queue, f"{bid}#complete")
    assert job is not None and job.type == "callback"


def test_cancel_batch_cancels_waiting_children(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=4)
    bid = client.batches.create(
        queue,
        [JobRequest("child", {"n": i}, delay=3600) for i in range(50)],
        on_success=cb("success"),
        on_complete=cb("complete"),
    )
    assert client.cancel(queue, f"{bid}#7")  # one cancelled by hand: found by the cancel
    out = client.batches.cancel(queue, bid)
    assert (out.was, out.cancelled_children, out.running_children) == ("running", 50, 0)
    info = client.batches.get(queue, bid)
    assert info is not None and (info.state, info.cancelled, info.pending) == ("cancelled", 50, 0)
    assert info.ended and not info.fires_pending
    again = client.batches.cancel(queue, bid)
    assert again.cancelled_children == 0 and again.was == "cancelled"
    for name in ("success", "complete"):
        assert client.get(queue, f"{bid}#{name}") is None  # a cancelled batch fires nothing
    assert client.get(queue, f"{bid}#0") is None


def test_resent_report_and_killed_relay_count_once(client: Client, queue: str) -> None:
    """The relay's steps one at a time: a report resent after a crash counts nothing, answers
    the fires again, and the callback enqueued twice is stored once."""
    client.create_queue(queue, partitions=4)
    bid = client.batches.create(
        queue, [JobRequest("child", {}, delay=3600) for _ in range(2)], on_success=cb("success")
    )
    bk = keys.batch_keys(queue, bid)
    first = client.run(one(ops.report(bk, [ops.ChildEnd(0, "ok", f"{bid}#0")])), "test")
    assert first.counted == 1 and not first.fires and not first.ended_ms
    again = client.run(one(ops.report(bk, [ops.ChildEnd(0, "ok", f"{bid}#0")])), "test")
    assert again.known and not again.counted
    last = client.run(one(ops.report(bk, [ops.ChildEnd(1, "ok", f"{bid}#1")])), "test")
    assert [f.name for f in last.fires] == ["success"] and last.ended_ms > 0
    # The relay dies after enqueueing the callback, before batch-fired: the resend redoes it.
    fires = client.run(one(ops.report(bk, [ops.ChildEnd(1, "ok", f"{bid}#1")])), "test").fires
    assert [f.name for f in fires] == ["success"]
    for _ in range(2):
        for f in fires:
            req = ops.request_of(f.body, f"{bid}#success", {"gb": bid}, idempotent=True)
            client.enqueue_detailed(queue, req)  # twice: stored once (its idempotency key)
    assert client.run(one(ops.fired(bk, ["success"])), "test") == (0, last.ended_ms)
    info = client.batches.get(queue, bid)
    assert info is not None and (info.completed, info.state, info.fires_pending) == (
        2,
        "succeeded",
        (),
    )
    layout = client.layout(queue)
    stored = sum(client.redis.hlen(pk.jobs) for pk in layout.active())
    assert stored == 3  # the two waiting children (reported by hand here) and one callback
    bad = client.run(
        one(ops.report(keys.batch_keys(queue, "nope"), [ops.ChildEnd(0, "ok", "x")])), "test"
    )
    assert not bad.known


def test_outbox_written_with_the_ack_and_relayed_later(
    url: str, client: Client, queue: str
) -> None:
    """No dispatcher runs while the children complete: their ends wait in the outboxes,
    written by the ack itself, and a dispatcher started later relays every one."""
    client.create_queue(queue, partitions=4)
    seen = Seen()
    with Runner(url, queue, seen.handlers(), dispatcher=False):
        bid = client.batches.create(
            queue, [JobRequest("child", {"n": i}) for i in range(40)], on_success=cb("success")
        )
        # Jobs due now go straight to the ready stream: no dispatcher needed to run them.
        wait_for(lambda: sum(seen.runs.values()) == 40, 20, "children did not run")
        layout = client.layout(queue)
        wait_for(
            lambda: sum(client.redis.hlen(pk.outbox) for pk in layout.active()) == 40,
            10,
            "the outboxes do not hold every end",
        )
        info = client.batches.get(queue, bid)
        assert info is not None and info.completed == 0
    with Runner(url, queue, seen.handlers()):
        wait_for(lambda: done(client, queue, bid), 20, "the relay did not deliver")
        wait_for(lambda: seen.fired("success"), 10, "no callback")
    assert seen.fired("success") == 1
    assert sum(client.redis.hlen(pk.outbox) for pk in layout.active()) == 0


def test_async_client_batches(url: str, queue: str) -> None:
    async def main() -> None:
        async with AsyncClient(url) as client:
            await client.create_queue(queue, partitions=4)
            bid = await client.batches.create(queue, [JobRequest("child", {"n": 1})])
            info = await client.batches.get(queue, bid)
            assert info is not None and info.total == 1 and info.state == "running"
            cid = await client.batches.chain(queue, [JobRequest("step", {"add": 1})])
            listed = {b.batch_id for b in await client.batches.list(queue)}
            assert {bid, cid} <= listed
            out = await client.batches.cancel(queue, cid)
            assert out.cancelled_children == 1

    asyncio.run(main())


def test_bad_input_writes_nothing(client: Client, queue: str) -> None:
    with pytest.raises(UnknownQueueError):
        client.batches.create(queue, [JobRequest("child")])
    client.create_queue(queue, partitions=4)
    bad: list[tuple[Any, ...]] = [
        ([JobRequest("child", job_id="mine")], {}),
        ([JobRequest("child", idempotency_key="k")], {}),
        (["not a request"], {}),
        ([JobRequest("child")], {"policy": "sometimes"}),
        ([JobRequest("child")], {"batch_id": "has space"}),
        ([JobRequest("child")], {"retention": 0}),
        ([JobRequest("child")], {"on_success": JobRequest("cb", job_id="x")}),
        ([Batch([Batch([Batch([Batch([JobRequest("child")])])])])], {}),
    ]
    for children, kwargs in bad:
        with pytest.raises(InvalidWorkflowError):
            client.batches.create(queue, children, **kwargs)
    with pytest.raises(InvalidWorkflowError):
        client.batches.chain(queue, [])
    # The jobs themselves are checked as their enqueue would, however deep, before any write.
    nan = JobRequest("child", {"x": float("nan")})
    for children, kwargs in [
        ([JobRequest("child"), Batch([JobRequest("child"), nan])], {}),
        ([JobRequest("child")], {"on_complete": JobRequest("bad type!")}),
        ([Chain([JobRequest("step"), JobRequest("step", "x" * 70_000)])], {}),
    ]:
        with pytest.raises(InvalidJobError):
            client.batches.create(queue, children, **kwargs)
    with pytest.raises(InvalidJobError):
        client.batches.chain(queue, [JobRequest("step"), nan])
    with pytest.raises(BatchNotFoundError):
        client.batches.add(queue, "missing", [JobRequest("child")])
    assert client.batches.list(queue) == []
    layout = client.layout(queue)
    assert all(client.redis.hlen(pk.jobs) == 0 for pk in layout.active())
    # A batch id taken by another batch of another size is refused.
    client.batches.create(queue, [JobRequest("child", delay=60)], batch_id="taken")
    with pytest.raises(InvalidWorkflowError):
        client.batches.create(queue, [JobRequest("child")] * 2, batch_id="taken")
    # The same create resent is its own retry: nothing doubles.
    client.batches.create(queue, [JobRequest("child", delay=60)], batch_id="taken")
    assert sum(client.redis.hlen(pk.jobs) for pk in layout.active()) == 1


def test_a_poison_child_reclaimed_dead_is_reported(client: Client, queue: str) -> None:
    """A child whose deliveries reach the limit (its workers died each time) is dead-lettered
    by the reclaim script, which writes its end into the outbox in the same call."""
    from shardq.store import delivery

    client.create_queue(queue, partitions=1)
    bid = client.batches.create(queue, [JobRequest("child", {})], on_failure=cb("failure"))
    pk = keys.partition_keys(queue, 0, 1)
    got = client.transport.run(delivery.fetch(pk, "c1", 1)).jobs
    assert [j.raw_id.decode() for j in got] == [f"{bid}#0"]
    reclaimed = client.transport.run(
        delivery.reclaim(
            pk, "c2", visibility_ms=0, orphan_idle_ms=0, live=[], count=10, max_deliveries=1
        ),
    )
    assert not reclaimed.jobs  # dead, not handed over
    (raw,) = client.redis.hvals(pk.outbox)
    entry = ops._entry(f"{bid}#0", raw)
    assert entry is not None and (entry.batch_id, entry.child, entry.outcome) == (bid, 0, "dead")
    assert b"delivery limit" in entry.value
    relayed = client.run(
        workflow_plans.relay_partition(client.cache, queue, pk, client.settings), "relaying"
    )
    assert (relayed.relayed, relayed.fires) == (1, ["failure"])
    info = client.batches.get(queue, bid)
    assert info is not None and (info.state, info.dead) == ("failed", 1)
    assert client.get(queue, f"{bid}#failure") is not None
    assert client.redis.hlen(pk.outbox) == 0


def _stored(client: Client, queue: str) -> int:
    """Jobs stored in the queue's partitions (waiting, ready or running)."""
    return sum(client.redis.hlen(pk.jobs) for pk in client.layout(queue).active())


def _outboxes(client: Client, queue: str) -> int:
    return sum(client.redis.hlen(pk.outbox) for pk in client.layout(queue).active())


def test_a_producer_dead_after_its_seal_leaves_the_fires_to_the_sweep(
    url: str, client: Client, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every child ended before the seal (common for a small batch), and the producer died
    between the seal that ended the batch and the callbacks' enqueue: the holder of partition
    0 finds the batch in the firing set and enqueues each callback once."""
    from shardq.dispatcher import relay as relay_module

    client.create_queue(queue, partitions=4)
    seen = Seen()
    bid = client.batches.open(queue, on_success=cb("success"), on_complete=cb("complete"))
    with Runner(url, queue, seen.handlers()):
        client.batches.add(queue, bid, [JobRequest("child", {"n": i}) for i in range(3)])
        wait_for(
            lambda: (client.batches.get(queue, bid) or ops).completed == 3,  # type: ignore[union-attr]
            20,
            "the children's ends were not counted",
        )
    bk = keys.batch_keys(queue, bid)
    # The producer's seal, then its death: the fires stay listed.
    client.run(one(ops.firing_add(queue, bid, 1)), "test")
    ended_ms, fires = client.run(one(ops.seal(bk)), "test")
    assert ended_ms > 0 and sorted(f.name for f in fires) == ["complete", "success"]
    info = client.batches.get(queue, bid)
    assert (
        info is not None
        and info.state == "succeeded"
        and set(info.fires_pending)
        == {
            "success",
            "complete",
        }
    )
    assert client.redis.zscore(keys.batches_live_key(queue), bid) is not None
    monkeypatch.setattr(relay_module, "SWEEP_EVERY", 0.3)
    with Runner(url, queue, seen.handlers()):
        wait_for(lambda: seen.fired("success") and seen.fired("complete"), 20, "no sweep")
        wait_for(lambda: relay_module.OPEN.labels(queue)._value.get() == 0, 10, "gauge not updated")
    assert seen.fired("success") == 1 and seen.fired("complete") == 1
    info = client.batches.get(queue, bid)
    assert info is not None and info.fires_pending == () and info.fired_ms is not None
    assert info.fired_ms >= info.ended_ms  # type: ignore[operator]
    assert info.ttl_ms is not None  # settled: its record now expires after its retention
    assert client.redis.zcard(keys.batches_firing_key(queue)) == 0
    assert client.redis.zcard(keys.batches_live_key(queue)) == 0


def test_a_resent_create_does_not_rerun_children_whose_ends_wait_in_outboxes(
    url: str, client: Client, queue: str
) -> None:
    """The children completed but no dispatcher relayed their ends yet (they are neither
    stored nor counted): a create called again with the same batch id enqueues none of them."""
    client.create_queue(queue, partitions=4)
    seen = Seen()
    children = [JobRequest("child", {"n": i}) for i in range(30)]
    with Runner(url, queue, seen.handlers(), dispatcher=False):
        bid = client.batches.create(queue, children, on_success=cb("success"))
        wait_for(lambda: _outboxes(client, queue) == 30, 20, "the ends are not all in outboxes")
    # Half relayed (counted), half still in the outboxes: the resend skips both.
    layout = client.layout(queue)
    for pk in layout.active()[:2]:
        client.run(
            workflow_plans.relay_partition(client.cache, queue, pk, client.settings), "relay"
        )
    assert 0 < _outboxes(client, queue) < 30
    assert client.batches.create(queue, children, batch_id=bid, on_success=cb("success")) == bid
    assert _stored(client, queue) == 0  # nothing enqueued again
    with Runner(url, queue, seen.handlers()):
        wait_for(lambda: done(client, queue, bid), 20, "the batch did not end")
        wait_for(lambda: seen.fired("success"), 10, "no callback")
    assert sum(seen.runs.values()) == 30 and set(seen.runs.values()) == {1}
    assert seen.fired("success") == 1


def test_an_add_with_an_add_id_is_safe_to_repeat(url: str, client: Client, queue: str) -> None:
    """A producer that reserved indexes and died before enqueueing the children calls add again
    with the same add id: the same indexes are filled, and a repeat of a finished add adds
    nothing; a repeat with another number of children is refused."""
    client.create_queue(queue, partitions=4)
    seen = Seen()
    bid = client.batches.open(queue, batch_id="parts-1", on_success=cb("success"))
    bk = keys.batch_keys(queue, bid)
    part = [JobRequest("child", {"n": i}) for i in range(5)]
    assert client.batches.add(queue, bid, part, add_id="part-1") == 0
    assert client.batches.add(queue, bid, part, add_id="part-1") == 0  # a repeat: nothing new
    # A restarted producer repeats its open too: the batch grew since, and that is no conflict.
    assert client.batches.open(queue, batch_id="parts-1", on_success=cb("success")) == bid
    # part-2: reserved, then the producer died (no child enqueued); it is then sealed.
    assert client.run(one(ops.add(bk, 5, "part-2")), "test") == (5, False)
    client.batches.seal(queue, bid)
    assert _stored(client, queue) == 5
    # The restarted producer repeats its add: indexes 5..9 are filled although it is sealed.
    assert client.batches.add(queue, bid, part, add_id="part-2") == 5
    assert _stored(client, queue) == 10
    with pytest.raises(ScriptArgumentError):
        client.batches.add(queue, bid, part[:3], add_id="part-2")
    with pytest.raises(BatchClosedError):
        client.batches.add(queue, bid, part, add_id="part-3")  # sealed: no new part
    with pytest.raises(InvalidWorkflowError):
        client.batches.add(queue, bid, part, add_id="no|bars")
    with Runner(url, queue, seen.handlers()):
        wait_for(lambda: done(client, queue, bid), 20, "the batch did not end")
        wait_for(lambda: seen.fired("success"), 10, "no callback")
    info = client.batches.get(queue, bid)
    assert info is not None and (info.total, info.completed) == (10, 10)
    assert sum(seen.runs.values()) == 10 and seen.fired("success") == 1


def test_a_fire_refused_for_good_is_given_up_and_shown(
    url: str, client: Client, queue: str
) -> None:
    """A priority callback on a queue whose lanes are off is refused by every enqueue: the
    relay gives it up once, with the error kept in the batch's record, instead of trying again
    with every round; the other callback is enqueued."""
    client.create_queue(queue, partitions=4)
    seen = Seen()
    with Runner(url, queue, seen.handlers()):
        bid = client.batches.create(
            queue,
            [JobRequest("child", {"n": 1})],
            on_success=JobRequest("callback", {"name": "success"}, priority="high"),
            on_complete=cb("complete"),
        )
        wait_for(lambda: done(client, queue, bid), 20, "the batch did not end")
        wait_for(lambda: seen.fired("complete"), 10, "no complete callback")
    info = client.batches.get(queue, bid)
    assert info is not None and info.state == "succeeded" and info.fires_pending == ()
    assert len(info.fire_errors) == 1 and info.fire_errors[0].startswith("success: LanesOffError")
    assert seen.fired("success") == 0 and seen.fired("complete") == 1
    assert _outboxes(client, queue) == 0


def _counting(plan: Plan[T], seen: list[str]) -> Plan[T]:
    """``plan``, recording the name of every script call it sends."""
    reply: Any = None
    try:
        while True:
            batch = plan.send(reply)
            calls = batch.calls if hasattr(batch, "calls") else batch
            seen.extend(getattr(getattr(c, "script", None), "name", "") for c in calls)
            reply = yield batch
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def test_one_report_call_per_batch_per_round(url: str, client: Client, queue: str) -> None:
    """A round of a partition's outbox reports each batch's entries in one call."""
    client.create_queue(queue, partitions=2)
    seen = Seen()
    with Runner(url, queue, seen.handlers(), dispatcher=False):
        bids = [
            client.batches.create(queue, [JobRequest("child", {"n": i}) for i in range(40)])
            for _ in range(3)
        ]
        wait_for(lambda: _outboxes(client, queue) == 120, 20, "the ends are not all in outboxes")
    for pk in client.layout(queue).active():
        names: list[str] = []
        entries = client.redis.hlen(pk.outbox)
        plan = workflow_plans.relay_partition(client.cache, queue, pk, client.settings)
        relayed = client.run(_counting(plan, names), "test")
        assert relayed.relayed == entries and relayed.left == 0
        assert names.count("batch-report") == 3  # one per batch, not one per child
    for bid in bids:
        info = client.batches.get(queue, bid)
        assert info is not None and (info.completed, info.state) == (40, "succeeded")
    assert client.redis.zcard(keys.batches_live_key(queue)) == 0


def test_the_sweep_drops_settled_and_recordless_ids_and_counts_the_open(
    client: Client, queue: str
) -> None:
    """The unsettled set loses an id whose remover died (a batch that settled) and one whose
    producer died before creating its record, and its size is the open-batches gauge."""
    client.create_queue(queue, partitions=2)
    open_bid = client.batches.create(queue, [JobRequest("child", delay=3600)])
    ended = client.batches.create(queue, [])  # ends at its seal
    assert client.redis.zscore(keys.batches_live_key(queue), ended) is None
    live = keys.batches_live_key(queue)
    client.redis.zadd(live, {ended: 5, "never-made": 1, "just-listed": 10**13})
    now = int(time.time() * 1000)
    swept = client.run(workflow_plans.sweep(client.cache, queue, client.settings, now), "sweep")
    assert swept.dropped == 2 and swept.unsettled == 2 and swept.cursor == (0, 0)
    assert set(client.redis.zrange(live, 0, -1)) == {open_bid.encode(), b"just-listed"}


def test_the_sweep_walks_a_page_at_a_time(
    client: Client, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.create_queue(queue, partitions=2)
    monkeypatch.setattr(workflow_plans, "SWEEP_PAGE", 3)
    live = keys.batches_live_key(queue)
    client.redis.zadd(live, {f"gone-{i}": 7 for i in range(5)} | {"late": 9})
    cursor = (0, 0)
    dropped = 0
    for expected in ((7, 0), (9, 0), (0, 0)):
        swept = client.run(
            workflow_plans.sweep(client.cache, queue, client.settings, 10**12, cursor), "sweep"
        )
        cursor = swept.cursor
        dropped += swept.dropped
        assert cursor == expected
    assert dropped == 6 and client.redis.zcard(live) == 0


def test_the_relay_waits_for_a_replica_before_deleting(
    url: str, cluster_url: str, client: Client, queue: str
) -> None:
    """With a replica to wait for, the relay deletes an entry once its count was confirmed."""
    if url != cluster_url:
        pytest.skip("a standalone node has no replica")
    client.create_queue(queue, partitions=2)
    seen = Seen()
    with Runner(url, queue, seen.handlers(), dispatcher=False):
        bid = client.batches.create(
            queue, [JobRequest("child", {"n": i}) for i in range(10)], on_success=cb("s")
        )
        wait_for(lambda: _outboxes(client, queue) == 10, 20, "the ends are not all in outboxes")
    for pk in client.layout(queue).active():
        relayed = client.run(
            workflow_plans.relay_partition(client.cache, queue, pk, client.settings, 1), "relay"
        )
        assert relayed.left == 0
    info = client.batches.get(queue, bid)
    assert info is not None and info.state == "succeeded" and info.fires_pending == ()
    assert client.get(queue, f"{bid}#success") is not None


def test_a_durable_batch_is_confirmed_by_a_replica_or_says_so(
    url: str, cluster_url: str, client: Client, queue: str
) -> None:
    """``durable=True``: on the cluster (a replica per primary) the record, children and seal
    are confirmed; a standalone node has no replica, so the create says NotDurableError after
    writing the record, and the same call again is safe (it finds the record)."""
    client.create_queue(queue, partitions=4)
    children = [JobRequest("child", {"n": i}, delay=3600) for i in range(20)]
    if url == cluster_url:
        bid = client.batches.create(queue, children, on_success=cb("s"), durable=True)
        cid = client.batches.chain(queue, [JobRequest("step", {"add": 1})], durable=True)
        assert _stored(client, queue) == 21
    else:
        with pytest.raises(NotDurableError):
            client.batches.create(queue, children, batch_id="d-1", durable=True)
        bid = client.batches.create(queue, children, batch_id="d-1")  # the resend completes it
        assert bid == "d-1" and _stored(client, queue) == 20
        cid = None
    info = client.batches.get(queue, bid)
    assert info is not None and (info.state, info.total) == ("running", 20)
    if cid is not None:
        chain = client.batches.get(queue, cid)
        assert chain is not None and chain.kind == "chain"


def test_the_outbox_wakes_the_relay_once_until_it_is_emptied(
    standalone_url: str, standalone_client: Client, queue: str
) -> None:
    """A child's end publishes the relay's hint only when the outbox was empty: a batch's
    children ending together wake the relay once, and the round it runs reads them all."""
    import redis as redis_lib

    from shardq.store import delivery, results

    client = standalone_client
    client.create_queue(queue, partitions=1)
    bid = client.batches.create(queue, [JobRequest("child", {"n": i}) for i in range(5)])
    pk = keys.partition_keys(queue, 0, 1)
    raw = redis_lib.Redis.from_url(standalone_url)
    sub = raw.pubsub()
    try:
        sub.ssubscribe(pk.due_hint)
        deadline = time.monotonic() + 5
        while sub.get_message(timeout=0.1) is None and time.monotonic() < deadline:
            pass  # the subscription's confirmation
        got = client.transport.run(delivery.fetch(pk, "c", 10)).jobs
        assert len(got) == 5
        for d in got:  # one complete call each, as five workers would
            done = results.Completion(
                d.entry_id, d.raw_id, 0, b"", f"{bid}|{d.raw_id.decode().split('#')[1]}", b""
            )
            client.transport.run(results.complete(pk, [done]))
        assert client.redis.hlen(pk.outbox) == 5
        hints = []
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            m = sub.get_message(timeout=0.1)
            if m and m["type"] == "smessage":
                hints.append(m["data"])
        assert hints == [b"o"]
        relayed = client.run(
            workflow_plans.relay_partition(client.cache, queue, pk, client.settings), "relay"
        )
        assert relayed.relayed == 5 and client.redis.hlen(pk.outbox) == 0
    finally:
        sub.close()
        raw.close()


def test_a_malformed_outbox_entry_is_refused_alone(url: str, client: Client, queue: str) -> None:
    """One entry with an outcome no script writes used to have its batch's whole report
    refused, and every end of that batch in the round dropped (issue 50, M4): now it is
    dropped alone and the others count."""
    client.create_queue(queue, partitions=2)
    seen = Seen()
    with Runner(url, queue, seen.handlers(), dispatcher=False):
        bid = client.batches.create(queue, [JobRequest("child", {"n": i}) for i in range(20)])
        wait_for(lambda: _outboxes(client, queue) == 20, 20, "the ends are not all in outboxes")
    pk = client.layout(queue).active()[0]
    entries = client.redis.hgetall(pk.outbox)
    assert len(entries) > 1
    victim = sorted(entries)[0]
    batch, index, _, ms, value = entries[victim].split(b"|", 4)
    client.redis.hset(pk.outbox, victim, b"|".join([batch, index, b"bogus", ms, value]))
    relayed = client.run(
        workflow_plans.relay_partition(client.cache, queue, pk, client.settings), "test"
    )
    assert (relayed.relayed, relayed.dropped, relayed.left) == (len(entries) - 1, 1, 0)
    info = client.batches.get(queue, bid)
    assert info is not None and info.completed == len(entries) - 1


def test_a_stored_spec_that_does_not_decode_gives_its_batch_up_alone(
    url: str, client: Client, queue: str
) -> None:
    """A batch whose stored callback spec is not JSON stopped its partitions' relay for good,
    holding every other batch's ends there (issue 50, M3): now that fire is given up, kept in
    the record (`batch get`), and the relay goes on with the rest."""
    client.create_queue(queue, partitions=2)
    seen = Seen()
    children = [JobRequest("child", {"n": i}) for i in range(30)]
    broken = client.batches.create(
        queue, children, on_success=cb("broken"), on_complete=cb("broken-complete")
    )
    fine = client.batches.create(queue, children, on_success=cb("fine"))
    client.redis.hset(keys.batch_keys(queue, broken).record, "cb:success", b"{not json")
    with Runner(url, queue, seen.handlers()):
        wait_for(lambda: done(client, queue, fine), 30, "the other batch did not settle")
        wait_for(lambda: done(client, queue, broken), 30, "the broken batch did not settle")
        wait_for(lambda: seen.fired("fine") and seen.fired("broken-complete"), 10, "no callbacks")
        wait_for(lambda: _outboxes(client, queue) == 0, 10, "entries left in the outboxes")
    info = client.batches.get(queue, broken)
    assert info is not None and info.state == "succeeded" and info.fires_pending == ()
    assert len(info.fire_errors) == 1
    assert info.fire_errors[0].startswith("success: InvalidWorkflowError"), info.fire_errors
    assert seen.fired("broken") == 0 and seen.fired("fine") == 1
