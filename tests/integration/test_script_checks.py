"""Scripts validate, then write: every script is forced to fail at each of its failure points
(each key overwritten with another type, each numeric argument out of range or not a number),
and each time it returns its typed error and leaves every key of the partition exactly as it
was: Redis does not roll a script back, so a check after the first write would leave half a
change behind.

The failure points are read from the scripts themselves (their ``KEYS[i] name type`` header
lines and their ``arg_number(i, lo, hi)`` checks), so a new script or a new check is covered
without editing this file.  The stats hash is advisory by design: a stats key of the wrong type
is left alone and the operation still happens.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from support.script_cases import OPS, State, enqueue_op, prepare

from shardq.client import Client
from shardq.errors import CorruptKeyError, ScriptArgumentError
from shardq.store import delivery
from shardq.store.loader import lua_dir
from shardq.store.op import Op
from shardq.store.transport import SyncTransport

_CREATED: list[str] = []


@pytest.fixture(autouse=True)
def _delete_checked_queues(cluster_client: Client) -> Iterator[None]:
    """The cases leave keys of the wrong type behind on purpose: delete each case's queues, so
    nothing that lists every queue (stats, the web console) meets them in later tests."""
    yield
    from shardq.dev.demo import delete_queue

    while _CREATED:
        queue = _CREATED.pop()
        for name, partitions in ((queue, 1), (queue + "-new", 2)):
            delete_queue(cluster_client.redis, name, partitions)


KEY_LINE = re.compile(r"^KEYS\[(\d+)\]\s+(\S+)\s+(\S+)", re.M)
ARG_CHECK = re.compile(r"arg_number\((\d+),\s*([-\w.* ]+?),\s*([-\w.* ]+?)\)")


def _source(name: str) -> str:
    (path,) = lua_dir().glob(f"{name}-[0-9]*.lua")
    return path.read_text()


def _bound(text: str) -> float | None:
    """A literal bound such as ``1e13`` or ``366 * 86400000`` (None for a named constant)."""
    value = 1.0
    for factor in text.split("*"):
        try:
            value *= float(factor.strip())
        except ValueError:
            return None
    return value


def _due_now(s: State) -> None:
    """Make the partition's earliest scheduled job due."""
    first = s.redis.zrange(s.pk.due, 0, 0)
    s.redis.zadd(s.pk.due, {first[0]: 0})


def _fetch_with_acks(s: State) -> Op[Any]:
    _due_now(s)
    return delivery.fetch(s.pk, "c2", 10, [(s.pending_entry, s.pending_id)], promote=True)


def _fetch_promoting(s: State) -> Op[Any]:
    _due_now(s)
    return delivery.fetch(s.pk, "c2", 10, promote=True)


# Calls that take other paths through a script, and so check some keys by other commands: a
# read checks the ready stream by its first write to it (XREADGROUP in OPS' case; here XACK
# when acks ride, XADD when it promotes) and the due set and errors hash by its reads of them.
VARIANTS: dict[str, tuple[str, Any]] = {
    "fetch-with-acks": ("fetch", _fetch_with_acks),
    "fetch-promoting": ("fetch", _fetch_promoting),
}


def _op(name: str, s: State) -> Op[Any]:
    return VARIANTS[name][1](s) if name in VARIANTS else OPS[name](s)


def _key_cases() -> list[Any]:
    cases = []
    for name in [*OPS, *VARIANTS]:
        script = VARIANTS[name][0] if name in VARIANTS else name
        for index, key_name, key_type in KEY_LINE.findall(_source(script)):
            if key_type == "any":  # a key that only routes the call: never touched
                continue
            cases.append(
                pytest.param(name, int(index), key_name, key_type, id=f"{name}-{key_name}")
            )
    return cases


