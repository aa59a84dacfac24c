"""Scripts validate, then write: every script is forced to fail at each of its failure points
(each key overwritten with another type, each checked argument out of its bounds, each checked
list of arguments cut short), and each time it returns its typed error and leaves every key of
the partition exactly as it was: Redis does not roll a script back, so a check after the first
write would leave half a change behind.

The failure points are read from the scripts' headers (their ``KEYS[i] name type`` lines and
the checks their ``ARGV`` lines end in, lua/README.md, as the loader reads them), so a new
script or a new check is covered without editing this file.  The stats hash is advisory by
design: a stats key of the wrong type is left alone and the operation still happens.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from support.script_cases import OPS, State, enqueue_op, prepare

from shardq.client import Client
from shardq.errors import CorruptKeyError, ScriptArgumentError
from shardq.store import delivery, loader
from shardq.store.contracts import ArgCheck
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


def _source(name: str) -> str:
    (path,) = lua_dir().glob(f"{name}-[0-9]*.lua")
    return path.read_text()


def _refused(check: ArgCheck) -> list[str]:
    """Values ``check`` refuses: each side of its bounds, and what is not of its kind."""
    if check.kind in ("number", "int"):
        lo, hi = check.lo_value, check.hi_value
        values = ["nan", "abc", "inf", "-inf", "", repr(lo - 1 if lo > -1e15 else lo * 10)]
        values.append(repr(hi * 2 + 1))
        # Lua's tonumber takes these; a whole number in decimal digits they are not.
        return values + (["1.5", "0x10"] if check.kind == "int" else [])
    if check.kind == "bytes":
        lo, hi = int(check.lo_value), int(check.hi_value)
        # (Past 1 MiB the session's Redis cuts the client off first, at maxmemory-clients:
        # MAX_RESULT_BYTES is sent to a Redis of its own in test_forged_writes.py.)
        longer = ["x" * (hi + 1)] if hi < 2**20 else []
        return longer + (["x" * (lo - 1)] if lo > 0 else [])
    if check.kind == "name":
        return ["", "x" * (loader.SHARED_LIMITS["MAX_NAME_BYTES"] + 1)]
    if check.kind == "flag":
        return ["2", "", "yes"]
    assert check.kind == "one of", check
    return ["nope", check.choices[0].upper()] + ([] if "" in check.choices else [""])


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
    """(script, ARGV index, value) for each value each header check refuses; a list's values
    are checked in its first group (each case sends at least one)."""
    cases = []
    for name in OPS:
        contract = loader.script(name).contract
        assert contract is not None
        checked = [(c.index, c) for c in contract.checks]
        if contract.arg_list is not None:
            start = contract.arg_list.start
            checked += [(start + m.index, m) for m in contract.arg_list.members]
        for index, check in checked:
            for value in _refused(check):
                shown = value if len(value) < 20 else f"{len(value)}bytes"
                cases.append(pytest.param(name, index, value, id=f"{name}-argv{index}-{shown}"))
    return cases


def _count_cases() -> list[Any]:
    """(script, how many arguments) for each call a list's check refuses: a group cut short,
    and no group where at least one is wanted."""
    cases = []
    for name in OPS:
        contract = loader.script(name).contract
        assert contract is not None
        if contract.arg_list is None:
            continue
        if contract.arg_list.size > 1:
            cases.append(pytest.param(name, 1, id=f"{name}-a-value-more"))
        if contract.arg_list.at_least_one:
            cases.append(pytest.param(name, 0, id=f"{name}-none"))
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


def _refused_whole(r: Any, s: State, op: Op[Any], argv: list[Any], index: int) -> None:
    """``op`` sent with ``argv`` is refused as a bad ARGV[index], and writes nothing."""
    before = _snapshot(r, s, op)
    with pytest.raises(ScriptArgumentError) as caught:
        SyncTransport(r).run(Op(op.script, op.keys, argv, op.parse))
    assert str(caught.value).startswith(f"argument {index} = "), caught.value
    assert _snapshot(r, s, op) == before, "the script wrote before it failed"


def test_every_bounded_argument_has_cases() -> None:
    """Each header check is sent out of bounds below: 65 fixed arguments and 7 values of
    lists' groups (406 cases; two values of complete-5 are only bounded at 16 MiB), and the
    counts of the 10 checked lists (12 cases), no fewer (a header line the loader stopped
    reading would leave its argument unchecked and untested).  When this test read the
    scripts' arg_number calls, it had 321 cases of 46 numbers."""
    assert len({c.values[:2] for c in _arg_cases()}) >= 72 and len(_arg_cases()) >= 406
    assert len(_count_cases()) >= 12


@pytest.mark.parametrize(("name", "index", "value"), _arg_cases())
def test_a_bad_argument_fails_the_script_before_any_write(
    cluster_client: Client, name: str, index: int, value: str
) -> None:
    r = cluster_client.redis
    s = prepare(cluster_client, _CREATED)
    op = OPS[name](s)
    argv = list(op.argv)
    assert len(argv) >= index, f"{name}'s case sends no ARGV[{index}]"
    argv[index - 1] = value
    _refused_whole(r, s, op, argv, index)


@pytest.mark.parametrize(("name", "more"), _count_cases())
def test_a_list_of_the_wrong_length_fails_the_script_before_any_write(
    cluster_client: Client, name: str, more: int
) -> None:
    r = cluster_client.redis
    s = prepare(cluster_client, _CREATED)
    op = OPS[name](s)
    contract = loader.script(name).contract
    assert contract is not None and contract.arg_list is not None
    # A value more than whole groups, or none at all: refused, its count the index.
    argv = [*op.argv, "x"] if more else list(op.argv[: contract.arg_list.start - 1])
    _refused_whole(r, s, op, argv, len(argv))


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
