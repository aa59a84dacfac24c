"""Every loop of a real worker and dispatcher recovers from injected faults, and the health
endpoints report an unhealthy loop (the supervisor alone, without Redis, is in
tests/unit/test_supervisor.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY
from support.helpers import FAST_DISPATCHER, FAST_WORKER, Runner, Runs, free_port, wait_for

from shardq import metrics
from shardq.client import Client
from shardq.runtime import health
from shardq.runtime.supervisor import Supervisor


def loop_errors(role: str, loop: str) -> float:
    value = REGISTRY.get_sample_value("shardq_loop_errors_total", {"role": role, "loop": loop})
    return value or 0.0


WORKER_LOOPS = [
    "membership",
    "heartbeat",
    "fetcher:",
    "fetcher-topology",
    "recoverer",
    "janitor",
    "hints",
]


DISPATCHER_LOOPS = [
    "membership",
    "leases",
    "schedules:",
    "promoter:",
    "promoter-topology",
    "hints",
    "trim",
    "sample",
]


@pytest.fixture
def injected(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Make the first two runs of every loop raise a bug-like error (before its body runs)."""
    fails: dict[str, int] = {}
    real_add = Supervisor._add

    def add(self: Supervisor, name: str, body: Any, interval: Any, at_once: bool) -> None:
        key = f"{self.role}/{name}"

        async def faulty() -> None:
            if fails.get(key, 0) < 2:
                fails[key] = fails.get(key, 0) + 1
                raise RuntimeError(f"injected fault in {name}")
            await body()

        real_add(self, name, faulty, interval, at_once)

    monkeypatch.setattr(Supervisor, "_add", add)
    yield fails


def test_every_loop_of_a_worker_and_a_dispatcher_recovers_from_faults(
    cluster_client: Client,
    cluster_url: str,
    queue: str,
    injected: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import shardq.worker.worker

    monkeypatch.setattr(shardq.worker.worker, "PRUNE_EVERY", 0.2)  # the janitor runs soon
    cluster_client.create_queue(queue, 8)
    runs = Runs()
    dispatcher_settings = FAST_DISPATCHER
    with Runner(
        cluster_url,
        queue,
        {"t": runs.add},
        dispatcher_settings=dispatcher_settings,
        worker_settings=FAST_WORKER,
        wait_leases=False,
    ) as runner:
        d, w = runner.dispatcher, runner.workers[0]
        assert d is not None
        wait_for(lambda: len(d.tokens) == 8, 30, "dispatcher did not take its leases")

        def loops_failed_and_ran(sup: Supervisor, names: list[str]) -> bool:
            for prefix in names:
                matching = [
                    s
                    for s in sup.states()
                    if s.name == prefix or (prefix.endswith(":") and s.name.startswith(prefix))
                ]
                if not matching or not all(s.errors >= 2 for s in matching):
                    return False
            return True

        wait_for(lambda: loops_failed_and_ran(w.supervisor, WORKER_LOOPS), 30, "worker faults")
        wait_for(
            lambda: loops_failed_and_ran(d.supervisor, DISPATCHER_LOOPS), 30, "dispatcher faults"
        )
        ids = {cluster_client.enqueue(queue, "t", i, delay=0.2) for i in range(50)}
        wait_for(lambda: ids <= set(runs.count()), 30, "jobs did not run after the faults")
        wait_for(w.supervisor.healthy, 10, "worker unhealthy")
        wait_for(d.supervisor.healthy, 10, "dispatcher unhealthy")
        wait_for(lambda: not w.supervisor.failing() and not d.supervisor.failing(), 30, "not ready")
    assert loop_errors("worker", "heartbeat") >= 2
    assert loop_errors("dispatcher", "leases") >= 2


def test_health_endpoints_report_an_unhealthy_loop(
    cluster_client: Client, cluster_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/healthz turns 503 while a loop keeps failing with a bug, 200 again once it recovers;
    /readyz is 200 while every loop works."""
    cluster_client.create_queue(queue, 4)
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    broken = {"on": False}
    from shardq.worker.heartbeat import Heartbeat

    real_beat = Heartbeat.beat

    async def beat(self: Heartbeat) -> None:
        if broken["on"]:
            raise ZeroDivisionError("a bug in the heartbeat")
        await real_beat(self)

    monkeypatch.setattr(Heartbeat, "beat", beat)

    def get(path: str) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    with Runner(cluster_url, queue, {"t": lambda job: None}) as runner:
        runner.workers[0].supervisor.unhealthy_after = 0.5
        wait_for(lambda: get("/readyz")[0] == 200, 15, lambda: str(get("/readyz")))
        assert get("/healthz")[0] == 200
        broken["on"] = True
        wait_for(lambda: get("/healthz")[0] == 503, 15, "never reported unhealthy")
        _, body = get("/healthz")
        worker = next(p for p in body["processes"] if p["role"] == "worker")
        assert any("heartbeat" in problem for problem in worker["problems"]), body
        assert get("/readyz")[0] == 503
        broken["on"] = False
        wait_for(lambda: get("/healthz")[0] == 200, 15, "did not recover")
        wait_for(lambda: get("/readyz")[0] == 200, 15, "not ready again")
    assert health.statuses() == [] or all(s.role != "worker" for s in health.statuses())
