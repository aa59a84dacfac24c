"""shardq.backoff, the one jittered exponential backoff, and the waits built on it.  No Redis."""

from __future__ import annotations

import random

import pytest

from shardq import backoff
from shardq.jobs import MAX_BACKOFF, Backoff
from shardq.store import retry


def test_exponential_doubles_from_first_up_to_the_cap() -> None:
    waits = [backoff.exponential(n, 0.1, 5.0) for n in range(1, 10)]
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])
    # Before the first failure and far past the cap: no error, no overflow.
    assert backoff.exponential(0, 0.1, 5.0) == backoff.exponential(-7, 0.1, 5.0) == 0.1
    assert backoff.exponential(10**9, 0.1, 5.0) == 5.0
    assert backoff.exponential(10**9, MAX_BACKOFF, MAX_BACKOFF) == MAX_BACKOFF


@pytest.mark.parametrize(
    ("kwargs", "first", "cap", "jitter"),
    [
        ({}, 0.1, 5.0, 0.5),  # a process's loops
        ({"first": 0.05, "cap": 0.5, "jitter": 0.25}, 0.05, 0.5, 0.25),  # producer resends
        ({"first": 1.0, "cap": 60.0, "jitter": 0.0}, 1.0, 60.0, 0.0),
    ],
)
def test_delay_stays_within_the_jitter_of_its_step_and_spreads(
    kwargs: dict[str, float], first: float, cap: float, jitter: float
) -> None:
    rng = random.Random(7)
    for attempt in range(1, 12):
        step = min(cap, first * 2 ** (attempt - 1))
        waits = [backoff.delay(attempt, rng, **kwargs) for _ in range(400)]
        assert all(step * (1 - jitter) <= w <= step * (1 + jitter) for w in waits)
        # The jitter is used, not just allowed: 400 draws reach both ends' outer tenths.
        assert min(waits) <= step * (1 - 0.8 * jitter)
        assert max(waits) >= step * (1 + 0.8 * jitter)


def test_delay_is_what_the_supervisor_and_the_producer_computed_before() -> None:
    """Same numbers as the two hand-rolled backoffs it replaced, draw for draw."""

    def old_supervisor(failures: int, rng: random.Random) -> float:
        base = float(min(5.0, 0.1 * 2 ** min(max(failures - 1, 0), 16)))
        return base * rng.uniform(0.5, 1.5)

    def old_producer(attempt: int, rng: random.Random) -> float:
        return float(min(0.5, 0.05 * 2 ** min(attempt - 1, 10))) * rng.uniform(0.75, 1.25)

    for attempt in range(1, 40):
        seed = random.randrange(2**32)
        assert backoff.delay(attempt, random.Random(seed)) == old_supervisor(
            attempt, random.Random(seed)
        )
        assert backoff.delay(
            attempt, random.Random(seed), first=0.05, cap=0.5, jitter=0.25
        ) == old_producer(attempt, random.Random(seed))


def test_the_producers_resend_pause_uses_its_own_schedule() -> None:
    for attempt in range(1, 12):
        step = min(retry.MAX_PAUSE, retry.FIRST_PAUSE * 2 ** (attempt - 1))
        waits = [retry.pause(attempt) for _ in range(200)]
        assert all(0.75 * step <= w <= 1.25 * step for w in waits)
    assert max(retry.pause(50) for _ in range(200)) <= 1.25 * retry.MAX_PAUSE


def test_jittered_scales_a_fixed_pause() -> None:
    rng = random.Random(3)
    waits = [backoff.jittered(0.1, rng=rng) for _ in range(400)]
    assert all(0.05 <= w <= 0.15 for w in waits)
    assert min(waits) < 0.06 and max(waits) > 0.14


def test_a_jobs_exponential_backoff_doubles_as_the_shared_one() -> None:
    policy = Backoff("exponential", base=2.0, cap=100.0)
    assert [policy.delay(n) for n in range(1, 9)] == [
        backoff.exponential(n, 2.0, 100.0) for n in range(1, 9)
    ]
    assert [policy.delay(n) for n in range(1, 9)] == [2, 4, 8, 16, 32, 64, 100, 100]
    full = Backoff("jitter", base=2.0, cap=100.0)
    assert all(0.0 <= full.delay(5) <= 32.0 for _ in range(200))
