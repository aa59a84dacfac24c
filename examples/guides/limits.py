"""The code of docs/guides/limits.md, runnable against a cluster (SHARDQ_REDIS_URL)."""


def main() -> None:
    from shardq import Client, RedisSettings

    client = Client(RedisSettings.from_env())
    client.create_queue("newsletters", partitions=16)

    # --8<-- [start:set]
    from shardq import limits

    # Every job of type "send": at most 100 starts a second, fleet-wide.
    client.set_limit("newsletters", limits.for_type("send", "100/s"))
    # Jobs enqueued with limit_key="api.partner.com": 10 starts a second, 5 running at once.
    client.set_limit(
        "newsletters", limits.for_key("api.partner.com", "10/s", burst=1, concurrency=5)
    )
    client.enqueue("newsletters", "send", {"to": "a@example.com"}, limit_key="api.partner.com")
    # Each tenant ("*") at most 10 running at once (a queue with lanes: see the lanes guide).
    client.set_limit("newsletters", limits.for_tenant("*", concurrency=10))

    for limit in client.limits("newsletters"):
        print(limit.name, limit)
    client.remove_limit("newsletters", "type:send")  # by name: type:<t>, key:<k>, tenant:<t>
    # --8<-- [end:set]
    names = {limit.name for limit in client.limits("newsletters")}
    assert names == {"key:api.partner.com", "tenant:*"}, names

    # --8<-- [start:invalid]
    from shardq.errors import InvalidLimitError

    try:
        limits.for_type("send", "100/fortnight")
    except InvalidLimitError as exc:
        print(exc)  # says what is wrong and what to write instead; nothing was written
    # --8<-- [end:invalid]
    client.close()


if __name__ == "__main__":
    main()
