"""The code of docs/guides/retries.md, runnable against a cluster (SHARDQ_REDIS_URL)."""

import time

from fleet import running

# --8<-- [start:handler]
from shardq import Job, PermanentError, RetryAfter


class RateLimited(Exception):
    def __init__(self, retry_after: float) -> None:
        self.retry_after = retry_after


def call_partner_api(payload: dict[str, object]) -> None:
    if payload.get("status") == 429:
        raise RateLimited(retry_after=30)


def sync_account(job: Job) -> None:
    if "account" not in job.payload:
        raise PermanentError("no account in the payload")  # dead at once, never retried
    try:
        call_partner_api(job.payload)
    except RateLimited as exc:
        raise RetryAfter(exc.retry_after) from exc  # retry in that many seconds
    # Any other exception: retried with the job's backoff until max_attempts.


# --8<-- [end:handler]


def main() -> None:
    # --8<-- [start:enqueue]
    from shardq import Backoff, Client, RedisSettings

    client = Client(RedisSettings.from_env())
    client.create_queue("accounts", partitions=16)
    client.enqueue(
        "accounts",
        "sync",
        {"account": 7},
        max_attempts=8,  # default: the worker's default_max_attempts, 5
        backoff=Backoff("exponential", base=2.0, cap=600.0),  # 2, 4, 8, ... s, at most 10 min
    )
    # --8<-- [end:enqueue]
    bad = client.enqueue("accounts", "sync", {"no": "account"})

    with running("accounts", {"sync": sync_account}):
        deadline = time.monotonic() + 60
        while (info := client.get("accounts", bad)) is None or info.state != "dead":
            assert time.monotonic() < deadline, info
            time.sleep(0.1)

        # --8<-- [start:dead]
        from shardq import Inspector

        inspector = Inspector(client)
        page = inspector.list_jobs("accounts", "dead", limit=20)
        for job in page.jobs:
            print(job.id, job.type, job.attempt, job.last_error)
        # Fixed the cause? Run them again (attempts start over), or drop them.
        replayed = inspector.retry_dead("accounts", job_type="sync")
        # inspector.run_now("accounts", job_id)  # one job
        # inspector.empty("accounts", "dead")    # every dead letter of the queue
        # --8<-- [end:dead]
        assert any(j.id == bad for j in page.jobs) and replayed >= 1
        assert "no account in the payload" in (page.jobs[0].last_error or "")
    client.close()


if __name__ == "__main__":
    main()
