"""OpenTelemetry (the ``otel`` extra): a real enqueue -> promote -> run on the cluster makes a
producer span whose context the job carries, and a consumer span per execution that is its
child; the handler's own spans nest under the consumer span; a handler's exception is recorded
on it with status ERROR."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode
from support.helpers import Runner, wait_for

from shardq import tracing
from shardq.client import Client
from shardq.jobs import Job, JobRequest

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (set once: OpenTelemetry allows one per process),
    exporting to memory; emptied around each test."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    assert tracing.active()
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _of(spans: InMemorySpanExporter, kind: SpanKind, queue: str) -> list[ReadableSpan]:
    return [
        s
        for s in spans.get_finished_spans()
        if s.kind == kind and (s.attributes or {}).get("messaging.destination.name") == queue
    ]


def _consumers(spans: InMemorySpanExporter, queue: str, job_id: str) -> list[ReadableSpan]:
    return [
        s
        for s in _of(spans, SpanKind.CONSUMER, queue)
        if (s.attributes or {}).get("messaging.message.id") == job_id
    ]


def test_the_consumer_span_is_a_child_of_the_enqueue_across_a_real_run(
    spans: InMemorySpanExporter, cluster_url: str, cluster_client: Client, queue: str
) -> None:
    cluster_client.create_queue(queue, 4)
    inner = trace.get_tracer("test")

    seen: list[tuple[Job, float]] = []  # the job, and the Redis clock when its handler ran

    def handler(job: Job) -> None:  # sync: runs in the worker's thread pool
        seen.append((job, job.redis_now_ms(time.monotonic())))
        with inner.start_as_current_span("handler work"):
            pass

    with Runner(cluster_url, queue, {"t": handler}):
        job_id = cluster_client.enqueue(queue, "t", {"n": 1}, delay=0.2)
        wait_for(lambda: _consumers(spans, queue, job_id), 20, "no consumer span")
        wait_for(
            lambda: any(s.name == "handler work" for s in spans.get_finished_spans()), 5, "inner"
        )

    [producer] = _of(spans, SpanKind.PRODUCER, queue)
    [consumer] = _consumers(spans, queue, job_id)
    assert producer.name == f"send {queue}" and consumer.name == f"process {queue}"
    assert producer.attributes is not None and consumer.attributes is not None
    assert producer.attributes["messaging.system"] == "shardq"
    assert producer.attributes["messaging.message.id"] == job_id
    # Parent and child across Redis: the context travelled in the job's headers.
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert consumer.context.trace_id == producer.context.trace_id
    attrs = consumer.attributes
    assert attrs["messaging.system"] == "shardq"
    assert attrs["messaging.operation.type"] == "process"
    assert attrs["shardq.partition"] == producer.attributes["shardq.partition"]
    assert attrs["shardq.attempt"] == 1
    assert attrs["shardq.job.type"] == "t"
    # start minus due time, on the Redis clock: started after the fetch, before the handler
    [(job, in_handler)] = seen
    assert job.due_ms is not None
    lateness = attrs["shardq.lateness_ms"]
    assert isinstance(lateness, int), lateness
    assert job.fetched_redis_ms - job.due_ms - 1 <= lateness <= in_handler - job.due_ms + 1, (
        lateness,
        job.fetched_redis_ms - job.due_ms,
        in_handler - job.due_ms,
    )
    assert consumer.status.status_code != StatusCode.ERROR
    # The handler's own span is a child of the execution's (the context reached the thread).
    [work] = [s for s in spans.get_finished_spans() if s.name == "handler work"]
    assert work.parent is not None and work.parent.span_id == consumer.context.span_id


def test_enqueue_many_is_one_span_whose_context_every_job_carries(
    spans: InMemorySpanExporter, cluster_url: str, cluster_client: Client, queue: str
) -> None:
    cluster_client.create_queue(queue, 4)
    with Runner(cluster_url, queue, {"t": lambda job: None}):
        own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        requests = [JobRequest("t", i) for i in range(5)]
        requests.append(JobRequest("t", 5, headers={"traceparent": own}))
        results = cluster_client.enqueue_many(queue, requests)
        ids = [r.job_id for r in results]
        wait_for(lambda: all(_consumers(spans, queue, j) for j in ids), 20, "consumer spans")

    [producer] = _of(spans, SpanKind.PRODUCER, queue)
    assert producer.attributes is not None
    assert producer.attributes["messaging.batch.message_count"] == 6
    for job_id in ids[:5]:
        [consumer] = _consumers(spans, queue, job_id)
        assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
    # A traceparent the caller set is kept: that job joins the caller's trace.
    [joined] = _consumers(spans, queue, ids[5])
    assert joined.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C


def test_an_exception_in_the_handler_is_recorded_on_the_consumer_span(
    spans: InMemorySpanExporter, cluster_url: str, cluster_client: Client, queue: str
) -> None:
    cluster_client.create_queue(queue, 2)

    async def failing(job: Job) -> Any:  # async: runs in a task of its own
        await asyncio.sleep(0)
        raise ValueError("handler broke")

    with Runner(cluster_url, queue, {"t": failing}):
        job_id = cluster_client.enqueue(queue, "t", None, max_attempts=1)
        wait_for(lambda: _consumers(spans, queue, job_id), 20, "no consumer span")

    [consumer] = _consumers(spans, queue, job_id)
    assert consumer.status.status_code == StatusCode.ERROR
    assert "handler broke" in (consumer.status.description or "")
    [event] = [e for e in consumer.events if e.name == "exception"]
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    assert event.attributes["exception.message"] == "handler broke"


def test_no_spans_without_a_tracer_provider() -> None:
    """The OpenTelemetry API alone (another library's dependency, say) leaves its default
    provider, which drops spans: shardq then makes none and its workers keep their fast path.
    Asked in a fresh process: this one may have set a provider already."""
    import subprocess
    import sys

    code = (
        "from shardq import tracing; from opentelemetry import trace; "
        "print(tracing.INSTALLED, tracing.active()); "
        "from opentelemetry.sdk.trace import TracerProvider; "
        "trace.set_tracer_provider(TracerProvider()); print(tracing.active())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["True", "False", "True"], out


def test_stamping_the_trace_context_keeps_every_other_field() -> None:
    """A positional copy once dropped limit_key, priority and tenant of every job enqueued
    while tracing was on."""
    import dataclasses

    from shardq import tracing

    full = JobRequest(
        "t", {"x": 1}, None, 5.0, "id-1", "idem-1", 3, None, {"a": "b"}, "api.example.com",
        "high", "acme",
    )  # fmt: skip
    stamped = tracing.with_headers(full, {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
    assert stamped.headers is not None and stamped.headers["a"] == "b"
    assert dataclasses.replace(stamped, headers=full.headers) == full
