"""The floor of an idle process's CPU: only the calls a role must make while its queue is idle.

    python -m bench.idle_floor [--url redis://127.0.0.1:7310] [--seconds 60] [--rounds 3]

An idle dispatcher or worker cannot do less than heartbeat into its fleet (how fast a dead one
is replaced depends on it: every ``renew_interval``, 1 s, for a dispatcher, every
``heartbeat_interval``, 0.75 s, for a worker), read its queue's meta every
``runtime.process.LAYOUT_CHECK`` (1 s: the resize protocol counts on it) and, for a worker,
re-read the queue's limits every ``LIMITS_REFRESH`` (2 s: the README promises it).  This runs
exactly those calls the way the processes run them: one loop each, its interval rounded down
to whole ticks of the role's wake-up grid (``Supervisor.period``), so loops due at one grid
moment wake in one turn of the event loop; in one process per role.  It reports each
process's CPU (utime + stime, % of a core) over ``--seconds``, and Redis' (``used_cpu_user +
used_cpu_sys``, every node) beside its own rate measured first without them: what those round
trips cost on this box, which no change to shardq's idle back-offs can go below.  ``bench.idle`` (or
``bench.baselines.steady --idle-settle 60``) measures the real processes beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

from bench.common import calibrate, calibration_line, cpu_seconds
from bench.idle import RedisCpu, _all_nodes
from shardq import Client
from shardq.connection import RedisSettings, connect_async
from shardq.dev.demo import delete_queue
from shardq.runtime.process import LAYOUT_CHECK
from shardq.runtime.supervisor import Supervisor
from shardq.runtime.waits import after_grid, wait_event_until
from shardq.store import fleet, keys, queues
from shardq.store.meta import read_meta
from shardq.store.transport import AsyncTransport
from shardq.worker.worker import LIMITS_REFRESH


async def _role(url: str, queue: str, role: str) -> None:
    """Run one role's required idle calls until stdin closes."""
    redis = await connect_async(RedisSettings.from_url(url))
    transport = AsyncTransport(redis)
    stop = asyncio.Event()
    if role == "dispatcher":
        members = keys.dispatchers_key(queue), keys.drain_key(queue)
        beat_every = 1.0  # DispatcherSettings.renew_interval
    else:
        members = keys.workers_key(queue), keys.workers_drain_key(queue)
        beat_every = 0.75  # WorkerSettings.heartbeat_interval
    me = f"{role}:floor#{os.getpid()}"
    grid = Supervisor(role, queue, tick=beat_every)  # only its rounding of intervals to the grid

    async def every(interval: float, body: Any) -> None:
        period = grid.period(interval)
        while not stop.is_set():
            await wait_event_until(stop, after_grid(time.monotonic(), period))
            if not stop.is_set():
                await body()

    async def beat() -> None:
        await transport.run(fleet.members(*members, me, 2500))

    async def layout() -> None:
        await read_meta(redis, queue)

    async def limits() -> None:
        await transport.run(queues.limits_fields(queue))

    loops = [every(beat_every, beat), every(LAYOUT_CHECK, layout)]
    if role == "worker":
        loops.append(every(LIMITS_REFRESH, limits))
    tasks = [asyncio.ensure_future(loop) for loop in loops]
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    stop.set()
    await asyncio.gather(*tasks)
    await transport.aclose()


def run(url: str, seconds: float) -> dict[str, float]:
    client = Client.from_url(url)
    redis_cpu = RedisCpu(_all_nodes(client, url))
    bare = redis_cpu.rate(min(seconds, 20.0))
    queue = f"floor-{int(time.time() * 1000)}"
    client.create_queue(queue, 64)
    procs = {
        role: subprocess.Popen(
            [sys.executable, "-m", "bench.idle_floor", "--role", role, "--queue", queue,
             "--url", url],
            stdin=subprocess.PIPE,
        )
        for role in ("dispatcher", "worker")
    }  # fmt: skip
    try:
        time.sleep(5.0)
        before = {role: cpu_seconds(p.pid) for role, p in procs.items()}
        r0, t0 = redis_cpu.read(), time.monotonic()
        time.sleep(seconds)
        r1, span = redis_cpu.read(), time.monotonic() - t0
        after = {role: cpu_seconds(p.pid) for role, p in procs.items()}
    finally:
        for p in procs.values():
            assert p.stdin is not None
            p.stdin.close()
        for p in procs.values():
            p.wait(30)
        delete_queue(client.redis, queue, 64)
        client.close()
        redis_cpu.close()
    out = {role: round((after[role] - before[role]) / span * 100, 3) for role in procs}
    out["redis"] = round((r1 - r0) / span * 100, 3)
    out["redis_alone"] = round(bare * 100, 3)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--url", default="redis://127.0.0.1:7310")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--role", default="", help=argparse.SUPPRESS)
    ap.add_argument("--queue", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.role:
        asyncio.run(_role(args.url, args.queue, args.role))
        return
    print(f"calibration: {calibration_line(calibrate(args.url))}")
    rows = []
    for rnd in range(args.rounds):
        r = run(args.url, args.seconds)
        r["both"] = round(r["dispatcher"] + r["worker"], 3)
        rows.append(r)
        print(json.dumps({"round": rnd + 1, **r}), flush=True)
    for name in ("dispatcher", "worker", "both", "redis", "redis_alone"):
        values = [r[name] for r in rows]
        print(f"{name}: {min(values):.3f}-{max(values):.3f} % of a core")
    net = [r["redis"] - r["redis_alone"] for r in rows]
    print(f"Redis net of its own rate: {min(net):.3f}-{max(net):.3f} % of a core")


if __name__ == "__main__":
    main()
