"""Bad input is refused with a typed error that says what to do, and writes nothing.

Malformed data that is already in Redis (a stream entry or envelope written by something else)
is dead-lettered by the worker, which keeps serving the other jobs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support.helpers import FAST_WORKER, Runner, Runs, dead_entries, queue_state, wait_for

from shardq import Backoff, Dispatcher, JobRequest, Worker
from shardq.client import Client
from shardq.config import ProducerSettings, RedisSettings
from shardq.connection import connect_async
from shardq.errors import (
    InvalidJobError,
    InvalidScheduleError,
    PayloadNotSerializableError,
    PayloadTooLargeError,
    ShardqError,
    UnknownQueueError,
)
from shardq.runtime import health
from shardq.store import keys

PARTITIONS = 4
IDEM = "idem-bad-input"
DAY = 24 * 3600.0


class Opaque:
    pass


def _deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


# (id, enqueue keyword arguments, expected error, a phrase of the advice in its message)
CASES: list[tuple[str, dict[str, Any], type[ShardqError], str]] = [
    ("payload-set", {"payload": {1, 2}}, PayloadNotSerializableError, "convert datetimes, sets"),
    ("payload-object", {"payload": {"o": Opaque()}}, PayloadNotSerializableError, "pass dicts"),
    ("payload-bytes", {"payload": b"\xff"}, PayloadNotSerializableError, "pass dicts"),
    ("payload-too-large", {"payload": "x" * 200}, PayloadTooLargeError, "pass a reference"),
    ("run_at-nan", {"run_at": math.nan}, InvalidScheduleError, "finite"),
    ("run_at-inf", {"run_at": math.inf}, InvalidScheduleError, "finite"),
    ("delay-nan", {"delay": math.nan}, InvalidScheduleError, "finite"),
    ("delay-inf", {"delay": math.inf}, InvalidScheduleError, "finite"),
    ("delay-minus-inf", {"delay": -math.inf}, InvalidScheduleError, "finite"),
    ("delay-bool", {"delay": True}, InvalidScheduleError, "seconds or a timedelta"),
    ("delay-str", {"delay": "5"}, InvalidScheduleError, "seconds or a timedelta"),
    (
        "run_at-naive",
        {"run_at": datetime.now() + timedelta(minutes=5)},
        InvalidScheduleError,
        "timezone-aware",
    ),
    ("run_at-before-1970", {"run_at": -5.0}, InvalidScheduleError, "epoch seconds"),
    ("run_at-str", {"run_at": "tomorrow"}, InvalidScheduleError, "datetime or epoch seconds"),
    ("delay-past", {"delay": -400.0}, InvalidScheduleError, "use delay=0 to run now"),
    (
        "delay-past-timedelta",
        {"delay": timedelta(minutes=-10)},
        InvalidScheduleError,
        "use delay=0 to run now",
    ),
    ("delay-beyond-horizon", {"delay": 400 * DAY}, InvalidScheduleError, "raise max_horizon"),
    ("both-run_at-and-delay", {"run_at": 1e10, "delay": 5}, InvalidScheduleError, "not both"),
    ("type-empty", {"job_type": ""}, InvalidJobError, "use 1-128 characters"),
    ("type-space", {"job_type": "send email"}, InvalidJobError, "use 1-128 characters"),
    ("type-long", {"job_type": "t" * 129}, InvalidJobError, "use 1-128 characters"),
    ("type-not-str", {"job_type": 5}, InvalidJobError, "use 1-128 characters"),
    ("job_id-empty", {"job_id": ""}, InvalidJobError, "1-128 printable ASCII"),
    ("job_id-space", {"job_id": "a b"}, InvalidJobError, "1-128 printable ASCII"),
    ("job_id-long", {"job_id": "j" * 129}, InvalidJobError, "1-128 printable ASCII"),
    ("job_id-unicode", {"job_id": "jöb"}, InvalidJobError, "1-128 printable ASCII"),
    ("job_id-not-str", {"job_id": 42}, InvalidJobError, "1-128 printable ASCII"),
    ("max_attempts-0", {"max_attempts": 0}, InvalidJobError, "integer 1..1000"),
    ("max_attempts-bool", {"max_attempts": True}, InvalidJobError, "integer 1..1000"),
    ("max_attempts-huge", {"max_attempts": 10**6}, InvalidJobError, "integer 1..1000"),
    ("max_attempts-float", {"max_attempts": 2.5}, InvalidJobError, "integer 1..1000"),
    ("idem-empty", {"idempotency_key": ""}, InvalidJobError, "1..256 characters"),
    ("idem-long", {"idempotency_key": "k" * 257}, InvalidJobError, "1..256 characters"),
    ("headers-not-str", {"headers": {"n": 1}}, InvalidJobError, "dict of str to str"),
    ("headers-list", {"headers": [("a", "b")]}, InvalidJobError, "dict of str to str"),
    ("headers-str", {"headers": "traceparent"}, InvalidJobError, "dict of str to str"),
    ("payload-nan", {"payload": {"x": math.nan}}, PayloadNotSerializableError, "NaN or infinity"),
    ("payload-inf", {"payload": [1, [math.inf]]}, PayloadNotSerializableError, "NaN or infinity"),
    ("payload-surrogate", {"payload": "\ud800"}, PayloadNotSerializableError, "valid Unicode"),
    ("payload-huge-int", {"payload": 2**70}, PayloadNotSerializableError, "big integers"),
    ("payload-deep", {"payload": _deep(100_000)}, PayloadNotSerializableError, "pass dicts"),
    ("payload-int-keys", {"payload": {1: 2}}, PayloadNotSerializableError, "pass dicts"),
    ("type-newline", {"job_type": "t\n"}, InvalidJobError, "use 1-128 characters"),
    ("job_id-newline", {"job_id": "j\n"}, InvalidJobError, "1-128 printable ASCII"),
    ("idem-surrogate", {"idempotency_key": "k\udc80"}, InvalidJobError, "valid Unicode"),
    ("backoff-not-backoff", {"backoff": "fixed"}, InvalidJobError, "shardq.Backoff"),
]


@pytest.fixture
def strict_client(url: str, queue: str) -> Any:
    c = Client.from_url(url, ProducerSettings(max_payload_bytes=100))
    c.create_queue(queue, PARTITIONS)
    # Some state to compare against: a scheduled job, a ready job, a used idempotency key.
    c.enqueue(queue, "t", {"keep": 1}, delay=600)
    c.enqueue(queue, "t", {"keep": 2})
    c.enqueue(queue, "t", {"keep": 3}, delay=60, idempotency_key=IDEM + "-used")
    try:
        yield c
    finally:
        c.close()


def _snapshot(c: Client, queue: str) -> list[Any]:
    return queue_state(c.redis, queue, PARTITIONS, [IDEM, IDEM + "-used"])


def _refused(
    c: Client, queue: str, call: Callable[[], Any], error: type[ShardqError], advice: str
) -> ShardqError:
    before = _snapshot(c, queue)
    with pytest.raises(error) as info:
        call()
    assert type(info.value) is error, f"{type(info.value).__name__} is not {error.__name__}"
    assert advice in str(info.value), str(info.value)
    assert _snapshot(c, queue) == before, "a refused enqueue changed Redis"
    return info.value


@pytest.mark.parametrize(
    ("kwargs", "error", "advice"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_enqueue_is_refused_and_writes_nothing(
    strict_client: Client, queue: str, kwargs: dict[str, Any], error: type[ShardqError], advice: str
) -> None:
    args = {"job_type": "t", "payload": None, "idempotency_key": IDEM, **kwargs}
    job_type, payload = args.pop("job_type"), args.pop("payload")
    _refused(
        strict_client,
        queue,
        lambda: strict_client.enqueue(queue, job_type, payload, **args),
        error,
        advice,
    )
    # enqueue_many validates every job before sending any: the good ones are not written
    requests = [JobRequest("t", {"ok": 1}), JobRequest(job_type, payload, **args)]
    _refused(
        strict_client, queue, lambda: strict_client.enqueue_many(queue, requests), error, advice
    )


def test_schedule_checked_on_the_redis_clock_writes_nothing(
    strict_client: Client, queue: str
) -> None:
    c = strict_client
    past = time.time() - 400  # the client cannot know the Redis clock: the script refuses
    err = _refused(
        c,
        queue,
        lambda: c.enqueue(queue, "t", run_at=past, idempotency_key=IDEM),
        InvalidScheduleError,
        "pass a time in the future, use delay=0 to run now",
    )
    assert "before the Redis clock" in str(err)
    _refused(
        c,
        queue,
        lambda: c.enqueue(queue, "t", run_at=datetime.now(UTC) - timedelta(hours=1)),
        InvalidScheduleError,
        "raise past_tolerance",
    )
    far = time.time() + 400 * DAY
    err = _refused(
        c,
        queue,
        lambda: c.enqueue(queue, "t", run_at=far, idempotency_key=IDEM),
        InvalidScheduleError,
        "schedule closer to now or raise max_horizon",
    )
    assert "after the Redis clock" in str(err)
    # an existing job keeps its due time when a reschedule is refused
    job_id = c.enqueue(queue, "t", delay=300)
    for run_at, delay, advice in (
        (past, None, "pass a time in the future"),
        (far, None, "raise max_horizon"),
        (None, math.nan, "finite"),
        (datetime.now(), None, "timezone-aware"),
    ):
        _refused(
            c,
            queue,
            lambda r=run_at, d=delay: c.reschedule(queue, job_id, run_at=r, delay=d),
            InvalidScheduleError,
            advice,
        )
    # within the tolerance a past time means "now"
    ok = c.enqueue_detailed(queue, JobRequest("t", run_at=time.time() - 60))
    assert c.get(queue, ok.job_id).state == "ready"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "name", ["", "bad name", "q/x", "{q}", "x" * 65, None, 7, "q\n", "q\x00", "q\ud800"]
)
def test_bad_queue_name_is_refused(strict_client: Client, queue: str, name: Any) -> None:
    c = strict_client
    for call in (
        lambda: c.enqueue(name, "t"),
        lambda: c.create_queue(name, 4),
        lambda: c.get(name, "j"),
    ):
        _refused(c, queue, call, UnknownQueueError, "use 1-64 characters of letters, digits")


@pytest.mark.parametrize("name", [".", "..", "..."])
def test_a_queue_named_only_dots_is_not_created(client: Client, name: str) -> None:
    """Browsers rewrite /queues/../jobs to /jobs: such a queue could never be opened in the
    console, so it is refused at creation, with nothing written."""
    with pytest.raises(UnknownQueueError, match="not only dots"):
        client.create_queue(name, 4)
    assert not client.redis.exists(keys.queue_meta_key(name))
    assert name not in client.queues()
    from shardq.inspector import Inspector

    dotted = f"t-{uuid.uuid4().hex[:8]}{name}x"
    client.create_queue(dotted, 2)  # dots among other characters are fine
    assert dotted in client.queues()
    Inspector(client).delete_queue(dotted)


@pytest.mark.parametrize("partitions", [0, -1, 16385, True, 2.0, "8"])
def test_bad_partition_count_is_refused(client: Client, queue: str, partitions: Any) -> None:
    with pytest.raises(InvalidJobError, match=r"partitions must be an integer 1\.\.16384"):
        client.create_queue(queue, partitions)
    assert not client.redis.exists(keys.queue_meta_key(queue))


def test_bad_job_id_on_get_cancel_reschedule(strict_client: Client, queue: str) -> None:
    c = strict_client
    for call in (
        lambda: c.get(queue, "a b"),
        lambda: c.cancel(queue, ""),
        lambda: c.reschedule(queue, "x" * 200, delay=1),
    ):
        _refused(c, queue, call, InvalidJobError, "1-128 printable ASCII")


# malformed data already in Redis ----------------------------------------------------------------


def test_malformed_ready_entries_go_dead_and_the_worker_carries_on(
    url: str, client: Client, queue: str
) -> None:
    client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    r = client.redis
    runs = Runs()
    with Runner(url, queue, {"t": runs.add}) as runner:
        r.xadd(pk.ready, {"x": "no job id here"})
        r.hset(pk.jobs, "no-bar", "garbage without a header")
        r.xadd(pk.ready, {"j": "no-bar", "d": "0"})
        r.hset(pk.jobs, "bad-body", "S0|{not json")
        r.xadd(pk.ready, {"j": "bad-body", "d": "0"})
        r.hset(pk.jobs, "bad-attempt", 'Sx|["t",1]')
        r.xadd(pk.ready, {"j": "bad-attempt", "d": "0"})
        good = client.enqueue(queue, "t", {"fine": True})
        wait_for(lambda: good in runs.count(), 10, "the good job did not run")
        wait_for(lambda: r.xlen(pk.dead) == 4, 10, lambda: f"dead: {dead_entries(r, pk)}")
        later = client.enqueue(queue, "t", {"fine": "still"}, delay=0.2)
        wait_for(lambda: later in runs.count(), 10, "the worker stopped serving")
        # Settled entries leave the stream with the dispatcher's next trim.
        wait_for(lambda: r.xlen(pk.ready) == 0, 10, lambda: f"ready: {r.xlen(pk.ready)}")
        runner.check()

    assert sorted(runs.count()) == sorted([good, later])
    dead = dead_entries(r, pk)
    reasons = [d["e"] for d in dead]
    assert any("malformed ready entry: no job id field" in e for e in reasons), reasons
    assert any("malformed envelope for job no-bar" in e for e in reasons), reasons
    assert any("malformed envelope for job bad-attempt" in e for e in reasons), reasons
    [body] = [d for d in dead if d.get("j") == "bad-body"]
    assert "stored job cannot be read" in body["e"]
    raw = [d for d in dead if "raw" in d]
    assert any("no job id here" in d["raw"] for d in raw)
    # nothing left behind: every entry acknowledged and trimmed, an envelope without a header
    # dropped; one whose attempt is not a whole number is dead with its body (a replay can run
    # it from attempt 0)
    assert r.xpending(pk.ready, keys.WORKER_GROUP)["pending"] == 0
    assert not r.hexists(pk.jobs, "no-bar")
    assert r.hget(pk.jobs, "bad-attempt") == b'D0|["t",1]'
    assert r.hget(pk.jobs, "bad-body").startswith(b"D")
    assert r.hget(pk.stats, "dead") == b"4"


def test_unknown_job_type_is_retried_until_a_worker_with_its_handler_takes_it(
    url: str, client: Client, queue: str
) -> None:
    """A rolling deploy: an old worker meets a job of a type only the new release handles.  The
    job fails with the type named, is retried by its backoff, and the new worker runs it."""
    client.create_queue(queue, 2)
    runs = Runs()
    old_release = {"known": runs.add}
    stray = client.enqueue(
        queue, "new.type", {"x": 1}, max_attempts=50, backoff=Backoff("fixed", 0.5)
    )
    with Runner(url, queue, old_release) as runner:
        wait_for(
            lambda: (i := client.get(queue, stray)) is not None and i.state == "retrying",
            10,
            "the old worker did not retry the job it has no handler for",
        )
        runner.check()
    info = client.get(queue, stray)
    assert info is not None and info.state != "dead"
    assert "UnknownJobTypeError" in (info.last_error or "")
    assert "worker.register('new.type', fn)" in (info.last_error or "")
    assert "Traceback" not in (info.last_error or "") and "File " not in (info.last_error or "")
    with Runner(url, queue, {**old_release, "new.type": runs.add}) as runner:
        wait_for(lambda: stray in runs.count(), 10, "the new worker did not run the job")
        runner.check()
    assert runs.count()[stray] == 1 and client.get(queue, stray) is None


def test_unknown_job_type_goes_dead_at_once_when_the_worker_says_so(
    url: str, client: Client, queue: str
) -> None:
    client.create_queue(queue, 2)
    runs = Runs()
    strict = dataclasses.replace(FAST_WORKER, dead_letter_unknown_types=True)
    with Runner(url, queue, {"known": runs.add}, worker_settings=strict) as runner:
        stray = client.enqueue(queue, "nobody.handles.this", {"x": 1}, max_attempts=5)
        fine = client.enqueue(queue, "known")
        wait_for(lambda: (i := client.get(queue, stray)) and i.state == "dead", 10, "not dead")
        wait_for(lambda: fine in runs.count(), 10, "the known job did not run")
        runner.check()
    info = client.get(queue, stray)
    assert info is not None and info.attempt == 1  # no retries
    assert "'nobody.handles.this'" in (info.last_error or "")
    assert "worker.register('nobody.handles.this', fn)" in (info.last_error or "")
    pk = keys.partition_keys(queue, keys.partition_for(stray, 2), 2)
    [entry] = dead_entries(client.redis, pk)
    assert entry["j"] == stray and entry["a"] == "1"
    assert "UnknownJobTypeError" in entry["e"] and "nobody.handles.this" in entry["e"]
    assert list(runs.count()) == [fine]


@pytest.mark.parametrize("role", ["worker", "dispatcher"])
def test_pinned_partitions_the_queue_lacks_are_refused_before_joining(
    url: str, client: Client, queue: str, role: str
) -> None:
    """A worker or dispatcher pinned to partitions its queue does not have stops at start with
    UnknownQueueError naming the queue's range and the partitions it lacks, having joined no
    fleet and left no health status behind."""
    client.create_queue(queue, PARTITIONS)

    async def start() -> None:
        redis = await connect_async(RedisSettings.from_url(url))
        try:
            if role == "worker":
                await Worker(redis, queue, handlers={"t": print}, partitions=[0, 9, 4]).run()
            else:
                await Dispatcher(redis, queue, partitions=[1, 4, 9]).run()
        finally:
            await redis.aclose()

    with pytest.raises(UnknownQueueError, match=r"has partitions 0\.\.3, not \[4, 9\]"):
        asyncio.run(start())
    r = client.redis
    assert r.zcard(keys.workers_key(queue)) == 0 and r.zcard(keys.dispatchers_key(queue)) == 0
    assert all(s.queue != queue for s in health.statuses())
