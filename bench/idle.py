"""Redis calls per second of an idle fleet (no jobs), with each version's default settings.

    python -m bench.idle --url redis://127.0.0.1:7300 [--partitions 256] [--dispatchers 3]
                         [--workers 3] [--seconds 20] [--code DIR] [--json]

Plain ``shardq dispatcher run`` / ``shardq worker run`` processes, no flags beyond the queue
and URL, so each version runs with its own defaults.  Client commands are counted with MONITOR
on every primary (commands scripts run inside Redis are left out), grouped by command and, for
FCALL (EVALSHA in older versions), by script.  ``--code DIR`` runs the fleet from another
checkout, to compare versions side by side in one session.
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

from bench.common import calibrate, calibration_line
from shardq import Client
from shardq.devtools.bench import cli_command, delete_queue
from shardq.devtools.bench_fleet import primary_addresses
from shardq.store import loader


def monitor(nodes: list[tuple[str, int]], seconds: float) -> Counter[str]:
    """Client commands over ``seconds``, by command (FCALL by script name)."""
    names = {s.function: s.name for s in loader.scripts().values()}
    socks: dict[socket.socket, bytearray] = {}
    for host, port in nodes:
        sock = socket.create_connection((host, port), timeout=5)
        sock.sendall(b"MONITOR\r\n")
        sock.setblocking(False)
        socks[sock] = bytearray()
    counts: Counter[str] = Counter()
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
                    command = parts[1].decode().upper()
                    if command in ("EVALSHA", "FCALL", "FCALL_RO") and len(parts) > 3:
                        fn = parts[3].decode()
                        command = "script:" + names.get(fn, fn.rsplit("_", 1)[-1][:16])
                    counts[command] += 1
    finally:
        for sock in socks:
            sock.close()
    return counts


def run(
    url: str, partitions: int, dispatchers: int, workers: int, seconds: float, code: str | None
) -> dict[str, Any]:
    client = Client.from_url(url)
    queue = f"idle-{int(time.time() * 1000)}"
    client.create_queue(queue, partitions)
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = code
    base = ["--queue", queue, "--url", url]
    procs = [
        subprocess.Popen(cli_command("dispatcher", "run", *base), env=env, cwd=code)
        for _ in range(dispatchers)
    ] + [
        subprocess.Popen(
            cli_command("worker", "run", *base, "--handlers", "shardq.devtools.handlers:handlers"),
            env=env,
            cwd=code,
        )
        for _ in range(workers)
    ]
    try:
        time.sleep(8.0)  # leases taken, workers registered, first rounds done
        counts = monitor(primary_addresses(client.redis, url), seconds)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
        delete_queue(client.redis, queue, partitions)
        client.close()
    total = sum(counts.values())
    return {
        "partitions": partitions,
        "dispatchers": dispatchers,
        "workers": workers,
        "seconds": seconds,
        "code": code,
        "calls_per_s": round(total / seconds, 1),
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
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--code", default=None, help="run the fleet from this checkout")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    code = str(Path(args.code).resolve()) if args.code else None
    say = (lambda s: print(s, file=sys.stderr)) if args.json else print
    cal = calibrate(args.url)
    say(f"calibration: {calibration_line(cal)}")
    r = run(args.url, args.partitions, args.dispatchers, args.workers, args.seconds, code)
    say(
        f"idle fleet, P={r['partitions']}, {r['dispatchers']} dispatchers, {r['workers']} "
        f"workers, code {code or 'this checkout'}: {r['calls_per_s']} Redis calls/s"
    )
    for name, rate in r["by_command_per_s"].items():
        say(f"  {name:<28} {rate:>8.1f}/s")
    if args.json:
        print(json.dumps({**r, "calibration": cal}))


if __name__ == "__main__":
    main()
