"""A batch of 100 thumbnails with a callback once all completed, and a chain of two steps;
waits for the callback's and the last step's results."""

import time

from shardq import BatchInfo, Client, JobRequest, RedisSettings


def wait_ended(client: Client, queue: str, batch_id: str, timeout: float = 60) -> BatchInfo:
    """The batch once it ended and what its end calls for (callbacks, next steps) was done."""
    deadline = time.monotonic() + timeout
    while True:
        info = client.batches.get(queue, batch_id)
        if info is not None and info.ended and not info.fires_pending:
            return info
        if time.monotonic() > deadline:
            raise TimeoutError(f"batch {batch_id} did not end within {timeout} s: {info}")
        time.sleep(0.2)


with Client(RedisSettings.from_env()) as client:
    client.create_queue("albums", partitions=16)

    batch_id = client.batches.create(
        "albums",
        [JobRequest("thumbnail", {"photo": n}) for n in range(100)],  # spread over partitions
        on_success=JobRequest("album.publish", {"album": 7}, keep_result=600),
    )
    info = wait_ended(client, "albums", batch_id)
    print(info.state, info.completed, "of", info.total)
    # A callback's job id is "<batch id>#success" (#failure, #complete).
    print(client.result("albums", f"{batch_id}#success", timeout=60))

    chain_id = client.batches.chain(
        "albums",
        [
            JobRequest("order.charge", {"cents": 1250}),
            JobRequest("order.receipt", {"order": 42}, keep_result=600),
        ],
    )
    wait_ended(client, "albums", chain_id)
    print(client.result("albums", f"{chain_id}#1", timeout=60))  # step i's job id: "<id>#i"
