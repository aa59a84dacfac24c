"""What one wake-up of an idle process costs on this box: the unit an idle queue's CPU is made of.

    python -m bench.wake_cost [--url redis://127.0.0.1:7310] [--seconds 20] [--rate 10] [--rounds 3]

An idle shardq process, or an idle BullMQ worker, spends its CPU waking up: a timer fires, the
process makes a Redis call or two, and sleeps again. This measures that unit by itself, each
kind in a fresh Python process that wakes ``--rate`` times a second for ``--seconds`` and
reads its own CPU around the loop (``time.process_time``: user + system time, to the
nanosecond, where ``os.times`` counts 10 ms ticks):

- ``time.sleep``: a bare timer wake-up, no event loop, no call;
- ``asyncio.sleep``: the same from an asyncio event loop;
- ``asyncio + GET``: an asyncio wake-up that sends one redis-py asyncio call and waits for its
  reply (two wake-ups of the process: the timer's and the reply's), as an idle loop does;
- ``sync GET``: the same with redis-py's blocking client.

It prints µs of CPU per wake-up and the % of a core one wake-up a second costs, so an idle
figure reads as wake-ups per second: BullMQ's idle consumer (0.03-0.05 % of a core, §1.3 of
docs/capacity.md) is about one ``asyncio + GET`` a second or less, and shardq's two idle
processes, each heartbeating every second or less and reading its queue's meta every second,
make several.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bench.common import calibrate, calibration_line

KINDS = ("time.sleep", "asyncio.sleep", "asyncio + GET", "sync GET")


def _measure(kind: str, url: str, seconds: float, rate: float) -> dict[str, float]:
    """Run in the child: wake ``rate`` times a second for ``seconds``; CPU per wake-up."""
    every = 1.0 / rate

    def result(t0: float, wakes: int) -> dict[str, float]:
        cpu = time.process_time() - t0
        return {"wakes": wakes, "cpu_s": cpu, "us_per_wake": 1e6 * cpu / max(wakes, 1)}

    if kind in ("time.sleep", "sync GET"):
        import redis

        client = redis.Redis.from_url(url) if kind == "sync GET" else None
        if client is not None:
            client.ping()
        t0, wakes, end = time.process_time(), 0, time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(every)
            if client is not None:
                client.get("wake-cost")
            wakes += 1
        return result(t0, wakes)

    import asyncio

    import redis.asyncio as aioredis

    async def run() -> dict[str, float]:
        client = aioredis.Redis.from_url(url) if kind == "asyncio + GET" else None
        if client is not None:
            await client.ping()
        t0, wakes, end = time.process_time(), 0, time.monotonic() + seconds
        while time.monotonic() < end:
            await asyncio.sleep(every)
            if client is not None:
                await client.get("wake-cost")
            wakes += 1
        out = result(t0, wakes)
        if client is not None:
            await client.aclose()
        return out

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.wake_cost", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--url", default="redis://127.0.0.1:7310")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=10.0, help="wake-ups a second")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_measure(args.child, args.url, args.seconds, args.rate)))
        return
    print(f"calibration (same run, before): {calibration_line(calibrate(args.url))}")
    rows: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for rnd in range(args.rounds):
        for kind in KINDS:
            out = subprocess.run(
                [sys.executable, "-m", "bench.wake_cost", "--child", kind, "--url", args.url,
                 "--seconds", str(args.seconds), "--rate", str(args.rate)],
                check=True, capture_output=True, text=True,
            ).stdout  # fmt: skip
            got = json.loads(out)
            rows[kind].append(got["us_per_wake"])
            print(json.dumps({"round": rnd + 1, "kind": kind, **got}))
    print(f"calibration (same run, after):  {calibration_line(calibrate(args.url))}")
    print()
    print(f"{args.rate:g} wake-ups a second for {args.seconds:g} s, {args.rounds} rounds")
    print()
    print("| wake-up | CPU µs per wake-up | % of a core at one a second |")
    print("|---|---|---|")
    for kind, values in rows.items():
        lo, hi = min(values), max(values)
        print(f"| {kind} | {lo:.0f}-{hi:.0f} | {lo / 1e4:.3f}-{hi / 1e4:.3f} |")


if __name__ == "__main__":
    main()
