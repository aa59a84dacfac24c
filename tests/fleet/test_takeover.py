"""Failover in seconds: a dead or paused worker's deliveries and partitions, and a dead, paused
or restarted dispatcher's partitions, are taken over through fleet membership, not by waiting
out visibility timeouts or leases.

Each test sets the slow path (visibility timeout, lease time, sweep interval) to 10 minutes and
waits at most about a minute: the takeover can only have come through the fast path.  How
fast it is with default settings is what `python -m bench.failover` measures over rounds of
random kill timing (the figures are in the closing note and docs/operations.md).
"""

from __future__ import annotations

import json
import random
import signal
import time

import pytest
from support.helpers import (
    FAST_DISPATCHER,
    Runner,
    Runs,
    job_id_in,
    one_by_one,
    queue_settled,
    ready_job_ids,
    scaled,
    text,
    wait_for,
)
from support.procs import Proc

from bench.fleet import lease_owners
from shardq import JobRequest, WorkerSettings
from shardq.client import Client
from shardq.store.keys import owners_key
from shardq.store.transport import SyncTransport

SLOW = 600.0  # the slow paths: far beyond every wait below
FAST_MEMBERSHIP = {"heartbeat_interval": 0.5, "membership_timeout": 2.0}
WORKER = WorkerSettings(
    visibility_timeout=SLOW,
    reclaim_interval=SLOW,
    sweep_interval=SLOW,
    idle_poll=0.2,
    shutdown_grace=2.0,
    **FAST_MEMBERSHIP,  # type: ignore[arg-type]
)
DISPATCHER_FLAGS = [
    "--lease-time",
    str(SLOW),
    "--renew-interval",
    "0.5",
    "--membership-timeout",
    "2",
    "--max-sleep",
    "0.2",
]


def doomed_worker(url: str, queue: str, record: str, **env: str) -> Proc:
    """A worker process whose handler records its starts and then runs for a minute."""
    settings = {"visibility_timeout": SLOW, "reclaim_interval": SLOW, **FAST_MEMBERSHIP}
    return Proc.helper(
        "worker",
        url,
        queue,
        record,
        "60",
        str(SLOW),
        env={"SHARDQ_TEST_SETTINGS": json.dumps(settings), **env},
    )


def test_a_killed_workers_deliveries_and_partitions_are_taken_over(
    cluster_url: str, cluster_client: Client, queue: str, procs: list[Proc]
) -> None:
    client, r = cluster_client, cluster_client.redis
    partitions = 8
    client.create_queue(queue, partitions)
    record = f"rec:{queue}"
    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}, worker_settings=WORKER) as runner:
        doomed = doomed_worker(cluster_url, queue, record)
        procs.append(doomed)
        survivor = runner.workers[0]
        wait_for(lambda: survivor.fleet_size == 2, 30, "the two workers did not meet")
        # One by one, so both workers' partitions get some (jobs due together share one).
        running = [one_by_one(client).enqueue(queue, "t", {"i": i}) for i in range(40)]
        # The doomed worker holds some of them (the survivor runs its share at once).
        wait_for(
            lambda: (
                (
                    r.hlen(f"{record}:starts") > 0
                    and len(runs.count()) + r.hlen(f"{record}:starts") >= len(running)
                )
                or doomed.check_alive()
            ),
            30,
            "jobs were not all started",
        )
        time.sleep(random.uniform(0.0, 1.0))  # seeded: SHARDQ_TEST_SEED repeats it
        held = {text(k) for k in r.hkeys(f"{record}:starts")}
        doomed.kill9()
        # Due after the kill, in every partition: the survivor reads the dead worker's share
        # (its sweep interval is 10 minutes, so only reassignment gets them read).
        later = [
            client.enqueue(queue, "t", job_id=job_id_in(p, partitions, f"later-{queue}"), delay=0.5)
            for p in range(partitions)
        ]
        wait_for(
            lambda: held | set(later) <= set(runs.count()),
            60,
            lambda: f"not taken over: {sorted(held | set(later) - set(runs.count()))[:5]}",
        )
        wait_for(lambda: queue_settled(r, queue, partitions), 30, "queue did not settle")
        assert survivor.stats.reclaimed == len(held)
    for job in runs.jobs:
        if job.id in held:
            assert job.attempt == 2 and job.deliveries == 2, job


