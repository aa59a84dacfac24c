"""OpenTelemetry spans for enqueue and execution (``pip install shardq[otel]``).

A producer span covers each ``enqueue`` and each ``enqueue_many`` call; its context is written
into the job's headers (W3C ``traceparent``, through the globally configured propagator), so
it is stored with the job and survives retries, restarts and slot moves.  A consumer span
covers each execution of a handler and is a *child* of that context: the enqueue and every
attempt of the job it made show as one trace, as Celery's and BullMQ's instrumentations do, and
the handler's own spans (HTTP calls, queries) nest under it because the span is current while
the handler runs.  A delay of hours makes a long trace; that is the truth of a delayed job.

``enqueue_many`` makes one span per call with ``messaging.batch.message_count``, not one per
job: the bulk path costs a few microseconds per job, a span per job would cost several times
that and flood the tracing backend with identical spans; every job of the call carries the
call's context, so each execution still points at the enqueue that made it.  A job whose
caller already set ``traceparent`` keeps it (the CLI's ``--header traceparent=...`` joins a
shell script's trace that way).

Attributes follow OpenTelemetry's messaging conventions: ``messaging.system`` = "shardq",
``messaging.destination.name`` = the queue, ``messaging.operation.type`` ("send" or
"process"), ``messaging.message.id``; and shardq's own ``shardq.partition``,
``shardq.attempt``, ``shardq.lateness_ms`` (start minus due time, on the Redis clock) and
``shardq.job.type``.  An exception from the handler is recorded on the consumer span, whose
status becomes ERROR.

Spans are made only while they can go somewhere (:func:`active`): the extra is installed *and*
the process has set a tracer provider (opentelemetry-sdk's, say).  The OpenTelemetry API alone,
which other libraries often pull in, leaves the API's default provider in place, whose spans
are dropped: shardq then makes none, and its workers keep their fast path (an async handler
started eagerly, without a task of its own).  Producers ask per call; a worker asks once, when
it starts: configure the SDK before starting workers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from shardq.jobs import Job, JobRequest

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind
except ImportError:  # the otel extra is not installed: every hook below stays unused
    INSTALLED = False
else:
    INSTALLED = True
    _tracer = trace.get_tracer("shardq")  # a proxy: follows the provider set later


def active() -> bool:
    """Whether spans go anywhere: the extra is installed and a tracer provider other than the
    API's default (a proxy to a no-op) or an explicit no-op one is set."""
    if not INSTALLED:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


if TYPE_CHECKING:
    from opentelemetry.trace import Span

SYSTEM = "shardq"


@contextmanager
def producer_span(queue: str, count: int | None = None) -> Iterator[Span]:
    """The span of one enqueue (``count`` None) or one enqueue_many call of ``count`` jobs.
    An exception leaving the block is recorded on it."""
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
    }
    if count is not None:
        attributes["messaging.batch.message_count"] = count
    with _tracer.start_as_current_span(
        f"send {queue}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        yield span


def trace_headers() -> dict[str, str]:
    """The current context as job headers (``traceparent``, and ``tracestate``/``baggage``
    when there are any)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def with_headers(request: JobRequest, carrier: dict[str, str]) -> JobRequest:
    """``request`` carrying ``carrier``'s trace context, unless it already has its own."""
    if not carrier:
        return request
    headers = request.headers
    if headers is not None and (not isinstance(headers, dict) or "traceparent" in headers):
        return request  # its own context, or invalid: validation reports that as usual
    # replace(): every other field kept (a positional copy here once dropped the limit key,
    # priority and tenant of every job enqueued while tracing was on)
    return dataclasses.replace(
        request, headers=carrier if headers is None else {**headers, **carrier}
    )


def stamp_all(requests: Iterable[JobRequest], carrier: dict[str, str]) -> Iterator[JobRequest]:
    """:func:`with_headers` for each request (anything that is not a JobRequest is passed on,
    for the producer's validation to reject as usual)."""
    for req in requests:
        yield with_headers(req, carrier) if isinstance(req, JobRequest) else req


def sent(span: Span, job_id: str, partition: int) -> None:
    """Name the job a single enqueue stored."""
    span.set_attribute("messaging.message.id", job_id)
    span.set_attribute("shardq.partition", partition)


def _consumer_span(job: Job, lateness_ms: int | None) -> Span:
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": job.queue,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.message.id": job.id,
        "shardq.job.type": job.type,
        "shardq.partition": job.partition,
        "shardq.attempt": job.attempt,
    }
    if lateness_ms is not None:
        attributes["shardq.lateness_ms"] = lateness_ms
    headers = job.headers if isinstance(job.headers, dict) else {}
    # An empty Context when the job carries none: the span starts its own trace rather than
    # joining whatever the worker's event loop happens to have current.
    parent = propagate.extract(headers)
    return _tracer.start_span(
        f"process {job.queue}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
    )


def run_sync(handler: Callable[[Job], Any], job: Job, lateness_ms: int | None) -> Any:
    """Call a sync handler inside its consumer span (current for the handler's own spans)."""
    with trace.use_span(_consumer_span(job, lateness_ms), end_on_exit=True):
        return handler(job)


async def run_async(call: Callable[[], Awaitable[Any]], job: Job, lateness_ms: int | None) -> Any:
    """Await ``call()`` (the handler, wherever it runs) inside the job's consumer span.  Must
    run in a task of its own: the span is made current in that task's context."""
    with trace.use_span(_consumer_span(job, lateness_ms), end_on_exit=True):
        return await call()
