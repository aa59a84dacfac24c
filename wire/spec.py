"""The wire specification's conformance vectors (docs/wire.md).

    python -m wire.spec vectors --write    # regenerate wire/vectors/*.json
    python -m wire.spec vectors --check    # exit 1 when they are not current

The vectors are language-neutral JSON: what a producer is given (a request, the queue, the
settings) and what it must do: the exact FCALLs and commands it sends (KEYS and ARGV), what
the call returns or which typed error it raises, and the Redis state that must result.  What
a case must *result in* (replies, errors, state) is written here by hand: it is the contract.
What it *sends* is computed by the Python client's own code, so the committed files change
whenever the Python client's wire does; ``make test`` checks the files are current
(tests/unit/test_wire_vectors.py), so a wire change cannot land without its vectors changing in
the same commit, in the diff a reviewer reads.  The function contracts (the header of each
producer-facing script: its KEYS, ARGV and replies) are fingerprinted the same way.

A request in the vectors (``R``) uses snake_case fields with times in ms: type, payload,
job_id, idempotency_key, delay_ms, run_at_ms, max_attempts, backoff {kind, base_ms, cap_ms},
headers, priority, tenant, limit_key, keep_result_ms, timeout_ms, deadline_ms,
start_within_ms, unique_until, debounce_ms.  Settings (``S``): past_tolerance_ms,
max_horizon_ms, idempotency_retention_ms, unique_retention_ms, max_payload_bytes.

Matchers where a value depends on the clock or on chance: ``{"from_now_ms": X}`` a time X ms
after the Redis clock while the step ran (``slack_ms`` either side, default 2,000: the
runner reads TIME before and after); ``{"re": "..."}`` text matching the regular expression
(ECMAScript and Python agree on the ones used); ``{"ttl_ms": X}`` for PTTL results X ms from
now within the slack.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from shardq import jobs as jobmod
from shardq import names
from shardq.config import ProducerSettings
from shardq.errors import ShardqError
from shardq.jobs import Backoff, JobRequest
from shardq.store import functions, keys, producer
from shardq.store import inspection as store_inspection
from shardq.store import queues as store_queues
from shardq.store.layout import Layout
from shardq.store.op import Command, Op

WIRE = "wire/1"
VECTORS_DIR = Path(__file__).resolve().parent / "vectors"

#: The functions a producer calls (docs/wire.md "Functions"): their headers are the contract.
PRODUCER_FUNCTIONS: tuple[str, ...] = (
    "queue-create",
    "control-init",
    "lanes",
    "enqueue",
    "enqueue-batch",
    "get",
    "cancel",
    "reschedule",
)

#: The settings of every call vector unless a case says otherwise: ProducerSettings' defaults.
DEFAULT_SETTINGS = ProducerSettings()


# requests and settings as the vectors write them ------------------------------------------------


def settings_vector(s: ProducerSettings) -> dict[str, int]:
    return {
        "past_tolerance_ms": round(s.past_tolerance * 1000),
        "max_horizon_ms": round(s.max_horizon * 1000),
        "idempotency_retention_ms": round(s.idempotency_retention * 1000),
        "unique_retention_ms": round(s.unique_retention * 1000),
        "max_payload_bytes": s.max_payload_bytes,
    }


def settings_from_vector(v: dict[str, Any] | None) -> ProducerSettings:
    if not v:
        return DEFAULT_SETTINGS
    base = settings_vector(DEFAULT_SETTINGS) | v
    return ProducerSettings(
        max_payload_bytes=base["max_payload_bytes"],
        past_tolerance=base["past_tolerance_ms"] / 1000,
        max_horizon=base["max_horizon_ms"] / 1000,
        idempotency_retention=base["idempotency_retention_ms"] / 1000,
        unique_retention=base["unique_retention_ms"] / 1000,
    )


_REQUEST_FIELDS = {
    *("type", "payload", "job_id", "idempotency_key", "delay_ms", "run_at_ms", "max_attempts"),
    *("backoff", "headers", "priority", "tenant", "limit_key", "keep_result_ms", "timeout_ms"),
    *("deadline_ms", "start_within_ms", "unique_until", "debounce_ms"),
}


def request_from_vector(r: dict[str, Any]) -> JobRequest:
    """The Python client's JobRequest for a vector's request (ms become seconds, as a Python
    caller passes them); KeyError for a field the vectors do not define."""
    unknown = set(r) - _REQUEST_FIELDS
    if unknown:
        raise KeyError(f"request fields {sorted(unknown)} are not part of {WIRE}")

    def seconds(name: str) -> float | None:
        return None if r.get(name) is None else r[name] / 1000

    backoff = None
    if r.get("backoff") is not None:
        b = r["backoff"]
        backoff = Backoff(b["kind"], b["base_ms"] / 1000, b["cap_ms"] / 1000)
    deadline: Any = seconds("deadline_ms")
    if r.get("start_within_ms") is not None:
        deadline = timedelta(milliseconds=r["start_within_ms"])
    request = JobRequest(
        job_type=r["type"],
        payload=r.get("payload"),
        run_at=seconds("run_at_ms"),
        delay=seconds("delay_ms"),
        job_id=r.get("job_id"),
        idempotency_key=r.get("idempotency_key"),
        max_attempts=r.get("max_attempts"),
        backoff=backoff,
        headers=r.get("headers"),
        limit_key=r.get("limit_key"),
        priority=r.get("priority"),
        tenant=r.get("tenant"),
        keep_result=seconds("keep_result_ms"),
        timeout=seconds("timeout_ms"),
        deadline=deadline,
        unique_until=r.get("unique_until"),
    )
    return jobmod.debounced(request, seconds("debounce_ms"))


# what a call sends ------------------------------------------------------------------------------


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


def sent(call: Op[Any] | Command[Any]) -> dict[str, Any]:
    """One call as the vectors write it: a function of the library (its name without the
    library's prefix) with KEYS and ARGV, or a plain command."""
    if isinstance(call, Op):
        return {
            "function": call.name,
            "keys": list(call.keys),
            "argv": [_text(a) for a in call.argv],
        }
    return {"command": [_text(a) for a in call.args]}


def create_queue_calls(queue: str, partitions: int, lanes: bool = False) -> list[dict[str, Any]]:
    """What creating a queue of this version sends, in order (shardq.plans.producer
    create_queue): the meta, each partition's consumer group, the registry, each partition's
    control hash, and with lanes each partition's lanes then the meta's flag."""
    pks = keys.all_partition_keys(queue, partitions)
    out = [sent(producer.queue_create(queue, partitions))]
    out += [sent(store_queues.group_create(pk)) for pk in pks]
    out.append(sent(store_queues.register(queue)))
    out += [sent(store_inspection.control_init(pk)) for pk in pks]
    if lanes:
        out += [sent(store_inspection.lanes(pk, True)) for pk in pks]
        out.append(sent(store_queues.set_meta_field(queue, "lanes", "1")))
    return out


def enqueue_calls(
    queue: str, partitions: int, r: dict[str, Any], s: ProducerSettings
) -> list[dict[str, Any]]:
    prepared = producer.prepare_enqueue(queue, partitions, request_from_vector(r), s, False)
    return [sent(prepared.op())]


def enqueue_many_calls(
    queue: str, partitions: int, rs: list[dict[str, Any]], s: ProducerSettings
) -> list[dict[str, Any]]:
    prepared = producer.prepare_many(queue, partitions, [request_from_vector(r) for r in rs], s)
    return [sent(c.op) for c in producer.plan_bulk(prepared)]


def by_id_calls(
    op_name: str, queue: str, partitions: int, step: dict[str, Any], s: ProducerSettings
) -> list[dict[str, Any]]:
    job_id = step["job_id"]
    names.check_job_id(job_id)  # refused before sending, as the clients do
    pk = Layout(queue, partitions).route(job_id)
    if op_name == "get":
        return [sent(producer.get(pk, job_id))]
    if op_name == "cancel":
        return [sent(producer.cancel(pk, job_id, bool(step.get("running"))))]
    delay = None if step.get("delay_ms") is None else step["delay_ms"] / 1000
    run_at = None if step.get("run_at_ms") is None else step["run_at_ms"] / 1000
    return [sent(producer.reschedule(pk, job_id, run_at, delay, s, step.get("priority")))]


def step_calls(queue: dict[str, Any], step: dict[str, Any], s: ProducerSettings) -> Any:
    """The calls a step sends; None when the client refuses it before sending anything."""
    name, partitions = queue["name"], queue["partitions"]
    try:
        op_name = step["op"]
        if op_name == "create_queue":
            return create_queue_calls(name, step["partitions"], bool(step.get("lanes")))
        if op_name == "enqueue":
            return enqueue_calls(name, partitions, step["request"], s)
        if op_name == "enqueue_many":
            return enqueue_many_calls(name, partitions, step["requests"], s)
        return by_id_calls(op_name, name, partitions, step, s)
    except ShardqError:
        return None


# the pure vectors -------------------------------------------------------------------------------


def keys_cases() -> list[dict[str, Any]]:
    shown = ("jobs", "due", "ready", "stats", "lane", "vtime", "ctl", "moving", "cancels")
    out = []
    for queue, partitions, partition, generation in [
        ("orders", 1, 0, 0),
        ("orders", 3, 2, 0),
        ("orders", 64, 0, 0),
        ("orders", 64, 17, 0),
        ("orders", 64, 63, 0),
        ("emails.v2", 1024, 1023, 0),
        ("emails.v2", 1025, 512, 0),
        ("emails.v2", 16384, 16383, 0),
        ("orders", 128, 5, 1),
        ("orders", 2048, 7, 3),
        ("a-b_c.d", 7, 3, 0),
    ]:
        pk = keys.partition_keys(queue, partition, partitions, generation)
        named = {kind: getattr(pk, kind) for kind in shown}
        named |= {"due_hint": pk.due_hint, "ready_hint": pk.ready_hint}
        named |= {"idem:k-1": pk.idem("k-1"), "idem_placeholder": pk.idem_placeholder}
        named |= {"result:j1": pk.result("j1"), "progress:j1": pk.progress("j1")}
        out.append(
            {
                "queue": queue,
                "partitions": partitions,
                "partition": partition,
                "generation": generation,
                "tag": pk.tag,
                "slot": keys.slot_of(pk.due),
                "keys": named,
            }
        )
    return out


def queue_keys_cases() -> list[dict[str, Any]]:
    return [
        {"queue": q, "meta": keys.queue_meta_key(q), "registry": keys.QUEUES_KEY}
        for q in ("orders", "emails.v2")
    ]


def routing_cases() -> list[dict[str, Any]]:
    routing = [
        "a",
        "job-1",
        "Zm9vYmFy.123",
        "order-42",
        "ünïcode-key",
        "AAGT0kLxABCDEFGHIJKL",
        "sq-sched:nightly@1764547200000",
        "sq-sched:bad name@1",
        "x" * 128,
    ]
    return [
        {"key": k, "partitions": p, "partition": keys.partition_for(k, p)}
        for k in routing
        for p in (1, 7, 64, 16384)
    ]


def timed_id_cases() -> list[dict[str, Any]]:
    out = []
    for due in (0, 1, 1_700_000_000_000, 1_764_547_200_123, 253_402_300_799_999):
        out.append({"due_ms": due, "head": jobmod.timed_head(due)})
    for length in (1, 20, 40, 41, 100, 300, 1000):
        out.append({"body_bytes": length, "compact_pays": jobmod.compact_pays(length)})
    return out


#: Body cases: (request, settings or None) whose encoding must be exactly the body; and requests
#: every client must refuse before sending, with the Python class name of the error.
BODY_CASES: list[dict[str, Any]] = [
    {"type": "send", "payload": None},
    {"type": "send", "payload": {"to": "a@example.com", "n": 3}},
    {"type": "a.b:c/d-e_f", "payload": [1, 2.5, "x", True, False, None, {"k": []}]},
    {"type": "send", "payload": "ünïcode ✓"},
    {"type": "send", "payload": 1, "max_attempts": 8},
    {
        "type": "send",
        "payload": 1,
        "backoff": {"kind": "exponential", "base_ms": 500, "cap_ms": 60000},
    },
    {"type": "send", "payload": 1, "backoff": {"kind": "fixed", "base_ms": 2000, "cap_ms": 2000}},
    {"type": "send", "payload": 1, "backoff": {"kind": "jitter", "base_ms": 1000, "cap_ms": 30000}},
    {"type": "send", "payload": 1, "idempotency_key": "order-42"},
    {"type": "send", "payload": 1, "headers": {"traceparent": "00-abc-def-01"}},
    {"type": "send", "payload": 1, "headers": {}},
    {"type": "send", "payload": 1, "limit_key": "tenant:acme"},
    {"type": "send", "payload": 1, "keep_result_ms": 3600000},
    {"type": "send", "payload": 1, "timeout_ms": 30000},
    {"type": "send", "payload": 1, "deadline_ms": 1893456000000},
    {"type": "send", "payload": 1, "start_within_ms": 60000},
    {"type": "send", "payload": 1, "priority": "high"},
    {"type": "send", "payload": 1, "priority": "low", "tenant": "acme"},
    {"type": "send", "payload": 1, "tenant": "acme.eu:1"},
    {"type": "send", "payload": 1, "priority": "default"},
    {
        "type": "send",
        "payload": {"x": 1},
        "max_attempts": 3,
        "backoff": {"kind": "exponential", "base_ms": 1000, "cap_ms": 600000},
        "idempotency_key": "k",
        "headers": {"a": "b"},
        "limit_key": "l",
        "keep_result_ms": 1000,
        "timeout_ms": 1,
        "deadline_ms": 1,
        "priority": "high",
        "tenant": "t",
    },
]

BODY_ERRORS: list[tuple[dict[str, Any], dict[str, Any] | None, str]] = [
    ({"type": "", "payload": 1}, None, "InvalidJobError"),
    ({"type": "has space", "payload": 1}, None, "InvalidJobError"),
    ({"type": "x" * 129, "payload": 1}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "max_attempts": 0}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "max_attempts": 1001}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "max_attempts": True}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "headers": {"a": 1}}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "limit_key": "has space"}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "keep_result_ms": 999}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "keep_result_ms": 2592000001}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "timeout_ms": 0}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "deadline_ms": -5}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "priority": "urgent"}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "tenant": "bad tenant"}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "job_id": "has space"}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "job_id": "x" * 129}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "idempotency_key": ""}, None, "InvalidJobError"),
    ({"type": "send", "payload": 1, "idempotency_key": "k" * 257}, None, "InvalidJobError"),
    ({"type": "send", "payload": "x" * 200}, {"max_payload_bytes": 100}, "PayloadTooLargeError"),
    ({"type": "send", "payload": 1, "delay_ms": -301000}, None, "InvalidScheduleError"),
    ({"type": "send", "payload": 1, "delay_ms": 367 * 86400000}, None, "InvalidScheduleError"),
    ({"type": "send", "payload": 1, "delay_ms": 1, "run_at_ms": 1}, None, "InvalidScheduleError"),
    ({"type": "send", "payload": 1, "unique_until": "done"}, None, "InvalidJobError"),
    (
        {"type": "send", "payload": 1, "unique_until": "forever", "idempotency_key": "k"},
        None,
        "InvalidJobError",
    ),
    ({"type": "send", "payload": 1, "debounce_ms": 1000}, None, "InvalidJobError"),
]


