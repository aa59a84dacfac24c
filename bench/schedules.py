"""Periodic schedules at scale: Redis memory per schedule and the dispatcher's added Redis cost.

    python -m bench.schedules --url redis://127.0.0.1:7300 [--schedules 100000]
                              [--partitions 64] [--every 60] [--seconds 30] [--json]

Stores N interval schedules on one queue (written straight with the schedule-put op, their
first ticks spread evenly over the second interval so none fires while they are written),
measures the primaries' memory before and after, then runs one ``shardq dispatcher run``:
first a window before any tick is due (the dispatcher's cost with N idle schedules), then a
window while ticks fire at N / every per second.  Reported per second of that window: fires,
FCALL calls, their Redis time and the primaries' CPU (net of the idle rate), against the
baseline window.  Prints a calibration line first (see bench/calibration.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import time
from typing import Any

from bench.common import Sampler, calibrate, calibration_line, fresh_queue, used_memory
from shardq import Client
from shardq.dev.demo import cli_command, delete_queue
from shardq.schedules import make_definition
from shardq.store import keys
from shardq.store import schedules as ops


def redis_now_ms(client: Client) -> int:
    seconds, micros = client.redis.time()  # type: ignore[misc]
    return int(seconds) * 1000 + int(micros) // 1000


def fired_total(client: Client, queue: str, partitions: int) -> int:
    pipe = client.redis.pipeline(transaction=False)
    for pk in keys.all_partition_keys(queue, partitions):
        pipe.hget(pk.stats, "schedule_fired")
    return sum(int(v or 0) for v in pipe.execute())


def store(client: Client, queue: str, partitions: int, n: int, every: float) -> float:
    """Write n schedules; returns the seconds taken.  First ticks: [now + every, now + 2 every)."""
    now = redis_now_ms(client)
    every_ms = round(every * 1000)
    base = make_definition("x", "bench", {"n": 0}, every=every)
    started = time.monotonic()
    for start in range(0, n, 2000):
        batch = []
        for i in range(start, min(start + 2000, n)):
            name = f"s{i}"
            anchor = now + every_ms + i * every_ms // n
            d = dataclasses.replace(base, name=name, anchor_ms=anchor)
            pk = keys.partition_keys(queue, keys.partition_for(name, partitions), partitions)
            batch.append(ops.put(pk, "put", name, d.to_json(), anchor))
        for result in client.transport.run_many(batch):
            if isinstance(result, BaseException):
                raise result
    return time.monotonic() - started


def delete_schedules(client: Client, queue: str, partitions: int) -> None:
    for pk in keys.all_partition_keys(queue, partitions):
        client.redis.delete(pk.schedules, pk.schedule_next, pk.schedule_state)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7300")
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--every", type=float, default=60.0, help="interval of each schedule (s)")
    parser.add_argument("--seconds", type=float, default=30.0, help="measurement window (s)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    print(calibration_line(calibrate(args.url)), flush=True)
    client = Client.from_url(args.url)
    queue = fresh_queue(client, "bench-sched", args.partitions)
    sampler = Sampler(client)
    proc = None
    try:
        sampler.calibrate(2.0)
        before = used_memory(client)
        write_s = store(client, queue, args.partitions, args.schedules, args.every)
        after = used_memory(client)
        stored_at = time.monotonic()
        proc = subprocess.Popen(
            cli_command("dispatcher", "run", "--queue", queue, "--url", args.url),
            stdout=subprocess.DEVNULL,
        )
        time.sleep(3.0)  # leases taken
        window = min(args.seconds, max(1.0, args.every - (time.monotonic() - stored_at) - 1.0))
        sampler.mark()
        time.sleep(window)
        idle = sampler.delta()
        # Ticks start one interval after they were stored; let the first ones go, then measure.
        time.sleep(max(0.0, args.every + 2.0 - (time.monotonic() - stored_at)))
        fired0 = fired_total(client, queue, args.partitions)
        sampler.mark()
        time.sleep(args.seconds)
        busy = sampler.delta()
        fired = fired_total(client, queue, args.partitions) - fired0
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        delete_schedules(client, queue, args.partitions)
        delete_queue(client.redis, queue, args.partitions)
        client.close()

    def per_s(d: dict[str, Any], key: str) -> float:
        return float(d[key]) / d["seconds"]

    out = {
        "schedules": args.schedules,
        "partitions": args.partitions,
        "every_s": args.every,
        "write_s": round(write_s, 2),
        "memory_bytes_per_schedule": round((after - before) / args.schedules, 1),
        "idle_window_s": round(idle["seconds"], 1),
        "idle_fcalls_per_s": round(per_s(idle, "script_calls"), 1),
        "idle_script_usec_per_s": round(per_s(idle, "script_usec"), 1),
        "idle_cpu_usec_per_s": round(per_s(idle, "cpu_usec"), 1),
        "firing_window_s": round(busy["seconds"], 1),
        "fires_per_s": round(fired / busy["seconds"], 1),
        "firing_fcalls_per_s": round(per_s(busy, "script_calls"), 1),
        "firing_script_usec_per_s": round(per_s(busy, "script_usec"), 1),
        "firing_cpu_usec_per_s": round(per_s(busy, "cpu_usec"), 1),
    }
    fires = max(out["fires_per_s"], 1e-9)
    out["script_usec_per_fire"] = round(
        (out["firing_script_usec_per_s"] - out["idle_script_usec_per_s"]) / fires, 2
    )
    if args.json:
        print(json.dumps(out))
        return
    print(
        f"{args.schedules} schedules every {args.every:g} s on {args.partitions} partitions: "
        f"{out['memory_bytes_per_schedule']} B of Redis memory each (written in {write_s:.1f} s)"
    )
    print(
        f"dispatcher, no tick due: {out['idle_fcalls_per_s']} FCALL/s, "
        f"{out['idle_script_usec_per_s']} us/s of script time, "
        f"{out['idle_cpu_usec_per_s']} us/s Redis CPU"
    )
    print(
        f"dispatcher, firing {out['fires_per_s']} ticks/s: {out['firing_fcalls_per_s']} FCALL/s, "
        f"{out['firing_script_usec_per_s']} us/s of script time, "
        f"{out['firing_cpu_usec_per_s']} us/s Redis CPU "
        f"({out['script_usec_per_fire']} us of script time per fire)"
    )


if __name__ == "__main__":
    main()
