"""The one jittered exponential backoff: how long to wait before trying again.

Wait number ``attempt`` (1-based) is ``first * 2**(attempt - 1)``, capped at ``cap``, times a
uniform random factor in ``[1 - jitter, 1 + jitter]`` so a fleet that lost Redis at one
instant does not come back at one instant.

The defaults are a process's own loops waiting out Redis (supervised loops, start-up, the web
console's reconnect, the limiter's and settler's resends): 0.1 s doubling to 5 s, +-50 %.  A
producer's resends (:func:`shardq.store.retry.pause`) wait less (50 ms doubling to 0.5 s,
+-25 %): a caller is blocked on them and the call is bounded by ``retry_timeout``, so each
resend should land soon after a failover ends rather than spread a fleet out.

A job's own retry policy (:class:`shardq.jobs.Backoff`) is the user's choice of schedule and
uses :func:`exponential` for its doubling; its ``jitter`` kind is full jitter (``[0, delay]``).

Imports nothing of shardq: every layer may use it.
"""

from __future__ import annotations

import random

FIRST = 0.1
CAP = 5.0
JITTER = 0.5
# 2**62 * any first still fits a float exactly; past it only the cap matters.
_MAX_DOUBLINGS = 62


def exponential(attempt: int, first: float, cap: float) -> float:
    """``first * 2**(attempt - 1)`` capped at ``cap`` (an attempt below 1 counts as 1)."""
    return min(cap, first * float(2 ** min(max(attempt - 1, 0), _MAX_DOUBLINGS)))


def jittered(seconds: float, jitter: float = JITTER, rng: random.Random | None = None) -> float:
    """``seconds`` times a uniform factor in ``[1 - jitter, 1 + jitter]``."""
    return seconds * (rng or random).uniform(1.0 - jitter, 1.0 + jitter)


def delay(
    attempt: int,
    rng: random.Random | None = None,
    *,
    first: float = FIRST,
    cap: float = CAP,
    jitter: float = JITTER,
) -> float:
    """Seconds to wait after the ``attempt``-th consecutive failure (1-based)."""
    return jittered(exponential(attempt, first, cap), jitter, rng)
