"""A lease lasts as long as its dispatcher is a live member of the fleet.

Liveness is the dispatcher's membership heartbeat (one call per renew interval whatever the
partition count), not a per-partition lease expiry: an idle partition's lease costs no call,
and fencing stays per partition (every write checks the token).  What the lease expiry used
to bound is bounded otherwise, and these tests hold each bound:

- a lease whose owner died before this dispatcher started (it never saw it go) is taken once
  the owner has been absent a whole membership timeout, not when the key expires (a day);
- a lease that names a live dispatcher which does not claim it (written by hand, or one its
  dispatcher lost track of) is taken after ``lease_time``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from support.helpers import FAST_DISPATCHER, Runner, Runs, job_id_in, scaled, wait_for
from support.monitor import monitored, script_calls

from shardq.client import Client
from shardq.config import RedisSettings
from shardq.connection import connect_async
from shardq.dispatcher import Dispatcher
from shardq.store import fleet, keys
from shardq.store.transport import SyncTransport

# No idle promote within a test (each would extend its partition's lease as a side effect).
NEVER = 600.0
IDLE = replace(FAST_DISPATCHER, max_sleep=NEVER, max_idle_sleep=NEVER)


def test_an_idle_dispatcher_keeps_its_leases_without_a_call_per_partition(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """Before, every lease was renewed every third of lease_time: 16 partitions x 4 lease
    times here came to about 190 lease-renew calls.  Now none, and the leases hold."""
    client, r = cluster_client, cluster_client.redis
    partitions = 16
    client.create_queue(queue, partitions)
    with Runner(cluster_url, queue, {}, workers=0, dispatcher_settings=IDLE) as runner:
        d = runner.dispatcher
        assert d is not None and d.leases is not None
        tokens = dict(d.tokens)
        with monitored(r, queue) as commands:
            time.sleep(4 * IDLE.lease_time)
        assert script_calls(commands, "lease-renew") == []
        assert d.tokens == tokens, "an idle partition's lease was lost or taken again"
        assert d.leases.counts.get("lost", 0) == 0
        for p in range(partitions):
            left_ms = r.pttl(keys.partition_keys(queue, p, partitions).lease)
            assert left_ms > 100 * IDLE.lease_time * 1000, (p, left_ms)


def test_a_lease_of_an_owner_that_died_unseen_is_taken_after_the_membership_timeout(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """A lease granted to a dispatcher that is not in the fleet (it died before this one
    started), for the fleet's whole lease ttl: taken within a few membership timeouts, and the
    job due in its partition runs."""
    client, r = cluster_client, cluster_client.redis
    partitions = 2
    client.create_queue(queue, partitions)
    pk = keys.partition_keys(queue, 0, partitions)
    ttl_ms = round(IDLE.lease_ttl * 1000)
    ghost = SyncTransport(r).run(fleet.lease_acquire(pk, "dispatcher:ghost#1", ttl_ms))
    assert ghost.won
    runs = Runs()
    started = time.monotonic()
    with Runner(
        cluster_url,
        queue,
        {"t": runs.add},
        workers=1,
        dispatcher_settings=FAST_DISPATCHER,
        wait_leases=False,
    ) as runner:
        d = runner.dispatcher
        assert d is not None
        wait_for(
            lambda: len(d.tokens) == partitions,
            scaled(10 * FAST_DISPATCHER.membership_timeout),
            lambda: f"held {sorted(d.tokens)}, lease 0: {r.get(pk.lease)!r}",
        )
        taken_after = time.monotonic() - started
        job = client.enqueue(queue, "t", {"in": 0}, job_id=job_id_in(0, partitions), delay=0.2)
        wait_for(lambda: job in runs.count(), 30, "the job did not run")
    assert taken_after < IDLE.lease_ttl / 100
    assert d.leases is not None and d.leases.counts.get("takeover", 0) >= 1


@contextmanager
def pinned_dispatchers(url: str, queue: str, pins: list[list[int]]) -> Iterator[list[Dispatcher]]:
    """Dispatchers of ``queue``, each serving only the partitions of its pin, on one asyncio
    loop in a background thread."""
    made: list[Dispatcher] = []
    ready = threading.Event()
    errors: list[BaseException] = []
    loop_box: list[asyncio.AbstractEventLoop] = []

    async def main() -> None:
        loop_box.append(asyncio.get_running_loop())
        redis = await connect_async(RedisSettings.from_url(url))
        try:
            for pin in pins:  # each its own instance: not one restarted in place
                made.append(
                    Dispatcher(
                        redis,
                        queue,
                        settings=FAST_DISPATCHER,
                        partitions=pin,
                        instance=f"pinned-{len(made)}",
                    )
                )
            tasks = [asyncio.create_task(d.run()) for d in made]
            ready.set()
            await asyncio.gather(*tasks)
        finally:
            await redis.aclose()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            errors.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(15)
    try:
        yield made
    finally:
        if loop_box:
            for d in made:
                loop_box[0].call_soon_threadsafe(d.stop)
        thread.join(30)
        assert not errors, errors


def test_a_lease_naming_a_live_dispatcher_that_does_not_claim_it_is_taken_after_lease_time(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """Dispatcher A serves partition 1 only; partition 0's lease names A for a day (written
    by a dispatcher-role user, or one A lost track of): A never claims it, so B, which serves
    partition 0, takes it over once that has lasted lease_time."""
    client, r = cluster_client, cluster_client.redis
    partitions = 2
    client.create_queue(queue, partitions)
    pk = keys.partition_keys(queue, 0, partitions)
    with pinned_dispatchers(cluster_url, queue, [[1], [0]]) as (a, b):
        wait_for(lambda: 1 in a.tokens, 15, "A did not take partition 1")
        ttl_ms = round(FAST_DISPATCHER.lease_ttl * 1000)
        # B may have won partition 0 already: take it from B in A's name (a forged grant).
        forged = SyncTransport(r).run(fleet.lease_acquire(pk, a.owner, ttl_ms, [b.owner]))
        assert forged.won
        forged_at = time.monotonic()

        def retaken() -> bool:
            token, _, owner = (r.get(pk.lease) or b"").decode().partition(":")
            return owner == b.owner and int(token) > int(forged.token)

        wait_for(
            retaken,
            scaled(10 * FAST_DISPATCHER.lease_time),
            lambda: f"lease 0: {r.get(pk.lease)!r}, B holds {sorted(b.tokens)}",
        )
        waited = time.monotonic() - forged_at
        wait_for(lambda: 0 in b.tokens, 10, "B did not record the lease it won")
        assert 1 in a.tokens, "A lost the partition it serves"
    # Not before lease_time: a holder that just won a lease names itself in the owners hash
    # within a round; until then it is not displaced.
    assert waited >= FAST_DISPATCHER.lease_time * 0.9, waited
