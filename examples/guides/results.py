"""The code of docs/guides/results.md, runnable against a cluster (SHARDQ_REDIS_URL)."""

# --8<-- [start:handler]
import asyncio

from shardq import Job


async def render(job: Job) -> dict[str, object]:
    pages = job.payload["pages"]
    for page in range(1, pages + 1):
        await asyncio.sleep(0.1)  # the work
        job.progress({"page": page, "of": pages})  # any JSON up to 4 KiB
    return {"url": f"https://files.example.com/{job.id}.pdf"}  # kept: see keep_result


# --8<-- [end:handler]


def main() -> None:
    from fleet import running

    from shardq import Client, RedisSettings

    client = Client(RedisSettings.from_env())
    client.create_queue("documents", partitions=16)
    with running("documents", {"render": render}):
        # --8<-- [start:wait]
        job_id = client.enqueue("documents", "render", {"pages": 10}, keep_result=3600)
        info = client.get("documents", job_id)  # while it runs: info.progress == {"page": 3, ...}
        value = client.result("documents", job_id, timeout=30)  # waits until it ended
        print(value["url"])
        # --8<-- [end:wait]
        assert info is not None
        assert value == {"url": f"https://files.example.com/{job_id}.pdf"}

        # --8<-- [start:errors]
        from shardq.errors import (
            JobFailedError,
            ResultNotFoundError,
            ResultNotKeptError,
            ResultNotStoredError,
            ResultTimeoutError,
        )

        try:
            value = client.result("documents", job_id, timeout=5)
        except ResultTimeoutError:
            ...  # still waiting or running after 5 s (also a TimeoutError)
        except JobFailedError as exc:
            print("dead:", exc.error)  # its last error
        except ResultNotStoredError as exc:
            print("completed, but its value was not kept:", exc.reason)  # too large, not JSON
        except (ResultNotKeptError, ResultNotFoundError):
            ...  # enqueued without keep_result; or unknown, cancelled, expired

        kept = client.result_info("documents", job_id)  # no wait: JobResult or None
        if kept is not None:
            print(kept.value, kept.attempt, kept.finished_ms, kept.stored)
        # --8<-- [end:errors]
        assert kept is not None and kept.stored and kept.attempt == 1
    client.close()


if __name__ == "__main__":
    main()
