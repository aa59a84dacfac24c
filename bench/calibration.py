"""Figures of the machine, measured in the same run as the figures they calibrate.

Every benchmark report starts with one line of these: this box's speed varies by a third from
day to day, so a figure means something only next to a calibration from the same run.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from typing import Any
from urllib.parse import urlsplit

CPU_LOOP = 2_000_000


def cpu_loop_rate(n: int = CPU_LOOP, repeat: int = 3) -> float:
    """Iterations per second of a fixed integer loop in this interpreter (best of ``repeat``)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        x = 0
        for i in range(n):
            x += i * i & 7
        best = min(best, time.perf_counter() - t0)
    return n / best


def redis_benchmark(
    url: str,
    requests: int = 200_000,
    username: str | None = None,
    password: str | None = None,
) -> dict[str, Any] | None:
    """``redis-benchmark -q -n <requests> PING`` against the node of ``url`` (50 clients, no
    pipelining; PING touches no key, so it needs no slot routing on a cluster), or None when
    redis-benchmark is not on PATH."""
    exe = shutil.which("redis-benchmark")
    if exe is None:
        return None
    u = urlsplit(url)
    password = password or u.password
    username = username or u.username
    cmd = [exe, "-h", u.hostname or "127.0.0.1", "-p", str(u.port or 6379), "-q"]
    if password:
        cmd += ["-a", password, "--no-auth-warning"]
        if username:
            cmd += ["--user", username]
    cmd += ["-n", str(requests), "PING"]
    shown = " ".join(c if c != password else "***" for c in cmd)
    try:
        # redis-benchmark retries a refused connection forever, at 100 % of a core.
        socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379), timeout=2).close()
    except OSError as exc:
        return {"command": shown, "ping_per_s": None, "output_tail": f"not reachable: {exc}"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    m = re.search(r"([\d.]+) requests per second", out.split("\r")[-1])
    if m is None:
        return {"command": shown, "ping_per_s": None, "output_tail": out[-500:]}
    return {"command": shown, "ping_per_s": float(m.group(1))}


def server_of(url: str, username: str | None = None, password: str | None = None) -> str:
    """``Redis 7.0.15`` or ``Valkey 8.1.8 (Redis 7.2.4)``: the server at ``url`` (its INFO),
    or ``unknown (...)`` when it cannot be asked."""
    import redis

    try:
        with redis.Redis.from_url(
            url, username=username, password=password, socket_timeout=5, driver_info=None
        ) as r:
            info: dict[str, Any] = r.info("server")
    except Exception as exc:  # a figure's label, never a reason to fail the benchmark
        return f"unknown ({type(exc).__name__})"
    name = str(info.get("server_name") or "redis")
    compat = str(info.get("redis_version", "?"))
    own = str(info.get(f"{name}_version") or compat)
    label = {"redis": "Redis", "valkey": "Valkey"}.get(name, name)
    return f"{label} {own}" + (f" (Redis {compat})" if own != compat else "")


def calibrate(url: str, username: str | None = None, password: str | None = None) -> dict[str, Any]:
    """This interpreter's CPU loop rate, the server's name and version, and its PING rate
    (redis-benchmark), now."""
    return {
        "server": server_of(url, username, password),
        "cpu_loop_iter_per_s": round(cpu_loop_rate()),
        "cpu_loop": f"python: for i in range({CPU_LOOP:,}): x += i * i & 7 (best of 3)",
        "redis_benchmark": redis_benchmark(url, username=username, password=password),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def calibration_line(c: dict[str, Any]) -> str:
    """One line for the top of a report."""
    parts = [f"server {c.get('server', 'unknown')}"]
    parts.append(f"python CPU loop {c['cpu_loop_iter_per_s'] / 1e6:.1f} M iter/s")
    rb = c["redis_benchmark"]
    if rb is None:
        parts.append("redis-benchmark not on PATH")
    else:
        rate = rb["ping_per_s"]
        parts.append(
            f"redis-benchmark PING {rate:,.0f} req/s" if rate else "redis-benchmark: no figure"
        )
        parts.append(f"({rb['command']})")
    parts.append(f"load avg 1m {c['loadavg_1m']}")
    return "; ".join(parts)
