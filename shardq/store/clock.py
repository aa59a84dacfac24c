"""This process's estimate of the Redis clock (:data:`REDIS_CLOCK`), kept from the replies
that carry the Redis time (each enqueue's ``now``)."""

from __future__ import annotations

import time


class RedisClock:
    """This process's estimate of the Redis clock in ms: the local clock plus the offset the
    last enqueue reply showed (its ``now``).  A timed job id carries it plus the delay, and the
    enqueue script accepts that as the due time within 250 ms of its own ``now + delay``
    (lua/includes/compact.lua); beyond that the job is stored at ``now + delay``, in the plain
    layout.  Off by the reply's half round trip: well inside that."""

    __slots__ = ("offset_ms",)

    def __init__(self) -> None:
        self.offset_ms = 0.0

    def now_ms(self) -> int:
        return int(time.time() * 1000.0 + self.offset_ms)

    def saw(self, redis_now_ms: int) -> None:
        self.offset_ms = redis_now_ms - time.time() * 1000.0


REDIS_CLOCK = RedisClock()
