"""Handlers of the workflow example: `shardq worker run -q albums --handlers jobs:handlers`."""

from shardq import Job


def make_thumbnail(job: Job) -> str:
    # A batch child: job.batch_id and job.batch_index say which batch and which child.
    return f"thumb-{job.payload['photo']}.jpg"


def publish_album(job: Job) -> str:
    # The batch's on_success callback: runs once, after every child completed.
    return f"album {job.payload['album']} published ({job.batch_id})"


def charge(job: Job) -> int:
    return job.payload["cents"]


def receipt(job: Job) -> str:
    # A chain step: job.previous is the return value of the step before it.
    return f"charged {job.previous} cents for order {job.payload['order']}"


handlers = {
    "thumbnail": make_thumbnail,
    "album.publish": publish_album,
    "order.charge": charge,
    "order.receipt": receipt,
}
