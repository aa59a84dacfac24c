"""Numbers the scripts read from Redis are checked as numbers (lua/includes/checks.lua).

Lua's tonumber takes 'nan', 'inf', '1e400' and '0x10', and nan + 1 stays nan.  The audit found a
nan in a lanes vtime hash making enqueue raise an untyped error after it had stored the job,
and promote fail on every round; an envelope attempt of nan making a failing job retry for ever
(3,804 retries in 4 s with m=2).  Here every numeric field a script reads from Redis is planted
with such values (hypothesis, on the session's standalone node) and each script that reads it
is run: it works, or returns a typed code with nothing written, or dead-letters the job; it
never raises an untyped error, never loops, and replies only whole numbers in range.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardq import limits
from shardq.client import Client
from shardq.config import ProducerSettings
from shardq.errors import ShardqError
from shardq.jobs import JobRequest
from shardq.schedules import make_definition
from shardq.store import delivery, fleet, inspection, keys, producer
from shardq.store import limits as store_limits
from shardq.store import schedules as sched
from shardq.store.transport import SyncTransport

SETTINGS = ProducerSettings()
MAX_MS = 253402300799999  # 9999-12-31T23:59:59.999Z: every reply is a date

# Text a careless hand or a buggy producer could leave where a number belongs.
ODD = [
    *("nan", "-nan", "NaN", "inf", "-inf", "+inf", "Infinity", "1e400", "-1e400", "0x10"),
    *("0X1F", " 5", "5 ", "1.5", "-1", "-0", "", "abc", "9" * 30, "9007199254740993"),
    *("1e15", "1e+15", "2e9", "12abc", "1000000001", "0", "7"),
]
texts = (
    st.sampled_from(ODD)
    | st.integers(min_value=-(2**70), max_value=2**70).map(str)
    | st.floats().map(repr)
    | st.text(max_size=6)
)
# What a sorted-set score can be (Redis refuses nan there itself).
scores = st.sampled_from(["inf", "-inf", "1e308", "-1e308", "1.5", "-5", "0", "1e15"]) | st.floats(
    allow_nan=False
).map(repr)

EXAMPLES = settings(
    max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
_CREATED: list[str] = []


@pytest.fixture(autouse=True)
def _delete_queues(standalone_client: Client) -> Iterator[None]:
    yield
    from shardq.dev.demo import delete_queue

    while _CREATED:
        queue = _CREATED.pop()
        delete_queue(standalone_client.redis, queue, 1)
        for pk in keys.all_partition_keys(queue, 1):
            standalone_client.redis.delete(pk.schedules, pk.schedule_next, pk.schedule_state)


def _queue(client: Client, lanes: bool = False) -> tuple[str, keys.PartitionKeys]:
    queue = "num-" + uuid.uuid4().hex[:10]
    _CREATED.append(queue)
    client.create_queue(queue, 1, lanes=lanes)
    return queue, keys.partition_keys(queue, 0, 1)


def _snapshot(r: Any, queue: str) -> dict[Any, Any]:
    found = sorted(r.scan_iter(match="{sq:" + queue + "*", count=1000))
    return {k: (r.type(k), r.dump(k)) for k in found}


def _run(r: Any, queue: str, op: Any) -> Any:
    """Run ``op``: its result, or the typed error it raised (then nothing was written).  An
    untyped error (a Lua runtime error, a Redis command refused half-way) fails the test."""
    before = _snapshot(r, queue)
    try:
        return SyncTransport(r).run(op)
    except ShardqError as exc:
        assert _snapshot(r, queue) == before, f"{op.name} wrote, then failed: {exc}"
        return exc


def _ms(value: Any) -> bool:
    return isinstance(value, int) and 0 <= value <= MAX_MS


def _lease(r: Any, pk: keys.PartitionKeys) -> str:
    grant = SyncTransport(r).run(fleet.lease_acquire(pk, "d-" + uuid.uuid4().hex[:6], 60_000))
    assert grant.won
    return str(grant.token)


def _body(max_attempts: int = 2) -> str:
    return '["t",{"x":1},{"m":' + str(max_attempts) + "}]"


# envelopes -----------------------------------------------------------------------------------


def _worker_round(r: Any, queue: str, pk: keys.PartitionKeys, token: str) -> str:
    """What a worker whose handler always fails does with the partition, once: promote, fetch,
    and fail each job (dead once attempt >= m = 2).  Returns 'dead', 'retry' or 'none'."""
    _run(r, queue, fleet.promote(pk, token, 100, 60_000))
    got = _run(r, queue, delivery.fetch(pk, "c", 10))
    assert not isinstance(got, BaseException), got
    outcome = "none"
    for d in got.jobs:
        assert 1 <= d.attempt <= 10**9 + 1, d
        delay = -1 if d.attempt >= 2 else 0
        failed = _run(r, queue, delivery.fail(pk, d.entry_id, d.raw_id, delay, "boom"))
        assert not isinstance(failed, BaseException), failed
        outcome = failed.outcome
    return outcome


@EXAMPLES
@given(attempt=texts)
def test_an_envelope_attempt_that_is_no_whole_number_goes_dead_never_round_and_round(
    standalone_client: Client, attempt: str
) -> None:
    """The audit's case: attempt nan, m=2, a handler that always fails: 3,804 retries in 4 s."""
    r = standalone_client.redis
    queue, pk = _queue(standalone_client)
    token = _lease(r, pk)
    r.hset(pk.jobs, "j", f"S{attempt}|{_body()}")
    r.xadd(pk.ready, {"j": "j", "d": "0"})
    for _ in range(4):  # m=2: dead after the second failure at the latest
        if _worker_round(r, queue, pk, token) == "none":
            break
    envelope = r.hget(pk.jobs, "j")
    assert envelope is not None and envelope.startswith(b"D"), (attempt, envelope)
    # Dead with its body kept: a replay can run it again from attempt 0.
    assert envelope.endswith(_body().encode())
    [letter] = r.xrange(pk.dead)
    if envelope.startswith(b"D0|") and not attempt.isdigit():
        assert b"malformed" in letter[1][b"e"] and letter[1][b"a"] == b"0"


