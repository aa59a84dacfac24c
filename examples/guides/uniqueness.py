"""The code of docs/guides/uniqueness.md, runnable against a cluster (SHARDQ_REDIS_URL)."""


def main() -> None:
    from shardq import Client, RedisSettings

    client = Client(RedisSettings.from_env())
    client.create_queue("orders", partitions=16)

    # --8<-- [start:key]
    from shardq import JobRequest

    first = client.enqueue_detailed(
        "orders", JobRequest("receipt", {"order": 42}, idempotency_key="receipt:order:42")
    )
    again = client.enqueue_detailed(
        "orders", JobRequest("receipt", {"order": 42}, idempotency_key="receipt:order:42")
    )
    print(first.created, again.created, again.job_id == first.job_id)  # True False True
    # --8<-- [end:key]
    assert not again.created and again.job_id == first.job_id

    # --8<-- [start:done]
    def export(day: str) -> str:
        return client.enqueue(
            "orders", "export", {"day": day}, delay=60,
            idempotency_key=f"export:{day}", unique_until="done",
        )  # fmt: skip

    job_id = export("2030-01-01")
    same = export("2030-01-01")  # the first job's id: it is still waiting
    client.cancel("orders", job_id)  # now it is done (completed, cancelled or dead) ...
    new = export("2030-01-01")  # ... so this is a new job
    # --8<-- [end:done]
    assert same == job_id and new != job_id

    # --8<-- [start:debounce]
    for _edit in range(3):  # a burst of edits to one document
        job_id = client.enqueue(
            "orders", "reindex", {"doc": 7}, idempotency_key="reindex:doc:7", debounce=5
        )
    # One job, due 5 s after the last enqueue of the burst, with the last payload.
    # --8<-- [end:debounce]
    info = client.get("orders", job_id)
    assert info is not None and info.state == "scheduled"

    # --8<-- [start:in-use]
    from shardq.errors import IdempotencyKeyInUseError

    try:  # a debounce acts only on a key a debounce of the same type and tenant made
        client.enqueue("orders", "reindex", {}, idempotency_key="receipt:order:42", debounce=5)
    except IdempotencyKeyInUseError as exc:
        print(exc)  # that key is the receipt's: nothing was written
    # --8<-- [end:in-use]
    client.close()


if __name__ == "__main__":
    main()
