"""Jobs in every state for the web console's tests (tests/integration/test_web*.py)."""

from __future__ import annotations

from dataclasses import dataclass

from shardq import JobRequest
from shardq.client import Client
from shardq.store import delivery, keys
from support.helpers import one_by_one

PARTITIONS = 8
TYPES = ("mail", "report", "sync")


@dataclass(frozen=True)
class Seeded:
    scheduled: list[str]
    ready: list[str]
    running: list[str]
    retrying: str
    dead: str
    idem_key: str
    idem_job: str


def seed(client: Client, queue: str) -> Seeded:
    """A queue of ``PARTITIONS`` partitions holding scheduled, ready, running, retrying and
    dead jobs (no dispatcher or worker runs: the states stay put)."""
    client.create_queue(queue, PARTITIONS)
    scheduled = [
        r.job_id
        for r in client.enqueue_many(
            queue,
            [JobRequest(TYPES[i % 3], {"n": i, "to": f"user{i}@example.com"}, delay=3600 + i)
             for i in range(30)],
        )
    ]  # fmt: skip
    idem_key = "order-4711"
    idem_job = client.enqueue(queue, "mail", {"order": 4711}, delay=7200, idempotency_key=idem_key)
    scheduled.append(idem_job)
    ready = [
        r.job_id
        for r in one_by_one(client).enqueue_many(
            queue, [JobRequest("report", i) for i in range(20)]
        )
    ]
    held = []
    for pk in keys.all_partition_keys(queue, PARTITIONS):
        held += [(pk, d) for d in client.transport.run(delivery.fetch(pk, "w-console", 1)).jobs]
    assert len(held) >= 3, "the ready jobs did not spread over the partitions"
    (pk1, d1), (pk2, d2) = held[0], held[1]
    client.transport.run(delivery.fail(pk1, d1.entry_id, d1.raw_id, 600_000, "timeout"))
    client.transport.run(delivery.fail(pk2, d2.entry_id, d2.raw_id, -1, "bad address <x>"))
    running = [d.raw_id.decode() for _, d in held[2:]]
    ready = [j for j in ready if j not in {d.raw_id.decode() for _, d in held}]
    return Seeded(
        scheduled=scheduled,
        ready=ready,
        running=running,
        retrying=d1.raw_id.decode(),
        dead=d2.raw_id.decode(),
        idem_key=idem_key,
        idem_job=idem_job,
    )