def test_a_worker_restarted_in_place_reruns_its_predecessors_jobs_at_once(
    cluster_url: str, cluster_client: Client, queue: str, procs: list[Proc]
) -> None:
    """Same instance (a container restarted in its pod): the new worker takes over what the old
    one held at start, though the old one's membership has not expired."""
    client, r = cluster_client, cluster_client.redis
    client.create_queue(queue, 4)
    record = f"rec:{queue}"
    instance = f"pod-{queue}"
    slow = {"SHARDQ_INSTANCE": instance}
    first = doomed_worker(cluster_url, queue, record, **slow)
    procs.append(first)
    ids = [client.enqueue(queue, "t", {"i": i}) for i in range(10)]
    wait_for(lambda: r.hlen(f"{record}:starts") == 10 or first.check_alive(), 30, "not started")
    first.kill9()
    second_settings = {
        "visibility_timeout": SLOW,
        "reclaim_interval": SLOW,
        "heartbeat_interval": 0.5,
        "membership_timeout": SLOW / 2,  # the predecessor's membership stays alive throughout
    }
    second = Proc.helper(
        "worker",
        cluster_url,
        queue,
        record,
        "0",
        str(SLOW),
        env={"SHARDQ_TEST_SETTINGS": json.dumps(second_settings), **slow},
    )
    procs.append(second)
    wait_for(
        lambda: r.hlen(f"{record}:finishes") == 10 or second.check_alive(),
        60,
        "the restarted worker did not take over its predecessor's jobs",
    )
    starts = {text(k): text(v) for k, v in r.hgetall(f"{record}:starts").items()}
    assert set(starts) == set(ids)
    assert all(v.startswith("2:2:") for v in starts.values()), starts


def test_a_killed_or_paused_dispatcher_is_taken_over_and_the_paused_one_is_fenced(
    cluster_url: str, cluster_client: Client, queue: str, procs: list[Proc]
) -> None:
    client = cluster_client
    partitions = 8
    client.create_queue(queue, partitions, ack_retention=3600)
    a = Proc.dispatcher(cluster_url, queue, *DISPATCHER_FLAGS)
    b = Proc.dispatcher(cluster_url, queue, *DISPATCHER_FLAGS)
    procs.extend([a, b])
    wait_for(
        lambda: len(set(lease_owners(client.redis, queue, partitions)) - {None}) == 2,
        30,
        "two dispatchers did not split the partitions",
    )
    victim, survivor = random.sample([a, b], 2)
    how = random.choice([signal.SIGKILL, signal.SIGSTOP])
    owner_of_survivor = _owner_of(client, queue, partitions, survivor)
    now = time.time()
    ids = {
        res.job_id
        for res in client.enqueue_many(
            queue,
            [JobRequest("t", i, run_at=now + 0.5 + 3 * i / 2000) for i in range(2000)],
        )
    }
    victim.signal(how)
    # The lease is 10 minutes: only the membership path can hand the partitions over.
    wait_for(
        lambda: set(lease_owners(client.redis, queue, partitions)) == {owner_of_survivor},
        60,
        f"the {how.name}ed dispatcher's partitions were not taken over",
    )
    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}, dispatcher=False):
        if how == signal.SIGSTOP:
            victim.signal(signal.SIGCONT)
        wait_for(lambda: ids <= set(runs.count()), 60, "jobs did not all run")
        wait_for(lambda: queue_settled(client.redis, queue, partitions), 30, "not settled")
    in_ready = ready_job_ids(client.redis, queue, partitions)
    assert set(in_ready) == ids and max(in_ready.values()) == 1, "a job was promoted twice"
    assert max(runs.count().values()) == 1
    if how == signal.SIGSTOP:
        wait_for(lambda: "lease.fenced" in victim.log(), 30, "the resumed dispatcher wrote")
    survivor_log = survivor.log()
    assert '"event":"lease.takeover"' in survivor_log, survivor_log[-2000:]


