"""The code of docs/guides/workflows.md, runnable against a cluster (SHARDQ_REDIS_URL)."""


def main() -> None:
    from shardq import Client, RedisSettings

    client = Client(RedisSettings.from_env())
    client.create_queue("imports", partitions=16)

    # --8<-- [start:nested]
    from shardq import Batch, Chain, JobRequest

    batch_id = client.batches.create(
        "imports",
        [
            JobRequest("fetch", {"source": "a"}),
            Batch([JobRequest("parse", {"part": n}) for n in range(10)]),  # one child
            Chain([JobRequest("load"), JobRequest("index")]),  # one child
        ],
        on_complete=JobRequest("report", {"run": 1}),  # every child ended, however
        on_failure=JobRequest("alert", {"run": 1}),  # policy "fail": at the first dead child
        policy="fail",  # or "continue" (on_failure once all ended), "ignore"
    )
    info = client.batches.get("imports", batch_id)
    print(info.kind, info.state, info.total, info.pending, info.completed, info.dead)
    # --8<-- [end:nested]
    assert info is not None and info.total == 3

    # --8<-- [start:open]
    nightly = client.batches.open(
        "imports", batch_id="nightly-2030-01-01", on_complete=JobRequest("report")
    )
    client.batches.add(
        "imports", nightly, [JobRequest("row", {"n": n}) for n in range(500)], add_id="part-1"
    )
    client.batches.add(
        "imports", nightly, [JobRequest("row", {"n": n}) for n in range(500, 900)], add_id="part-2"
    )
    client.batches.seal("imports", nightly)  # it cannot end before it is sealed
    # --8<-- [end:open]

    # --8<-- [start:cancel]
    cancelled = client.batches.cancel("imports", nightly)  # no callback fires any more
    print(cancelled)  # what was cancelled; running children end as they will
    # --8<-- [end:cancel]
    client.batches.cancel("imports", batch_id)
    client.close()


if __name__ == "__main__":
    main()
