"""Redis calls and CPU of an idle fleet (no jobs), with each version's default settings.

    python -m bench.idle --url redis://127.0.0.1:7300 [--partitions 256] [--dispatchers 3]
                         [--workers 3] [--settle 8] [--cpu-seconds 0] [--seconds 20]
                         [--code DIR] [--json]

Plain ``shardq dispatcher run`` / ``shardq worker run`` processes, no flags beyond the queue
and URL, so each version runs with its own defaults.  After ``--settle`` seconds (leases taken,
workers registered, the idle back-offs under way):

1. with ``--cpu-seconds S``, CPU over S seconds, with nothing else talking to Redis: Redis
   (``used_cpu_user + used_cpu_sys`` of every node, primaries and replicas, as a share of a
   core; the same nodes' rate over ``--bare-seconds`` before the fleet started is printed
   beside it, so the fleet's own share is the difference) and the fleet's processes (utime +
   stime, per role);
2. client commands over ``--seconds``, counted with MONITOR on every primary (commands scripts
   run inside Redis are left out), grouped by command and, for FCALL (EVALSHA in older
   versions), by script; and round trips: a connection's commands less than 1 ms apart are
   counted as one (a pipelined batch), so calls/s over round trips/s is the batching.
   MONITOR costs Redis CPU itself: that is why the CPU window comes first, apart.

``--code DIR`` runs the fleet from another checkout, to compare versions side by side in one
session.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis as redis_lib

from bench.common import calibrate, calibration_line, cpu_seconds
from bench.fleet import primary_addresses
from shardq import Client
from shardq.connection import is_cluster
from shardq.dev.demo import cli_command, delete_queue
from shardq.store import loader

# A connection's commands closer than this are one round trip (one pipelined batch).
BURST_GAP = 0.001


def monitor(nodes: list[tuple[str, int]], seconds: float) -> tuple[Counter[str], int]:
    """Client commands over ``seconds``, by command (FCALL by script name), and round trips."""
    names = {s.function: s.name for s in loader.scripts().values()}
    socks: dict[socket.socket, bytearray] = {}
    for host, port in nodes:
        sock = socket.create_connection((host, port), timeout=5)
        sock.sendall(b"MONITOR\r\n")
        sock.setblocking(False)
        socks[sock] = bytearray()
    counts: Counter[str] = Counter()
    last_at: dict[bytes, float] = {}
    trips = 0
    deadline = time.monotonic() + seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select(list(socks), [], [], left)
            for sock in readable:
                buf = socks[sock]
                buf.extend(sock.recv(1 << 16))
                *lines, rest = bytes(buf).split(b"\r\n")
                buf[:] = rest
                for line in lines:
                    if not line.startswith(b"+") or b" lua] " in line or line == b"+OK":
                        continue
                    parts = line.split(b'"')
                    if len(parts) < 2 or parts[1] == b"MONITOR":
                        continue
                    # '+<seconds.micros> [<db> <client address>] "<command>" ...'
                    head = parts[0][1:].split(b" ")
                    at, client = float(head[0]), head[-2].rstrip(b"]")
                    if at - last_at.get(client, -1.0) > BURST_GAP:
                        trips += 1
                    last_at[client] = at
                    command = parts[1].decode().upper()
                    if command in ("EVALSHA", "FCALL", "FCALL_RO") and len(parts) > 3:
                        fn = parts[3].decode()
                        command = "script:" + names.get(fn, fn.rsplit("_", 1)[-1][:16])
                    counts[command] += 1
    finally:
        for sock in socks:
            sock.close()
    return counts, trips


def _all_nodes(client: Client, url: str) -> list[tuple[str, int]]:
    """Every node, replicas too (a write a script makes costs its replica CPU as well)."""
    if is_cluster(client.redis):
        return [(n.host, n.port) for n in client.redis.get_nodes()]  # type: ignore[union-attr]
    return primary_addresses(client.redis, url)


class RedisCpu:
    """Seconds of CPU the given nodes have used, read with INFO."""

    def __init__(self, nodes: list[tuple[str, int]]) -> None:
        self.conns = [redis_lib.Redis(host=h, port=p) for h, p in nodes]

    def read(self) -> float:
        total = 0.0
        for c in self.conns:
            info = c.info("cpu")
            total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        return total

    def rate(self, seconds: float) -> float:
        """Share of a core over ``seconds`` from now."""
        c0, t0 = self.read(), time.monotonic()
        time.sleep(seconds)
        return (self.read() - c0) / (time.monotonic() - t0)

    def close(self) -> None:
        for c in self.conns:
            c.close()


def run(
    url: str,
    partitions: int,
    dispatchers: int,
    workers: int,
    seconds: float,
    code: str | None,
    settle: float = 8.0,
    cpu_window: float = 0.0,
    bare_window: float = 10.0,
) -> dict[str, Any]:
    client = Client.from_url(url)
    nodes = _all_nodes(client, url)
    primaries = primary_addresses(client.redis, url)
    cpu = RedisCpu(nodes)
    bare = cpu.rate(bare_window) if cpu_window > 0 else None
    queue = f"idle-{int(time.time() * 1000)}"
    client.create_queue(queue, partitions)
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = code
    base = ["--queue", queue, "--url", url]
    roles = ["dispatcher"] * dispatchers + ["worker"] * workers
    procs = [
        subprocess.Popen(cli_command("dispatcher", "run", *base), env=env, cwd=code)
        for _ in range(dispatchers)
    ] + [
        subprocess.Popen(
            cli_command("worker", "run", *base, "--handlers", "shardq.dev.handlers:handlers"),
            env=env,
            cwd=code,
        )
        for _ in range(workers)
    ]
    cpu_figures: dict[str, Any] = {}
    try:
        time.sleep(settle)  # leases taken, workers registered, first rounds done
        if cpu_window > 0:
            r0, t0 = cpu.read(), time.monotonic()
            p0 = [cpu_seconds(p.pid) for p in procs]
            time.sleep(cpu_window)
            r1, t1 = cpu.read(), time.monotonic()
            p1 = [cpu_seconds(p.pid) for p in procs]
            span = t1 - t0
            by_role: dict[str, float] = {}
            for role, a, b in zip(roles, p0, p1, strict=True):
                by_role[role] = by_role.get(role, 0.0) + (b - a)
            cpu_figures = {
                "cpu_seconds": round(span, 1),
                "redis_core_pct": round((r1 - r0) / span * 100, 3),
                "bare_redis_core_pct": round((bare or 0.0) * 100, 3),
                "nodes": len(nodes),
                "process_core_pct": {k: round(v / span * 100, 3) for k, v in by_role.items()},
                "consumer_core_pct": round(sum(by_role.values()) / span * 100, 3),
            }
        counts, trips = monitor(primaries, seconds)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
        delete_queue(client.redis, queue, partitions)
        client.close()
        cpu.close()
    total = sum(counts.values())
    return {
        "partitions": partitions,
        "dispatchers": dispatchers,
        "workers": workers,
        "settle": settle,
        "seconds": seconds,
        "code": code,
        **cpu_figures,
        "calls_per_s": round(total / seconds, 1),
        "round_trips_per_s": round(trips / seconds, 1),
        "by_command_per_s": {k: round(v / seconds, 1) for k, v in counts.most_common()},
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--url", default=os.environ.get("SHARDQ_BENCH_URL", "redis://127.0.0.1:7300"))
    ap.add_argument("--partitions", type=int, default=256)
    ap.add_argument("--dispatchers", type=int, default=3)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--settle", type=float, default=8.0, help="seconds before measuring")
    ap.add_argument(
        "--cpu-seconds", type=float, default=0.0, help="measure CPU over this long first (0: no)"
    )
    ap.add_argument(
        "--bare-seconds", type=float, default=10.0, help="Redis' own rate before the fleet"
    )
    ap.add_argument("--seconds", type=float, default=20.0, help="MONITOR window")
    ap.add_argument("--code", default=None, help="run the fleet from this checkout")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    code = str(Path(args.code).resolve()) if args.code else None
    say = (lambda s: print(s, file=sys.stderr)) if args.json else print
    cal = calibrate(args.url)
    say(f"calibration: {calibration_line(cal)}")
    r = run(
        args.url,
        args.partitions,
        args.dispatchers,
        args.workers,
        args.seconds,
        code,
        args.settle,
        args.cpu_seconds,
        args.bare_seconds,
    )
    say(
        f"idle fleet, P={r['partitions']}, {r['dispatchers']} dispatchers, {r['workers']} "
        f"workers, code {code or 'this checkout'}, after {r['settle']:g} s: "
        f"{r['calls_per_s']} Redis calls/s in {r['round_trips_per_s']} round trips/s"
    )
    if "redis_core_pct" in r:
        roles = ", ".join(f"{k} {v:.3f}" for k, v in r["process_core_pct"].items())
        say(
            f"  CPU over {r['cpu_seconds']:g} s, % of a core: Redis {r['redis_core_pct']:.3f} "
            f"({r['nodes']} nodes; {r['bare_redis_core_pct']:.3f} before the fleet started); "
            f"processes {r['consumer_core_pct']:.3f} ({roles})"
        )
    for name, rate in r["by_command_per_s"].items():
        say(f"  {name:<28} {rate:>8.1f}/s")
    if args.json:
        print(json.dumps({**r, "calibration": cal}))


if __name__ == "__main__":
    main()
