"""Hint subscriptions at scale (issue 54, 4): a process subscribes to thousands of partitions'
hint channels in seconds, one SSUBSCRIBE per channel written in pipelined batches on each
primary's subscriber connection, and hears a hint on any of them.

The process is busy meanwhile, as a dispatcher taking thousands of leases at start-up is:
other tasks on its event loop each hold it 2 ms a turn.  Sent one call at a time, every
SSUBSCRIBE waited its turn behind them (4,096 channels took 41 s here; a dispatcher of 16,384
partitions had 6,085 subscribed after 175 s); pipelined, a few writes per primary."""

from __future__ import annotations

import asyncio
import time

from support.helpers import scaled

from shardq.config import RedisSettings
from shardq.connection import connect_async
from shardq.runtime import hints
from shardq.runtime.supervisor import Supervisor

CHANNELS = 4096


def test_thousands_of_hint_channels_are_subscribed_at_once_and_each_is_heard(
    cluster_url: str, queue: str
) -> None:
    # One tag each, as partitions' hint channels: CHANNELS slots spread over every primary.
    channels = {f"{{{queue}:{i}}}:hint:due": i for i in range(CHANNELS)}
    woken: set[int] = set()
    heard: dict[int, bytes] = {}

    def on_hint(partition: int, message: bytes | None) -> None:
        if message is None:
            woken.add(partition)  # the wake-up each partition gets once subscribed
        else:
            heard[partition] = message

    async def main() -> float:
        redis = await connect_async(RedisSettings.from_url(cluster_url))

        async def busy() -> None:  # another loop of the process, 2 ms of CPU a turn
            while True:
                time.sleep(0.002)
                await asyncio.sleep(0)

        others = [asyncio.create_task(busy()) for _ in range(4)]
        sup = Supervisor("test", queue)
        started = time.monotonic()
        sup.forever(
            "hints",
            lambda: hints.listen(redis, channels, on_hint, sup, "hints"),
            pace=hints.PASS_WAIT,
        )
        try:
            deadline = started + scaled(60)
            while len(woken) < CHANNELS and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            took = time.monotonic() - started
            assert len(woken) == CHANNELS, f"{len(woken)} of {CHANNELS} subscribed"
            # Every channel's subscription is in place: a sample of them hears a hint (sent
            # again until heard: the server may not have read the last SSUBSCRIBEs yet).
            sample = list(channels.items())[:: CHANNELS // 64]
            deadline = time.monotonic() + scaled(10)
            while time.monotonic() < deadline and any(p not in heard for _, p in sample):
                for name, p in sample:
                    if p not in heard:
                        await redis.execute_command("SPUBLISH", name, f"h{p}")
                await asyncio.sleep(0.1)
            assert {p: heard.get(p) for _, p in sample} == {p: f"h{p}".encode() for _, p in sample}
            assert set(heard) == {p for _, p in sample}  # nothing heard on other channels
            return took
        finally:
            for task in others:
                task.cancel()
            await sup.stop()
            await redis.aclose()

    took = asyncio.run(main())
    assert took < scaled(15), f"{CHANNELS} channels took {took:.1f} s to subscribe"
