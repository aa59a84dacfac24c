"""The handlers under test (tests in test_jobs.py)."""

from shardq import Job, PermanentError, RetryAfter


def charge(job: Job) -> dict[str, int]:
    cents = job.payload.get("cents")
    if not isinstance(cents, int) or cents <= 0:
        raise PermanentError(f"cannot charge {cents!r} cents")  # dead at once, not retried
    if job.payload.get("gateway_busy"):
        raise RetryAfter(10)  # the gateway asked us to come back in 10 s
    return {"charged": cents, "attempt": job.attempt}


handlers = {"charge": charge}