@EXAMPLES
@given(attempt=texts, where=st.sampled_from(["reclaim", "fail", "defer"]))
def test_an_attempt_spoilt_while_the_job_ran_is_settled_whole(
    standalone_client: Client, attempt: str, where: str
) -> None:
    """The envelope of a job a worker holds is overwritten: reclaim, fail and defer each leave
    the job dead (its body kept), or waiting with an attempt that counts, never half done."""
    r = standalone_client.redis
    queue, pk = _queue(standalone_client)
    job = standalone_client.enqueue(queue, "t", {"x": 1}, max_attempts=2)
    [d] = SyncTransport(r).run(delivery.fetch(pk, "gone", 1)).jobs
    body = r.hget(pk.jobs, job).split(b"|", 1)[1].decode()
    r.hset(pk.jobs, job, f"A{attempt}|{body}")
    if where == "reclaim":
        op: Any = delivery.reclaim(
            pk, "c", visibility_ms=0, orphan_idle_ms=0, live=[], count=10, max_deliveries=5
        )
        got = _run(r, queue, op)
        assert not isinstance(got, BaseException), got
        assert all(1 <= x.attempt <= 10**9 + 1 for x in got.jobs)
    elif where == "fail":
        got = _run(r, queue, delivery.fail(pk, d.entry_id, d.raw_id, 0, "boom"))
        assert not isinstance(got, BaseException), got
    else:
        got = _run(r, queue, store_limits.defer(pk, [(d.entry_id, d.raw_id, 10**13)]))
        assert got == 1, got
    envelope = r.hget(pk.jobs, job)
    assert envelope is not None and envelope.endswith(body.encode()), envelope
    header = envelope.split(b"|", 1)[0].decode()
    assert header[0] in "SADL" and header[1:].isdigit() and int(header[1:]) <= 10**9 + 1, header
    assert r.xpending(pk.ready, keys.WORKER_GROUP)["pending"] == (
        1 if where == "reclaim" and header[0] == "A" else 0
    )


# lanes ---------------------------------------------------------------------------------------


