"""The code of docs/guides/lanes.md, runnable against a cluster (SHARDQ_REDIS_URL)."""

import time

from fleet import running


def main() -> None:
    from shardq import Client, RedisSettings

    client = Client(RedisSettings.from_env())

    # --8<-- [start:lanes]
    from shardq import JobRequest, limits

    client.create_queue("renders", partitions=16, lanes=True)  # or client.set_lanes(q, True)
    client.enqueue("renders", "render", {"id": 7}, priority="high", tenant="acme")
    client.enqueue_many(
        "renders", [JobRequest("render", {"id": i}, tenant="globex") for i in range(200)]
    )
    job_id = client.enqueue("renders", "render", {"id": 8}, tenant="acme", delay=600)
    client.reschedule("renders", job_id, priority="low")  # still waiting: due time kept
    client.set_limit("renders", limits.for_tenant("*", concurrency=10))  # each tenant: 10
    # --8<-- [end:lanes]

    # --8<-- [start:handler]
    def render(job):  # a handler sees the job's priority and tenant
        print(job.priority, job.tenant, job.payload)

    # --8<-- [end:handler]

    info = client.get("renders", job_id)
    assert info is not None and info.priority == "low" and info.tenant == "acme"
    seen: list[str] = []
    with running("renders", {"render": lambda job: seen.append(job.tenant)}):
        deadline = time.monotonic() + 60
        while len(seen) < 201:
            assert time.monotonic() < deadline, len(seen)
            time.sleep(0.1)
    client.cancel("renders", job_id)

    # --8<-- [start:off]
    from shardq.errors import LanesOffError

    client.create_queue("plain", partitions=16)
    try:
        client.enqueue("plain", "render", {"id": 9}, priority="high")
    except LanesOffError as exc:
        print(exc)  # refused before anything was written: turn lanes on, or leave it out
    # --8<-- [end:off]
    client.close()


if __name__ == "__main__":
    main()
