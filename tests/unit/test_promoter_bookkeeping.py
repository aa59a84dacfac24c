"""The promoter's due times through canned replies (no Redis): which partitions it promotes
next after each kind of reply.  The replies are what lua/promote-8.lua answers; the transport
only hands them back, so this checks bookkeeping, not Redis behaviour."""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from shardq.config import DispatcherSettings
from shardq.dispatcher.promoter import IDLE_PROMOTE_RATE, Promoter
from shardq.errors import FencedError
from shardq.runtime.supervisor import Supervisor
from shardq.store import fleet
from shardq.store.layout import Layout

NODE = "127.0.0.1:1"


class CannedTransport:
    """One primary; run_on runs ``during`` (what happens while the call is on the wire), then
    answers with ``replies``."""

    def __init__(self) -> None:
        self.replies: list[Any] = []
        self.during: Callable[[], None] = lambda: None

    def node_name(self, key: str) -> str:
        return NODE

    def slot_node_name(self, slot: int) -> str:
        return NODE

    async def run_on(self, node: str, ops: list[Any]) -> list[Any]:
        assert len(ops) == len(self.replies)
        self.during()
        return self.replies


class HeldLeases:
    """What the promoter asks of Leases: the tokens held and the acquisition callbacks."""

    def __init__(self) -> None:
        self.tokens: dict[int, str] = {}
        self.target = 0  # the fair share (the promoter's safety net paces by it)
        self.callbacks: list[Callable[[int], None]] = []

    def when_acquired(self, callback: Callable[[int], None]) -> None:
        self.callbacks.append(callback)

    def win(self, partition: int, token: str) -> None:
        self.tokens[partition] = token
        for callback in self.callbacks:
            callback(partition)

    def fenced(self, partition: int, reason: str, token: str | None = None) -> None:
        if token is None or self.tokens.get(partition) == token:
            self.tokens.pop(partition, None)

    def extended(self, partition: int, at: float) -> None:
        pass


def promoter(partitions: int = 2) -> tuple[Promoter, CannedTransport, HeldLeases]:
    transport = CannedTransport()
    leases = HeldLeases()
    ctx = SimpleNamespace(
        supervisor=Supervisor("dispatcher", "q"),
        transport=transport,
        queue="q",
        pks=Layout("q", partitions).fleet(),
        settings=DispatcherSettings(),
    )
    return Promoter(ctx, leases=leases), transport, leases  # type: ignore[arg-type]


def due_now(p: Promoter) -> list[int]:
    return p.next_wake.take(NODE, time.monotonic() + 1e-3, 100)


def test_a_stale_tokens_refusal_keeps_a_partition_won_again_meanwhile() -> None:
    """A promote sent with token 1; while it is on the wire the lease is lost and won again
    (token 2).  The refusal of token 1 is no news: the partition is promoted next round."""
    p, transport, leases = promoter()
    leases.win(0, "1")
    assert due_now(p) == [0]
    transport.replies = [FencedError("fencing token 1 is stale")]

    def lost_and_won_again() -> None:
        leases.tokens.pop(0)
        leases.win(0, "2")

    transport.during = lost_and_won_again
    asyncio.run(p._promote(NODE, [0]))
    assert leases.tokens == {0: "2"}
    assert due_now(p) == [0]


def test_a_refusal_of_the_current_token_drops_the_partition() -> None:
    p, transport, leases = promoter()
    leases.win(0, "1")
    assert due_now(p) == [0]
    transport.replies = [FencedError("fencing token 1 is stale")]
    asyncio.run(p._promote(NODE, [0]))
    assert leases.tokens == {} and 0 not in p.next_wake


def test_replies_set_the_next_promote() -> None:
    p, transport, leases = promoter()
    leases.win(0, "1")
    leases.win(1, "1")
    assert sorted(due_now(p)) == [0, 1]
    batch = DispatcherSettings().batch
    # partition 0 moved a full batch (more are due: again at once); 1 has none left
    transport.replies = [fleet.Promoted(batch, 1000, 1000), fleet.Promoted(3, None, 1000)]
    asyncio.run(p._promote(NODE, [0, 1]))
    assert due_now(p) == [0]
    assert p.next_wake.get(1) > time.monotonic() + DispatcherSettings().max_sleep / 2


