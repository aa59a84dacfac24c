"""Test helpers: waiting on conditions, raw Redis snapshots, a Dispatcher + Worker in a thread.

Tests never assert how long something took: they wait for the condition they need, with a
deadline generous enough for a loaded machine, scaled by ``SHARDQ_TEST_TIME_FACTOR`` (e.g. 3 on a
slow CI runner).  Latency and throughput figures live in the benchmarks.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from shardq.client import Client
from shardq.config import DispatcherSettings, RedisSettings, WorkerSettings
from shardq.connection import connect_async, is_cluster
from shardq.dispatcher import Dispatcher
from shardq.jobs import Job
from shardq.store import keys
from shardq.tasks import Tasks
from shardq.worker import Handler, Worker

FAST_DISPATCHER = DispatcherSettings(
    lease_time=2.0, renew_interval=0.5, max_sleep=0.2, membership_timeout=2.0
)
FAST_WORKER = WorkerSettings(
    visibility_timeout=2.0,
    heartbeat_interval=0.5,
    reclaim_interval=0.5,
    idle_poll=0.2,
    sweep_interval=0.5,
    membership_timeout=2.0,
    shutdown_grace=2.0,
)


TIME_FACTOR = float(os.environ.get("SHARDQ_TEST_TIME_FACTOR") or 1.0)


def scaled(seconds: float) -> float:
    """A deadline stretched by ``SHARDQ_TEST_TIME_FACTOR``."""
    return seconds * TIME_FACTOR


def wait_for(
    condition: Callable[[], Any],
    timeout: float,
    message: str | Callable[[], str] = "condition not met",
    interval: float = 0.02,
) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds
    (times ``SHARDQ_TEST_TIME_FACTOR``)."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout} s: {text}")
        time.sleep(interval)


def settled(read: Callable[[], Any], quiet: float = 0.3, timeout: float = 10.0) -> Any:
    """Read until the value stays the same for ``quiet`` seconds.

    A process killed with SIGKILL can leave a command it already wrote in Redis's input buffer;
    Redis still runs it after the kill, so a count read at once can be one script call short.
    """
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    value = read()
    stable_since = time.monotonic()
    while time.monotonic() - stable_since < quiet:
        if time.monotonic() > deadline:
            raise AssertionError(f"value still changing after {timeout} s: {value!r}")
        time.sleep(0.02)
        now = read()
        if now != value:
            value, stable_since = now, time.monotonic()
    return value


_spare: list[int] = []


def free_port() -> int:
    """A port for a test's own listener (a metrics endpoint, a console): one of the session
    block's spare ports that is free now, so concurrent sessions never collide.  The spare ports
    are taken in turn, round and round: a port a finished test released is used again later, so
    a long session never runs out (a port still bound is skipped)."""
    import socket

    from support.ports import session_ports

    if not _spare:
        _spare.extend(session_ports().spare)
    for _ in range(len(_spare)):
        port = _spare.pop(0)
        _spare.append(port)
        with socket.socket() as s:
            # As the listeners do (uvicorn, http.server): a port whose last connections are in
            # TIME_WAIT can be bound again; only a port someone still listens on is skipped.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(
        f"all {len(_spare)} of the session's spare ports are bound now: a test leaks listeners"
    )


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def one_by_one(client: Client) -> Client:
    """A client on ``client``'s connections that routes each job on its own (``sticky_jobs=1``,
    shardq.store.sticky), for a test that needs a few jobs spread over the partitions (and so
    over the workers they are assigned to); by default the jobs due together share one.
    Close only ``client``."""
    return Client(client.redis, replace(client.settings, sticky_jobs=1))


def job_id_in(partition: int, partitions: int, prefix: str = "job") -> str:
    """A job id that routes to ``partition``."""
    n = 0
    while keys.partition_for(f"{prefix}-{n}", partitions) != partition:
        n += 1
    return f"{prefix}-{n}"


def idem_key_in(partition: int, partitions: int, prefix: str = "idem") -> str:
    """An idempotency key that routes to ``partition``."""
    return job_id_in(partition, partitions, prefix)


# raw Redis state ------------------------------------------------------------------------------


def stored_envelope(redis: Any, pk: keys.PartitionKeys, job_id: str) -> bytes | None:
    """A job's envelope as stored: its jobs-hash entry, or for a compact waiting job (layout 3,
    lua/includes/compact.lua) 'S0|' + the body carried by its due-set member."""
    raw = redis.hget(pk.jobs, job_id)
    if raw is not None:
        return bytes(raw)
    prefix = job_id.encode() + b" "
    for member in redis.zrange(pk.due, 0, -1):
        if member.startswith(prefix):
            return b"S0|" + member[len(prefix) :]
    return None


def partition_state(redis: Any, pk: keys.PartitionKeys, idem: Sequence[str] = ()) -> dict[str, Any]:
    """Everything one partition holds, read raw (for before/after comparisons)."""
    state: dict[str, Any] = {
        "jobs": redis.hgetall(pk.jobs),
        "due": redis.zrange(pk.due, 0, -1, withscores=True),
        "ready": redis.xrange(pk.ready) if redis.exists(pk.ready) else None,
        "dead": redis.xrange(pk.dead) if redis.exists(pk.dead) else None,
        "errors": redis.hgetall(pk.errors),
        "stats": redis.hgetall(pk.stats),
    }
    if state["ready"] is not None:
        state["pending"] = redis.xpending(pk.ready, keys.WORKER_GROUP)["pending"]
    for key in idem:
        state["idem:" + key] = redis.get(pk.idem(key))
    return state


def queue_state(redis: Any, queue: str, partitions: int, idem: Sequence[str] = ()) -> list[Any]:
    """Every partition's raw state, plus the idempotency keys named (in their partitions)."""
    out = []
    for pk in keys.all_partition_keys(queue, partitions):
        mine = [k for k in idem if keys.partition_for(k, partitions) == pk.partition]
        out.append(partition_state(redis, pk, mine))
    return out


