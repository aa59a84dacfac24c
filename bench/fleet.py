"""Fleet benchmark: how fast leases converge, and what an idle fleet costs.

    python -m bench.fleet --url redis://127.0.0.1:7300 [--dispatchers 8 --partitions 256 ...]

Starts D dispatcher processes on a fresh queue of P partitions, measures how long until every
partition is owned and every dispatcher holds the floor or ceiling of P / D; kills one with
SIGKILL and measures again; stops one with SIGTERM and measures again.  Then it starts W workers
and counts the Redis commands per second the idle fleet sends (INFO total_commands_processed
over the primaries).
"""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import socket
import subprocess
import time
from collections import Counter
from typing import Any

import click

from bench.calibration import calibrate
from shardq.cli.connection import redis_options, redis_settings
from shardq.client import Client
from shardq.config import RedisSettings
from shardq.connection import SyncRedis, is_cluster
from shardq.dev.demo import cli_command, delete_queue, stop_processes
from shardq.store import keys


def lease_owners(redis: SyncRedis, queue: str, partitions: int) -> list[str | None]:
    """The owner named in each partition's lease (None when free)."""
    pipe = redis.pipeline(transaction=False)
    for pk in keys.all_partition_keys(queue, partitions):
        pipe.get(pk.lease)
    owners: list[str | None] = []
    for value in pipe.execute():
        if value is None:
            owners.append(None)
        else:
            text = value.decode() if isinstance(value, bytes) else str(value)
            owners.append(text.split(":", 1)[1])
    return owners


def spread_ok(owners: list[str | None], expected_dispatchers: int) -> bool:
    """Every partition owned by one of exactly N owners, each with floor or ceil of P / N."""
    if any(o is None for o in owners):
        return False
    counts = Counter(owners)
    if len(counts) != expected_dispatchers:
        return False
    lo = len(owners) // expected_dispatchers
    hi = lo + (1 if len(owners) % expected_dispatchers else 0)
    return all(lo <= c <= hi for c in counts.values())


def primary_addresses(redis: SyncRedis, url: str) -> list[tuple[str, int]]:
    if is_cluster(redis):
        return [(n.host, n.port) for n in redis.get_primaries()]  # type: ignore[union-attr]
    return [RedisSettings.from_url(url).host_port()]


def count_client_commands(
    nodes: list[tuple[str, int]], seconds: float, password: str | None = None
) -> dict[str, int]:
    """Commands clients send to each node over ``seconds``, by MONITOR.

    INFO's counters also count the commands scripts run inside Redis; MONITOR marks those
    "lua", so only what clients sent is counted.  Calls we make ourselves are not included.
    """
    socks: dict[socket.socket, tuple[str, bytearray]] = {}
    for host, port in nodes:
        sock = socket.create_connection((host, port), timeout=5)
        if password:
            sock.sendall(f"AUTH {password}\r\n".encode())
            sock.recv(64)
        sock.sendall(b"MONITOR\r\n")
        sock.setblocking(False)
        socks[sock] = (f"{host}:{port}", bytearray())
    counts = {name: 0 for name, _ in socks.values()}
    deadline = time.monotonic() + seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select(list(socks), [], [], left)
            for sock in readable:
                name, buf = socks[sock]
                buf.extend(sock.recv(1 << 16))
                *lines, rest = bytes(buf).split(b"\r\n")
                buf[:] = rest
                counts[name] += sum(
                    1
                    for line in lines
                    if line.startswith(b"+")
                    and b" lua] " not in line
                    and b'"MONITOR"' not in line
                    and line != b"+OK"
                )
    finally:
        for sock in socks:
            sock.close()
    return counts


