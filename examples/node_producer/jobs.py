"""The Python side: `shardq worker run -q signups --handlers jobs:handlers` runs what the
TypeScript producer enqueues (the same wire: docs/wire.md)."""

from shardq import Job


async def send_email(job: Job) -> str:
    return f"sent to {job.payload['to']}"


handlers = {"email.send": send_email}
