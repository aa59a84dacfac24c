"""Resizing a queue (shardq.admin.resize): every kind of waiting job, idempotency record,
schedule and dead letter comes out the other side, found by id before, during and after;
releases before resizing refuse a resized queue; a resize stopped halfway resumes; an abort
puts everything back.  Under a running fleet and with kill -9: tests/fleet/test_resize_fleet.py."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from typing import Any

import pytest
from support import release_before_resize_meta
from support.helpers import Runner, Runs, wait_for

from shardq import Client, Job, JobRequest
from shardq.admin.lease import LeaderLease
from shardq.admin.resize import ResizeError, Resizer
from shardq.config import RedisSettings
from shardq.connection import connect
from shardq.dev.demo import cli_command
from shardq.errors import FencedError, LayoutMovedError, MalformedRecordError
from shardq.plans import one
from shardq.store import fleet, keys
from shardq.store import producer as store_producer
from shardq.store import resize as ops
from shardq.store.meta import RESIZED_MARKER
from shardq.store.transport import SyncTransport

pytestmark = pytest.mark.usefixtures("redis_servers")


def _seed(client: Client, queue: str) -> dict[str, Any]:
    """Jobs in every waiting state: scheduled far ahead (plain and compact), with a given id,
    with an idempotency key, and a periodic schedule."""
    far = [client.enqueue(queue, "far", i, delay=86_400 * 90) for i in range(40)]
    soon = [client.enqueue(queue, "soon", i, delay=3600) for i in range(40)]
    given = [client.enqueue(queue, "given", i, delay=7200, job_id=f"given-{i}") for i in range(20)]
    idem = {
        f"key-{i}": client.enqueue(queue, "idem", i, delay=5000, idempotency_key=f"key-{i}")
        for i in range(20)
    }
    many = [
        r.job_id
        for r in client.enqueue_many(queue, [JobRequest("bulk", i, delay=1800) for i in range(200)])
    ]
    client.schedules.add(queue, "tick", "tick", every=3600)
    return {"far": far, "soon": soon, "given": given, "idem": idem, "many": many}


def _due_of(client: Client, queue: str, ids: list[str]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for job_id in ids:
        info = client.get(queue, job_id)
        out[job_id] = None if info is None else info.due_ms
    return out


def _all_ids(seeded: dict[str, Any]) -> list[str]:
    return [
        *seeded["far"], *seeded["soon"], *seeded["given"], *seeded["idem"].values(),
        *seeded["many"],
    ]  # fmt: skip


@pytest.mark.parametrize(("start", "to"), [(8, 16), (16, 8), (4, 7)])
def test_a_resize_keeps_every_waiting_job_found_by_id(
    cluster_client: Client, cluster_url: str, queue: str, start: int, to: int
) -> None:
    client = cluster_client
    client.create_queue(queue, partitions=start)
    seeded = _seed(client, queue)
    ids = _all_ids(seeded)
    before = _due_of(client, queue, ids)
    assert all(v is not None for v in before.values())

    stale = Client.from_url(cluster_url)  # caches the layout before the resize
    try:
        stale.partitions(queue)
        admin = Client.from_url(cluster_url)
        try:
            final = Resizer(admin, queue).run(to)
        finally:
            admin.close()
        assert final.phase == "done"
        layout = client.layout(queue)
        assert (layout.partitions, layout.generation, layout.draining) == (to, 1, None)
        # Every job where it was, due when it was: asked by a fresh client and by one whose
        # cached meta is from before (the sealed tombstones redirect it).
        assert _due_of(client, queue, ids) == before
        assert _due_of(stale, queue, ids) == before
        # The same idempotency key gives the same single job, before a fresh lookup and after.
        for key, job_id in seeded["idem"].items():
            assert stale.enqueue(queue, "idem", 0, idempotency_key=key) == job_id
            assert client.enqueue(queue, "idem", 0, idempotency_key=key) == job_id
        # A given id is still taken: resending the same job is recognised, not duplicated.
        assert stale.enqueue(queue, "given", 0, delay=7200, job_id="given-0") == "given-0"
        # New jobs go to the new generation, from either client.
        fresh = stale.enqueue(queue, "new", 1, delay=60)
        info = client.get(queue, fresh)
        assert info is not None and info.due_ms is not None
        [sched] = client.schedules.list(queue)
        assert sched.name == "tick"
        # By-id writes work across the move.
        assert client.cancel(queue, seeded["far"][0])
        assert client.get(queue, seeded["far"][0]) is None
        assert stale.reschedule(queue, seeded["soon"][0], delay=10) > 0
    finally:
        stale.close()
    r = connect(RedisSettings.from_url(cluster_url))
    try:
        old = keys.all_partition_keys(queue, start)
        # Only the sealed control hashes of the old generation are left.
        for pk in old:
            assert r.exists(*[k for k in pk.all() if k != pk.ctl]) == 0
            assert r.hget(pk.ctl, "sealed") == f"1:{to}".encode()
        total = sum(r.zcard(pk.due) for pk in keys.all_partition_keys(queue, to, 1))
        # 40 + 40 + 20 + 20 + 200 waiting, one cancelled, one new; the compact ones share
        # members with nothing: each job is one member.
        assert total == 320
    finally:
        r.close()


def test_the_previous_release_refuses_a_resized_queue(
    cluster_client: Client, cluster_url: str, queue: str, tmp_path: Any
) -> None:
    """A process of the release before resizing reads the meta's `partitions` as a number; the
    resized meta holds a marker there, so it stops with MalformedRecordError instead of writing
    into generation 0's keys, and its queue create writes nothing."""
    cluster_client.create_queue(queue, partitions=4)
    admin = Client.from_url(cluster_url)
    try:
        Resizer(admin, queue).run(8)
    finally:
        admin.close()
    r = connect(RedisSettings.from_url(cluster_url))
    try:
        raw = r.hgetall(keys.queue_meta_key(queue))
    finally:
        r.close()
    assert raw[b"partitions"] == RESIZED_MARKER.encode()
    # The previous release's meta reader (tests/support: its file as it was released).
    with pytest.raises(MalformedRecordError, match="damaged meta"):
        release_before_resize_meta.parse_meta(queue, raw)
    # This release's create agrees with the resized count and refuses another.
    assert cluster_client.create_queue(queue, partitions=8) is False


