"""Numbers from Redis are checked as numbers: every numeric field a parser reads (stats
counters, due scores, an envelope's attempt, body options, lease and fence values, the owners
hash, the members registries' scores, limits, schedules, the meta, dead letters) is written
into real Redis as a buggy release or a careless operator would (nan, inf, -inf, 1e400, huge
and negative integers, hex, ' 12', '1_000', non-ASCII digits, non-numeric text, empty,
bytes that are not UTF-8), and the reading path (the CLI through click's CliRunner, the
Inspector, Client.get, the metrics collector) is run: a typed result, with the bad value
shown as malformed, or a typed error; never an exception escaping.

And numbers given by a user that no field can hold (a delay or run_at of 10**400 or 2**63,
nan, inf, a bool) are refused with a typed error that says the range, nothing written."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY, generate_latest
from support.helpers import job_id_in, queue_state

from shardq import metrics
from shardq.cli import main as cli
from shardq.client import Client
from shardq.errors import InvalidJobError, InvalidPeriodicScheduleError, ShardqError
from shardq.inspector import Inspector
from shardq.jobs import MAX_ATTEMPT, Backoff
from shardq.limits import Limit
from shardq.store import keys, numbers

# Text no numeric field may be read as, and text it may.
BAD_TEXT = [
    "nan", "NaN", "-nan", "inf", "-inf", "+inf", "Infinity", "1e400", "-1e400", "1e308",
    str(2**63), str(2**64), str(-(2**63) - 1), "-1", "-5", "0x10", " 12", "12 ", "1_000",
    "١٢", "²", "", "abc", "1.5", "1e3", "9" * 5000, "--1", "+5",
]  # fmt: skip
BAD_BYTES = [b"\xff\xfe", b"\x00", b"12\xff", b"\xc3\x28"]
stored_text = st.one_of(
    st.sampled_from([*BAD_TEXT, *BAD_BYTES]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats().map(repr),
    st.binary(max_size=12),
    st.text(max_size=12),
)
scores = st.one_of(
    st.sampled_from([math.inf, -math.inf, 1e308, -1e308, 2.0**63, -1.0, 0.5, 1e15 + 0.5]),
    st.floats(allow_nan=False),
)


def _decimal(raw: Any) -> int | None:
    """What a strict reader takes ``raw`` for: decimal digits with an optional '-'."""
    data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw
    if isinstance(data, bytes) and re.fullmatch(rb"-?[0-9]{1,19}", data):
        return int(data)
    return None


# the checked parsers, alone ------------------------------------------------------------------


@given(
    raw=st.one_of(
        stored_text, st.integers(), st.floats(), st.booleans(), st.none(), st.lists(st.none())
    ),
    lo=st.integers(-(2**64), 2**64),
    span=st.integers(0, 2**65),
)
def test_integer_takes_only_decimal_integers_in_range(raw: Any, lo: int, span: int) -> None:
    hi = lo + span
    try:
        value = numbers.integer(raw, lo, hi)
    except numbers.BadNumber as exc:
        assert str(exc)  # says what it got (and never fails itself)
        if isinstance(raw, bool) or raw is None or isinstance(raw, list):
            return
        if isinstance(raw, int):
            assert not lo <= raw <= hi
        elif isinstance(raw, float):
            assert not (math.isfinite(raw) and raw.is_integer() and lo <= raw <= hi)
        else:
            expected = _decimal(raw)
            assert expected is None or not lo <= expected <= hi, raw
        return
    assert lo <= value <= hi and not isinstance(raw, bool)
    if isinstance(raw, bytes | str):
        assert value == _decimal(raw)
    else:
        assert value == raw


@given(raw=st.one_of(stored_text, st.integers(), st.floats(), st.booleans(), st.none()))
def test_real_and_time_take_only_finite_numbers_in_range(raw: Any) -> None:
    for parse in (
        lambda: numbers.real(raw, -1e18, 1e18),
        lambda: float(numbers.time_ms(raw)),
    ):
        try:
            value = parse()
        except numbers.BadNumber:
            continue
        assert math.isfinite(value) and -1e18 <= value <= 1e18
        if isinstance(raw, bytes | str):
            text = raw.decode() if isinstance(raw, bytes) else raw
            assert re.fullmatch(r"[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?", text), raw
            assert "x" not in text.lower() and "_" not in text
    try:
        ms = numbers.time_ms(raw)
    except numbers.BadNumber:
        return
    assert 0 <= ms <= numbers.MAX_TIME_MS
    datetime.fromtimestamp(ms / 1000, UTC)  # every time it lets through can be shown


# reading paths over real Redis -------------------------------------------------------------


class Stored:
    """A queue of the cluster to write records into, and the ways to read them back."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = Client.from_url(url)
        self.r = self.client.redis
        self.partitions = 2
        self.queue = "n-" + uuid.uuid4().hex[:10]
        self.client.create_queue(self.queue, self.partitions)
        self.pk = keys.partition_keys(self.queue, 0, self.partitions)

    def cli(self, *args: str) -> Result:
        """Run a command: it answers (output, or one error line), never with a traceback."""
        done = CliRunner().invoke(cli, [*args, "--url", self.url])
        text = done.output + done.stderr
        assert "Traceback" not in text, (args, text)
        assert done.exception is None or isinstance(done.exception, SystemExit), (args, text)
        if done.exit_code != 0:
            errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
            assert len(errors) == 1, (args, text)
        return done

    def q(self, *args: str) -> Result:
        return (
            self.cli(*args[:2], "-q", self.queue, *args[2:])
            if len(args) > 1
            else self.cli(args[0], "-q", self.queue)
        )


