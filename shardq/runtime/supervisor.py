"""Supervised background loops: one error policy for every loop of a worker or dispatcher.

Every loop of a process runs under :class:`Supervisor`.  An exception never ends a loop
silently: it is logged as one JSON event (``loop.error``) with the loop's name, counted in
``shardq_loop_errors_total{role,loop}``, and the loop runs again after a jittered exponential
backoff (0.1 s doubling to 5 s).

Two kinds of trouble are told apart:

- Redis or the network failing (a failover, a slot move, an outage of any length) makes the
  process *not ready* while it lasts; loops keep retrying and resume by themselves.
- A slot on the move (MOVED, ASK, TRYAGAIN, redis-py's "TTL exhausted") is neither: it is the
  normal signal of a slot move, logged as a ``topology.redirect`` event at info level with the
  slot and its new node, and the loop runs again after a short pause with the slot map
  refreshed.  Only a loop that keeps meeting them (:data:`REDIRECT_STREAK` in a row: its slot
  map is not catching up) has them logged and counted as errors.
- A loop that keeps raising anything else (a bug, a corrupt record it cannot skip) for longer
  than ``unhealthy_after``, or that stops making progress, makes the process *unhealthy*, so an
  orchestrator restarts it instead of leaving a half-working process behind.  "Stopped making
  progress" is measured per loop against its own pace: no progress for ``stall_after`` plus
  :data:`STALL_PASSES` of its interval (an ``every`` loop) or of the longest wait of one pass
  (a ``forever`` loop's ``pace``).  ``stall_after`` covers a slow pass (a Redis call waits at
  most its socket timeout, and a failed call counts as progress: failing is not hanging).

Periodic rounds run on the process's grid (:mod:`shardq.runtime.waits`): a loop of
``interval`` runs at each whole multiple of its period on the monotonic clock, and the period
is the interval rounded down to a whole number of the process's ``tick`` (the role's heartbeat
interval).  Every periodic loop of a process then wakes it on the same moments, once a tick
at most, instead of each on its own drifting timer; a loop runs at least as often as asked.
Components put their fallback wake-ups on the same grid (:meth:`Supervisor.on_tick`).

Loops stop in the order the coordinator gives to :meth:`Supervisor.stop` (stated in
docs/architecture-processes.md); the rest stop together after them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from shardq import backoff
from shardq.logs import log_event
from shardq.metrics import registry as metrics
from shardq.runtime.waits import after_grid, on_grid, wait_event, wait_event_until
from shardq.store.faults import is_migration, is_transient, redirect_fields

log = logging.getLogger("shardq.supervisor")

# A loop is stuck after this many of its own passes without progress, on top of stall_after.
STALL_PASSES = 3
# Redirects in a row a loop may meet (each followed by REDIRECT_PAUSE) before they count as
# errors: a move is over for a loop once its slot map is refreshed, a round or two.
REDIRECT_STREAK = 10
REDIRECT_PAUSE = 0.1


def log_redirect(logger: logging.Logger, exc: BaseException, **fields: object) -> None:
    """A slot on the move was met: the ``topology.redirect`` event (info), never a warning."""
    log_event(logger, "topology.redirect", logging.INFO, **redirect_fields(exc), **fields)


@dataclass(slots=True)
class LoopState:
    """What the supervisor knows about one loop (health checks, tests, /healthz)."""

    name: str
    rounds: int = 0
    errors: int = 0
    consecutive: int = 0
    failing_since: float | None = None  # any error streak (Redis down counts)
    broken_since: float | None = None  # a streak of errors that are not Redis faults
    last_progress: float = field(default_factory=time.monotonic)
    last_error: str | None = None
    on_recover: Callable[[LoopState], None] | None = None
    redirects: int = 0  # slot-move signals met in a row (see REDIRECT_STREAK)

    def progress(self) -> None:
        """Called by a long-running loop on each pass, so a hung loop can be told apart."""
        self.last_progress = time.monotonic()

    def ok(self) -> None:
        """Called by a long-running loop after a pass that worked: ends an error streak."""
        self.last_progress = time.monotonic()
        self.redirects = 0
        if self.consecutive and self.on_recover is not None:
            self.on_recover(self)


Body = Callable[[], Awaitable[None]]


@dataclass(slots=True)
class _Loop:
    state: LoopState
    body: Body
    interval: float | None
    stop: asyncio.Event
    period: float = 0.0  # an every loop's rounds: on each whole multiple of this
    task: asyncio.Task[None] | None = None
    pace: float = 0.0  # a forever loop's longest wait between two progress reports
    # Events a forever loop sleeps on (its wake-ups): set at its stop too, so it sees the stop
    # at once instead of at the end of its sleep (a process re-running its role on a resized
    # queue stops every loop, one group after the other).
    wakes: tuple[asyncio.Event, ...] = ()

    def stall_bound(self, stall_after: float) -> float:
        """Seconds without progress after which this loop counts as stuck."""
        return stall_after + STALL_PASSES * (
            self.interval if self.interval is not None else self.pace
        )


class Supervisor:
    """Runs named loops with one error policy and reports the process's health.

    ``every(name, interval, fn)`` calls ``fn`` once per ``interval``; ``forever(name, fn)`` runs
    a coroutine that loops by itself (watching :meth:`stop_event`) and is started again if it
    raises or returns early.
    """

    def __init__(
        self,
        role: str,
        queue: str,
        *,
        unhealthy_after: float = 60.0,
        stall_after: float = 30.0,
        tick: float = 0.0,
    ) -> None:
        """``tick``: the step of the process's grid (0: every loop on its own interval's)."""
        self.role = role
        self.queue = queue
        self.tick = tick
        self.unhealthy_after = unhealthy_after
        self.stall_after = stall_after
        self.loops: dict[str, _Loop] = {}

    # registration --------------------------------------------------------------------------

    def every(self, name: str, interval: float, body: Body, *, first_at_once: bool = False) -> None:
        """Run ``body`` every ``interval`` seconds, on the grid (see :meth:`period`): the next
        round at the first multiple of the period after the last one ends."""
        self._add(name, body, interval, first_at_once)

    def period(self, interval: float) -> float:
        """``interval`` rounded down to a whole number of ticks (not below one tick): what a
        loop asking for ``interval`` runs every.  Shorter than a tick: ``interval`` itself."""
        tick = self.tick
        if tick <= 0.0 or interval < tick:
            return interval
        return math.floor(interval / tick + 1e-9) * tick

    def on_tick(self, at: float) -> float:
        """The first moment of the process's grid at or after ``at`` (monotonic seconds): a
        fallback wake-up set there shares the periodic loops' wake-up."""
        return on_grid(at, self.tick)

    async def sleep_to_tick(self, event: asyncio.Event, at_least: float) -> bool:
        """Wait for ``event`` at most until the first grid moment ``at_least`` seconds from
        now; True when it was set."""
        return await wait_event_until(event, self.on_tick(time.monotonic() + at_least))

    def forever(
        self, name: str, body: Body, *, pace: float = 0.0, wakes: tuple[asyncio.Event, ...] = ()
    ) -> None:
        """Run ``body`` (a coroutine that loops until its stop event); restart it on failure.

        ``pace``: the longest a healthy pass of ``body`` waits between two calls of
        :meth:`LoopState.progress` or :meth:`LoopState.ok` (its idle sleep); the stall bound is
        derived from it.  ``wakes``: the events ``body`` sleeps on (set when it is stopped, so
        it returns at once; it checks its stop event after each wake)."""
        self._add(name, body, None, True)
        self.loops[name].pace = pace  # before the task's first step: it has not run yet
        self.loops[name].wakes = wakes

    def wake_on_stop(self, name: str, *events: asyncio.Event) -> None:
        """Also set ``events`` when loop ``name`` is stopped (see :meth:`forever`)."""
        loop = self.loops[name]
        loop.wakes = (*loop.wakes, *events)

    def _add(self, name: str, body: Body, interval: float | None, at_once: bool) -> None:
        if name in self.loops:
            raise ValueError(f"loop {name!r} registered twice")
        loop = _Loop(LoopState(name, on_recover=self._succeeded), body, interval, asyncio.Event())
        if interval is not None:
            loop.period = self.period(interval)
        self.loops[name] = loop
        loop.task = asyncio.get_running_loop().create_task(self._run(loop, at_once), name=name)

    def state(self, name: str) -> LoopState:
        return self.loops[name].state

    def stop_event(self, name: str) -> asyncio.Event:
        """The event a ``forever`` body watches to know it should return."""
        return self.loops[name].stop

    async def retire(self, name: str, grace: float = 2.0) -> None:
        """Stop one loop and forget it (a per-primary loop whose primary is gone)."""
        loop = self.loops.pop(name, None)
        if loop is not None:
            await _stop_loops([loop], grace)

    # health --------------------------------------------------------------------------------

    def states(self) -> list[LoopState]:
        return [loop.state for loop in self.loops.values()]

    def problems(self) -> list[str]:
        """Why the process is unhealthy (empty when healthy); each starts with the loop's name."""
        now = time.monotonic()
        out = []
        for loop in self.loops.values():
            s = loop.state
            if s.broken_since is not None and now - s.broken_since >= self.unhealthy_after:
                out.append(f"{s.name}: failing for {now - s.broken_since:.0f} s ({s.last_error})")
            if self._stuck(loop, now):
                out.append(
                    f"{s.name}: no progress for {now - s.last_progress:.0f} s "
                    f"(bound {loop.stall_bound(self.stall_after):.0f} s)"
                )
        return out

    def stuck(self) -> list[str]:
        """The loops that stopped making progress (hung, or the event loop is blocked)."""
        now = time.monotonic()
        return [loop.state.name for loop in self.loops.values() if self._stuck(loop, now)]

    def _stuck(self, loop: _Loop, now: float) -> bool:
        s = loop.state
        bound = loop.stall_bound(self.stall_after)
        return s.failing_since is None and now - s.last_progress >= bound

    def healthy(self) -> bool:
        return not self.problems()

    def failing(self) -> list[str]:
        """Loops in an error streak right now (Redis faults included): the process is not
        ready while any is."""
        return [s.name for s in self.states() if s.failing_since is not None]

    # running -------------------------------------------------------------------------------

    async def _run(self, loop: _Loop, at_once: bool) -> None:
        state = loop.state
        skip_wait = at_once  # the first round at once, and a retry right after its backoff
        while not loop.stop.is_set():
            if loop.interval is not None and not skip_wait:
                await wait_event_until(loop.stop, after_grid(time.monotonic(), loop.period))
                if loop.stop.is_set():
                    return
            skip_wait = False
            try:
                await loop.body()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._failed(loop, exc)
                skip_wait = True
                continue
            if loop.interval is None and not loop.stop.is_set():
                # A forever-loop that returns while not asked to stop is a bug: restart it,
                # but say so and back off like after an error.
                await self._failed(loop, RuntimeError(f"loop {state.name} returned early"))
                continue
            self._succeeded(state)

    def _succeeded(self, state: LoopState) -> None:
        state.rounds += 1
        state.last_progress = time.monotonic()
        state.redirects = 0
        if state.consecutive:
            log_event(
                log,
                "loop.recovered",
                logging.INFO,
                role=self.role,
                queue=self.queue,
                loop=state.name,
                failures=state.consecutive,
                failed_for_s=round(time.monotonic() - (state.failing_since or 0.0), 3),
            )
        state.consecutive = 0
        state.failing_since = None
        state.broken_since = None

    async def _failed(self, loop: _Loop, exc: BaseException) -> None:
        state = loop.state
        now = time.monotonic()
        if is_migration(exc) and state.redirects < REDIRECT_STREAK:
            # A slot moving: not a failure (the process stays ready); try again shortly, by
            # when the loop's own slot-map refresh has caught up.
            state.redirects += 1
            state.last_progress = now
            log_redirect(log, exc, role=self.role, queue=self.queue, loop=state.name)
            await wait_event(loop.stop, backoff.jittered(REDIRECT_PAUSE))
            return
        transient = is_transient(exc)
        state.errors += 1
        state.consecutive += 1
        state.last_progress = now  # failing and retrying is not hanging
        if state.failing_since is None:
            state.failing_since = now
        if transient:
            state.broken_since = None
        elif state.broken_since is None:
            state.broken_since = now
        state.last_error = f"{type(exc).__name__}: {exc}"[:500]
        metrics.LOOP_ERRORS.labels(self.role, state.name.split(":", 1)[0]).inc()
        # Log every error of a streak's first few, then one in 20, so an outage of an hour
        # does not write a line per loop per backoff.
        if state.consecutive <= 3 or state.consecutive % 20 == 0:
            log_event(
                log,
                "loop.error",
                logging.WARNING,
                role=self.role,
                queue=self.queue,
                loop=state.name,
                error=state.last_error,
                error_type=type(exc).__name__,
                transient=transient,
                consecutive=state.consecutive,
                failing_for_s=round(now - state.failing_since, 3),
            )
        if not transient and state.consecutive == 1:
            log.warning("loop %s: unexpected error", state.name, exc_info=exc)
        await wait_event(loop.stop, backoff.delay(state.consecutive))

    async def stop(
        self, order: Sequence[str] | None = None, grace: float = 2.0, *, rest: bool = True
    ) -> None:
        """Stop loops one group at a time: each name (or name prefix ending in ``:``) in
        ``order`` first, in that order, then (unless ``rest`` is False: they keep running) the
        rest together.  A loop gets ``grace`` seconds to see its stop event, then it is
        cancelled."""
        remaining = dict(self.loops)
        groups: list[list[_Loop]] = []
        for name in order or []:
            group = [
                remaining.pop(n)
                for n in list(remaining)
                if n == name or (name.endswith(":") and n.startswith(name))
            ]
            if group:
                groups.append(group)
        if rest:
            groups.append(list(remaining.values()))
        for group in groups:
            await _stop_loops(group, grace)


async def _stop_loops(loops: list[_Loop], grace: float) -> None:
    for loop in loops:
        loop.stop.set()
        for event in loop.wakes:
            event.set()
    tasks = [loop.task for loop in loops if loop.task is not None]
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=grace)
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