def ready_job_ids(redis: Any, queue: str, partitions: int) -> Counter[str]:
    """How often each job id occurs in the queue's ready streams (entries not yet deleted)."""
    seen: Counter[str] = Counter()
    for pk in keys.all_partition_keys(queue, partitions):
        last = "-"
        while True:
            batch = redis.xrange(pk.ready, min=last, count=5000)
            if last != "-":
                batch = batch[1:]
            if not batch:
                break
            for _, fields in batch:
                seen[text(fields[b"j"])] += 1
            last = text(batch[-1][0])
    return seen


def dead_entries(redis: Any, pk: keys.PartitionKeys) -> list[dict[str, str]]:
    return [{text(k): text(v) for k, v in f.items()} for _, f in redis.xrange(pk.dead)]


def total(redis: Any, queue: str, partitions: int, kind: str, generation: int = 0) -> int:
    """Sum over partitions of ZCARD due / XLEN ready / XLEN dead, or for ``jobs`` the jobs
    stored: HLEN jobs plus the compact waiting jobs (due-set members '<id> <body>')."""
    n = 0
    for pk in keys.all_partition_keys(queue, partitions, generation):
        if kind == "due":
            n += redis.zcard(pk.due)
        elif kind == "jobs":
            n += redis.hlen(pk.jobs) + sum(b" " in m for m in redis.zrange(pk.due, 0, -1))
        else:
            n += redis.xlen(getattr(pk, kind))
    return n


def queue_settled(redis: Any, queue: str, partitions: int, generation: int = 0) -> bool:
    """Nothing is left to run: no job stored, none due, no delivery pending.

    Once this holds no handler can start again (a ready entry whose job is gone is dropped by
    fetch), so it is what a test waits for before it counts runs: "nothing ran twice" is then a
    fact, not the hope that a sleep was long enough.
    """
    return (
        total(redis, queue, partitions, "jobs", generation) == 0
        and total(redis, queue, partitions, "due", generation) == 0
        and pending_total(redis, queue, partitions, generation) == 0
    )


def counter_total(redis: Any, queue: str, partitions: int, name: str) -> int:
    """Sum of one per-partition counter the scripts keep (e.g. 'completed')."""
    return sum(
        int(redis.hget(pk.stats, name) or 0) for pk in keys.all_partition_keys(queue, partitions)
    )


def pending_total(redis: Any, queue: str, partitions: int, generation: int = 0) -> int:
    return sum(
        redis.xpending(pk.ready, keys.WORKER_GROUP)["pending"]
        for pk in keys.all_partition_keys(queue, partitions, generation)
    )