@pytest.fixture(scope="module")
def stored(cluster_url: str) -> Iterator[Stored]:
    s = Stored(cluster_url)
    try:
        yield s
    finally:
        s.client.close()


def _typed(fn: Any) -> Any:
    """``fn()``, or the typed error it raised (anything else escapes and fails the test)."""
    try:
        return fn()
    except ShardqError as exc:
        return exc


def _counter_ok(raw: Any) -> bool:
    value = _decimal(raw)
    return value is not None and value >= 0


@settings(max_examples=25)
@given(value=stored_text, name=st.sampled_from(["enqueued", "promoted", "completed", "dead"]))
def test_stats_counters(stored: Stored, value: Any, name: str) -> None:
    """A counter of inf crashed `shardq queue stats` and `queue info`; now it is left out, shown as
    malformed, and left out of the metrics (not exported as 0: that would read as a reset)."""
    s = stored
    s.r.hset(s.pk.stats, name, value)
    try:
        (info, *_) = Inspector(s.client).partitions(s.queue)
        bad = "counter " + name in info.malformed
        assert bad == (not _counter_ok(value)), (value, info.malformed)
        if not bad:
            assert info.counters.get(name, 0) == int(value)
        done = s.q("queue", "stats", "--json", "--window", "0")
        row = orjson.loads(done.output.splitlines()[0])["partitions"][0]
        assert ("counter " + name in row["malformed"]) == bad
        assert ("malformed: partition 0: counter " + name in s.q("queue", "info").output) == bad
        s.q("queue", "info", "--json")
        s.q("queue", "stats", "--window", "0")
        snaps = metrics.snapshot_sync(s.r, keys.all_partition_keys(s.queue, s.partitions))
        metrics.PARTITIONS.update(s.queue, snaps, {0, 1})
        exported = generate_latest(REGISTRY).decode()
        line = f'shardq_jobs_{name}_total{{partition="0",queue="{s.queue}"}}'
        if name in metrics.COUNTERS:
            assert (line in exported) == (not bad), exported[-500:]
    finally:
        s.r.hdel(s.pk.stats, name)
        metrics.PARTITIONS.forget(s.queue)