def test_a_partition_released_while_its_call_is_on_the_wire_is_dropped() -> None:
    p, transport, leases = promoter()
    leases.win(0, "1")
    assert due_now(p) == [0]
    transport.replies = [fleet.Promoted(1, None, 1000)]
    transport.during = lambda: leases.tokens.pop(0)
    asyncio.run(p._promote(NODE, [0]))
    assert 0 not in p.next_wake


def test_an_idle_partitions_fallback_doubles_and_a_hint_starts_it_over() -> None:
    """Found idle again and again (nothing moved, nothing due within max_sleep), a partition's
    next promote without a hint comes after max_sleep, 2x, 4x ... below max_idle_sleep, then
    from the safety net (its phase of a max_idle_sleep cycle here: half to 1.5 cycles on); a
    job due sooner still wakes it then; a hint, or a promote that moved jobs, starts over."""
    p, transport, leases = promoter(1)
    s = DispatcherSettings()
    leases.win(0, "1")

    def sleep_after(reply: fleet.Promoted) -> float:
        transport.replies = [reply]
        before = time.monotonic()
        asyncio.run(p._promote(NODE, [0]))
        return p.next_wake.get(0) - before

    def net(sleep: float) -> bool:  # a safety-net look (on the 1 s grid at most a tick on)
        return 15.0 - 0.05 <= sleep <= 45.0 + 1.05

    idle = fleet.Promoted(0, None, 1000)
    # No work seen since the dispatcher started: the safety net at once, and a
    # resubscription's wake-up (one look) leaves it so.
    assert net(sleep_after(idle))
    p.hint(0, resubscribed=True)
    assert net(sleep_after(idle))
    assert abs(sleep_after(fleet.Promoted(3, None, 1000)) - 1.0) < 0.05  # work: over
    sleeps = [sleep_after(idle) for _ in range(7)]
    expected = [1.0, 2.0, 4.0, 8.0, 16.0]  # max_sleep 1 s doubling, below 30 s
    assert s.max_sleep == 1.0 and s.max_idle_sleep == 30.0
    assert all(abs(a - b) < 0.05 for a, b in zip(sleeps, expected, strict=False)), sleeps
    assert all(net(v) for v in sleeps[5:]), sleeps
    # Far-off jobs only (due in an hour) count as idle too; one due in 0.5 s wakes it then.
    assert net(sleep_after(fleet.Promoted(0, 1000 + 3_600_000, 1000)))
    assert abs(sleep_after(fleet.Promoted(0, 1500, 1000)) - 0.5) < 0.05
    assert abs(sleep_after(idle) - 1.0) < 0.05  # a job came due within max_sleep: over
    sleep_after(idle)
    p.hint(0)
    assert abs(sleep_after(idle) - 1.0) < 0.05  # a hint: over
    sleep_after(idle)
    assert abs(sleep_after(fleet.Promoted(3, None, 1000)) - 1.0) < 0.05  # moved jobs: over


def test_idle_promotes_stay_bounded_whatever_the_partitions_held() -> None:
    """The safety net's looks at idle partitions come at most IDLE_PROMOTE_RATE a second for
    the process, evenly: at 4,096 partitions held each is looked at every ~34 min (within 1.5
    periods), not every max_idle_sleep (136 promotes a second before)."""
    p, transport, leases = promoter(4096)
    for q in range(4096):
        leases.win(q, "1")
    leases.target = 4096
    transport.replies = [fleet.Promoted(0, None, 1000)] * 4096
    now = time.monotonic()
    asyncio.run(p._promote(NODE, p.next_wake.take(NODE, now + 1e-3, 5000)))
    period = 4096 / IDLE_PROMOTE_RATE
    looks = sorted(p.next_wake.get(q) - now for q in range(4096))
    assert period / 2 - 1 <= looks[0] and looks[-1] <= 1.5 * period + 2, (looks[0], looks[-1])
    # At most ~IDLE_PROMOTE_RATE in any 100 s (they are spread over the period, not bunched).
    busiest = max(bisect.bisect_right(looks, t + 100.0) - i for i, t in enumerate(looks))
    assert busiest <= 2 * IDLE_PROMOTE_RATE * 100, busiest
