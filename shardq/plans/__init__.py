"""Operations written once for sync and asyncio: plans.

A plan is a generator that yields batches of Redis calls (:mod:`shardq.store.op`: a list of
calls, a :class:`~shardq.store.op.Waiting` batch, or :class:`~shardq.store.op.Rounds`) and is
sent back each batch's results: per call its parsed value or the exception it met, already
retried and translated by the facade's runner (:mod:`shardq.store.retry`).  A plan holds every
decision of an operation (what to read first, what to write after, what a reply means) and
touches no client, so the sync facades drive it with :func:`drive` and the asyncio ones with
:func:`drive_async`, and the two can never drift apart.  Model: httpx's generator ``auth_flow``.

Plans compose with ``yield from``: an operation that needs the queue's partition count starts
with ``n = yield from queue_partitions(cache, queue)``, which yields nothing when it is cached.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, TypeVar

from shardq.store.op import Batch, Call

T = TypeVar("T")

Plan = Generator[Batch, Any, T]


def drive(plan: Plan[T], send: Callable[[Batch], Any]) -> T:
    """Run a plan with a sync sender (a :class:`~shardq.store.retry.SyncRunner`'s batches)."""
    try:
        batch = next(plan)
        while True:
            batch = plan.send(send(batch))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def drive_async(plan: Plan[T], send: Callable[[Batch], Awaitable[Any]]) -> T:
    """Run a plan with an asyncio sender (an :class:`~shardq.store.retry.AsyncRunner`'s)."""
    try:
        batch = next(plan)
        while True:
            batch = plan.send(await send(batch))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def ok(results: Sequence[Any]) -> list[Any]:
    """The results of a batch, raising the first exception among them."""
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return list(results)


def one(call: Call[T]) -> Plan[T]:
    """A plan of one call: its result, or the exception it met raised."""
    (result,) = ok((yield [call]))
    return result  # type: ignore[no-any-return]


def each(calls: Sequence[Call[T]]) -> Plan[list[T]]:
    """A plan of one batch whose every call must succeed."""
    if not calls:
        return []
    return ok((yield list(calls)))


C = TypeVar("C", bound=type)


def twin_of(sync_cls: type) -> Callable[[C], C]:
    """Class decorator for an asyncio facade: each public method without a docstring takes its
    sync twin's, so a method's documentation is written once (on the sync facade).  That both
    have the same methods, parameters and return types is checked by the parity test
    (tests/unit/test_parity.py), not here."""

    def copy(async_cls: C) -> C:
        for name, member in vars(async_cls).items():
            if name.startswith("_") or not callable(getattr(member, "__func__", member)):
                continue
            fn = getattr(member, "__func__", member)
            twin = getattr(sync_cls, name, None)
            doc = getattr(getattr(twin, "__func__", twin), "__doc__", None)
            if fn.__doc__ is None and doc:
                fn.__doc__ = doc
        return async_cls

    return copy
