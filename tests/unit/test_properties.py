"""Property tests (hypothesis, derandomized in conftest): key and tag rules, routing of ids and
idempotency keys, input validation, backoff schedules.  No Redis needed."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from shardq.config import ProducerSettings
from shardq.errors import InvalidJobError, InvalidScheduleError, ShardqError
from shardq.jobs import JOB_TYPE_RE, Backoff, encode_body, make_schedule
from shardq.jobs.body import decode_backoff, decode_body
from shardq.store import keys, producer, routing

SETTINGS = ProducerSettings()
queue_names = st.from_regex(keys.QUEUE_NAME_RE, fullmatch=True).filter(lambda q: "\n" not in q)
partition_counts = st.integers(min_value=1, max_value=keys.MAX_PARTITIONS)
job_ids = st.from_regex(r"[\x21-\x7e]{1,40}", fullmatch=True)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(queue=queue_names, data=st.data())
def test_every_key_of_a_partition_is_in_its_own_slot_range(queue: str, data: Any) -> None:
    partitions = data.draw(partition_counts)
    p = data.draw(st.integers(min_value=0, max_value=partitions - 1))
    pk = keys.partition_keys(queue, p, partitions)
    lo, hi = keys.slot_range(p, partitions)
    slot = keys.slot_of(pk.due)
    assert lo <= slot < hi
    names = [pk.due, pk.jobs, pk.ready, pk.dead, pk.lease, pk.fence, pk.stats, pk.errors]
    names += [pk.due_hint, pk.ready_hint, pk.idem("any key"), pk.idem_placeholder]
    assert {keys.slot_of(k) for k in names} == {slot}
    # Deterministic: every process derives the same tag without a lookup.
    keys.partition_tag.cache_clear()
    assert keys.partition_tag(queue, p, partitions) == pk.tag


@given(partitions=partition_counts, key=st.text(min_size=1, max_size=64))
def test_an_idempotency_key_routes_its_generated_id_to_its_own_partition(
    partitions: int, key: str
) -> None:
    job_id, partition = routing.route(partitions, None, key)
    assert partition == keys.partition_for(key, partitions)
    # cancel/get/reschedule find the job from its id alone: the id must land there too.
    assert keys.partition_for(job_id, partitions) == partition


@given(partitions=partition_counts, job_id=job_ids)
def test_a_job_id_routes_by_its_own_hash(partitions: int, job_id: str) -> None:
    assert routing.route(partitions, job_id, None) == (
        job_id,
        keys.partition_for(job_id, partitions),
    )
    assert 0 <= keys.partition_for(job_id, partitions) < partitions


@given(job_type=st.text(max_size=140))
def test_job_types_are_accepted_or_refused_with_a_typed_error(job_type: str) -> None:
    try:
        encode_body(
            job_type,
            None,
            max_attempts=None,
            backoff=None,
            idempotency_key=None,
            headers=None,
            settings=SETTINGS,
        )
    except InvalidJobError:
        assert not JOB_TYPE_RE.fullmatch(job_type)
    else:
        assert JOB_TYPE_RE.fullmatch(job_type)


@given(payload=json_values, attempts=st.none() | st.integers(1, 1000))
def test_a_stored_body_decodes_to_what_was_enqueued(payload: Any, attempts: int | None) -> None:
    body = encode_body(
        "t",
        payload,
        max_attempts=attempts,
        backoff=None,
        idempotency_key=None,
        headers={"traceparent": "00-abc-def-01"},
        settings=ProducerSettings(max_payload_bytes=10**6),
    )
    decoded = decode_body(body)
    assert decoded["t"] == "t"
    assert orjson.dumps(decoded["p"]) == orjson.dumps(payload)
    assert decoded.get("m") == attempts


@given(
    value=st.one_of(
        st.floats(),
        st.integers(min_value=-(10**12), max_value=10**12),
        st.text(max_size=5),
        st.none(),
        st.booleans(),
    )
)
def test_delays_are_accepted_or_refused_with_a_typed_error(value: Any) -> None:
    try:
        schedule = make_schedule(None, value, SETTINGS)
    except InvalidScheduleError:
        ok = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and -SETTINGS.past_tolerance <= value <= SETTINGS.max_horizon
        )
        assert not ok, value
    else:
        assert schedule.mode == "in" and schedule.ms >= 0


@given(
    when=st.datetimes(
        min_value=datetime(1971, 1, 1), max_value=datetime(9000, 1, 1), timezones=st.just(UTC)
    )
)
def test_run_at_keeps_the_absolute_time(when: datetime) -> None:
    schedule = make_schedule(when, None, SETTINGS)
    assert schedule.mode == "at"
    assert abs(schedule.ms - when.timestamp() * 1000) <= 1


def test_naive_and_mixed_schedules_are_refused() -> None:
    naive = datetime(2030, 1, 1)
    for run_at, delay in ((naive, None), (datetime.now(UTC), timedelta(seconds=1))):
        try:
            make_schedule(run_at, delay, SETTINGS)
        except ShardqError:
            continue
        raise AssertionError((run_at, delay))


backoffs = st.builds(
    Backoff,
    kind=st.sampled_from(["fixed", "exponential", "jitter"]),
    base=st.floats(min_value=0, max_value=1e6),
    cap=st.floats(min_value=0, max_value=1e7),
)


@given(backoff=backoffs, attempt=st.integers(min_value=1, max_value=10_000))
def test_backoff_delays_stay_within_zero_and_the_cap(backoff: Backoff, attempt: int) -> None:
    delay = backoff.delay(attempt, random.Random(attempt))
    assert 0 <= delay <= backoff.cap
    if backoff.kind == "fixed":
        assert delay == min(backoff.base, backoff.cap)


@given(backoff=backoffs, attempt=st.integers(min_value=1, max_value=200))
def test_exponential_backoff_never_shrinks_and_jitter_stays_below_it(
    backoff: Backoff, attempt: int
) -> None:
    exponential = Backoff("exponential", backoff.base, backoff.cap)
    assert exponential.delay(attempt + 1) >= exponential.delay(attempt)
    jitter = Backoff("jitter", backoff.base, backoff.cap)
    assert jitter.delay(attempt, random.Random(0)) <= exponential.delay(attempt)


@given(backoff=backoffs)
def test_backoff_survives_its_stored_form(backoff: Backoff) -> None:
    again = decode_backoff(orjson.loads(orjson.dumps(backoff.encode())))
    assert again.kind == backoff.kind
    assert abs(again.base - backoff.base) <= 0.0005 and abs(again.cap - backoff.cap) <= 0.0005


stored_option_names = st.sampled_from(["m", "b", "h", "k", "l", "r", "o", "d", "w", "g", "gb"])
stored_option_values = st.one_of(
    json_values,
    # the shapes the readers take apart, with any JSON in each place
    st.lists(json_values, min_size=3, max_size=3),
    st.tuples(st.sampled_from(["f", "e", "j"]), json_values, json_values).map(list),
)


@given(options=st.dictionaries(stored_option_names, stored_option_values, max_size=4))
def test_any_stored_option_reads_as_a_value_or_as_malformed(options: dict[str, Any]) -> None:
    """A body written by hand or by a buggy release (a list where the backoff's kind letter
    goes, an object where a number goes) is read by every reader (Client.get, `job list`,
    the console) as options or as a malformed part, never as a TypeError that fails the page."""
    from shardq.jobs.body import stored_options
    from shardq.store.envelope import read

    raw = b"S0|" + orjson.dumps(["t", 1, options])
    envelope = read(raw)
    bad: dict[str, str] = {}
    stored_options(envelope.body, bad)
    assert set(bad) <= set(options)
    try:
        stored_options(envelope.body)
    except ValueError:
        assert bad
    else:
        assert not bad


delays = st.one_of(
    st.none(),
    st.integers(min_value=-100, max_value=10**10),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.timedeltas(min_value=timedelta(seconds=-60), max_value=timedelta(days=400)),
)
bodies = st.tuples(
    st.one_of(st.sampled_from(["t", "send.email", "bad type", ""]), st.integers()),
    json_values | st.floats() | st.text(max_size=4),
    st.one_of(st.none(), st.integers(min_value=0, max_value=20)),
)


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except ShardqError as exc:
        return (type(exc), str(exc))


@given(
    queue=queue_names,
    partitions=partition_counts,
    items=st.lists(st.tuples(bodies, delays), min_size=1, max_size=8),
)
def test_prepare_many_is_prepare_enqueue_for_every_request(
    queue: str, partitions: int, items: list[Any]
) -> None:
    """enqueue_many's fast path (prepare_many) accepts and refuses exactly what the one-job
    path does, with the same body, schedule and routing (ids are random: routing is checked
    against the id each drew)."""
    from shardq.jobs import JobRequest

    requests = [
        JobRequest(job_type, payload, delay=delay, max_attempts=attempts)  # type: ignore[arg-type]
        for (job_type, payload, attempts), delay in items
    ]
    many = _outcome(lambda: producer.prepare_many(queue, partitions, requests, SETTINGS))
    ones = [
        _outcome(lambda r=r: producer.prepare_enqueue(queue, partitions, r, SETTINGS))
        for r in requests
    ]
    first_error = next((o for o in ones if isinstance(o, tuple)), None)
    if first_error is not None:
        assert many == first_error  # the first bad request is the one reported, nothing sent
        return
    assert len(many) == len(ones)
    for m, o in zip(many, ones, strict=True):
        assert (m.body, m.schedule, m.request) == (o.body, o.schedule, o.request)
        assert m.partition == keys.partition_for(m.job_id, partitions)
        assert m.pk == keys.partition_keys(queue, m.partition, partitions)
