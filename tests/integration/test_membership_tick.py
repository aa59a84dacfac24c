"""A dispatcher's lease round and its membership loop wake at one moment of the process's grid:
the round decides on the view that moment's beat brings (Membership.this_tick)."""

from __future__ import annotations

import asyncio

from shardq.config import RedisSettings
from shardq.connection import connect_async
from shardq.runtime.membership import Membership
from shardq.runtime.waits import wait_event_until
from shardq.store import fleet, keys
from shardq.store.transport import AsyncTransport


def test_a_lease_round_woken_with_the_membership_beat_decides_on_that_beat(
    url: str, queue: str
) -> None:
    """The dispatcher's lease round and its membership loop wake at one grid moment; the round
    waits for that moment's beat (Membership.this_tick), so a member found gone by it is acted
    on in the same round, not a renew_interval later (the failover bench's dispatcher takeover
    grew by up to a second when the round read the view of the tick before)."""

    async def main() -> tuple[float | None, float | None, list[str]]:
        redis = await connect_async(RedisSettings(url=url))
        transport = AsyncTransport(redis)
        members_key = keys.queue_keys(queue)[1]  # the dispatchers' zset
        m = Membership(transport, members_key, members_key + ":drain", "me", 2.0)
        try:
            await m.beat()
            before = m.last_success
            await transport.run(fleet.members(members_key, members_key + ":drain", "peer", 2000))
            loop = asyncio.get_running_loop()
            at = loop.time() + 0.05
            never = asyncio.Event()
            seen: list[float | None] = []
            live: list[str] = []

            async def lease_round() -> None:  # woken first, as a timer heap may order them
                await wait_event_until(never, at)
                await m.this_tick(1.0)
                seen.append(m.last_success)
                live.extend(m.live)

            async def membership_loop() -> None:
                await wait_event_until(never, at)
                await m.beat()

            await asyncio.gather(lease_round(), membership_loop())
            return before, seen[0], live
        finally:
            await transport.aclose()
            await redis.aclose()

    before, seen, live = asyncio.run(main())
    assert before is not None and seen is not None and seen > before, "decided on the old view"
    assert "peer" in live