@EXAMPLES
@given(value=texts, field=st.sampled_from(["V", "n", "h", "lacme"]), lane_score=scores)
def test_a_damaged_vtime_or_lane_score_costs_fairness_never_a_job_or_a_call(
    standalone_client: Client, value: str, field: str, lane_score: str
) -> None:
    """The audit's case: nan in the vtime hash made enqueue fail after storing the job (a retry
    duplicated it) and promote fail on every round.  Now enqueue, bulk enqueue, promote and
    fetch all work, every score they write is a number, and every job is delivered."""
    client, r = standalone_client, standalone_client.redis
    queue, pk = _queue(client, lanes=True)
    r.hset(pk.vtime, mapping={field: value})
    r.hset(pk.jobs, "planted", f"S0|{_body()}")
    r.zadd(pk.lane, {"0 n planted": float(lane_score)})
    token = _lease(r, pk)
    ids = [client.enqueue(queue, "t", {"i": 0})]
    ids += [client.enqueue(queue, "t", {"i": 1}, priority="high", tenant="acme")]
    ids += [x.job_id for x in client.enqueue_many(queue, [JobRequest("t", i) for i in range(3)])]
    later = client.enqueue(queue, "t", {"later": 1}, delay=0.05)
    import time

    time.sleep(0.1)
    promoted = _run(r, queue, fleet.promote(pk, token, 100, 60_000))
    assert not isinstance(promoted, BaseException), promoted
    for member, score in r.zrange(pk.lane, 0, -1, withscores=True):
        if not member.endswith(b" planted"):  # the scores the scripts wrote are numbers
            assert 0 <= score < 2**53, (member, score)
    got = _run(r, queue, delivery.fetch(pk, "c", 100))
    assert not isinstance(got, BaseException), got
    delivered = {d.raw_id.decode() for d in got.jobs}
    assert {*ids, later, "planted"} == delivered
    # What the scripts wrote is a number (a damaged field of a flow without jobs stays as it
    # was: nothing reads it until that flow has a job, and then it reads as 0).
    for f, v in r.hgetall(pk.vtime).items():
        if f.decode() in ("V", "n", "hacme"):
            assert 0 <= float(v) < 2**53, (f, v)


# leases --------------------------------------------------------------------------------------


@EXAMPLES
@given(token=texts, granted=texts)
def test_a_damaged_fencing_token_is_refused_typed_and_granted_reads_as_a_time(
    standalone_client: Client, token: str, granted: str
) -> None:
    r = standalone_client.redis
    queue, pk = _queue(standalone_client)
    r.hset(pk.fence, mapping={"token": token, "granted": granted})
    info = _run(r, queue, fleet.lease_info(pk))
    assert not isinstance(info, BaseException), info
    assert info.granted_ms is None or _ms(info.granted_ms)
    grant = _run(r, queue, fleet.lease_acquire(pk, "d1", 10_000))
    if token.lstrip("-").isdigit() and 0 <= int(token) < 2**53 and len(token) <= 17:
        assert grant.won and int(grant.token) == int(token) + 1, grant
    else:
        assert isinstance(grant, ShardqError) and "token" in str(grant), grant


# limits --------------------------------------------------------------------------------------


@EXAMPLES
@given(state=texts, hold=scores)
def test_a_damaged_limit_state_starts_the_limit_afresh(
    standalone_client: Client, state: str, hold: str
) -> None:
    r = standalone_client.redis
    queue, _ = _queue(standalone_client)
    rate = limits.for_type("t", 10)
    r.set(keys.limit_state_key(queue, rate.name), state)
    starts = _run(r, queue, store_limits.take(queue, rate, 3))
    assert not isinstance(starts, BaseException), starts
    assert all(t == 0 or starts.now_ms < t <= starts.now_ms + MAX_MS for t in starts.times)
    left = r.get(keys.limit_state_key(queue, rate.name))
    assert left is not None and 0 <= float(left) <= 10**15 + 10**6  # + the 3 reserved
    conc = limits.for_type("t", concurrency=1)
    r.zadd(keys.limit_holders_key(queue, conc.name), {"squatter": float(hold)})
    slots = _run(r, queue, store_limits.acquire(queue, conc, [b"a"], 10_000))
    assert not isinstance(slots, BaseException), slots
    # A hold that could never have been written by a live worker (past, or beyond any hold
    # time) does not keep the slot.
    stale = float(hold) <= slots.now_ms or float(hold) > slots.now_ms + 86_400_000
    assert slots.held == [stale], (hold, slots)


