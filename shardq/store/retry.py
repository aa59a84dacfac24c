"""Producer retries: ride out failovers, slot moves and restarts within a time window.

redis-py's own retries do not span a failover (a killed primary is replaced in 3-4.5 s with
``cluster-node-timeout 2000``), so producers retry here: after each transient fault the slot map
is read again and the call resent after a short, growing pause (50 ms doubling to 0.5 s), until
``ProducerSettings.retry_timeout`` has passed.  Once the new slot map is visible, the next resend
goes to the right node: producers follow a failover within about half a second of it.

Only calls that are safe to repeat are resent after an ambiguous fault (sent, reply lost):
enqueue recognises its own job id and body, reads repeat freely.  Others are resent only when
the fault proves nothing was written (refused connection, redirect, CLUSTERDOWN, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from shardq import backoff
from shardq.store import faults
from shardq.store.op import Batch, Call, Pause, Rounds, Waiting
from shardq.store.transport import AsyncSent, AsyncTransport, SyncSent, SyncTransport

T = TypeVar("T")

# Shorter than a process loop's backoff (shardq.backoff): a caller waits on these resends and
# the call ends at retry_timeout, so each should land soon after a failover is over.
FIRST_PAUSE = 0.05
MAX_PAUSE = 0.5
PAUSE_JITTER = 0.25


def pause(attempt: int) -> float:
    """Seconds before resend number ``attempt`` (1-based), jittered by +-25 %."""
    return backoff.delay(attempt, first=FIRST_PAUSE, cap=MAX_PAUSE, jitter=PAUSE_JITTER)


def should_retry(exc: BaseException, safe_to_repeat: bool) -> bool:
    if not faults.is_transient(exc) and not faults.is_code_missing(exc):
        return False
    return safe_to_repeat or faults.surely_not_written(exc)


def sync_call(
    refresh: Callable[[], None],
    fn: Callable[[], T],
    window: float,
    *,
    safe_to_repeat: bool,
    what: str,
) -> T:
    """``fn()`` with resends through transient faults for up to ``window`` seconds;
    ``refresh`` re-reads the slot map."""
    deadline = time.monotonic() + window
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            attempt += 1
            if not should_retry(exc, safe_to_repeat) or time.monotonic() >= deadline:
                raise faults.translate(exc, what) from exc
            refresh()
            time.sleep(min(pause(attempt), max(0.0, deadline - time.monotonic())))


async def async_call(
    refresh: Callable[[], Awaitable[None]],
    fn: Callable[[], Awaitable[T]],
    window: float,
    *,
    safe_to_repeat: bool,
    what: str,
) -> T:
    """Asyncio form of :func:`sync_call`; ``refresh`` re-reads the slot map."""
    deadline = time.monotonic() + window
    attempt = 0
    while True:
        try:
            return await fn()
        except Exception as exc:
            attempt += 1
            if not should_retry(exc, safe_to_repeat) or time.monotonic() >= deadline:
                raise faults.translate(exc, what) from exc
            with contextlib.suppress(Exception):  # every node down: the next attempt retries
                await refresh()
            await asyncio.sleep(min(pause(attempt), max(0.0, deadline - time.monotonic())))


# The one retry layer of the facades ------------------------------------------------------------
#
# Client, AsyncClient, Inspector, AsyncInspector, the schedules facades and the operator's
# actions run every operation (a plan, shardq.plans) with ``Client.run`` / ``AsyncClient.run``,
# which drive it through the client's runner: it sends each batch the
# plan yields, resends within one window the calls that met a transient fault (those not
# ``safe_to_repeat`` only when nothing can have been written), re-reading the slot map between
# rounds, and translates what is left into typed shardq errors.  So a failover gives the same
# ride-through, or the same typed error, from every entry point.


def _pending(calls: Sequence[Call[Any]], results: list[Any]) -> list[int]:
    return [
        i
        for i, r in enumerate(results)
        if isinstance(r, BaseException) and should_retry(r, calls[i].safe_to_repeat)
    ]


def _translated(results: list[Any], what: str) -> list[Any]:
    out = []
    for r in results:
        if isinstance(r, BaseException):
            typed = faults.translate(r, what)
            if typed is not r:
                typed.__cause__ = r
            r = typed
        out.append(r)
    return out


class SyncRunner:
    """Sends a sync facade's batches (see the comment above) through a :class:`SyncTransport`;
    one per facade.  :class:`AsyncRunner` is its asyncio twin, method for method."""

    def __init__(self, transport: SyncTransport, window: float) -> None:
        self.transport = transport
        self.window = window

    def batches(self, what: str) -> Callable[[Batch], Any]:
        """A sender for one operation: every batch it sends shares one retry window, so an
        operation of many rounds gives up ``window`` seconds after it began, not per round."""
        deadline = time.monotonic() + self.window
        return lambda batch: self.send(batch, deadline, what)

    def plain(self, fn: Callable[[], T], what: str) -> T:
        """``fn()`` (reads of Redis's own settings, not of shardq's keys) within the window."""
        return sync_call(self.transport.refresh, fn, self.window, safe_to_repeat=True, what=what)

    def send(self, batch: Batch, deadline: float, what: str) -> Any:
        if isinstance(batch, Pause):
            time.sleep(batch.seconds)
            return None
        if isinstance(batch, Waiting):
            return self._waiting(batch, deadline, what)
        if isinstance(batch, Rounds):
            return self._rounds(batch, deadline, what)
        return self._calls(batch, deadline, what)

    def _first(self, calls: Sequence[Call[Any]]) -> list[Any]:
        if len(calls) == 1:  # one call: no pipeline to set up
            try:
                return [self.transport.run(calls[0])]
            except Exception as exc:
                return [exc]
        return self.transport.run_many(calls)

    def _calls(self, calls: Sequence[Call[Any]], deadline: float, what: str) -> list[Any]:
        results = self._first(calls)
        self._resend(calls, results, deadline)
        return _translated(results, what)

    def _resend(self, calls: Sequence[Call[Any]], results: list[Any], deadline: float) -> None:
        attempt = 0
        while (again := _pending(calls, results)) and time.monotonic() < deadline:
            attempt += 1
            self._pause(attempt, deadline)
            for i, r in zip(again, self._first([calls[i] for i in again]), strict=True):
                results[i] = r

    def _pause(self, attempt: int, deadline: float) -> None:
        self.transport.refresh()
        time.sleep(min(pause(attempt), max(0.0, deadline - time.monotonic())))

    def _rounds(self, batch: Rounds, deadline: float, what: str) -> list[list[Any]]:
        """Each round written before the previous one's replies are read."""
        out: list[list[Any]] = []
        sent: list[SyncSent] = []
        try:
            for calls in batch.rounds:
                sent.append(self.transport.send(calls))
                if len(sent) > 1:
                    out.append(self._finish(batch.rounds[len(out)], sent[-2], deadline, what))
            if sent:
                out.append(self._finish(batch.rounds[-1], sent[-1], deadline, what))
        finally:
            for s in sent[len(out) :]:  # not read: an error, or an interrupt
                s.abandon()
        return out

    def _finish(
        self, calls: Sequence[Call[Any]], sent: SyncSent, deadline: float, what: str
    ) -> list[Any]:
        results = sent.results()
        self._resend(calls, results, deadline)
        return _translated(results, what)

    def _waiting(self, batch: Waiting, deadline: float, what: str) -> tuple[list[Any], list[Any]]:
        calls = batch.calls
        results: list[Any] = [None] * len(calls)
        acked: list[int | None] = [None] * len(calls)
        todo = list(range(len(calls)))
        attempt = 0
        while True:
            got, counts = self.transport.run_waiting(
                [calls[i] for i in todo], batch.replicas, batch.timeout_ms, batch.per_node
            )
            for i, r, n in zip(todo, got, counts, strict=True):
                results[i], acked[i] = r, n
            todo = _pending(calls, results)
            if not todo or time.monotonic() >= deadline:
                return _translated(results, what), acked
            attempt += 1
            self._pause(attempt, deadline)


