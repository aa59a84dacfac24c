"""The dispatcher fleet: fair-share leases, crash and shutdown handover, fencing, rebalancing.

Dispatchers run as real `shardq dispatcher run` processes (SIGKILL, SIGSTOP and SIGTERM need a
process of their own); the worker runs in-process and counts handler runs per job.
"""

from __future__ import annotations

import random
import signal
import time

import pytest
from click.testing import CliRunner
from support.helpers import FAST_WORKER, Runner, Runs, queue_settled, ready_job_ids, wait_for
from support.procs import Proc

from bench.fleet import lease_owners, spread_ok
from shardq import JobRequest, admin
from shardq.cli import main as cli
from shardq.client import Client
from shardq.dispatcher import fair_share
from shardq.store import keys

LEASE = 2.0
RENEW = 0.5


def promoted_once(client: Client, queue: str, partitions: int, ids: set[str]) -> None:
    """Each job has exactly one ready entry (the queue keeps acknowledged entries): it was
    promoted, or enqueued straight to ready, exactly once, whoever held its partition."""
    in_ready = ready_job_ids(client.redis, queue, partitions)
    assert set(in_ready) == ids, f"{len(ids - set(in_ready))} jobs never reached ready"
    twice = [j for j, c in in_ready.items() if c > 1]
    assert not twice, f"{len(twice)} jobs promoted more than once, e.g. {twice[:3]}"


def start_dispatcher(url: str, queue: str, *extra: str) -> Proc:
    return Proc.dispatcher(
        url,
        queue,
        "--lease-time",
        str(LEASE),
        "--renew-interval",
        str(RENEW),
        "--membership-timeout",
        str(LEASE),
        "--max-sleep",
        "0.2",
        *extra,
    )


def wait_joined(client: Client, queue: str, dispatchers: int) -> None:
    wait_for(
        lambda: client.redis.zcard(keys.dispatchers_key(queue)) >= dispatchers,
        30,
        f"{dispatchers} dispatchers did not join",
    )


def stop_all(procs: list[Proc]) -> None:
    for p in procs:
        p.cleanup()


def test_fair_share_floor_and_ceiling() -> None:
    members = [f"d{i}" for i in range(7)]
    shares = [fair_share(256, members, m) for m in members]
    assert sum(shares) == 256
    assert set(shares) == {36, 37}
    assert fair_share(256, members, "not-a-member") == 0
    assert fair_share(5, ["a", "b"], "a") == 3 and fair_share(5, ["a", "b"], "b") == 2