def primaries(redis: Any) -> list[Any]:
    """Plain per-node clients of every primary (one client when standalone)."""
    if is_cluster(redis):
        return [redis.get_redis_connection(node) for node in redis.get_primaries()]
    return [redis]


# running a dispatcher and workers -------------------------------------------------------------


@dataclass
class Runs:
    """Thread-safe record of handler starts (CPython list.append is atomic)."""

    jobs: list[Job] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def add(self, job: Job) -> None:
        self.times.append(time.monotonic())
        self.jobs.append(job)

    def count(self) -> Counter[str]:
        return Counter(j.id for j in self.jobs)

    def of(self, job_id: str) -> list[tuple[Job, float]]:
        return [(j, t) for j, t in zip(self.jobs, self.times, strict=False) if j.id == job_id]


class Runner:
    """Runs one Dispatcher and N Workers of a queue on an asyncio loop in a background thread.

    The test thread keeps using the sync Client meanwhile.  Use as a context manager; on exit
    everything is stopped (leases released, consumers retired) and any crash is re-raised.
    """

    def __init__(
        self,
        url: str,
        queue: str,
        handlers: Mapping[str, Handler] | None = None,
        *,
        dispatcher: bool = True,
        workers: int = 1,
        dispatcher_settings: DispatcherSettings = FAST_DISPATCHER,
        worker_settings: WorkerSettings = FAST_WORKER,
        wait_leases: bool = True,
    ) -> None:
        self.url = url
        self.queue = queue
        self.handlers = handlers or {}
        self.want_dispatcher = dispatcher
        self.n_workers = workers
        self.dispatcher_settings = dispatcher_settings
        self.worker_settings = worker_settings
        self.wait_leases = wait_leases
        self.dispatcher: Dispatcher | None = None
        self.workers: list[Worker] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="shardq-runner", daemon=True)

    def __enter__(self) -> Runner:
        self._thread.start()
        wait_for(self._started.is_set, 15, "runner did not start")
        self.check()
        if self.dispatcher is not None and self.wait_leases:
            d = self.dispatcher
            wait_for(
                lambda: d.leases is not None and len(d.tokens) == len(d.leases.pks),
                10,
                "dispatcher did not take its leases",
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"dispatcher/worker crashed: {self.error!r}") from self.error

    def stop(self) -> None:
        if self.loop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop_all)
        self._thread.join(30)
        assert not self._thread.is_alive(), "runner did not stop"
        self.check()

    def _stop_all(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.stop()
        for w in self.workers:
            w.stop()

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:
            self.error = exc
        finally:
            self._started.set()

    async def _run(self) -> None:
        self.loop = asyncio.get_running_loop()
        redis = await connect_async(RedisSettings.from_url(self.url))
        try:
            tasks = []
            if self.want_dispatcher:
                self.dispatcher = Dispatcher(redis, self.queue, settings=self.dispatcher_settings)
                tasks.append(asyncio.create_task(self.dispatcher.run()))
            for i in range(self.n_workers):
                w = Worker(
                    redis,
                    self.queue,
                    handlers=self.handlers
                    if isinstance(self.handlers, Tasks)
                    else dict(self.handlers),
                    settings=self.worker_settings,
                    name=f"test-worker-{i}-{id(self)}",
                )
                self.workers.append(w)
                tasks.append(asyncio.create_task(w.run()))
            await asyncio.sleep(0.05)
            for task in tasks:
                if task.done():
                    task.result()
            self._started.set()
            await asyncio.gather(*tasks)
        finally:
            await redis.aclose()


def start_log(redis: Any, record: str) -> dict[str, list[dict[str, Any]]]:
    """Every start and finish the proc_helper workers of ``record`` logged, per job id, in
    order (tests/support/proc_helper.py)."""
    import json

    out: dict[str, list[dict[str, Any]]] = {}
    for raw in redis.lrange(f"{record}:log", 0, -1):
        event = json.loads(raw)
        out.setdefault(event["id"], []).append(event)
    return out


def counter_value(name: str, **labels: str) -> float:
    """This process's value of a Prometheus counter (0 when the series does not exist yet)."""
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0