@settings(max_examples=25)
@given(score=scores)
def test_due_scores(stored: Stored, score: float) -> None:
    """A job due at +inf crashed `job get`: every due score is read as a time or shown as
    malformed, in Client.get, `job get`, `job list` and `queue info`."""
    s = stored
    job_id = job_id_in(0, s.partitions, "due")
    s.client.enqueue(s.queue, "t", {"x": 1}, delay=60, job_id=job_id)  # a plain (untimed) id
    try:
        s.r.zadd(s.pk.due, {job_id: score})
        info = s.client.get(s.queue, job_id)
        assert info is not None and info.state == "scheduled"
        good = math.isfinite(score) and 0 <= score <= numbers.MAX_TIME_MS
        assert (info.due_ms == math.floor(score)) if good else info.due_ms is None
        assert ("due_ms" in info.malformed) == (not good), (score, info)
        shown = s.q("job", "get", job_id).output
        assert ("malformed:" in shown) == (not good), shown
        s.q("job", "get", job_id, "--json")
        page = Inspector(s.client).list_jobs(s.queue, "scheduled")
        for job in page.jobs:
            assert job.due_ms is None or 0 <= job.due_ms <= numbers.MAX_TIME_MS
            if job.id == job_id:
                assert ("due_ms" in job.malformed) == (not good), job
        s.q("job", "list", "--state", "scheduled")
        s.q("job", "list", "--state", "scheduled", "--json")
        s.q("queue", "info")
        s.q("queue", "stats", "--json", "--window", "0")
    finally:
        s.client.cancel(s.queue, job_id)


@settings(max_examples=25)
@given(attempt=stored_text, due=stored_text)
def test_envelope_attempt_and_ready_due(stored: Stored, attempt: Any, due: Any) -> None:
    """An envelope's attempt and a ready entry's due time, read by Client.get, `job get`, the
    ready listing and `dlq show`."""
    s = stored
    job_id = job_id_in(0, s.partitions, "env")
    raw = b"S" + (attempt if isinstance(attempt, bytes) else attempt.encode()) + b'|["t",1]'
    s.r.hset(s.pk.jobs, job_id, raw)
    entry = s.r.xadd(s.pk.ready, {"j": job_id, "d": due})
    try:
        info = _typed(lambda: s.client.get(s.queue, job_id))
        if not isinstance(info, ShardqError):
            assert info is not None
            number = _decimal(attempt)
            good = number is not None and 0 <= number <= MAX_ATTEMPT
            assert ("attempt" in info.malformed) == (not good), (attempt, info.malformed)
        s.q("job", "get", job_id)
        s.q("dlq", "show", job_id)
        page = Inspector(s.client).list_jobs(s.queue, "ready")
        mine = [j for j in page.jobs if j.id == job_id]
        assert mine, page
        assert mine[0].due_ms is None or 0 <= mine[0].due_ms <= numbers.MAX_TIME_MS
        s.q("job", "list", "--state", "ready")
        s.q("job", "list", "--state", "ready", "--json")
    finally:
        s.r.xdel(s.pk.ready, entry)
        s.r.hdel(s.pk.jobs, job_id)


options = st.fixed_dictionaries(
    {},
    optional={
        "m": st.one_of(
            st.sampled_from([1e308, -1, 0, 10**30, 2**63, "5", True, 1.5, None, [1]]),
            st.integers(),
        ),
        "b": st.one_of(
            st.lists(
                st.one_of(
                    st.sampled_from(["f", "e", "j", "x"]),
                    st.floats(-1e300, 1e300),
                    st.integers(-(2**63), 2**63),
                ),
                max_size=4,
            ),
            st.sampled_from([["f", 1, 1e300], ["e", -5, 10], ["j", 1e12, 1e13], "zzz", {}]),
        ),
        "h": st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
        "k": st.one_of(st.none(), st.integers(), st.text(max_size=4)),
        "l": st.one_of(st.none(), st.floats(allow_nan=False), st.text(max_size=4)),
    },
)