def _arg_cases() -> list[Any]:
    cases = []
    for name in OPS:
        for index, lo, hi in ARG_CHECK.findall(_source(name)):
            values = ["nan", "abc", "inf", "-inf", ""]
            low, high = _bound(lo), _bound(hi)
            if low is not None:
                values.append(repr(low - 1 if low > -1e15 else low * 10))
            if high is not None:
                values.append(repr(high * 2 + 1))
            for value in values:
                cases.append(
                    pytest.param(name, int(index), value, id=f"{name}-argv{index}-{value}")
                )
    return cases


def _snapshot(r: Any, s: State, op: Op[Any]) -> dict[str, Any]:
    """Type and serialized value of every key of the partition and of the op."""
    slots = ("dead", "due", "errors", "fence", "jobs", "lease", "ctl")
    names = {getattr(s.pk, slot) for slot in slots}
    names |= {s.pk.ready, s.pk.stats, *op.keys}
    return {k: (r.type(k), r.dump(k), r.pttl(k) > 0) for k in sorted(names)}


def _overwrite(r: Any, key: str, key_type: str) -> None:
    r.delete(key)
    if key_type == "string":
        r.hset(key, "not", "a string")
    else:
        r.set(key, "not a " + key_type)


def test_every_script_has_a_case() -> None:
    shipped = {p.name.rsplit("-", 1)[0] for p in lua_dir().glob("*-[0-9]*.lua")}
    assert shipped == set(OPS), shipped ^ set(OPS)


@pytest.mark.parametrize(("name", "index", "key_name", "key_type"), _key_cases())
def test_a_key_of_the_wrong_type_fails_the_script_before_any_write(
    cluster_client: Client, name: str, index: int, key_name: str, key_type: str
) -> None:
    r = cluster_client.redis
    s = prepare(cluster_client, _CREATED)
    if key_name in ("lane", "vtime") or (name == "promote" and key_name == "jobs"):
        # A partition without lanes never touches its lane keys: check them with lanes on.
        r.hset(s.pk.ctl, "lanes", "1")
    op = _op(name, s)
    key = op.keys[index - 1]
    _overwrite(r, key, key_type)
    before = _snapshot(r, s, op)
    if key_name == "stats":
        # Counters are advisory (the flags live in the control hash): the operation goes on
        # and leaves the stats key alone.
        SyncTransport(r).run(op)
        assert _snapshot(r, s, op)[key] == before[key]
        return
    with pytest.raises(CorruptKeyError) as caught:
        SyncTransport(r).run(op)
    assert key in str(caught.value), caught.value
    assert _snapshot(r, s, op) == before, "the script wrote before it failed"


@pytest.mark.parametrize(("name", "index", "value"), _arg_cases())
def test_a_bad_numeric_argument_fails_the_script_before_any_write(
    cluster_client: Client, name: str, index: int, value: str
) -> None:
    r = cluster_client.redis
    s = prepare(cluster_client, _CREATED)
    op = OPS[name](s)
    argv = list(op.argv)
    argv[index - 1] = value
    bad = Op(op.script, op.keys, argv, op.parse)
    before = _snapshot(r, s, op)
    with pytest.raises(ScriptArgumentError) as caught:
        SyncTransport(r).run(bad)
    assert f"ARGV[{index}]" in str(caught.value) or str(index) in str(caught.value)
    assert _snapshot(r, s, op) == before, "the script wrote before it failed"


def test_idempotency_retention_below_a_millisecond_is_refused_whole(
    cluster_client: Client,
) -> None:
    """The audit's case: a retention that rounds to 0 ms used to store the job, then fail."""
    r = cluster_client.redis
    s = prepare(cluster_client, _CREATED)
    op = enqueue_op(s)
    argv = list(op.argv)
    argv[6] = 0  # ARGV[7]: retention ms
    before = _snapshot(r, s, op)
    with pytest.raises(ScriptArgumentError):
        SyncTransport(r).run(Op(op.script, op.keys, argv, op.parse))
    assert _snapshot(r, s, op) == before
