"""A promote's ready hint names the last entry it added, and a worker that has read past it
ignores it (shardq/worker/fetcher.py Fetcher.hint): the hint and the read travel on different
connections, so a read often takes the jobs before their hint comes."""

from __future__ import annotations

import time

import redis

from shardq import JobRequest
from shardq.client import Client
from shardq.store import fleet, keys
from shardq.worker.fetcher import entry_id_of


def test_a_promotes_hint_is_the_last_entry_it_added(
    standalone_url: str, standalone_client: Client, queue: str
) -> None:
    client = standalone_client
    client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    client.enqueue_many(queue, [JobRequest("t", i, delay=3600) for i in range(3)])
    members = client.redis.zrange(pk.due, 0, -1)
    client.redis.zadd(pk.due, dict.fromkeys(members, 0))  # overdue: the promote takes them
    raw = redis.Redis.from_url(standalone_url)
    sub = raw.pubsub()
    try:
        sub.ssubscribe(pk.ready_hint)
        deadline = time.monotonic() + 5
        while sub.get_message(timeout=0.1) is None and time.monotonic() < deadline:
            pass  # the subscription's confirmation
        grant = client.transport.run(fleet.lease_acquire(pk, "d", 10_000))
        moved = client.transport.run(fleet.promote(pk, grant.token, 10, 10_000))
        assert moved.moved == 3
        message = None
        while message is None and time.monotonic() < deadline:
            message = sub.get_message(timeout=0.1)
        assert message is not None and message["type"] == "smessage"
        last = raw.xrevrange(pk.ready, count=1)[0][0]
        assert message["data"] == last  # the id of the newest of the three entries
        assert entry_id_of(last) is not None and entry_id_of(b"1") is None
    finally:
        sub.close()
        raw.close()
