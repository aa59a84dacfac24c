"""Supervised loops: every loop's failures are logged, counted and retried; a loop that keeps
failing for a reason other than Redis makes the process unhealthy; Redis trouble only makes it
not ready.  Faults injected into every loop of a real worker and dispatcher:
tests/integration/test_supervisor_redis.py."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client import REGISTRY
from redis.exceptions import ConnectionError as RedisConnectionError
from support.helpers import scaled

from shardq.runtime.supervisor import Supervisor

ROLE = "test"


def loop_errors(role: str, loop: str) -> float:
    value = REGISTRY.get_sample_value("shardq_loop_errors_total", {"role": role, "loop": loop})
    return value or 0.0


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + scaled(timeout)
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        await asyncio.sleep(0.01)


def test_a_failing_loop_is_logged_counted_retried_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[float] = []

    async def flaky() -> None:
        calls.append(time.monotonic())
        if len(calls) <= 3:
            raise ValueError(f"bug number {len(calls)}")

    async def main() -> Supervisor:
        sup = Supervisor(ROLE, "q", unhealthy_after=60)
        before = loop_errors(ROLE, "flaky")
        sup.every("flaky", 0.01, flaky, first_at_once=True)
        await until(lambda: sup.state("flaky").rounds >= 2)
        assert loop_errors(ROLE, "flaky") - before == 3
        assert sup.healthy()  # a streak shorter than unhealthy_after
        await sup.stop()
        return sup

    with caplog.at_level(logging.INFO, logger="shardq.supervisor"):
        sup = asyncio.run(main())
    state = sup.state("flaky")
    assert state.errors == 3 and state.consecutive == 0 and state.failing_since is None
    events = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    errors = [e for e in events if e["event"] == "loop.error"]
    assert [e["consecutive"] for e in errors] == [1, 2, 3]
    assert all(e["loop"] == "flaky" and e["error_type"] == "ValueError" for e in errors)
    assert errors[0]["transient"] is False
    assert any(e["event"] == "loop.recovered" and e["failures"] == 3 for e in events)
    # Retried with a growing backoff (0.1 s, 0.2 s, 0.4 s, each +-50 %), not in a tight loop.
    gaps = [b - a for a, b in itertools.pairwise(calls)][:3]
    assert gaps[0] >= 0.05 and gaps[2] >= gaps[0]


def test_a_loop_that_keeps_failing_makes_the_process_unhealthy_until_it_recovers() -> None:
    broken = {"on": True}

    async def body() -> None:
        if broken["on"]:
            raise KeyError("corrupt record")

    async def main() -> None:
        sup = Supervisor(ROLE, "q", unhealthy_after=0.3)
        sup.every("stuck", 0.01, body, first_at_once=True)
        await until(lambda: not sup.healthy())
        assert any("stuck: failing for" in p for p in sup.problems())
        assert sup.failing() == ["stuck"]
        broken["on"] = False
        await until(sup.healthy)
        await until(lambda: not sup.failing())
        await sup.stop()

    asyncio.run(main())


def test_redis_faults_make_a_process_unready_never_unhealthy() -> None:
    async def body() -> None:
        raise RedisConnectionError("Connection refused")

    async def main() -> None:
        sup = Supervisor(ROLE, "q", unhealthy_after=0.2)
        sup.every("redis", 0.01, body, first_at_once=True)
        await until(lambda: sup.state("redis").errors >= 3)
        await asyncio.sleep(0.3)
        assert sup.healthy() and sup.failing() == ["redis"]
        await sup.stop()

    asyncio.run(main())


def test_slot_move_signals_are_info_events_not_loop_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """MOVED/ASK/TRYAGAIN/TTL exhausted met by a loop: ``topology.redirect`` at info level with
    the slot and its new node; the loop is not failing (the process stays ready) and runs again
    shortly.  One that keeps meeting them past REDIRECT_STREAK has them logged as errors."""
    from redis.exceptions import AskError, ClusterError, MovedError, TryAgainError

    from shardq.runtime.supervisor import REDIRECT_STREAK

    signals: list[BaseException] = [
        MovedError("1993 127.0.0.1:7001"),
        AskError("1993 127.0.0.1:7001"),
        TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
        ClusterError("TTL exhausted."),
    ]
    # Whether the "moving" loop counted as failing at each of its rounds (the "stuck" loop
    # does, once past the streak: only "moving" is asked about).
    seen_failing: list[bool] = []

    async def main() -> Supervisor:
        sup = Supervisor(ROLE, "q")
        calls = {"moving": 0, "stuck": 0}

        async def moving() -> None:
            calls["moving"] += 1
            seen_failing.append("moving" in sup.failing())
            if calls["moving"] <= len(signals):
                raise signals[calls["moving"] - 1]

        async def stuck() -> None:
            calls["stuck"] += 1
            raise MovedError("7 127.0.0.1:7002")

        sup.every("moving", 0.01, moving, first_at_once=True)
        sup.every("stuck", 0.01, stuck, first_at_once=True)
        await until(lambda: sup.state("moving").rounds >= 2)
        await until(lambda: sup.state("stuck").errors >= 1)
        await sup.stop()
        return sup

    with caplog.at_level(logging.INFO, logger="shardq.supervisor"):
        sup = asyncio.run(main())
    assert sup.state("moving").errors == 0 and not any(seen_failing)
    events = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    moving = [e for e in events if e.get("loop") == "moving"]
    assert [e["event"] for e in moving] == ["topology.redirect"] * len(signals), moving
    assert [e["redirect"] for e in moving] == ["moved", "ask", "tryagain", "ttl_exhausted"]
    assert (moving[0]["slot"], moving[0]["node"]) == (1993, "127.0.0.1:7001")
    levels = {r.levelname for r in caplog.records if "topology.redirect" in r.getMessage()}
    assert levels == {"INFO"}
    stuck = [e for e in events if e.get("loop") == "stuck"]
    assert [e["event"] for e in stuck[:REDIRECT_STREAK]] == ["topology.redirect"] * REDIRECT_STREAK
    assert stuck[REDIRECT_STREAK]["event"] == "loop.error", stuck[REDIRECT_STREAK]


def test_a_forever_loop_that_returns_is_started_again() -> None:
    starts: list[int] = []

    async def main() -> None:
        sup = Supervisor(ROLE, "q")

        async def body() -> None:
            starts.append(1)
            if len(starts) < 3:
                return  # a bug: returned without being asked to stop
            await sup.stop_event("runner").wait()

        sup.forever("runner", body)
        await until(lambda: len(starts) >= 3)
        assert sup.state("runner").errors == 2
        await sup.stop()

    asyncio.run(main())


def test_loops_stop_in_the_order_given() -> None:
    stopped: list[str] = []

    async def main() -> None:
        sup = Supervisor(ROLE, "q")

        def body(name: str) -> Callable[[], Awaitable[None]]:
            async def run() -> None:
                await sup.stop_event(name).wait()
                stopped.append(name)

            return run

        for name in ("a", "b:1", "b:2", "c"):
            sup.forever(name, body(name))
        await asyncio.sleep(0.05)
        await sup.stop(["c", "b:", "a"])

    asyncio.run(main())
    assert stopped[0] == "c" and set(stopped[1:3]) == {"b:1", "b:2"} and stopped[3] == "a"


def test_periodic_loops_run_on_the_process_grid_and_wake_it_together() -> None:
    """Loops of one process run on whole multiples of their period (the interval rounded down
    to whole ticks): asked for 0.1 s and 0.2 s on a 0.1 s tick, both run at the same moments
    of the monotonic clock, in one turn of the event loop (one wake-up), and a loop asking
    for 0.15 s runs every 0.1 s (at least as often as asked)."""
    sup = Supervisor(ROLE, "q", tick=0.1)
    assert sup.period(0.1) == 0.1 and sup.period(0.2) == 0.2 and sup.period(0.15) == 0.1
    assert sup.period(0.05) == 0.05  # under a tick: its own
    assert Supervisor(ROLE, "q").period(0.75) == 0.75  # no tick: its own interval
    at = sup.on_tick(1000.04)
    assert abs(at - 1000.1) < 1e-9 and sup.on_tick(at) == at
    runs: dict[str, list[tuple[float, int]]] = {"a": [], "b": [], "c": []}
    turns = itertools.count()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        original = loop._run_once  # type: ignore[attr-defined]

        def counted() -> None:  # numbers the event loop's turns
            next(turns)
            original()

        loop._run_once = counted  # type: ignore[attr-defined]

        def body(name: str) -> Callable[[], Awaitable[None]]:
            async def run() -> None:
                now = time.monotonic()
                runs[name].append((now, next(turns)))

            return run

        sup.every("a", 0.1, body("a"))
        sup.every("b", 0.2, body("b"))
        sup.every("c", 0.15, body("c"))
        await asyncio.sleep(scaled(1.0))
        await sup.stop()

    asyncio.run(main())
    assert len(runs["a"]) >= 5 and len(runs["b"]) >= 2 and len(runs["c"]) >= 5
    # every round of b ran in the same event-loop turn as a round of a (one wake-up)
    # (matched by nearest time, not by rounding: 0.40496 and 0.40501 round apart)
    for when, turn in runs["b"]:
        a_when, a_turn = min(runs["a"], key=lambda run: abs(run[0] - when))
        assert abs(a_when - when) < 0.01, (runs["a"], runs["b"])
        assert abs(a_turn - turn) <= 1, (runs["a"], runs["b"])