@settings(max_examples=25)
@given(opts=options)
def test_body_options(stored: Stored, opts: dict[str, Any]) -> None:
    """Options no producer writes (max attempts 1e308 or 10**30, a backoff cap of 1e300, keys
    that are numbers) are shown as malformed by Client.get, `job get` and the listings; the
    worker dead-letters such a job (tests/integration/test_malformed.py runs that)."""
    s = stored
    job_id = job_id_in(0, s.partitions, "opt")
    s.r.hset(s.pk.jobs, job_id, b'S0|["t",1,' + json.dumps(opts).encode() + b"]")
    s.r.zadd(s.pk.due, {job_id: 4_000_000_000_000})
    try:
        info = s.client.get(s.queue, job_id)
        assert info is not None
        assert info.max_attempts is None or 1 <= info.max_attempts <= 1000
        if (
            "m" in opts
            and opts["m"] is not None
            and not (type(opts["m"]) is int and 1 <= opts["m"] <= 1000)
        ):
            assert "m" in info.malformed, (opts, info.malformed)
        s.q("job", "get", job_id)
        s.q("job", "get", job_id, "--json")
        s.q("job", "list", "--state", "scheduled")
        for job in Inspector(s.client).list_jobs(s.queue, "scheduled").jobs:
            assert job.max_attempts is None or 1 <= job.max_attempts <= 1000
    finally:
        s.r.zrem(s.pk.due, job_id)
        s.r.hdel(s.pk.jobs, job_id)


@settings(max_examples=25)
@given(token=stored_text, granted=stored_text)
def test_lease_and_fence_values(stored: Stored, token: Any, granted: Any) -> None:
    """A lease whose token is not a number and a fence whose grant time is not one: `owners`,
    `queue info` and the Inspector show them as malformed."""
    s = stored
    pk = keys.partition_keys(s.queue, 1, s.partitions)
    lease = (token if isinstance(token, bytes) else token.encode()) + b":somebody"
    s.r.set(pk.lease, lease, px=60_000)
    s.r.hset(pk.fence, "granted", granted)
    try:
        infos = Inspector(s.client).partitions(s.queue)
        assert infos[1].owner == "somebody"
        if _decimal(token) is None or _decimal(token) < 0:  # type: ignore[operator]
            assert "token" in infos[1].malformed
        s.q("queue", "owners")
        s.q("queue", "owners", "--json")
        s.q("queue", "info")
        s.q("rebalance", "leases")
    finally:
        s.r.delete(pk.lease)
        s.r.hdel(pk.fence, "granted")


@settings(max_examples=20)
@given(fields=st.dictionaries(stored_text, stored_text, min_size=1, max_size=4))
def test_owners_hash(stored: Stored, fields: dict[Any, Any]) -> None:
    """The advisory owners hash: fields that are not a partition number ('²' passed isdigit()
    and then failed int()) are skipped by the parser the dispatchers use."""
    from shardq.store.fleet import parse_owners

    s = stored
    key = keys.owners_key(s.queue)
    s.r.delete(key)
    s.r.hset(key, mapping=fields)
    try:
        skipped: list[str] = []
        owners = parse_owners(s.r.hgetall(key), s.partitions, skipped)
        assert all(0 <= p < s.partitions for p in owners)
        s.q("queue", "owners")
        s.q("rebalance", "leases")
        s.q("queue", "info")
    finally:
        s.r.delete(key)


@settings(max_examples=20)
@given(score=scores, role=st.sampled_from(["dispatcher", "worker"]))
def test_members_registry_scores(stored: Stored, score: float, role: str) -> None:
    """A member's heartbeat score of +inf (an endless heartbeat) or any other: `queue members`
    and the Inspector list it with the score shown as malformed, or leave it out as expired."""
    s = stored
    key = keys.dispatchers_key(s.queue) if role == "dispatcher" else keys.workers_key(s.queue)
    s.r.zadd(key, {f"{role}:ghost#1": score})
    try:
        members = Inspector(s.client).members(s.queue)
        for m in members:
            assert m.malformed or 0 <= m.heartbeat_expires_ms <= numbers.MAX_TIME_MS
        if score == math.inf:
            assert [m.malformed for m in members if m.id == f"{role}:ghost#1"] != [{}]
        s.q("queue", "members")
        s.q("queue", "members", "--json")
        s.q("rebalance", "leases")
    finally:
        s.r.delete(key)