@pytest.mark.parametrize("owners_written", [True, False], ids=["owners-written", "owners-missing"])
def test_a_dispatcher_restarted_in_place_resumes_at_once(
    cluster_url: str, cluster_client: Client, queue: str, procs: list[Proc], owners_written: bool
) -> None:
    """Same instance: the new incarnation takes its predecessor's leases though neither the
    leases nor the predecessor's membership have expired.  Also when the predecessor was killed
    after its leases were granted but before it named itself in the owners hash (a stress run
    once hit that window: the successor then waited out the whole lease)."""
    client = cluster_client
    partitions = 8
    client.create_queue(queue, partitions)
    env = {"SHARDQ_INSTANCE": f"pod-{queue}"}
    slow_membership = [*DISPATCHER_FLAGS]
    slow_membership[slow_membership.index("--membership-timeout") + 1] = str(SLOW / 2)
    first = Proc.dispatcher(cluster_url, queue, *slow_membership, env=env)
    procs.append(first)
    wait_for(
        lambda: None not in lease_owners(client.redis, queue, partitions),
        30,
        "the first dispatcher did not take every partition",
    )
    old_owner = lease_owners(client.redis, queue, partitions)[0]
    first.kill9()
    if not owners_written:
        # Killed right after its first grants: write_owners had not run yet.
        client.redis.delete(owners_key(queue))
    second = Proc.dispatcher(cluster_url, queue, *slow_membership, env=env)
    procs.append(second)
    wait_for(
        lambda: (
            set(lease_owners(client.redis, queue, partitions)) - {old_owner, None}
            and None not in lease_owners(client.redis, queue, partitions)
            and old_owner not in lease_owners(client.redis, queue, partitions)
        ),
        60,
        lambda: (
            "the restarted dispatcher did not take over its predecessor's leases: owners "
            f"{lease_owners(client.redis, queue, partitions)}, first {old_owner}; its log:\n"
            + second.log()[-3000:]
        ),
    )
    job = client.enqueue(queue, "t", delay=0.2)
    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}, dispatcher=False):
        wait_for(lambda: job in runs.count(), 30, "the restarted dispatcher did not promote")


def _owner_of(client: Client, queue: str, partitions: int, proc: Proc) -> str:
    """The member id of a dispatcher process (from the leases it holds)."""
    owners = set(lease_owners(client.redis, queue, partitions)) - {None}
    mine = [o for o in owners if o is not None and f":{proc.pid}#" in o]
    assert len(mine) == 1, (owners, proc.pid)
    return mine[0]


# leases always expire -------------------------------------------------------------------------


@pytest.mark.parametrize("ttl", ["none", "beyond the lease time"])
def test_a_lease_written_by_hand_that_would_never_expire_is_taken_over(
    cluster_url: str, cluster_client: Client, queue: str, ttl: str
) -> None:
    """The audit's case: `SET <lease> 1:squatter` (no expiry, an owner that was never a member)
    blocked its partition for ever: 0 of 1 leases taken, the delayed job never ran.  A lease
    without expiry was not written by the fleet's lease-acquire, and one whose owner has been
    absent from the fleet a whole membership timeout is not a live dispatcher's: either is
    displaceable, so a dispatcher takes the partition and the job runs."""
    from shardq.store import fleet, keys

    client, r = cluster_client, cluster_client.redis
    partitions = 1
    client.create_queue(queue, partitions)
    pk = keys.partition_keys(queue, 0, partitions)
    if ttl == "none":
        r.set(pk.lease, "1:squatter")
    else:
        r.set(pk.lease, "1:squatter", px=int(SLOW * 1000 * 100))
    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}, wait_leases=False) as runner:
        job = client.enqueue(queue, "t", {"late": True}, delay=0.3)
        wait_for(lambda: job in runs.count(), 30, lambda: f"lease: {r.get(pk.lease)!r}")
        wait_for(
            lambda: lease_owners(r, queue, partitions) == [runner.dispatcher.owner],
            scaled(10 * FAST_DISPATCHER.membership_timeout),
            lambda: f"lease: {r.get(pk.lease)!r}",
        )
    # A lease expiring within the caller's lease time is a live owner's, whoever it is: left
    # alone.
    r.set(pk.lease, "99:someone", px=1_500)
    refused = SyncTransport(r).run(fleet.lease_acquire(pk, "d-other", 10_000))
    assert not refused.won and refused.owner == "someone"
    # ... but one with more left than the caller's lease time is not, whatever lease time it
    # was granted for (a stored one is not trusted: any dispatcher-role user can write it;
    # tests/integration/test_acl.py).  A fleet runs one lease time.
    r.delete(pk.lease)
    assert SyncTransport(r).run(fleet.lease_acquire(pk, "d-long", 60_000)).won
    assert SyncTransport(r).run(fleet.lease_acquire(pk, "d-short", 2_000)).takeover