def _wait_spread(redis: SyncRedis, queue: str, partitions: int, n: int, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if spread_ok(lease_owners(redis, queue, partitions), n):
            return round(time.monotonic() - start, 2)
        time.sleep(0.1)
    return float("nan")


def run_fleet(
    url: str,
    dispatchers: int = 8,
    partitions: int = 256,
    workers: int = 4,
    lease_time: float = 4.0,
    renew_interval: float = 1.0,
    idle_seconds: float = 10.0,
    password: str | None = None,
) -> dict[str, Any]:
    settings = RedisSettings.from_url(url, password=password)
    password = settings.password
    cal = calibrate(settings.url, settings.username, password)  # before the fleet starts
    # Credentials reach the child processes in their environment, never on their command line.
    url = settings.url + ("?cluster=true" if settings.cluster else "")
    env = dict(os.environ)
    if password:
        env["SHARDQ_REDIS_PASSWORD"] = password
    if settings.username:
        env["SHARDQ_REDIS_USERNAME"] = settings.username
    client = Client(settings)
    queue = f"fleet-{int(time.time())}-{secrets.token_hex(3)}"
    client.create_queue(queue, partitions)
    procs: list[subprocess.Popen[bytes]] = []

    def dispatcher() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            cli_command(
                "dispatcher",
                "run",
                "--queue",
                queue,
                "--url",
                url,
                "--lease-time",
                str(lease_time),
                "--renew-interval",
                str(renew_interval),
                "--membership-timeout",
                str(lease_time),
            ),
            env=env,
        )
        procs.append(proc)
        return proc

    limit = 10 * lease_time
    try:
        fleet = [dispatcher() for _ in range(dispatchers)]
        converge_start = _wait_spread(client.redis, queue, partitions, dispatchers, limit)
        victim = fleet.pop()
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        converge_kill = _wait_spread(client.redis, queue, partitions, dispatchers - 1, limit)
        leaver = fleet.pop()
        leaver.send_signal(signal.SIGTERM)
        leaver.wait()
        converge_term = _wait_spread(client.redis, queue, partitions, dispatchers - 2, limit)
        for _ in range(workers):
            procs.append(
                subprocess.Popen(
                    cli_command(
                        "worker",
                        "run",
                        "--queue",
                        queue,
                        "--url",
                        url,
                        "--handlers",
                        "shardq.dev.handlers:handlers",
                    ),
                    env=env,
                )
            )
        time.sleep(3.0)  # let workers register and settle
        counts = count_client_commands(primary_addresses(client.redis, url), idle_seconds, password)
        idle_rate = sum(counts.values()) / idle_seconds
        return {
            "calibration": cal,
            "partitions": partitions,
            "dispatchers": dispatchers,
            "workers": workers,
            "lease_time_s": lease_time,
            "renew_interval_s": renew_interval,
            "converge_after_start_s": converge_start,
            "converge_after_sigkill_s": converge_kill,
            "converge_after_sigterm_s": converge_term,
            "idle_fleet_dispatchers": dispatchers - 2,
            "idle_fleet_redis_calls_per_s": round(idle_rate, 1),
        }
    finally:
        stop_processes(procs, 15.0)
        delete_queue(client.redis, queue, partitions)
        client.close()


@click.command()
@click.option("--dispatchers", default=8, show_default=True)
@click.option("--partitions", default=256, show_default=True)
@click.option("--workers", default=4, show_default=True)
@click.option("--lease-time", default=4.0, show_default=True)
@click.option("--renew-interval", default=1.0, show_default=True)
@click.option("--idle-seconds", default=10.0, show_default=True)
@redis_options
def main(
    dispatchers: int,
    partitions: int,
    workers: int,
    lease_time: float,
    renew_interval: float,
    idle_seconds: float,
) -> None:
    """Lease convergence after start, SIGKILL and SIGTERM, and the idle fleet's Redis calls/s."""
    conn = redis_settings()
    click.echo(
        json.dumps(
            run_fleet(
                conn.url,
                dispatchers,
                partitions,
                workers,
                lease_time,
                renew_interval,
                idle_seconds,
                password=conn.password,
            )
        )
    )


if __name__ == "__main__":
    main()