limit_values = st.one_of(
    stored_text,
    st.builds(
        lambda d: orjson.dumps(d),
        st.dictionaries(
            st.sampled_from(["rate", "per", "burst", "concurrency"]),
            st.one_of(st.sampled_from([1e308, -1, 0, 2**63, True, "5", None, 0.0001]),
                      st.integers(), st.floats(allow_nan=False, allow_infinity=False)),
            max_size=4,
        ),
    ),
)  # fmt: skip


@settings(max_examples=25)
@given(name=st.one_of(st.sampled_from(["type:t", "key:api", "tenant:*"]), stored_text),
       value=limit_values)  # fmt: skip
def test_limit_definitions(stored: Stored, name: Any, value: Any) -> None:
    """A limit stored by hand: Client.limits gives the limits or a typed error naming the bad
    one (what the worker's refresh logs and skips), `limit list` one line either way."""
    s = stored
    key = keys.limits_key(s.queue)
    s.r.delete(key)
    s.r.hset(key, name, value)
    try:
        found = _typed(lambda: s.client.limits(s.queue))
        if not isinstance(found, ShardqError):
            for limit in found:
                assert isinstance(limit, Limit)
        text = name.decode(errors="replace") if isinstance(name, bytes) else name
        got = _typed(lambda: Limit.from_stored(text, value))
        assert isinstance(got, Limit | ShardqError)
        s.q("limit", "list")
        s.q("limit", "list", "--json")
    finally:
        s.r.delete(key)


definitions = st.builds(
    lambda extra: orjson.dumps({"v": 1, "type": "t", "body": '["t",1]', **extra}),
    st.dictionaries(
        st.sampled_from(["every", "start", "end", "catch_up", "grace", "anchor", "cron", "tz"]),
        st.one_of(st.sampled_from([0, -1, 1e308, 2**63, "60000", True, None, 60_000, 1.5]),
                  st.integers(), st.floats(allow_nan=False, allow_infinity=False)),
        max_size=4,
    ),
)  # fmt: skip


@settings(max_examples=25)
@given(definition=st.one_of(definitions, stored_text), state=stored_text, score=scores)
def test_schedules(stored: Stored, definition: Any, state: Any, score: float) -> None:
    """A schedule's definition (numbers as JSON), state string and next tick score: listed and
    shown (an unreadable one as type '?' with its definition under malformed), never fatal."""
    s = stored
    name = "hand-made"
    pk = keys.partition_keys(s.queue, keys.partition_for(name, s.partitions), s.partitions)
    s.r.hset(pk.schedules, name, definition)
    s.r.hset(pk.schedule_state, name, state)
    s.r.zadd(pk.schedule_next, {name: score})
    try:
        listed = s.client.schedules.list(s.queue)
        assert [x.name for x in listed] == [name]
        got = listed[0]
        assert got.job_type == "?" or got.job_type == "t"
        if got.job_type == "?":
            assert "definition" in got.malformed
        for t in (got.next_fire_ms, got.last_fire_ms, got.last_tick_ms, got.start_ms):
            assert t is None or 0 <= t <= numbers.MAX_TIME_MS
        assert _typed(lambda: s.client.schedules.get(s.queue, name)).name == name
        _typed(lambda: s.client.schedules.next(s.queue, name, 3))
        s.q("schedule", "list")
        s.q("schedule", "show", name)
        s.q("schedule", "next", name)
    finally:
        for k in (pk.schedules, pk.schedule_state, pk.schedule_next):
            s.r.delete(k)


@settings(max_examples=20)
@given(field=st.sampled_from(["partitions", "layout", "dead_cap", "ack_retention_ms"]),
       value=stored_text)  # fmt: skip