def test_fleet_churn_loses_nothing_and_promotes_once(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """20,000 jobs due while 3 dispatchers start, one is killed, two are added, one gets SIGTERM:
    0 lost, 0 promoted twice, every partition owned at the end."""
    partitions = 32
    n = 20_000
    cluster_client.create_queue(queue, partitions, ack_retention=3600)
    runs = Runs()
    procs: list[Proc] = []
    with Runner(
        cluster_url,
        queue,
        {"t": runs.add},
        dispatcher=False,
        workers=1,
        worker_settings=FAST_WORKER,
    ):
        try:
            now = time.time()
            results = cluster_client.enqueue_many(
                queue, [JobRequest("t", i, run_at=now + 1 + 8 * i / n) for i in range(n)]
            )
            ids = {r.job_id for r in results}
            procs = [start_dispatcher(cluster_url, queue) for _ in range(3)]
            time.sleep(random.uniform(1.0, 3.5))  # seeded: SHARDQ_TEST_SEED repeats it
            procs[0].kill9()
            procs += [start_dispatcher(cluster_url, queue) for _ in range(2)]
            time.sleep(random.uniform(0.5, 3.0))
            # The graceful stop of a running dispatcher: one still importing on a loaded box
            # has no handler yet, and SIGTERM ends it as -15 (with nothing to release).
            wait_for(lambda: "started on" in procs[1].log(), 30, "dispatcher 1 did not start")
            assert procs[1].stop() == 0
            wait_for(lambda: len(runs.count()) >= n, 60, "not every job ran")
            wait_for(
                lambda: queue_settled(cluster_client.redis, queue, partitions),
                30,
                "queue did not settle",
            )
            live = 3  # procs 2, 3, 4
            wait_for(
                lambda: spread_ok(lease_owners(cluster_client.redis, queue, partitions), live),
                4 * LEASE,
                "spread did not converge",
            )
        finally:
            stop_all(procs)
    counts = runs.count()
    assert set(counts) == ids, "jobs lost"
    assert max(counts.values()) == 1, "a job ran twice"
    promoted_once(cluster_client, queue, partitions, ids)


def test_sigkill_takeover_within_lease_plus_renewal(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    partitions = 16
    cluster_client.create_queue(queue, partitions)
    procs = [start_dispatcher(cluster_url, queue) for _ in range(2)]
    try:
        wait_for(
            lambda: spread_ok(lease_owners(cluster_client.redis, queue, partitions), 2),
            4 * LEASE,
            "two dispatchers did not split the partitions",
        )
        victim = procs[0]
        victim.kill9()
        # The survivor takes every partition once the victim's membership and leases expire.
        # How soon is a benchmark figure (`python -m bench.fleet`), not asserted here.
        wait_for(
            lambda: spread_ok(lease_owners(cluster_client.redis, queue, partitions), 1),
            10 * LEASE,
            "partitions not taken over",
        )
    finally:
        stop_all(procs)


def test_sigterm_hands_back_at_once(cluster_client: Client, cluster_url: str, queue: str) -> None:
    partitions = 16
    cluster_client.create_queue(queue, partitions)
    procs = [start_dispatcher(cluster_url, queue) for _ in range(2)]
    try:
        wait_for(
            lambda: spread_ok(lease_owners(cluster_client.redis, queue, partitions), 2),
            4 * LEASE,
            "two dispatchers did not split the partitions",
        )
        assert procs[0].stop() == 0
        wait_for(
            lambda: spread_ok(lease_owners(cluster_client.redis, queue, partitions), 1),
            10 * LEASE,
            "partitions not taken over",
        )
        assert not procs[0].alive()
    finally:
        survivor = procs[1].log()
        stop_all(procs)
    # Handed back, not left to expire: the survivor acquired every one of them as a released
    # lease (a takeover is what an expired one would have been).
    assert '"event":"lease.acquired"' in survivor
    assert '"event":"lease.takeover"' not in survivor, survivor[-2000:]


def test_paused_dispatcher_is_fenced_and_promotes_nothing(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """SIGSTOP a dispatcher past its lease; another takes over; SIGCONT: its writes are rejected,
    it drops the partitions and logs it, and no job is promoted twice."""
    partitions = 8
    n = 4_000
    cluster_client.create_queue(queue, partitions, ack_retention=3600)
    runs = Runs()
    first = start_dispatcher(cluster_url, queue)
    procs = [first]
    try:
        wait_for(
            lambda: spread_ok(lease_owners(cluster_client.redis, queue, partitions), 1),
            4 * LEASE,
            "first dispatcher did not take the partitions",
        )
        first_owner = lease_owners(cluster_client.redis, queue, partitions)[0]
        first.signal(signal.SIGSTOP)
        now = time.time()
        ids = {
            r.job_id
            for r in cluster_client.enqueue_many(
                queue, [JobRequest("t", i, run_at=now + 0.5 + 4 * i / n) for i in range(n)]
            )
        }
        procs.append(start_dispatcher(cluster_url, queue))
        wait_for(
            lambda: all(
                o not in (None, first_owner)
                for o in lease_owners(cluster_client.redis, queue, partitions)
            ),
            6 * LEASE,
            "second dispatcher did not take over",
        )
        with Runner(
            cluster_url,
            queue,
            {"t": runs.add},
            dispatcher=False,
            workers=1,
            worker_settings=FAST_WORKER,
        ):
            first.signal(signal.SIGCONT)
            wait_for(lambda: len(runs.count()) >= n, 60, "not every job ran")
            wait_for(
                lambda: queue_settled(cluster_client.redis, queue, partitions),
                30,
                "queue did not settle",
            )
        assert first.stop() == 0
        log = first.log()
        assert "lease.fenced" in log or "lease lost" in log, log[-2000:]
    finally:
        stop_all(procs)
    counts = runs.count()
    assert set(counts) == ids and max(counts.values()) == 1
    promoted_once(cluster_client, queue, partitions, ids)


def test_owners_and_rebalance_cli_under_load(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """`shardq queue owners`, `rebalance drain` and `even` move partitions under load: 0 lost."""
    partitions = 16
    n = 6_000
    cluster_client.create_queue(queue, partitions, ack_retention=3600)
    runner = CliRunner()
    runs = Runs()
    procs = [start_dispatcher(cluster_url, queue) for _ in range(2)]
    try:
        wait_for(
            lambda: spread_ok(lease_owners(cluster_client.redis, queue, partitions), 2),
            4 * LEASE,
            "no even spread",
        )
        with Runner(
            cluster_url,
            queue,
            {"t": runs.add},
            dispatcher=False,
            workers=1,
            worker_settings=FAST_WORKER,
        ):
            now = time.time()
            ids = {
                r.job_id
                for r in cluster_client.enqueue_many(
                    queue, [JobRequest("t", i, run_at=now + 0.5 + 6 * i / n) for i in range(n)]
                )
            }
            out = runner.invoke(cli, ["queue", "owners", "--queue", queue, "--url", cluster_url])
            assert out.exit_code == 0, out.output
            assert out.output.count("dispatcher:") == partitions
            target = lease_owners(cluster_client.redis, queue, partitions)[0]
            assert target is not None
            # Without --yes nothing changes.
            dry = runner.invoke(
                cli, ["rebalance", "drain", "--queue", queue, "--url", cluster_url, target]
            )
            assert dry.exit_code == 0 and "add --yes" in dry.output
            assert target in lease_owners(cluster_client.redis, queue, partitions)
            done = runner.invoke(
                cli,
                [
                    "rebalance",
                    "drain",
                    "--queue",
                    queue,
                    "--url",
                    cluster_url,
                    target,
                    "--yes",
                    "--timeout",
                    "20s",
                ],
            )
            assert done.exit_code == 0, done.output
            assert target not in lease_owners(cluster_client.redis, queue, partitions)
            undo = runner.invoke(
                cli,
                ["rebalance", "undrain", "--queue", queue, "--url", cluster_url, target, "--yes"],
            )
            assert undo.exit_code == 0, undo.output
            wait_for(
                lambda: spread_ok(lease_owners(cluster_client.redis, queue, partitions), 2),
                4 * LEASE,
                "undrained dispatcher did not get its share back",
            )
            even = runner.invoke(
                cli, ["rebalance", "even", "--queue", queue, "--url", cluster_url, "--yes"]
            )
            assert even.exit_code == 0, even.output
            wait_for(lambda: len(runs.count()) >= n, 60, "not every job ran")
            wait_for(
                lambda: queue_settled(cluster_client.redis, queue, partitions),
                30,
                "queue did not settle",
            )
    finally:
        stop_all(procs)
    counts = runs.count()
    assert set(counts) == ids and max(counts.values()) == 1
    promoted_once(cluster_client, queue, partitions, ids)


def test_even_revokes_above_fair_share(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """A dispatcher pinned to every partition holds more than its share once a fleet member
    joins; --even revokes the excess and the fleet member takes it."""
    partitions = 8
    cluster_client.create_queue(queue, partitions)
    procs = [start_dispatcher(cluster_url, queue)]
    try:
        wait_for(
            lambda: spread_ok(lease_owners(cluster_client.redis, queue, partitions), 1),
            4 * LEASE,
            "no owner",
        )
        procs.append(start_dispatcher(cluster_url, queue))
        wait_for(
            lambda: spread_ok(lease_owners(cluster_client.redis, queue, partitions), 2),
            6 * LEASE,
            "fleet did not balance by itself",
        )
        assert admin.excess_leases(cluster_client, queue) == []
        assert admin.spread(cluster_client, queue).even
    finally:
        stop_all(procs)


@pytest.mark.parametrize("workers", [1, 3])
def test_workers_split_partitions(
    cluster_client: Client, cluster_url: str, queue: str, workers: int
) -> None:
    """Each worker is assigned a disjoint share; together they cover every partition."""
    partitions = 12
    cluster_client.create_queue(queue, partitions)
    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}, workers=workers) as runner:
        ws = runner.workers
        wait_for(
            lambda: (
                sum(len(w.assigned) for w in ws) == partitions
                and all(w.fleet_size == workers for w in ws)
            ),
            10,
            "workers did not split",
        )
        assigned = [w.assigned for w in ws]
        assert set().union(*assigned) == set(range(partitions))
        assert sum(len(a) for a in assigned) == partitions  # disjoint
        cluster_client.enqueue_many(queue, [JobRequest("t", i) for i in range(600)])
        wait_for(lambda: len(runs.count()) >= 600, 30, "not every job ran")
        wait_for(
            lambda: queue_settled(cluster_client.redis, queue, partitions),
            30,
            "queue did not settle",
        )
    assert max(runs.count().values()) == 1
    members = cluster_client.redis.zrange(keys.workers_key(queue), 0, -1)
    assert members == [], "workers did not leave the membership on stop"


def test_rebalancing_between_healthy_dispatchers_is_never_fenced(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """Dispatchers joining one by one (each start makes the others hand partitions back), one
    leaving with SIGTERM and coming back, while jobs come due all the time: no dispatcher ever
    logs lease.fenced (a fenced write means a paused or cut-off owner, never a rebalance), and
    every job runs once."""
    partitions = 32
    n = 12_000
    cluster_client.create_queue(queue, partitions)
    runs = Runs()
    procs: list[Proc] = []
    with Runner(cluster_url, queue, {"t": runs.add}, dispatcher=False, worker_settings=FAST_WORKER):
        try:
            now = time.time()
            results = cluster_client.enqueue_many(
                queue, [JobRequest("t", i, run_at=now + 0.5 + 8 * i / n) for i in range(n)]
            )
            ids = {r.job_id for r in results}
            for _ in range(3):
                procs.append(start_dispatcher(cluster_url, queue))
                # Joined before the next step: a SIGTERM to a process still importing is the
                # default action (-15), not the hand-back this test is about.
                wait_joined(cluster_client, queue, len(procs))
                time.sleep(random.uniform(0.5, 1.5))
            assert procs[0].stop() == 0
            time.sleep(random.uniform(0.5, 1.5))
            procs.append(start_dispatcher(cluster_url, queue))
            wait_for(lambda: len(runs.count()) >= n, 60, "not every job ran")
            wait_for(
                lambda: spread_ok(lease_owners(cluster_client.redis, queue, partitions), 3),
                4 * LEASE,
                "spread did not converge",
            )
            for p in procs:
                p.stop()
            logs = "\n".join(p.log() for p in procs)
        finally:
            stop_all(procs)
    assert "lease.fenced" not in logs, [ln for ln in logs.splitlines() if "fenced" in ln][:5]
    assert logs.count('"event":"lease.released"') > 0  # partitions really were handed over
    counts = runs.count()
    assert set(counts) == ids and max(counts.values()) == 1


def test_two_dispatchers_share_the_partitions_evenly_after_resizes(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """A resize makes every dispatcher run its role again on the new layout, handing its
    leases back first, the two at about the same moment: they take up the new generation's
    partitions half each, not one of them all (neither is idle for holding nothing then),
    after a grow and after a shrink, within a few lease times."""
    from shardq.admin.resize import Resizer

    cluster_client.create_queue(queue, 8)
    procs = [start_dispatcher(cluster_url, queue) for _ in range(2)]

    def even(partitions: int) -> bool:
        s = admin.spread(cluster_client, queue)
        return s.partitions == partitions and len(s.live) == 2 and s.even

    def shown() -> str:
        s = admin.spread(cluster_client, queue)
        return f"{s.partitions} partitions, held {s.held}, fair share {s.target}"

    try:
        wait_for(lambda: even(8), 4 * LEASE, shown)
        for to in (16, 8, 16, 8):
            assert Resizer(cluster_client, queue).run(to).phase == "done"
            wait_for(lambda to=to: even(to), 4 * LEASE, shown)  # type: ignore[misc]
            # ... and it stays so (not an instant between two rounds of a pile-up).
            time.sleep(2 * RENEW)
            assert even(to), shown()
    finally:
        stop_all(procs)


def test_a_dispatcher_undrained_after_a_long_drain_gets_its_share_back(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """A dispatcher drained for longer than the idle grace holds nothing when it is undrained:
    it counts in the fair share again at once (as a member that just joined), so its peer
    hands it its share back."""
    from shardq.dispatcher.leases import IDLE_MEMBER_GRACE

    cluster_client.create_queue(queue, 8)
    procs = [start_dispatcher(cluster_url, queue) for _ in range(2)]

    def shown() -> str:
        s = admin.spread(cluster_client, queue)
        return f"held {s.held}, fair share {s.target}, draining {s.draining}"

    try:
        wait_for(lambda: admin.spread(cluster_client, queue).even, 4 * LEASE, shown)
        target = lease_owners(cluster_client.redis, queue, 8)[0]
        assert target is not None
        admin.request_drain(cluster_client, queue, target)
        wait_for(lambda: target not in lease_owners(cluster_client.redis, queue, 8), 4 * LEASE)
        time.sleep(IDLE_MEMBER_GRACE + 1)  # at least the grace: not a deadline
        admin.cancel_drain(cluster_client, queue, target)
        wait_for(lambda: admin.spread(cluster_client, queue).even, 4 * LEASE, shown)
        assert admin.spread(cluster_client, queue).held.get(target) == 4
    finally:
        stop_all(procs)
