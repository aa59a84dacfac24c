"""/healthz (loops making progress) and /readyz (Redis answering) over HTTP, against real Redis.

A hung loop is made by holding the recoverer's round in a sleep loop that never reports
progress: the process's other loops keep running, as with a handler or a Redis call that hangs
one loop.  Redis going away is a standalone redis-server of this test, killed.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from support.helpers import FAST_WORKER, Runner, free_port, wait_for
from support.procs import OwnRedis

from shardq import Client, metrics
from shardq.worker.recoverer import Recoverer


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def worker_status(port: int, path: str, queue: str) -> tuple[int, dict[str, Any] | None]:
    code, body = get(port, path)
    mine = [p for p in body["processes"] if p["role"] == "worker" and p["queue"] == queue]
    return code, mine[0] if mine else None


def test_a_stuck_loop_makes_healthz_503_naming_it(
    cluster_client: Client, cluster_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster_client.create_queue(queue, 4)
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    hang = {"on": False}
    real_round = Recoverer.round

    async def round(self: Recoverer) -> str:
        while hang["on"]:  # stuck: no progress reported, the rest of the process runs on
            await asyncio.sleep(0.05)
        return await real_round(self)

    monkeypatch.setattr(Recoverer, "round", round)
    with Runner(cluster_url, queue, {"t": lambda job: None}, dispatcher=False) as runner:
        sup = runner.workers[0].supervisor
        sup.stall_after = 0.5  # bound: 0.5 s + 3 x reclaim_interval (0.5 s) = 2 s
        worker = runner.workers[0]
        # Healthy before the worker has read its layout and built its loops: wait for both.
        wait_for(lambda: worker.recoverer is not None, 15, "the worker built no recoverer")
        wait_for(lambda: worker_status(port, "/healthz", queue)[0] == 200, 15, "not healthy")
        hang["on"] = True
        recoverer = worker.recoverer
        assert recoverer is not None
        recoverer.trigger()
        wait_for(lambda: worker_status(port, "/healthz", queue)[0] == 503, 15, "never stuck")
        code, status = worker_status(port, "/healthz", queue)
        assert code == 503
        assert status is not None and status["stuck"] == ["recoverer"], status
        assert any(p.startswith("recoverer: no progress") for p in status["problems"]), status
        # Stuck is not unready: Redis answers, so traffic may still come.
        assert worker_status(port, "/readyz", queue)[0] == 200
        hang["on"] = False
        wait_for(lambda: worker_status(port, "/healthz", queue)[0] == 200, 15, "did not recover")


def test_readyz_503_while_redis_is_down(own_redis: Callable[..., OwnRedis], queue: str) -> None:
    server = own_redis()
    with Client.from_url(server.url) as client:
        client.create_queue(queue, 4)
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    with Runner(server.url, queue, {"t": lambda job: None}, worker_settings=FAST_WORKER):
        wait_for(lambda: worker_status(port, "/readyz", queue)[0] == 200, 15, "never ready")
        assert worker_status(port, "/healthz", queue)[0] == 200
        server.stop()
        wait_for(lambda: worker_status(port, "/readyz", queue)[0] == 503, 30, "still ready")
        # Redis down is not a reason to restart the process.
        assert worker_status(port, "/healthz", queue)[0] == 200
