"""The code of docs/guides/observability.md, runnable against a cluster (SHARDQ_REDIS_URL)."""

import time

from fleet import running


def main() -> None:
    # --8<-- [start:tracing]
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))  # or OTLP's
    trace.set_tracer_provider(provider)  # before the client and the workers start
    # --8<-- [end:tracing]

    from shardq import Client, Job, RedisSettings

    ran: list[Job] = []
    client = Client(RedisSettings.from_env())
    client.create_queue("traced", partitions=16)
    with running("traced", {"ping": ran.append}):
        job_id = client.enqueue("traced", "ping", {"n": 1})  # a producer span, sent as ...
        deadline = time.monotonic() + 30
        while not ran:
            assert time.monotonic() < deadline, "the job did not run"
            time.sleep(0.05)
    # ... the job's traceparent header, which the worker's consumer span continues.
    assert ran[0].id == job_id and "traceparent" in ran[0].headers, ran[0].headers
    client.close()


if __name__ == "__main__":
    main()
