"""The handlers: `shardq worker run --handlers jobs:handlers` runs them."""

from shardq import Job, RetryAfter


async def send_reminder(job: Job) -> str:
    if job.payload.get("busy"):
        raise RetryAfter(30)  # try again in 30 s; any other exception retries with backoff
    print(f"reminding user {job.payload['user']} (attempt {job.attempt})")
    return "sent"  # kept for the producer: enqueued with keep_result


handlers = {"reminder": send_reminder}