def test_queue_meta(cluster_url: str, field: str, value: Any) -> None:
    """A damaged meta: every reader gets the queue or a typed error naming the field."""
    client = Client.from_url(cluster_url)
    queue = "m-" + uuid.uuid4().hex[:10]
    try:
        client.create_queue(queue, 2)
        client.redis.hset(keys.queue_meta_key(queue), field, value)
        client.forget(queue)
        got = _typed(lambda: client.partitions(queue))
        assert isinstance(got, int | ShardqError)
        if isinstance(got, ShardqError):
            assert field in str(got) or "does not exist" in str(got), got
        runner = CliRunner()
        for args in (["queue", "info"], ["queue", "stats", "--window", "0"], ["job", "get", "x"],
                     ["job", "enqueue", "t"], ["dlq", "list"], ["queue", "owners"]):  # fmt: skip
            done = runner.invoke(cli, [*args, "-q", queue, "--url", cluster_url])
            assert "Traceback" not in done.output and (
                done.exception is None or isinstance(done.exception, SystemExit)
            ), (args, done.output)
    finally:
        client.redis.delete(keys.queue_meta_key(queue))
        client.close()


@settings(max_examples=20)
@given(attempt=stored_text, at=stored_text)
def test_dead_letter_fields(stored: Stored, attempt: Any, at: Any) -> None:
    s = stored
    entry = s.r.xadd(s.pk.dead, {"j": "dead-x", "a": attempt, "t": at, "e": "boom"})
    try:
        s.q("dlq", "list")
        s.q("dlq", "list", "--json")
        for job in Inspector(s.client).list_jobs(s.queue, "dead").jobs:
            assert job.dead_at_ms is None or 0 <= job.dead_at_ms <= numbers.MAX_TIME_MS
        s.q("job", "list", "--state", "dead")
    finally:
        s.r.xdel(s.pk.dead, entry)


# numbers a user gives --------------------------------------------------------------------------

huge = st.sampled_from(
    [10**400, -(10**400), 2**63, -(2**63), 2**64, math.nan, math.inf, -math.inf, True, 1e308]
)


@settings(max_examples=30)
@given(value=huge, where=st.sampled_from(["delay", "run_at", "reschedule", "many"]))
def test_unrepresentable_delays_and_times_are_typed_errors_and_write_nothing(
    stored: Stored, value: Any, where: str
) -> None:
    """delay/run_at of 10**400 or 2**63 raised OverflowError; now InvalidJobError saying the
    range, before anything is written."""
    from shardq.jobs import JobRequest

    s = stored
    before = queue_state(s.r, s.queue, s.partitions)
    if where == "delay":
        call: Any = lambda: s.client.enqueue(s.queue, "t", 1, delay=value)  # noqa: E731
    elif where == "run_at":
        call = lambda: s.client.enqueue(s.queue, "t", 1, run_at=value)  # noqa: E731
    elif where == "reschedule":
        call = lambda: s.client.reschedule(s.queue, "nope", delay=value)  # noqa: E731
    else:
        call = lambda: s.client.enqueue_many(s.queue, [JobRequest("t", 1, delay=value)])  # noqa: E731
    with pytest.raises(InvalidJobError) as caught:
        call()
    assert "OverflowError" not in repr(caught.value)
    assert queue_state(s.r, s.queue, s.partitions) == before


@given(value=huge, what=st.sampled_from(["base", "cap", "dead_cap", "every", "start", "grace"]))
def test_other_unrepresentable_inputs_are_typed_errors(value: Any, what: str) -> None:
    from shardq.schedules import make_definition
    from shardq.store import producer

    if what in ("base", "cap"):
        with pytest.raises(InvalidJobError, match=r"0\.\.31622400 seconds"):
            Backoff("fixed", **{what: value})
    elif what == "dead_cap":
        with pytest.raises(InvalidJobError, match="dead_letter_cap"):
            producer.queue_create("q", 2, dead_letter_cap=value)
        with pytest.raises(InvalidJobError, match="ack_retention"):
            producer.queue_create("q", 2, ack_retention=value)
    else:
        kwargs: dict[str, Any] = {"every": 60}
        kwargs[{"every": "every", "start": "start", "grace": "misfire_grace"}[what]] = value
        with pytest.raises(InvalidPeriodicScheduleError):
            make_definition("s", "t", None, **kwargs)
