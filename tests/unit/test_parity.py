"""The sync and asyncio facades have one surface: the same public methods, parameters, defaults
and return types, each documented once (on the sync facade, copied by ``plans.twin_of``).

The facades are thin drivers of the same plans (shardq.plans), so a difference here is a
difference users would meet.  No Redis needed.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from shardq import AsyncClient, AsyncInspector, Client, Inspector
from shardq.client import AsyncBatches, AsyncSchedules, Batches, Schedules

PAIRS: list[tuple[type, type]] = [
    (Client, AsyncClient),
    (Inspector, AsyncInspector),
    (Schedules, AsyncSchedules),
    (Batches, AsyncBatches),
]
# What only one flavour can have: the context-manager protocol, and what is sync in both.
SYNC_IN_BOTH = {"forget"}


def _public(cls: type) -> dict[str, Any]:
    return {
        name: member
        for klass in reversed(cls.__mro__[:-1])
        for name, member in vars(klass).items()
        if not name.startswith("_") and callable(getattr(member, "__func__", member))
    }


def _norm(annotation: Any, sync: type, async_: type) -> str:
    """An annotation as text, with the async facade's name read as the sync one's."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return re.sub(rf"\b{async_.__name__}\b", sync.__name__, text)


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=lambda c: c.__name__)
def test_same_methods(sync: type, async_: type) -> None:
    assert sorted(_public(sync)) == sorted(_public(async_))


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=lambda c: c.__name__)
def test_same_signatures_and_docs(sync: type, async_: type) -> None:
    mine, theirs = _public(sync), _public(async_)
    problems = []
    for name in sorted(set(mine) & set(theirs)):
        a = getattr(sync, name)
        b = getattr(async_, name)
        sa, sb = inspect.signature(a), inspect.signature(b)
        params_a = [
            (p.name, p.kind, p.default, _norm(p.annotation, sync, async_))
            for p in sa.parameters.values()
        ]
        params_b = [
            (p.name, p.kind, p.default, _norm(p.annotation, sync, async_))
            for p in sb.parameters.values()
        ]
        if params_a != params_b:
            problems.append(f"{name}: parameters {params_a} != {params_b}")
        ra = _norm(sa.return_annotation, sync, async_)
        rb = _norm(sb.return_annotation, sync, async_)
        if ra != rb:
            problems.append(f"{name}: returns {ra} != {rb}")
        if name in SYNC_IN_BOTH:
            if inspect.iscoroutinefunction(b):
                problems.append(f"{name} should be sync in {async_.__name__}")
        elif not inspect.iscoroutinefunction(b):
            problems.append(f"{async_.__name__}.{name} is not a coroutine function")
        if not (a.__doc__ or "").strip():
            problems.append(f"{sync.__name__}.{name} has no docstring")
        if (b.__doc__ or "") != (a.__doc__ or ""):
            problems.append(f"{async_.__name__}.{name}'s docstring is not its twin's")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=lambda c: c.__name__)
def test_same_constructor(sync: type, async_: type) -> None:
    a = inspect.signature(sync.__init__)
    b = inspect.signature(async_.__init__)
    names_a = [(p.name, p.kind, p.default) for p in a.parameters.values()]
    names_b = [(p.name, p.kind, p.default) for p in b.parameters.values()]
    assert names_a == names_b