class AsyncRunner:
    """The asyncio form of :class:`SyncRunner`, over an :class:`AsyncTransport`."""

    def __init__(self, transport: AsyncTransport, window: float) -> None:
        self.transport = transport
        self.window = window

    def batches(self, what: str) -> Callable[[Batch], Awaitable[Any]]:
        deadline = time.monotonic() + self.window
        return lambda batch: self.send(batch, deadline, what)

    async def plain(self, fn: Callable[[], Awaitable[T]], what: str) -> T:
        """``await fn()`` (reads of Redis's own settings, not of shardq's keys) in the window."""
        return await async_call(
            self.transport.refresh, fn, self.window, safe_to_repeat=True, what=what
        )

    async def send(self, batch: Batch, deadline: float, what: str) -> Any:
        if isinstance(batch, Pause):
            await asyncio.sleep(batch.seconds)
            return None
        if isinstance(batch, Waiting):
            return await self._waiting(batch, deadline, what)
        if isinstance(batch, Rounds):
            return await self._rounds(batch, deadline, what)
        return await self._calls(batch, deadline, what)

    async def _first(self, calls: Sequence[Call[Any]]) -> list[Any]:
        if len(calls) == 1:
            try:
                return [await self.transport.run(calls[0])]
            except Exception as exc:
                return [exc]
        return await self.transport.run_many(calls)

    async def _calls(self, calls: Sequence[Call[Any]], deadline: float, what: str) -> list[Any]:
        results = await self._first(calls)
        await self._resend(calls, results, deadline)
        return _translated(results, what)

    async def _resend(
        self, calls: Sequence[Call[Any]], results: list[Any], deadline: float
    ) -> None:
        attempt = 0
        while (again := _pending(calls, results)) and time.monotonic() < deadline:
            attempt += 1
            await self._pause(attempt, deadline)
            for i, r in zip(again, await self._first([calls[i] for i in again]), strict=True):
                results[i] = r

    async def _pause(self, attempt: int, deadline: float) -> None:
        with contextlib.suppress(Exception):  # every node down: the next attempt retries
            await self.transport.refresh()
        await asyncio.sleep(min(pause(attempt), max(0.0, deadline - time.monotonic())))

    async def _rounds(self, batch: Rounds, deadline: float, what: str) -> list[list[Any]]:
        out: list[list[Any]] = []
        sent: list[AsyncSent] = []
        try:
            for calls in batch.rounds:
                sent.append(await self.transport.send(calls))
                if len(sent) > 1:
                    out.append(await self._finish(batch.rounds[len(out)], sent[-2], deadline, what))
            if sent:
                out.append(await self._finish(batch.rounds[-1], sent[-1], deadline, what))
        finally:
            for s in sent[len(out) :]:
                await s.abandon()
        return out

    async def _finish(
        self, calls: Sequence[Call[Any]], sent: AsyncSent, deadline: float, what: str
    ) -> list[Any]:
        results = await sent.results()
        await self._resend(calls, results, deadline)
        return _translated(results, what)

    async def _waiting(
        self, batch: Waiting, deadline: float, what: str
    ) -> tuple[list[Any], list[Any]]:
        calls = batch.calls
        results: list[Any] = [None] * len(calls)
        acked: list[int | None] = [None] * len(calls)
        todo = list(range(len(calls)))
        attempt = 0
        while True:
            got, counts = await self.transport.run_waiting(
                [calls[i] for i in todo], batch.replicas, batch.timeout_ms, batch.per_node
            )
            for i, r, n in zip(todo, got, counts, strict=True):
                results[i], acked[i] = r, n
            todo = _pending(calls, results)
            if not todo or time.monotonic() >= deadline:
                return _translated(results, what), acked
            attempt += 1
            await self._pause(attempt, deadline)
