"""The code of docs/guides/scheduling.md, runnable against a cluster (SHARDQ_REDIS_URL)."""

import asyncio


def main() -> None:
    # --8<-- [start:when]
    from datetime import UTC, datetime, timedelta

    from shardq import Client, RedisSettings

    client = Client(RedisSettings.from_env())  # SHARDQ_REDIS_URL, default 127.0.0.1:7000
    client.create_queue("emails", partitions=16)

    client.enqueue("emails", "send", {"to": "a@example.com"})  # due now
    client.enqueue("emails", "send", {"to": "b@example.com"}, delay=90)  # in 90 s
    client.enqueue("emails", "send", {"to": "c@example.com"}, delay=timedelta(hours=2))
    tomorrow_9am = datetime.now(UTC).replace(hour=9, minute=0) + timedelta(days=1)
    client.enqueue("emails", "send", {"to": "d@example.com"}, run_at=tomorrow_9am)
    # --8<-- [end:when]

    # --8<-- [start:ids]
    from shardq import JobRequest
    from shardq.errors import DuplicateJobError

    job_id = client.enqueue("emails", "send", {"to": "e@example.com"}, delay=600)
    info = client.get("emails", job_id)  # JobInfo, or None once it is gone
    print(info.state, info.due_ms, info.attempt)  # scheduled <epoch ms> 0

    due_ms = client.reschedule("emails", job_id, delay=60)  # a new due time (Redis clock)
    client.cancel("emails", job_id)  # True; False when there is no such job

    # Your own id: sending the same job again is a resend (stored once); another job under
    # that id is refused.  To get an existing job back instead, use an idempotency key.
    r = client.enqueue_detailed(
        "emails", JobRequest("send", {"to": "f@example.com"}, job_id="welcome:f", delay=300)
    )
    try:
        client.enqueue("emails", "send", {"to": "other@example.com"}, job_id="welcome:f")
    except DuplicateJobError:
        print("welcome:f is taken")
    # --8<-- [end:ids]
    assert info is not None and info.state == "scheduled" and due_ms > 0
    assert r.created and r.job_id == "welcome:f"
    assert client.get("emails", job_id) is None

    # --8<-- [start:many]
    from shardq.errors import BulkEnqueueError

    addresses = [f"user{n}@example.com" for n in range(1000)]
    requests = [JobRequest("send", {"to": a}, delay=60) for a in addresses]
    try:
        results = client.enqueue_many("emails", requests)  # pipelined per Redis node
    except BulkEnqueueError as exc:
        # Some were not stored (an outage outlasted retry_timeout): resend the rest. Their
        # ids are filled in, so a resend never makes a job twice.
        results = client.enqueue_many("emails", exc.retry_requests)
    print(len(results), results[0].job_id, results[0].partition)
    # --8<-- [end:many]
    assert len(results) == 1000

    # --8<-- [start:tasks]
    from shardq import Backoff, Tasks

    tasks = Tasks(default_queue="emails")

    @tasks.task("welcome", max_attempts=8, backoff=Backoff("exponential"), keep_result=3600)
    async def welcome(job):
        return {"sent_to": job.payload["to"]}

    job_id = welcome.enqueue(client, {"to": "a@example.com"})  # queue and options: declared
    welcome.enqueue(client, {"to": "b@example.com"}, delay=60, max_attempts=2)  # a call's win
    client.enqueue_many("emails", [welcome.request({"to": a}) for a in addresses[:10]])
    # A worker runs every declared task: Worker(redis, "emails", handlers=tasks), or
    # `shardq worker run -q emails --handlers myapp.jobs:tasks`.
    # --8<-- [end:tasks]
    info = client.get("emails", job_id)
    assert info is not None and info.max_attempts == 8 and info.keep_result == 3600

    # --8<-- [start:durable]
    from shardq.errors import NotDurableError

    try:
        client.enqueue("emails", "send", {"to": "g@example.com"}, durable=True)
    except NotDurableError as exc:
        print("stored, not yet on a replica:", exc.job_ids)  # resend them if it matters
    # --8<-- [end:durable]
    client.close()
    asyncio.run(async_example())


async def async_example() -> None:
    # --8<-- [start:async]
    from shardq import AsyncClient, RedisSettings

    async with await AsyncClient.from_url(RedisSettings.from_env()) as client:
        job_id = await client.enqueue("emails", "send", {"to": "a@example.com"}, delay=30)
        info = await client.get("emails", job_id)
        await client.cancel("emails", job_id)
    # --8<-- [end:async]
    assert info is not None


if __name__ == "__main__":
    main()
