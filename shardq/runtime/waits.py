"""Waiting for an event with a time limit, cheaply: the idle loops' one wait.

``asyncio.wait_for(event.wait(), t)`` makes a task for the wait and, when the time runs out,
cancels it and waits for the cancellation: four or five turns of the event loop per timeout.
Idle, a process's loops do little else than time out (a worker's every-interval loops alone
six times a second), so that machinery was most of an idle process's CPU.
``asyncio.timeout`` (3.11) cancels the waiting task itself with one timer: two turns.

The other half of an idle process's CPU is how many times it wakes, whatever each wake does
(~230 µs of CPU for a timer that makes no call, measured at cfb048f).  Loops that sleep on
their own timers, each set from the end of its own last round, drift apart and wake the
process one after the other, a few milliseconds apart.  So the periodic and fallback waits of
a process end on a shared grid instead (:func:`on_grid`, moments that are whole multiples of
a step of the monotonic clock): timers due at one moment of it expire in one turn of the
event loop, one wake-up for all of them.
"""

from __future__ import annotations

import asyncio
import math


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds passed; True when it was set."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(max(0.0, timeout)):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def wait_event_until(event: asyncio.Event, deadline: float) -> bool:
    """Wait until ``event`` is set or the monotonic clock reaches ``deadline``; True when set.

    An absolute deadline, so that waits ending on one grid moment share one timer expiry."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout_at(deadline):
            await event.wait()
    except TimeoutError:
        return False
    return True


def on_grid(at: float, step: float) -> float:
    """The first moment at or after ``at`` (monotonic seconds) that is a whole multiple of
    ``step``: every wait of a process that ends there expires together (``step`` 0: ``at``)."""
    if step <= 0.0:
        return at
    return math.ceil(at / step) * step


def after_grid(at: float, step: float) -> float:
    """The first whole multiple of ``step`` strictly after ``at`` (a periodic loop's next
    round: never the moment its last one started)."""
    if step <= 0.0:
        return at
    return (math.floor(at / step) + 1) * step
