"""An idle queue: what its fleet still does on time while it waits as little as it can.

Idle, a dispatcher promotes a partition only every ``max_idle_sleep`` (30 s by default), its
lease loop renews the leases the promotes no longer extend, and a worker reads an empty
partition every ``max_idle_poll`` and asks Redis which partitions hold a delivery to reclaim
before it sends a reclaim (docs/capacity.md, "Idle cost").  These tests take the fallbacks
away altogether (10 minutes) and check that nothing a user waits for waited for them: a job
enqueued into the idle queue starts within the lateness budget (hints wake both loops), the
leases of partitions nobody promoted for many lease times are still this dispatcher's, and a
delivery a dead worker left pending (one that was not pending at the previous reclaim round
too) is taken over within the bounds it always was.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace

from support.helpers import (
    FAST_DISPATCHER,
    FAST_WORKER,
    Runner,
    Runs,
    pending_total,
    scaled,
    wait_for,
)
from support.monitor import by_name, monitored

from shardq import DispatcherSettings, ProducerSettings
from shardq.client import Client
from shardq.store import delivery, keys, producer
from shardq.store.transport import SyncTransport

# Hints only: no fallback promote or read comes within a test's length.
NEVER = 600.0
# What a job may take on top of the budget here: Redis and network time, and a test box that
# runs other tests at once (times SHARDQ_TEST_TIME_FACTOR).  Far below any fallback (NEVER),
# so a job this punctual was woken by a hint.
SLACK_MS = scaled(250)


def test_a_job_enqueued_into_an_idle_queue_starts_within_the_lateness_budget(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    client = cluster_client
    partitions = 8
    client.create_queue(queue, partitions)
    # A short lease: an idle partition is never promoted here, so only the lease loop's
    # renewals keep it (a third of the lease time, 1 s, with renew_interval 0.5 s).
    dispatcher = DispatcherSettings(
        lease_time=3.0, renew_interval=0.5, membership_timeout=2.0, max_sleep=NEVER
    )
    worker = replace(FAST_WORKER, idle_poll=NEVER, max_idle_poll=NEVER, sweep_interval=NEVER)
    budget_ms = dispatcher.lateness_budget * 1000
    runs = Runs()
    with Runner(
        cluster_url,
        queue,
        {"t": runs.add},
        dispatcher_settings=dispatcher,
        worker_settings=worker,
    ) as runner:
        d = runner.dispatcher
        assert d is not None and d.leases is not None
        tokens = dict(d.tokens)
        assert len(tokens) == partitions
        time.sleep(4 * dispatcher.lease_time)  # idle: every loop asleep until a hint
        assert d.tokens == tokens, "an idle partition's lease was lost (or taken again)"
        assert d.leases.counts.get("lost", 0) == 0 and d.leases.counts.get("fenced", 0) == 0
        ids = {client.enqueue(queue, "t", i) for i in range(8)}  # due now: straight to ready
        ids |= {client.enqueue(queue, "t", i, delay=0.4 + 0.05 * i) for i in range(16)}
        wait_for(lambda: set(runs.count()) == ids, 30, lambda: f"{len(runs.jobs)} ran")
        runner.check()
    late = {j.id: j.fetched_redis_ms - (j.due_ms or 0) for j in runs.jobs}
    assert all(v >= 0 for v in late.values()), late  # never early
    assert max(late.values()) <= budget_ms + SLACK_MS, sorted(late.values())


def test_a_dead_workers_delivery_is_reclaimed_where_none_was_pending_before(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """The recoverer sends its reclaim only to partitions with a delivery idle long enough
    (XPENDING IDLE, asked every round): a partition with nothing pending for several rounds
    and then a dead worker's delivery is reclaimed all the same, and so is one pending before
    the worker started."""
    client, r = cluster_client, cluster_client.redis
    partitions = 4
    client.create_queue(queue, partitions)
    first = client.enqueue(queue, "t", "before")
    pk = keys.partition_keys(queue, keys.partition_for(first, partitions), partitions)
    taken = SyncTransport(r).run(delivery.fetch(pk, "crashed-before", 10))  # never acked
    assert [j.raw_id for j in taken.jobs] == [first.encode()]
    runs = Runs()
    # Readers that never read on their own, and no dispatcher: the test promotes the second
    # job itself, and only reclaim hands the dead workers' jobs over.
    worker = replace(FAST_WORKER, idle_poll=NEVER, max_idle_poll=NEVER, sweep_interval=NEVER)
    with Runner(
        cluster_url, queue, {"t": runs.add}, dispatcher=False, worker_settings=worker
    ) as runner:
        wait_for(lambda: first in runs.count(), 20, "the delivery pending at start not reclaimed")
        w = runner.workers[0]
        assert w.recoverer is not None
        wait_for(lambda: pending_total(r, queue, partitions) == 0, 10, "the first not settled")
        rounds = w.recoverer.rounds
        wait_for(lambda: w.recoverer.rounds >= rounds + 3, 20, "no rounds with nothing pending")
        # A dead worker takes a job in another partition: made due and fetched (its read
        # promotes) in one MULTI, so the live worker's read on the due hint finds nothing.  The
        # job waits far in the future until then, so no read of the live worker's takes it.
        other = keys.partition_keys(queue, (pk.partition + 1) % partitions, partitions)
        second = client.enqueue(
            queue, "t", "after", job_id=_id_in(other.partition, partitions), delay=600
        )
        node = r.get_redis_connection(r.get_node_from_key(other.due))  # type: ignore[union-attr]
        pipe = node.pipeline(transaction=True)
        made_due = producer.reschedule(other, second, None, 0, ProducerSettings())
        pipe.execute_command(*made_due.command())
        pipe.execute_command(*delivery.fetch(other, "crashed-after", 10, promote=True).command())
        _due_ms, fetched = pipe.execute()
        assert fetched[2:], fetched  # {now, next due, jobs...}: the dead worker holds it
        taken_at = time.monotonic()
        wait_for(lambda: second in runs.count(), 20, "the new pending delivery not reclaimed")
        # taken once idle past the orphan bound (two heartbeats, 1 s), within a round or two
        assert time.monotonic() - taken_at < scaled(5)
        runner.check()
        assert w.stats.reclaimed == 2
    jobs = {j.id: j for j in runs.jobs}
    assert jobs[first].attempt == 2 and jobs[first].deliveries == 2
    assert jobs[second].attempt == 2 and jobs[second].deliveries == 2
    wait_for(lambda: pending_total(r, queue, partitions) == 0, 10, "deliveries left pending")


def _id_in(partition: int, partitions: int) -> str:
    """A job id that routes to ``partition``."""
    i = 0
    while True:
        job_id = f"idle-{i}"
        if keys.partition_for(job_id, partitions) == partition:
            return job_id
        i += 1


def test_an_idle_workers_calls_do_not_grow_with_its_partitions(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """An idle worker alone (no dispatcher, no jobs) over 8 and over 512 partitions: its calls
    over the same window differ by a small factor, not by 64 (its reclaim probes and idle
    reads used to be per partition per interval: P / reclaim_interval and P / max_idle_poll
    a second).  The settings make each interval short, so the window holds many of them."""
    worker = replace(
        FAST_WORKER, reclaim_interval=0.5, idle_poll=0.25, max_idle_poll=1.0, sweep_interval=1.0
    )
    window = scaled(6.0)
    counts: dict[int, Counter[str]] = {}
    for partitions in (8, 512):
        name = f"{queue}-{partitions}"
        cluster_client.create_queue(name, partitions)
        with Runner(cluster_url, name, {}, dispatcher=False, worker_settings=worker) as runner:
            w = runner.workers[0]
            # Start-up reads every partition (and the recoverer probes every one) once: an
            # event, not idle cost.  Then the window, idle.
            rec = w.recoverer
            assert rec is not None
            wait_for(lambda rec=rec: rec.rounds >= 1, 20, "no reclaim round")
            time.sleep(scaled(3.0))
            with monitored(cluster_client.redis, name) as commands:
                time.sleep(window)
            runner.check()
            seen = by_name(commands)
            # the janitor's round is once a minute: in a window or not, by chance
            counts[partitions] = Counter({k: v for k, v in seen.items() if k != "prune-consumers"})
    small, large = counts[8], counts[512]
    assert small["fetch"] > 0 and small["xpending"] > 0, small  # the safety nets do run
    # 64 times the partitions: at most 3 times the calls (a burst of idle reads may fall in
    # the window at 512), where it used to be ~60 times.
    assert sum(large.values()) <= 3 * sum(small.values()) + 50, (small, large)
    for name in ("fetch", "xpending"):
        assert large[name] <= 3 * small[name] + 50, (name, small, large)


# The calls a dispatcher makes per partition that this test bounds (lease renewals and the
# heartbeat are the lease loop's, bounded on their own: test_lease_liveness).
PER_PARTITION = ("promote", "trim", "partition-stats", "schedule-read", "hscan")


def test_an_idle_dispatchers_calls_do_not_grow_with_the_partitions_it_holds(
    cluster_url: str, cluster_client: Client
) -> None:
    """Issue 54, 1: an idle dispatcher's promotes, trims, snapshots, schedule reads and outbox
    reads come at a bounded rate whatever the partitions it holds: its calls over the same
    window at 512 partitions are within a small factor of those at 16 (before: 32x, each
    partition looked at every max_idle_sleep, 31 trim rounds, 6 metrics rounds...).  Short
    intervals make the difference show within seconds."""
    settings = replace(
        FAST_DISPATCHER, max_idle_sleep=1.0, metrics_interval=0.25, trim_interval=0.25
    )
    window = scaled(8)
    idle: dict[int, Counter[str]] = {}
    for partitions in (16, 512):
        queue = f"t-idle-{partitions}-{time.monotonic_ns() % 10**9}"
        cluster_client.create_queue(queue, partitions)
        with Runner(cluster_url, queue, workers=0, dispatcher_settings=settings) as runner:
            d = runner.dispatcher
            assert d is not None and d.promoter is not None
            # Start-up looks at every partition (won leases, the wake-up after subscribing):
            # wait for them to be over, then count an idle window.
            wait_for(
                lambda d=d: sum(d.supervisor.state(n).rounds for n in ("sample", "trim")) > 8,
                scaled(20),
                "no sampling and trimming rounds",
            )
            time.sleep(scaled(3))
            with monitored(cluster_client.redis, queue) as commands:
                time.sleep(window)
            runner.check()
        seen = by_name(commands)
        idle[partitions] = Counter({k: seen[k] for k in PER_PARTITION})
    small, large = sum(idle[16].values()), sum(idle[512].values())
    assert large <= 3 * small + 20 * window, idle  # (before: about 32x)
