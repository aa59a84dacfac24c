"""The code of docs/guides/cancel-timeouts.md, runnable against a cluster (SHARDQ_REDIS_URL)."""

# --8<-- [start:handlers]
import asyncio
import time

from shardq import Job


async def fetch(url: str) -> None:
    await asyncio.sleep(0.5)


async def crawl(job: Job) -> None:
    for url in job.payload["urls"]:
        await fetch(url)  # an async handler's task is cancelled where it awaits


def export(job: Job) -> None:
    for _chunk in range(100):
        job.check_cancelled()  # a sync handler checks between steps (JobCancelledError)
        time.sleep(0.1)


# --8<-- [end:handlers]


def main() -> None:
    from fleet import running

    from shardq import Client, RedisSettings

    def wait_state(client: Client, queue: str, job_id: str, state: str) -> None:
        deadline = time.monotonic() + 60
        while (info := client.get(queue, job_id)) is None or info.state != state:
            assert time.monotonic() < deadline, info
            time.sleep(0.05)

    client = Client(RedisSettings.from_env())
    client.create_queue("crawls", partitions=16)

    # --8<-- [start:waiting]
    from shardq.errors import JobRunningError

    job_id = client.enqueue("crawls", "crawl", {"urls": ["https://example.com"]}, delay=3600)
    client.cancel("crawls", job_id)  # True: it was waiting, it is gone
    # --8<-- [end:waiting]
    assert client.get("crawls", job_id) is None

    with running("crawls", {"crawl": crawl, "export": export}):
        long_crawl = client.enqueue("crawls", "crawl", {"urls": ["https://a.example"] * 100})
        long_export = client.enqueue("crawls", "export", {})
        wait_state(client, "crawls", long_crawl, "running")
        wait_state(client, "crawls", long_export, "running")
        job_id = long_crawl
        # --8<-- [start:running]
        try:
            client.cancel("crawls", job_id)
        except JobRunningError:
            client.cancel("crawls", job_id, running=True)  # its worker stops it within a second
        # --8<-- [end:running]
        assert client.cancel("crawls", long_export, running=True)
        for gone in (long_crawl, long_export):
            deadline = time.monotonic() + 30
            while client.get("crawls", gone) is not None:
                assert time.monotonic() < deadline
                time.sleep(0.05)

        # --8<-- [start:limits]
        from datetime import timedelta

        client.enqueue("crawls", "crawl", {"urls": []}, timeout=30)  # one attempt: 30 s at most
        client.enqueue(
            "crawls",
            "crawl",
            {"urls": []},
            delay=60,
            deadline=timedelta(minutes=5),  # not started within 5 min of its due time: dead
        )
        # --8<-- [end:limits]

        # --8<-- [start:bulk]
        from shardq import Inspector

        inspector = Inspector(client)
        cancelled = inspector.cancel("crawls", "scheduled", job_type="crawl")  # every waiting one
        # --8<-- [end:bulk]
        assert cancelled >= 1
    client.close()


if __name__ == "__main__":
    main()