def body_of(r: dict[str, Any], s: ProducerSettings) -> bytes:
    prepared = producer.prepare_enqueue("q", 1, request_from_vector(r), s)
    return prepared.body


def body_cases() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in BODY_CASES:
        out.append({"request": r, "body": body_of(r, DEFAULT_SETTINGS).decode()})
    for r, s, error in BODY_ERRORS:
        try:
            body_of(r, settings_from_vector(s))
        except ShardqError as exc:
            if type(exc).__name__ != error:
                raise AssertionError(f"{r}: {type(exc).__name__}, the vector says {error}") from exc
        else:
            raise AssertionError(f"{r}: accepted, the vector says {error}")
        case: dict[str, Any] = {"request": r, "error": error}
        if s:
            case["settings"] = s
        out.append(case)
    return out


def schedule_cases() -> list[dict[str, Any]]:
    """How a request's time becomes enqueue's ARGV[3] and ARGV[4] (a given id: no timed id)."""
    out = []
    for r in (
        {"type": "t", "job_id": "j"},
        {"type": "t", "job_id": "j", "delay_ms": 0},
        {"type": "t", "job_id": "j", "delay_ms": 1500},
        {"type": "t", "job_id": "j", "delay_ms": 0.4},
        {"type": "t", "job_id": "j", "delay_ms": -1000},
        {"type": "t", "job_id": "j", "run_at_ms": 1893456000000},
        {"type": "t", "job_id": "j", "run_at_ms": 1893456000000.6},
    ):
        argv = enqueue_calls("q", 1, r, DEFAULT_SETTINGS)[0]["argv"]
        out.append({"request": r, "mode": argv[2], "ms": argv[3]})
    return out