def test_a_resize_stopped_between_rounds_resumes_and_an_abort_puts_everything_back(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    client = cluster_client
    client.create_queue(queue, partitions=8)
    seeded = _seed(client, queue)
    ids = _all_ids(seeded)
    before = _due_of(client, queue, ids)
    admin = Client.from_url(cluster_url)
    try:
        stop = threading.Event()
        rounds = 0

        def stop_after_two(_: Any) -> None:
            nonlocal rounds
            rounds += 1
            if rounds == 2:
                stop.set()

        r = Resizer(admin, queue, on_progress=stop_after_two, stop=stop, batch=5)
        halfway = r.run(16)
        assert halfway.phase == "moving"
        # Halfway: some jobs in each generation, every one found by id.
        layout = client.layout(queue)
        assert layout.draining == (0, 8) and layout.partitions == 16
        assert _due_of(client, queue, ids) == before
        with pytest.raises(ResizeError, match="being resized to 16"):
            Resizer(admin, queue).run(32)
        # Abort: back to the 8 partitions of generation 0, everything in them.
        final = Resizer(admin, queue).abort()
        assert final.phase == "aborted"
        layout = client.layout(queue)
        assert (layout.partitions, layout.generation, layout.draining) == (8, 0, None)
        assert _due_of(client, queue, ids) == before
        for key, job_id in seeded["idem"].items():
            assert client.enqueue(queue, "idem", 0, idempotency_key=key) == job_id
        # A later resize takes a generation never used (the aborted one stays sealed).
        assert Resizer(admin, queue).run(4).phase == "done"
        assert client.layout(queue).generation == 2
        assert _due_of(client, queue, ids) == before
    finally:
        admin.close()


def test_one_driver_at_a_time_and_a_stale_one_is_fenced(client: Client, queue: str) -> None:
    """The resize driver's lease (admin/lease.py, the balancer's too): a second driver is
    refused while the first holds it; a holder whose lease was taken (here revoked, as if it
    had expired while it was paused) is refused at its next renewal and drops its token; a
    release lets the next driver take it at once, with a larger fencing token."""
    client.create_queue(queue, partitions=2)
    first, second = Resizer(client, queue, owner="resize:a#1"), Resizer(client, queue)
    assert isinstance(first.lease, LeaderLease) and first.lease.keys == ops.lease_keys(queue)
    first._take_lease()
    token = first.lease.token
    with pytest.raises(ResizeError, match=r"another process \(resize:a#1\) is driving"):
        second._take_lease()
    assert first.lease.acquire().won and first.lease.token == token  # an extension
    first._keep_lease()  # renewed within a third of the lease: no call, still held
    client.run(one(fleet.lease_revoke(ops.lease_keys(queue), "resize:a#1")), "revoking")
    second._take_lease()
    assert int(second.lease.token) > int(token)
    first.lease.renewed = 0.0  # a third of the lease has passed: the next check renews
    with pytest.raises(FencedError, match="lost the resize lease"):
        first._keep_lease()
    assert first.lease.token == ""
    second.lease.release()
    assert second.lease.token == "" and not client.redis.exists(ops.lease_keys(queue).lease)
    third = Resizer(client, queue)
    third._take_lease()
    assert int(third.lease.token) > int(token)
    third.lease.release()


def test_a_sealed_partition_refuses_new_jobs_with_a_redirect(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """Raw: an enqueue into a sealed partition writes nothing and names the new generation."""
    cluster_client.create_queue(queue, partitions=2)
    r = connect(RedisSettings.from_url(cluster_url))
    try:
        pk = keys.partition_keys(queue, 0, 2)
        r.hset(pk.ctl, "sealed", "1:4")
        prepared = store_producer.prepare_enqueue(
            queue, 2, JobRequest("t", 1, job_id=_id_in(0, 2)), store_producer.ProducerSettings()
        )
        with pytest.raises(LayoutMovedError) as moved:
            SyncTransport(r).run(prepared.op())
        assert (moved.value.generation, moved.value.partitions) == (1, 4)
        assert r.hlen(pk.jobs) == 0 and r.zcard(pk.due) == 0
    finally:
        r.close()


def _id_in(partition: int, partitions: int) -> str:
    n = 0
    while keys.partition_for(f"j{n}", partitions) != partition:
        n += 1
    return f"j{n}"


@pytest.mark.parametrize(("start", "to"), [(4, 8), (8, 4)])
def test_a_resize_under_a_running_fleet_runs_every_job_once(
    cluster_client: Client, cluster_url: str, queue: str, start: int, to: int
) -> None:
    """Grow 4 -> 8 (and shrink 8 -> 4) while a dispatcher and two workers run, jobs come due
    throughout and some fail once (retrying) or for good (dead): every job runs, none twice,
    the dead letters come across, and the fleet takes up each layout without a restart."""
    client = cluster_client
    client.create_queue(queue, partitions=start)
    runs = Runs()

    def handler(job: Job) -> None:
        runs.add(job)
        if job.type == "flaky" and job.attempt == 1:
            raise RuntimeError("first attempt fails")
        if job.type == "poison":
            raise RuntimeError("always fails")

    handlers = {"ok": handler, "flaky": handler, "poison": handler}
    ids: list[str] = []
    with Runner(cluster_url, queue, handlers, workers=2):
        for i in range(300):
            ids.append(client.enqueue(queue, "ok", i, delay=(i % 30) / 10))
        flaky = [client.enqueue(queue, "flaky", i, delay=0.5) for i in range(20)]
        poison = [client.enqueue(queue, "poison", i, max_attempts=1, delay=0.2) for i in range(10)]
        stop = threading.Event()
        late: list[str] = []

        def produce() -> None:
            i = 0
            while not stop.is_set():
                late.append(client.enqueue(queue, "ok", 10_000 + i, delay=0.5))
                i += 1
                time.sleep(0.01)

        producer_thread = threading.Thread(target=produce)
        producer_thread.start()
        admin = Client.from_url(cluster_url)
        try:
            assert Resizer(admin, queue).run(to).phase == "done"
        finally:
            admin.close()
            stop.set()
            producer_thread.join()
        everything = ids + late
        wait_for(
            lambda: set(everything) <= set(runs.count()), 60, "not every job ran after the resize"
        )
        wait_for(lambda: all(client.get(queue, j) is None for j in flaky), 30, "flaky jobs left")
        dead = {j for j in poison if (info := client.get(queue, j)) and info.state == "dead"}
        wait_for(
            lambda: (
                {j for j in poison if (i := client.get(queue, j)) and i.state == "dead"}
                == set(poison)
            ),
            30,
            f"poison jobs not all dead ({len(dead)})",
        )
    counts = runs.count()
    assert [j for j in everything if counts[j] != 1] == []
    assert {j: counts[j] for j in flaky if counts[j] != 2} == {}
    assert all(counts[j] == 1 for j in poison)
    assert client.layout(queue).partitions == to


def test_kill_9_of_the_resizing_process_at_random_points_then_resume_loses_nothing(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """`shardq queue resize` killed with SIGKILL at a random moment, over several rounds (each
    a new resize after the last finished), then resumed: every job is found once, due when it
    was, and no job is left in two generations."""
    client = cluster_client
    client.create_queue(queue, partitions=8)
    ids = [client.enqueue(queue, "far", i, delay=86_400 * 30) for i in range(1500)]
    ids += [
        r.job_id
        for r in client.enqueue_many(
            queue, [JobRequest("bulk", i, delay=3600) for i in range(1500)]
        )
    ]
    keyed = {
        f"k{i}": client.enqueue(queue, "k", i, delay=600, idempotency_key=f"k{i}")
        for i in range(100)
    }
    ids += list(keyed.values())
    before = _due_of(client, queue, ids)
    rng = random.Random()
    sizes = [16, 5, 12]
    killed = 0
    for to in sizes:
        argv = cli_command(
            "queue", "resize", "--queue", queue, "--partitions", str(to), "--batch", "20",
            "--lease-time", "2", "--yes", "--url", cluster_url,
        )  # fmt: skip
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # (the CLI takes ~0.5 s to start: some kills land before it began, most during)
        time.sleep(rng.uniform(0.6, 2.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.wait(30)
        # A killed driver's lease lasts its ttl; the resumed one waits it out.
        admin = Client.from_url(cluster_url)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    resizer = Resizer(admin, queue, settle=0.2)
                    state = resizer.status()
                    if state.running:
                        final = resizer.run(None)  # resume what the killed one started
                    elif admin.layout(queue).partitions != to:
                        final = resizer.run(to)  # killed before it began: start it again
                    else:
                        final = state
                    break
                except ResizeError as exc:
                    if "driving the resize" not in str(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        finally:
            admin.close()
        assert final.phase == "done", final.raw
        assert client.layout(queue).partitions == to
        assert _due_of(client, queue, ids) == before
        for key, job_id in keyed.items():
            assert client.enqueue(queue, "k", 0, idempotency_key=key) == job_id
        # One member per job in the live generation, nothing left anywhere else.
        layout = client.layout(queue)
        r = connect(RedisSettings.from_url(cluster_url))
        try:
            stored = sum(r.zcard(pk.due) for pk in layout.active())
        finally:
            r.close()
        assert stored == len(ids)
    assert killed >= 1, "every resize finished before its kill: nothing was tested"
