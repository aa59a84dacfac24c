"""Waiting for an event with a time limit, cheaply: the idle loops' one wait.

``asyncio.wait_for(event.wait(), t)`` makes a task for the wait and, when the time runs out,
cancels it and waits for the cancellation: four or five turns of the event loop per timeout.
Idle, a process's loops do little else than time out (a worker's every-interval loops alone
six times a second), so that machinery was most of an idle process's CPU.
``asyncio.timeout`` (3.11) cancels the waiting task itself with one timer: two turns.
"""

from __future__ import annotations

import asyncio


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
