"""The sync and asyncio transports (and their written batches, and the runners over them) have
one shape: the same public methods with the same parameters, the asyncio ones awaited, each
returning the same parsed results (``Sync`` read as ``Async`` in the annotations).  What both
share they inherit from one base, so only the methods each defines are compared.

That the two also behave alike on Redis, pipelining a plan's rounds, is
tests/integration/test_client.py::test_both_runners_pipeline_rounds.  No Redis needed.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from shardq.store.retry import AsyncRunner, SyncRunner
from shardq.store.transport import AsyncSent, AsyncTransport, SyncSent, SyncTransport

PAIRS: list[tuple[type, type]] = [
    (SyncTransport, AsyncTransport),
    (SyncSent, AsyncSent),
    (SyncRunner, AsyncRunner),
]
# What only the asyncio transport has, and why.
ASYNC_ONLY = {
    "aclose": "it owns a plain client per primary; the sync one uses the cluster client's own",
}
# Methods that compute without Redis: sync in both.
SYNC_IN_BOTH = {"node_client", "batches"}


def _own_public(cls: type) -> dict[str, Any]:
    """Public methods a class defines or inherits from anything but a base both share."""
    shared = set(cls.__mro__[1:])
    return {
        name: member
        for klass in reversed(cls.__mro__)
        if klass not in shared or klass is cls
        for name, member in vars(klass).items()
        if not name.startswith("_") and callable(member)
    }


def _norm(annotation: Any) -> str:
    """An annotation as text, ``Sync`` read as ``Async`` and ``Awaitable[X]`` as ``X``."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    while (start := text.find("Awaitable[")) >= 0:
        depth, end = 0, start + len("Awaitable")
        while True:
            depth += {"[": 1, "]": -1}.get(text[end], 0)
            if depth == 0:
                break
            end += 1
        text = text[:start] + text[start + len("Awaitable[") : end] + text[end + 1 :]
    return re.sub(r"\bSync(?=[A-Z])", "Async", text)


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=lambda c: c.__name__)
def test_same_methods(sync: type, async_: type) -> None:
    assert sorted(_own_public(sync)) == sorted(set(_own_public(async_)) - set(ASYNC_ONLY))


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=lambda c: c.__name__)
def test_same_parameters_and_results(sync: type, async_: type) -> None:
    problems = []
    for name, a in _own_public(sync).items():
        b = getattr(async_, name)
        sa, sb = inspect.signature(a), inspect.signature(b)
        params_a = [
            (p.name, p.kind, p.default, _norm(p.annotation)) for p in sa.parameters.values()
        ]
        params_b = [
            (p.name, p.kind, p.default, _norm(p.annotation)) for p in sb.parameters.values()
        ]
        if params_a != params_b:
            problems.append(f"{name}: parameters {params_a} != {params_b}")
        ra, rb = _norm(sa.return_annotation), _norm(sb.return_annotation)
        if ra != rb:
            problems.append(f"{name}: returns {ra} != {rb}")
        if (name in SYNC_IN_BOTH) == inspect.iscoroutinefunction(b):
            problems.append(f"{async_.__name__}.{name}: awaited in one, not in the other")
    assert not problems, "\n".join(problems)


def test_the_shared_base_holds_the_topology() -> None:
    """Where a key lives, the primaries and their replicas: written once, for both."""
    base = set(SyncTransport.__mro__[1:]) & set(AsyncTransport.__mro__[1:]) - {object}
    shared = {name for klass in base for name in vars(klass) if not name.startswith("_")}
    assert {
        "node_name",
        "slot_node_name",
        "primaries",
        "primary_routes",
        "replicas_by_primary",
        "most_replicas",
        "group",
    } <= shared