# the call vectors -------------------------------------------------------------------------------


def _same_partition_id(key: str, partitions: int, stem: str) -> str:
    """A job id of the partition ``key`` routes to (an idempotency key and a given job id must
    agree)."""
    want = keys.partition_for(key, partitions)
    n = 0
    while keys.partition_for(f"{stem}-{n}", partitions) != want:
        n += 1
    return f"{stem}-{n}"


def _pk(queue: str, partitions: int, routing_key: str) -> keys.PartitionKeys:
    return Layout(queue, partitions).route(routing_key)


def _created(queue: str, partitions: int, lanes: bool = False) -> dict[str, Any]:
    step: dict[str, Any] = {"op": "create_queue", "partitions": partitions, "result": True}
    if lanes:
        step["lanes"] = True
    return step


def _body(r: dict[str, Any]) -> str:
    return body_of(r, DEFAULT_SETTINGS).decode()


def call_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    r: dict[str, Any]
    P = 4

    # create_queue: idempotent with the same count, refused with another
    q = "wire-create"
    meta = keys.queue_meta_key(q)
    cases.append(
        {
            "name": "create_queue",
            "queue": {"name": q, "partitions": P},
            "steps": [
                _created(q, P)
                | {
                    "state": [
                        {"command": ["HGET", meta, "partitions"], "expect": str(P)},
                        {"command": ["HGET", meta, "layout"], "expect": str(keys.LAYOUT_VERSION)},
                        {"command": ["HGET", meta, "ack_retention_ms"], "expect": "0"},
                        {"command": ["SISMEMBER", keys.QUEUES_KEY, q], "expect": 1},
                        *(
                            {"command": ["XLEN", pk.ready], "expect": 0}
                            for pk in keys.all_partition_keys(q, P)
                        ),
                        *(
                            {"command": ["HGET", pk.ctl, "lanes"], "expect": "0"}
                            for pk in keys.all_partition_keys(q, P)
                        ),
                    ]
                },
                {"op": "create_queue", "partitions": P, "result": False},
                {"op": "create_queue", "partitions": 8, "error": "QueueConfigConflictError"},
                {"op": "create_queue", "partitions": 0, "error": "InvalidJobError"},
            ],
        }
    )

    # enqueue with a delay, then every by-id call on it
    q = "wire-delay"
    r = {"type": "email.send", "payload": {"to": "a@example.com"}, "job_id": "job-1"}
    r_delay = r | {"delay_ms": 60000}
    pk = _pk(q, P, "job-1")
    cases.append(
        {
            "name": "enqueue_delay_get_reschedule_cancel",
            "queue": {"name": q, "partitions": P},
            "steps": [
                _created(q, P),
                {
                    "op": "enqueue",
                    "request": r_delay,
                    "result": {
                        "job_id": "job-1",
                        "created": True,
                        "due_ms": {"from_now_ms": 60000},
                        "partition": pk.partition,
                    },
                    "state": [
                        {"command": ["HGET", pk.jobs, "job-1"], "expect": "S0|" + _body(r)},
                        {"command": ["ZSCORE", pk.due, "job-1"], "expect": {"from_now_ms": 60000}},
                        {"command": ["HGET", pk.stats, "enqueued"], "expect": "1"},
                        {"command": ["XLEN", pk.ready], "expect": 0},
                    ],
                },
                {
                    "op": "enqueue",
                    "request": r_delay,
                    "comment": "the same call resent: recognised, nothing written",
                    "result": {"job_id": "job-1", "created": True, "due_ms": None},
                    "state": [{"command": ["HGET", pk.stats, "enqueued"], "expect": "1"}],
                },
                {
                    "op": "enqueue",
                    "request": r_delay | {"payload": {"to": "other@example.com"}},
                    "error": "DuplicateJobError",
                },
                {
                    "op": "get",
                    "job_id": "job-1",
                    "result": {
                        "id": "job-1",
                        "state": "scheduled",
                        "type": "email.send",
                        "payload": {"to": "a@example.com"},
                        "attempt": 0,
                        "max_attempts": None,
                        "due_ms": {"from_now_ms": 60000},
                        "partition": pk.partition,
                        "priority": "default",
                        "tenant": None,
                        "idempotency_key": None,
                        "last_error": None,
                    },
                },
                {
                    "op": "reschedule",
                    "job_id": "job-1",
                    "delay_ms": 120000,
                    "result": {"from_now_ms": 120000},
                    "state": [
                        {"command": ["ZSCORE", pk.due, "job-1"], "expect": {"from_now_ms": 120000}}
                    ],
                },
                {"op": "reschedule", "job_id": "job-1", "error": "InvalidScheduleError"},
                {
                    "op": "reschedule",
                    "job_id": "nope",
                    "delay_ms": 1000,
                    "error": "JobNotFoundError",
                },
                {
                    "op": "cancel",
                    "job_id": "job-1",
                    "result": True,
                    "state": [
                        {"command": ["HEXISTS", pk.jobs, "job-1"], "expect": 0},
                        {"command": ["ZSCORE", pk.due, "job-1"], "expect": None},
                    ],
                },
                {"op": "get", "job_id": "job-1", "result": None},
                {"op": "cancel", "job_id": "job-1", "result": False},
                {"op": "get", "job_id": "bad id", "error": "InvalidJobError"},
            ],
        }
    )

    # due now: straight into the ready stream; a ready job cannot be rescheduled
    q = "wire-now"
    pk = _pk(q, P, "now-1")
    r = {"type": "t", "payload": [1], "job_id": "now-1"}
    cases.append(
        {
            "name": "enqueue_now",
            "queue": {"name": q, "partitions": P},
            "steps": [
                _created(q, P),
                {
                    "op": "enqueue",
                    "request": r,
                    "result": {"job_id": "now-1", "created": True, "due_ms": {"from_now_ms": 0}},
                    "state": [
                        {"command": ["HGET", pk.jobs, "now-1"], "expect": "S0|" + _body(r)},
                        {"command": ["XLEN", pk.ready], "expect": 1},
                        {"command": ["ZCARD", pk.due], "expect": 0},
                    ],
                },
                {"op": "get", "job_id": "now-1", "result": {"state": "ready", "due_ms": None}},
                {
                    "op": "reschedule",
                    "job_id": "now-1",
                    "delay_ms": 1000,
                    "error": "JobNotScheduledError",
                },
                {"op": "cancel", "job_id": "now-1", "result": True},
            ],
        }
    )

    # every option a producer sets, stored in the body; read back by get
    q = "wire-options"
    r = {
        "type": "report.build",
        "payload": {"id": 7},
        "job_id": "opt-1",
        "delay_ms": 5000,
        "max_attempts": 8,
        "backoff": {"kind": "exponential", "base_ms": 1000, "cap_ms": 60000},
        "headers": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        "limit_key": "acme",
        "keep_result_ms": 86400000,
        "timeout_ms": 30000,
        "deadline_ms": 4102444800000,
    }
    pk = _pk(q, P, "opt-1")
    plain = {k: v for k, v in r.items() if k not in ("job_id", "delay_ms")}
    cases.append(
        {
            "name": "enqueue_options",
            "queue": {"name": q, "partitions": P},
            "steps": [
                _created(q, P),
                {
                    "op": "enqueue",
                    "request": r,
                    "result": {"job_id": "opt-1", "created": True},
                    "state": [
                        {"command": ["HGET", pk.jobs, "opt-1"], "expect": "S0|" + _body(plain)}
                    ],
                },
                {
                    "op": "get",
                    "job_id": "opt-1",
                    "result": {
                        "state": "scheduled",
                        "max_attempts": 8,
                        "limit_key": "acme",
                        "keep_result_ms": 86400000,
                        "timeout_ms": 30000,
                        "deadline_ms": 4102444800000,
                    },
                },
            ],
        }
    )

    # idempotency keys: the key routes the job; a second enqueue returns the first job
    q = "wire-idem"
    key = "order-42"
    first = _same_partition_id(key, P, "idem-a")
    second = _same_partition_id(key, P, "idem-b")
    pk = _pk(q, P, key)
    r = {"type": "t", "payload": 1, "idempotency_key": key, "delay_ms": 60000}
    cases.append(
        {
            "name": "idempotency_key",
            "queue": {"name": q, "partitions": P},
            "steps": [
                _created(q, P),
                {
                    "op": "enqueue",
                    "request": r | {"job_id": first},
                    "result": {"job_id": first, "created": True, "partition": pk.partition},
                    "state": [
                        {"command": ["GET", pk.idem(key)], "expect": first},
                        {"command": ["PTTL", pk.idem(key)], "expect": {"ttl_ms": 60000 + 86400000}},
                    ],
                },
                {
                    "op": "enqueue",
                    "request": r | {"job_id": second},
                    "result": {"job_id": first, "created": False, "due_ms": None},
                    "state": [{"command": ["HEXISTS", pk.jobs, second], "expect": 0}],
                },
                {
                    "op": "enqueue",
                    "request": r | {"job_id": _other_partition_id(key, P)},
                    "error": "InvalidJobError",
                    "comment": "job_id and idempotency_key in different partitions",
                },
            ],
        }
    )

    # unique until done, and debounce
    q = "wire-unique"
    key = "sync-user-7"
    a = _same_partition_id(key, P, "u-a")
    b = _same_partition_id(key, P, "u-b")
    pk = _pk(q, P, key)
    r = {"type": "t", "payload": 1, "idempotency_key": key, "unique_until": "done"}
    d = {"type": "t", "idempotency_key": "deb-1", "debounce_ms": 30000}
    da = _same_partition_id("deb-1", P, "d-a")
    db = _same_partition_id("deb-1", P, "d-b")
    dpk = _pk(q, P, "deb-1")
    cases.append(
        {
            "name": "unique_until_done_and_debounce",
            "queue": {"name": q, "partitions": P},
            "steps": [
                _created(q, P),
                {
                    "op": "enqueue",
                    "request": r | {"job_id": a, "delay_ms": 60000},
                    "result": {"job_id": a, "created": True},
                    "state": [
                        {
                            "command": ["PTTL", pk.idem(key)],
                            "expect": {"ttl_ms": 60000 + 7 * 86400000},
                        }
                    ],
                },
                {
                    "op": "enqueue",
                    "request": r | {"job_id": b, "delay_ms": 60000},
                    "result": {"job_id": a, "created": False},
                },
                {"op": "cancel", "job_id": a, "result": True},
                {
                    "op": "enqueue",
                    "request": r | {"job_id": b, "delay_ms": 60000},
                    "comment": "the key's job is gone: the key is taken for a new one",
                    "result": {"job_id": b, "created": True},
                },
                {
                    "op": "enqueue",
                    "request": d | {"job_id": da, "payload": {"v": 1}},
                    "result": {"job_id": da, "created": True, "due_ms": {"from_now_ms": 30000}},
                },
                {
                    "op": "enqueue",
                    "request": d | {"job_id": db, "payload": {"v": 2}},
                    "comment": "debounced: the waiting job takes the new body and due time",
                    "result": {"job_id": da, "created": False, "due_ms": {"from_now_ms": 30000}},
                    "state": [
                        {
                            "command": ["HGET", dpk.jobs, da],
                            "expect": "S0|"
                            + _body({"type": "t", "payload": {"v": 2}, "idempotency_key": "deb-1"}),
                        },
                        {"command": ["HEXISTS", dpk.jobs, db], "expect": 0},
                        {"command": ["HGET", dpk.stats, "debounced"], "expect": "1"},
                    ],
                },
            ],
        }
    )

    # lanes: a priority or tenant needs lanes on
    q = "wire-lanes"
    pk = _pk(q, P, "ln-1")
    r = {"type": "t", "payload": 1, "job_id": "ln-1", "priority": "high", "tenant": "acme"}
    cases.append(
        {
            "name": "lanes_priority_tenant",
            "queue": {"name": q, "partitions": P},
            "steps": [
                _created(q, P),
                {"op": "enqueue", "request": r, "error": "LanesOffError"},
                {"op": "create_queue", "partitions": P, "lanes": True, "result": False},
                {
                    "op": "enqueue",
                    "request": r,
                    "result": {"job_id": "ln-1", "created": True},
                    "state": [
                        {"command": ["HGET", pk.jobs, "ln-1"], "expect": "S0|" + _body(r)},
                        {"command": ["ZCARD", pk.lane], "expect": 1},
                        {"command": ["XLEN", pk.ready], "expect": 0},
                    ],
                },
                {
                    "op": "get",
                    "job_id": "ln-1",
                    "result": {"state": "ready", "priority": "high", "tenant": "acme"},
                },
            ],
        }
    )

    # enqueue many: grouped by partition into batches; a job with a key goes alone
    q = "wire-many"
    ids = [f"m-{i}" for i in range(10)]
    rs: list[dict[str, Any]] = [
        {"type": "t", "payload": i, "job_id": job, "delay_ms": 60000} for i, job in enumerate(ids)
    ]
    key = "many-key"
    keyed = _same_partition_id(key, P, "m-k")
    rs.append({"type": "t", "payload": "k", "job_id": keyed, "idempotency_key": key})
    cases.append(
        {
            "name": "enqueue_many",
            "queue": {"name": q, "partitions": P},
            "steps": [
                _created(q, P),
                {
                    "op": "enqueue_many",
                    "requests": rs,
                    "result": [
                        {
                            "job_id": job,
                            "created": True,
                            "due_ms": {"from_now_ms": 60000},
                            "partition": keys.partition_for(job, P),
                        }
                        for job in ids
                    ]
                    + [{"job_id": keyed, "created": True}],
                    "state": [
                        *(
                            {
                                "command": ["ZSCORE", _pk(q, P, job).due, job],
                                "expect": {"from_now_ms": 60000},
                            }
                            for job in ids
                        ),
                        {"command": ["XLEN", _pk(q, P, keyed).ready], "expect": 1},
                    ],
                },
                {
                    "op": "enqueue_many",
                    "requests": [rs[0], {"type": "t", "payload": "new", "job_id": "m-0"}],
                    "error": "BulkEnqueueError",
                    "comment": "the first is a resend (recognised), the second a duplicate id",
                },
                {
                    "op": "enqueue_many",
                    "requests": [{"type": "t", "job_id": "fine"}, {"type": "bad type"}],
                    "error": "InvalidJobError",
                    "comment": "every job is checked before any is sent: nothing written",
                    "state": [
                        {"command": ["HEXISTS", _pk(q, P, "fine").jobs, "fine"], "expect": 0}
                    ],
                },
            ],
        }
    )

    # refused by the script or before sending
    q = "wire-errors"
    cases.append(
        {
            "name": "errors",
            "queue": {"name": q, "partitions": P},
            "steps": [
                {
                    "op": "enqueue",
                    "request": {"type": "t", "job_id": "e"},
                    "error": "UnknownQueueError",
                },
                _created(q, P),
                {
                    "op": "enqueue",
                    "request": {"type": "t", "job_id": "e", "run_at_ms": 1000},
                    "error": "InvalidScheduleError",
                    "comment": "E_DUE_IN_PAST (-2) from the script",
                },
                {
                    "op": "enqueue",
                    "request": {"type": "t", "job_id": "e", "delay_ms": 367 * 86400000},
                    "error": "InvalidScheduleError",
                    "comment": "beyond max_horizon: refused before sending",
                },
                {
                    "op": "enqueue",
                    "request": {"type": "t", "job_id": "has space"},
                    "error": "InvalidJobError",
                },
                {
                    "op": "enqueue",
                    "request": {"type": "t", "payload": "x" * 200, "job_id": "big"},
                    "settings": {"max_payload_bytes": 100},
                    "error": "PayloadTooLargeError",
                },
            ],
        }
    )
    for case in cases:
        case_settings = DEFAULT_SETTINGS
        for step in case["steps"]:
            s = (
                settings_from_vector(step.get("settings"))
                if step.get("settings")
                else case_settings
            )
            calls = step_calls(case["queue"], step, s)
            if step.get("error") in REFUSED_BEFORE_SENDING:
                calls = None
            elif step.get("error") and step["op"] == "create_queue" and calls:
                calls = calls[:1]  # the meta's script refuses: nothing follows it
            if calls is not None:
                step["send"] = calls
    return cases


