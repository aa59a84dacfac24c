"""Batches and chains (shardq.workflows) on both topologies, against the raw Redis state: every
callback fires exactly once, counts are exact, results travel along chains, the outbox is
relayed idempotently (a resent report changes nothing, a relay killed between report and
delete loses and doubles nothing), and bad input writes nothing."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import pytest
from support.helpers import Runner, wait_for

from shardq import Batch, Chain, JobRequest, PermanentError
from shardq.client import AsyncClient, Client
from shardq.errors import (
    BatchClosedError,
    BatchNotFoundError,
    InvalidJobError,
    InvalidWorkflowError,
    UnknownQueueError,
)
from shardq.jobs import Job
from shardq.plans import workflows as workflow_plans
from shardq.store import keys
from shardq.store import workflows as ops


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
    first = client._run(ops.report(bk, 0, "ok", f"{bid}#0", b""))
    assert first.counted and not first.fires
    again = client._run(ops.report(bk, 0, "ok", f"{bid}#0", b""))
    assert again.known and not again.counted
    last = client._run(ops.report(bk, 1, "ok", f"{bid}#1", b""))
    assert [f.name for f in last.fires] == ["success"]
    # The relay dies after enqueueing the callback, before batch-fired: the resend redoes it.
    fires = client._run(ops.report(bk, 1, "ok", f"{bid}#1", b"")).fires
    assert [f.name for f in fires] == ["success"]
    for _ in range(2):
        for f in fires:
            req = ops.request_of(f.body, f"{bid}#success", {"gb": bid}, idempotent=True)
            client.enqueue_detailed(queue, req)  # twice: stored once (its idempotency key)
    assert client._run(ops.fired(bk, ["success"])) == 0
    info = client.batches.get(queue, bid)
    assert info is not None and (info.completed, info.state, info.fires_pending) == (
        2,
        "succeeded",
        (),
    )
    layout = client.layout(queue)
    stored = sum(client.redis.hlen(pk.jobs) for pk in layout.active())
    assert stored == 3  # the two waiting children (reported by hand here) and one callback
    bad = client._run(ops.report(keys.batch_keys(queue, "nope"), 0, "ok", "x", b""))
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
    from shardq.store import delivery, transport

    client.create_queue(queue, partitions=1)
    bid = client.batches.create(queue, [JobRequest("child", {})], on_failure=cb("failure"))
    pk = keys.partition_keys(queue, 0, 1)
    got = transport.run(client.redis, delivery.fetch(pk, "c1", 1)).jobs
    assert [j.raw_id.decode() for j in got] == [f"{bid}#0"]
    reclaimed = transport.run(
        client.redis,
        delivery.reclaim(
            pk, "c2", visibility_ms=0, orphan_idle_ms=0, live=[], count=10, max_deliveries=1
        ),
    )
    assert not reclaimed.jobs  # dead, not handed over
    (raw,) = client.redis.hvals(pk.outbox)
    entry = ops._entry(f"{bid}#0", raw)
    assert entry is not None and (entry.batch_id, entry.child, entry.outcome) == (bid, 0, "dead")
    assert b"delivery limit" in entry.value
    relayed = client._drive(
        workflow_plans.relay_partition(client._queues, queue, pk, client.settings), "relaying"
    )
    assert (relayed.relayed, relayed.fires) == (1, ["failure"])
    info = client.batches.get(queue, bid)
    assert info is not None and (info.state, info.dead) == ("failed", 1)
    assert client.get(queue, f"{bid}#failure") is not None
    assert client.redis.hlen(pk.outbox) == 0