# periodic schedules --------------------------------------------------------------------------


@EXAMPLES
@given(field=st.integers(min_value=0, max_value=4), value=texts, next_score=scores)
def test_a_damaged_schedule_state_or_next_tick_never_stops_or_loops_the_schedule(
    standalone_client: Client, field: int, value: str, next_score: str
) -> None:
    r = standalone_client.redis
    queue, pk = _queue(standalone_client)
    d = make_definition("s", "t", {"x": 1}, every=60)
    SyncTransport(r).run(sched.put(pk, "put", "s", d.to_json(), 1000))
    parts = ["1000", "1000", "3", "0", "0"]
    parts[field] = value.replace("|", "")
    r.hset(pk.schedule_state, "s", "|".join(parts))
    r.zadd(pk.schedule_next, {"s": float(next_score)})
    token = _lease(r, pk)
    for mode, arg in (("get", "s"), ("scan", "0"), ("due", "")):
        read = _run(r, queue, sched.read(pk, mode, arg, 10))  # type: ignore[arg-type]
        assert not isinstance(read, BaseException), read
        assert read.head_ms is None or _ms(read.head_ms)
        for row in read.schedules:
            assert row.next_ms is None or _ms(row.next_ms), row
    due = _run(r, queue, sched.read(pk, "due", "", 10))
    for row in due.schedules:
        # Fired with the tick it was read at, it moves on: it is not due again at once.
        fire = sched.Fire("s", row.next_ms, d.sha, 10**13, 0, d.body.encode(), [])
        result = _run(r, queue, sched.fire(pk, token, [fire]))
        assert not isinstance(result, BaseException), result
        assert result.statuses == [(1, 0)], (next_score, row, result)
        assert not _run(r, queue, sched.read(pk, "due", "", 10)).schedules
    for action in ("pause", "resume"):
        put = _run(r, queue, sched.put(pk, action, "s", "", 10**13))  # type: ignore[arg-type]
        assert not isinstance(put, BaseException), put
    # Written back whole: five whole numbers.
    state = r.hget(pk.schedule_state, "s").decode().split("|")
    assert len(state) == 5 and all(p.lstrip("-").isdigit() for p in state), state


# due scores ----------------------------------------------------------------------------------


@EXAMPLES
@given(score=scores)
def test_a_due_score_written_by_hand_reads_as_whole_ms_everywhere(
    standalone_client: Client, score: str
) -> None:
    """-inf is overdue, +inf never due; every reply about it is a whole ms time in range (a
    reply of inf used to reach Python as -2^63, or crash `job get`)."""
    client, r = standalone_client, standalone_client.redis
    queue, pk = _queue(client)
    r.hset(pk.jobs, "odd", f"S0|{_body()}")
    r.zadd(pk.due, {"odd": float(score)})
    token = _lease(r, pk)
    got = _run(r, queue, producer.get(keys.partition_keys(queue, 0, 1), "odd"))
    assert not isinstance(got, BaseException), got
    info = _run(r, queue, fleet.lease_info(pk))
    assert info.next_due_ms is not None and _ms(info.next_due_ms)
    snap = _run(r, queue, inspection.partition_stats(pk, "n"))
    assert snap.oldest_due_ms is not None and _ms(snap.oldest_due_ms)
    kept = _run(
        r,
        queue,
        producer.reschedule(keys.partition_keys(queue, 0, 1), "odd", None, None, SETTINGS, "low"),
    )
    assert not isinstance(kept, BaseException) and _ms(kept), kept
    bulk = client.enqueue_many(queue, [JobRequest("t", 1, delay=30)])
    assert bulk[0].created
    promoted = _run(r, queue, fleet.promote(pk, token, 100, 60_000))
    assert not isinstance(promoted, BaseException), promoted
    assert promoted.next_due_ms is None or _ms(promoted.next_due_ms)
    assert promoted.moved == (1 if float(score) <= promoted.now_ms else 0)
