"""Loops woken by one moment of a process's grid: they send together and the lease round sees
that moment's membership beat.

AsyncTransport.run_together: the ops asked for in one turn of the event loop go out as one
batch per primary, each caller gets its own result, and one op's error stays its own.  This is
what lets a worker's membership beat, layout check and limits read, all on the queue's slot,
cost one round trip."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import ResponseError

from shardq.client import Client
from shardq.config import RedisSettings
from shardq.connection import connect_async
from shardq.runtime.membership import Membership
from shardq.runtime.waits import wait_event_until
from shardq.store import fleet, keys, queues
from shardq.store.op import cmd
from shardq.store.transport import AsyncTransport


def test_ops_of_one_loop_turn_share_one_batch(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, 2)
    client.redis.hset(keys.limits_key(queue), "type:t", b"{}")
    # Not a hash: its HGETALL fails (WRONGTYPE); the others must not.
    wrong = keys.queue_meta_key(queue) + ":not-a-hash"
    client.redis.set(wrong, "x")

    async def main() -> tuple[list[Any], list[int], list[Any]]:
        redis = await connect_async(RedisSettings(url=url))
        transport = AsyncTransport(redis)
        sent: list[int] = []
        run_many = transport.run_many

        async def counted(ops: Any) -> Any:  # records the batches, then sends them as is
            sent.append(len(ops))
            return await run_many(ops)

        transport.run_many = counted  # type: ignore[method-assign]
        try:
            together = await asyncio.gather(
                transport.run_together(queues.read_meta(queue)),
                transport.run_together(queues.limits_fields(queue)),
                transport.run_together(cmd("HGETALL", wrong, parse=dict)),
                return_exceptions=True,
            )
            # A later turn is a batch of its own.
            alone = [await transport.run_together(queues.limits_fields(queue))]
            return together, sent, alone
        finally:
            await transport.aclose()
            await redis.aclose()

    together, sent, alone = asyncio.run(main())
    meta, limits, failed = together
    assert not isinstance(meta, BaseException) and meta.partitions == 2
    assert limits == {"type:t": b"{}"}
    assert isinstance(failed, ResponseError) and "WRONGTYPE" in str(failed)
    assert sent == [3, 1], "the three ops of one turn were not one batch"
    assert alone == [{"type:t": b"{}"}]


def test_a_caller_cancelled_before_the_send_leaves_the_others_served(
    url: str, client: Client, queue: str
) -> None:
    client.create_queue(queue, 2)

    async def main() -> Any:
        redis = await connect_async(RedisSettings(url=url))
        transport = AsyncTransport(redis)
        try:
            gone = asyncio.ensure_future(transport.run_together(queues.read_meta(queue)))
            kept = asyncio.ensure_future(transport.run_together(queues.read_meta(queue)))
            await asyncio.sleep(0)  # both are queued for this turn's batch
            gone.cancel()
            with pytest.raises(asyncio.CancelledError):
                await gone
            return await kept
        finally:
            await transport.aclose()
            await redis.aclose()

    assert asyncio.run(main()).partitions == 2


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