#: Errors a client raises from what it read of the queue (its meta), before sending the step's
#: calls: their steps send nothing.
REFUSED_BEFORE_SENDING = ("UnknownQueueError", "LanesOffError")


def _other_partition_id(key: str, partitions: int) -> str:
    want = keys.partition_for(key, partitions)
    n = 0
    while keys.partition_for(f"other-{n}", partitions) == want:
        n += 1
    return f"other-{n}"


# function contracts -----------------------------------------------------------------------------


def contracts() -> list[dict[str, Any]]:
    """Each producer-facing function's file and the SHA-256 of its header (KEYS, ARGV,
    returns): a change to one is a change to the wire."""
    out = []
    for name in PRODUCER_FUNCTIONS:
        c = functions.contract(name)
        header = c.pop("header")
        out.append(
            {"function": name, **c, "header_sha256": hashlib.sha256(header.encode()).hexdigest()}
        )
    return out


# the files --------------------------------------------------------------------------------------


def build() -> dict[str, dict[str, Any]]:
    """Every vector file by name."""

    def doc(kind: str, cases: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"wire": WIRE, "kind": kind, **extra, "cases": cases}

    return {
        "keys.json": doc("keys", keys_cases(), queue_keys=queue_keys_cases()),
        "routing.json": doc("routing", routing_cases()),
        "timed_ids.json": doc("timed_ids", timed_id_cases()),
        "bodies.json": doc("bodies", body_cases(), settings=settings_vector(DEFAULT_SETTINGS)),
        "schedules.json": doc("schedules", schedule_cases()),
        "calls.json": doc("calls", call_cases(), settings=settings_vector(DEFAULT_SETTINGS)),
        "functions.json": doc("functions", contracts(), layout_version=keys.LAYOUT_VERSION),
    }


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"


def stale(directory: Path = VECTORS_DIR) -> list[str]:
    """The vector files that differ from what this code generates (or are missing)."""
    out = []
    for name, document in build().items():
        path = directory / name
        if not path.is_file() or path.read_text() != render(document):
            out.append(name)
    return out


def write(directory: Path = VECTORS_DIR) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    changed = stale(directory)
    for name, document in build().items():
        (directory / name).write_text(render(document))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wire.spec")
    sub = parser.add_subparsers(dest="command", required=True)
    vec = sub.add_parser("vectors", help="write or check wire/vectors/*.json")
    vec.add_argument("--dir", type=Path, default=VECTORS_DIR)
    mode = vec.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "vectors":
        if args.write:
            changed = write(args.dir)
            print(f"wrote {args.dir}: {', '.join(changed) or 'nothing changed'}")
            return 0
        old = stale(args.dir)
        if old:
            print(
                f"{', '.join(old)} in {args.dir} are not what this code sends: the wire changed. "
                "Regenerate with `python -m wire.spec vectors --write`, review the "
                "diff (a change other clients must follow), and say it in docs/wire.md",
                file=sys.stderr,
            )
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
