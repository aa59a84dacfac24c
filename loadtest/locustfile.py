"""Locust load test for shardq: producers enqueue, a shardq fleet runs the jobs, and each
job's end-to-end lateness lands in locust's statistics next to the enqueue calls.

    locust -f loadtest/locustfile.py --headless --shardq-url redis://127.0.0.1:7300 \\
        --csv results/loadtest/shardq --html results/loadtest/report.html

Request rows (CSV, HTML, web UI):

- ``enqueue`` / ``enqueue_many``, named after the scenario (``steady``, ``burst``, ``backlog``):
  one row per producer call; response time is the call's latency, *response length is the
  number of jobs in the call* (so jobs/s = requests/s x average content size).
- ``lateness``, named after the scenario: one row per job the workers started; response time
  is the lateness in ms (handler start minus due time, both on the Redis primary's clock).
- ``check`` ``jobs not run`` / ``jobs run twice``: written once at the end; the response length
  holds the count, and a non-zero count is a failure (locust then exits 1).

The ``Aggregated`` row mixes call latencies with lateness: read the named rows.

Shapes (``LOADTEST_SHAPE=tour|steady|burst|backlog``, default ``tour``; with ``--class-picker``
the web UI offers all four):

- ``steady``: ``--shardq-rate`` jobs/s, each due ``--shardq-delay`` s (+-50 %) after enqueue.
- ``burst``: every ``--shardq-burst-every`` s, ``--shardq-burst-jobs`` jobs all due at the same
  instant.
- ``backlog``: ``--shardq-backlog-jobs`` jobs enqueued as fast as possible, all due at one
  instant ``--shardq-backlog-fill`` s after the first; the fleet then drains a large overdue
  backlog while a steady trickle keeps arriving behind it.
- ``tour``: steady, burst and backlog in turn, a third of ``--shardq-duration`` each.

After the load, every shape waits (no users) until every enqueued job has run or
``--shardq-drain-timeout`` passes.

The fleet (``--shardq-dispatchers`` dispatcher and ``--shardq-workers`` worker processes,
``loadtest/fleet.py``) runs as subprocesses of the locust process (local mode) or of the worker
with index 0 (distributed mode), started on ``test_start`` and stopped on ``test_stop``.
Subprocesses keep shardq's asyncio code away from locust's gevent monkey-patching and give the
fleet its own CPU, as in production.  ``--shardq-workers 0`` runs producers only.
"""

from __future__ import annotations

import math
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gevent
import orjson
from locust import LoadTestShape, User, events, task
from locust import stats as locust_stats
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from shardq import JobRequest
from shardq.client import Client
from shardq.config import RedisSettings
from shardq.dev.demo import delete_queue, queue_counters

FLEET_PY = Path(__file__).resolve().parent / "fleet.py"
SHAPE_ENV = "LOADTEST_SHAPE"
SHAPES = ("tour", "steady", "burst", "backlog")


# options ------------------------------------------------------------------------------------


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    group = parser.add_argument_group("shardq")

    def opt(name: str, default: Any, help_text: str, kind: Any = str) -> None:
        env = "SHARDQ_LOADTEST_" + name.upper().replace("-", "_")
        group.add_argument(
            f"--shardq-{name}",
            type=kind,
            default=default,
            env_var=env,
            help=f"{help_text} Env: {env}. Default: {default}.",
        )

    opt("url", "redis://127.0.0.1:7300", "Redis URL (cluster or standalone).")
    opt("queue", "", "Queue to load; empty: a fresh queue per run, deleted at the end.")
    opt("partitions", 64, "Partitions of the fresh queue.", int)
    opt("duration", 45.0, "Seconds of load (tour: a third per scenario).", float)
    opt("users", 8, "Producer users.", int)
    opt("rate", 1000.0, "steady: jobs/s over all users.", float)
    opt("delay", 1.0, "steady: seconds from enqueue to due (uniform +-50 %).", float)
    opt("batch", 50, "Jobs per enqueue_many call.", int)
    opt("single-share", 0.1, "steady: share of calls that are single enqueue().", float)
    opt("burst-jobs", 5000, "burst: jobs due at each burst instant.", int)
    opt("burst-every", 5.0, "burst: seconds between burst instants.", float)
    opt("backlog-jobs", 50000, "backlog: jobs all due at one instant.", int)
    opt("backlog-fill", 8.0, "backlog: seconds from the first backlog enqueue to due.", float)
    opt("payload-bytes", 20, "Payload size.", int)
    opt(
        "job-type",
        "",
        "Job type enqueued; empty: each scenario's name (steady, burst, backlog). Against a "
        "fleet of your own, one its workers have a handler for.",
    )
    opt("dispatchers", 1, "Dispatcher subprocesses (0: run your own fleet).", int)
    opt("workers", 1, "Worker subprocesses (0: no lateness figures).", int)
    opt("drain-timeout", 20.0, "Seconds to wait after the load for the jobs to run.", float)
    opt("summary", "", "Write a JSON summary here (default: next to --csv, if given).")


def _opts(environment: Environment) -> Any:
    return environment.parsed_options


# one Redis client per locust process --------------------------------------------------------

_client: Client | None = None


def shared_client(environment: Environment) -> Client:
    global _client
    if _client is None:
        _client = Client(RedisSettings.from_url(_opts(environment).shardq_url))
    return _client


# the fleet: dispatcher and worker subprocesses ----------------------------------------------


class Fleet:
    """Subprocesses running the queue; their lateness reports become request events."""

    def __init__(self, environment: Environment, queue: str) -> None:
        self.environment = environment
        self.queue = queue
        self.procs: list[subprocess.Popen[bytes]] = []
        self.readers: list[Any] = []
        self.ran: Counter[str] = Counter()
        self.by_type: Counter[str] = Counter()
        self.rss_mb: dict[str, float] = {}

    def start(self, dispatchers: int, workers: int) -> None:
        url = _opts(self.environment).shardq_url
        for role, n in (("dispatcher", dispatchers), ("worker", workers)):
            for i in range(n):
                cmd = [sys.executable, str(FLEET_PY), "--role", role, "--url", url]
                proc = subprocess.Popen([*cmd, "--queue", self.queue], stdout=subprocess.PIPE)
                self.procs.append(proc)
                self.readers.append(gevent.spawn(self._read, proc, f"{role}-{i}"))

    def _read(self, proc: subprocess.Popen[bytes], name: str) -> None:
        fire = self.environment.events.request.fire
        assert proc.stdout is not None
        for line in proc.stdout:
            record = orjson.loads(line)
            if "rss_mb" in record:
                self.rss_mb[name] = record["rss_mb"]
                continue
            for job_type, job_id, late in record["r"]:
                self.ran[job_id] += 1
                self.by_type[job_type] += 1
                fire(
                    request_type="lateness",
                    name=job_type,
                    response_time=late,
                    response_length=0,
                    exception=None,
                    context={},
                )

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        gevent.joinall(self.readers, timeout=5)


class Run:
    """What this process knows about the current test run."""

    queue = ""
    fresh_queue = False
    fleet: Fleet | None = None


RUN = Run()


def _runs_fleet(environment: Environment) -> bool:
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        return False
    if isinstance(runner, WorkerRunner):
        return runner.worker_index == 0
    return True


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    o = _opts(environment)
    if not isinstance(environment.runner, WorkerRunner):
        # master or local: choose the queue; the master forwards it to its workers
        if not getattr(o, "shardq_queue_fixed", None):
            o.shardq_queue_fixed = "yes" if o.shardq_queue else "no"
        if o.shardq_queue_fixed == "no":
            o.shardq_queue = f"lt-{int(time.time())}-{secrets.token_hex(3)}"
    RUN.queue = o.shardq_queue
    RUN.fresh_queue = o.shardq_queue_fixed == "no"
    client = shared_client(environment)
    client.create_queue(RUN.queue, o.shardq_partitions)  # idempotent
    BacklogProducer.reset()
    if _runs_fleet(environment) and o.shardq_workers + o.shardq_dispatchers > 0:
        RUN.fleet = Fleet(environment, RUN.queue)
        RUN.fleet.start(o.shardq_dispatchers, o.shardq_workers)


def drained(environment: Environment) -> bool:
    """Every job enqueued so far has run (only known where the fleet runs)."""
    if _opts(environment).shardq_workers == 0:
        return True  # no fleet: nothing to wait for
    fleet = RUN.fleet
    if fleet is None or not RUN.queue:
        return False
    counters = queue_counters(shared_client(environment).redis, RUN.queue, _partitions())
    return len(fleet.ran) >= counters.get("enqueued", 0)


def _partitions() -> int:
    return _client.partitions(RUN.queue) if _client is not None else 64


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    fleet, RUN.fleet = RUN.fleet, None
    o = _opts(environment)
    client = shared_client(environment)
    if fleet is None:
        # producers only: the master (or the local runner) removes the fresh queue
        no_fleet = o.shardq_workers + o.shardq_dispatchers == 0
        if RUN.fresh_queue and no_fleet and not isinstance(environment.runner, WorkerRunner):
            delete_queue(client.redis, RUN.queue, _partitions())
        return
    fleet.stop()
    counters = queue_counters(client.redis, RUN.queue, _partitions())
    enqueued = counters.get("enqueued", 0)
    not_run = max(0, enqueued - len(fleet.ran))
    twice = sum(n - 1 for n in fleet.ran.values() if n > 1)
    fire = environment.events.request.fire
    for name, count in (("jobs not run", not_run), ("jobs run twice", twice)):
        fire(
            request_type="check",
            name=name,
            response_time=0,
            response_length=count,
            exception=AssertionError(f"{count} {name}") if count else None,
            context={},
        )
    summary = {
        "queue": RUN.queue,
        "enqueued": enqueued,
        "ran": len(fleet.ran),
        "ran_by_scenario": dict(fleet.by_type),
        "not_run": not_run,
        "run_twice": twice,
        "redis_counters": counters,
        "fleet_peak_rss_mb": fleet.rss_mb,
    }
    path = o.shardq_summary or (f"{o.csv_prefix}_summary.json" if o.csv_prefix else "")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    print("shardq load test:", orjson.dumps(summary).decode(), file=sys.stderr)
    if RUN.fresh_queue:
        delete_queue(client.redis, RUN.queue, _partitions())
    if o.csv_prefix:
        # locust's CSV writer rewrites the files once per CSV_STATS_INTERVAL_SEC and is not
        # run again at exit: give it one more turn so the last lateness and check rows land
        gevent.sleep(locust_stats.CSV_STATS_INTERVAL_SEC + 0.5)


# producers ----------------------------------------------------------------------------------


class ShardqUser(User):
    """A locust user calling the shardq client; every call is reported as a request event."""

    abstract = True
    kind = "job"

    def on_start(self) -> None:
        self.client = shared_client(self.environment)
        self.o = _opts(self.environment)
        self.payload = "x" * self.o.shardq_payload_bytes
        # What is enqueued; the request events keep the scenario's name (self.kind).
        self.job_type = self.o.shardq_job_type or self.kind
        self._next = time.monotonic()

    def _report(self, request_type: str, started: float, jobs: int, exc: Exception | None) -> None:
        self.environment.events.request.fire(
            request_type=request_type,
            name=self.kind,
            response_time=(time.perf_counter() - started) * 1000.0,
            response_length=jobs,
            exception=exc,
            context={},
        )

    def enqueue(self, **schedule: Any) -> None:
        started = time.perf_counter()
        try:
            self.client.enqueue(RUN.queue, self.job_type, self.payload, **schedule)
        except Exception as exc:
            self._report("enqueue", started, 1, exc)
        else:
            self._report("enqueue", started, 1, None)

    def enqueue_many(self, requests: list[JobRequest]) -> None:
        started = time.perf_counter()
        try:
            self.client.enqueue_many(RUN.queue, requests)
        except Exception as exc:
            self._report("enqueue_many", started, len(requests), exc)
        else:
            self._report("enqueue_many", started, len(requests), None)

    def pace(self, seconds: float) -> float:
        """Constant pacing: the next call ``seconds`` after the previous one was due."""
        now = time.monotonic()
        self._next = max(self._next + seconds, now)
        return self._next - now


class SteadyProducer(ShardqUser):
    """``--shardq-rate`` jobs/s over all users, each due ``--shardq-delay`` s later (+-50 %)."""

    kind = "steady"

    def wait_time(self) -> float:
        return self.pace(self._last_jobs * self.o.shardq_users / self.o.shardq_rate)

    def on_start(self) -> None:
        super().on_start()
        self._last_jobs = 0

    def _delay(self) -> float:
        return float(self.o.shardq_delay) * random.uniform(0.5, 1.5)

    @task
    def produce(self) -> None:
        if random.random() < self.o.shardq_single_share:
            self.enqueue(delay=self._delay())
            self._last_jobs = 1
            return
        n = self.o.shardq_batch
        self.enqueue_many(
            [JobRequest(self.job_type, self.payload, delay=self._delay()) for _ in range(n)]
        )
        self._last_jobs = n


class BurstProducer(ShardqUser):
    """Every ``--shardq-burst-every`` s, ``--shardq-burst-jobs`` jobs due at the same instant
    (split over the users), enqueued between one and two periods ahead of it."""

    kind = "burst"

    def on_start(self) -> None:
        super().on_start()
        self.filled: dict[float, int] = {}

    def _target(self) -> float:
        every = self.o.shardq_burst_every
        return (math.floor(time.time() / every) + 2) * every

    def wait_time(self) -> float:
        target = self._target()
        if self.filled.get(target, 0) < self._quota():
            return 0.0
        every = self.o.shardq_burst_every
        return max(0.01, (math.floor(time.time() / every) + 1) * every - time.time())

    def _quota(self) -> int:
        return math.ceil(self.o.shardq_burst_jobs / max(1, self.o.shardq_users))

    @task
    def produce(self) -> None:
        target = self._target()
        done = self.filled.get(target, 0)
        n = min(self.o.shardq_batch, self._quota() - done)
        if n <= 0:
            return
        self.enqueue_many([JobRequest(self.job_type, self.payload, run_at=target)] * n)
        self.filled = {target: done + n}


class BacklogProducer(ShardqUser):
    """``--shardq-backlog-jobs`` jobs (this process' share) as fast as possible, all due
    ``--shardq-backlog-fill`` s after the first call: the fleet then finds them all overdue."""

    kind = "backlog"
    due_at = 0.0
    left = 0

    @classmethod
    def reset(cls) -> None:
        cls.due_at = 0.0
        cls.left = -1  # set on first use, when the process' share is known

    def wait_time(self) -> float:
        cls = type(self)
        return 1.0 if cls.left == 0 or (cls.due_at and time.time() >= cls.due_at) else 0.0

    @task
    def produce(self) -> None:
        cls = BacklogProducer
        if cls.left < 0:
            workers = 1
            if isinstance(self.environment.runner, WorkerRunner):
                workers = max(1, int(getattr(self.o, "expect_workers", 1) or 1))
            cls.left = math.ceil(self.o.shardq_backlog_jobs / workers)
            cls.due_at = time.time() + self.o.shardq_backlog_fill
        if cls.left == 0 or time.time() >= cls.due_at:
            return
        n = min(max(self.o.shardq_batch, 500), cls.left)
        cls.left -= n
        self.enqueue_many([JobRequest(self.job_type, self.payload, run_at=cls.due_at)] * n)


# shapes -------------------------------------------------------------------------------------


def _hidden(name: str) -> bool:
    """Shapes other than $LOADTEST_SHAPE are hidden from locust (it runs the first one)."""
    chosen = os.environ.get(SHAPE_ENV, "")
    if chosen and chosen not in SHAPES:
        raise SystemExit(f"{SHAPE_ENV}={chosen!r}: choose one of {', '.join(SHAPES)}")
    return bool(chosen) and chosen != name


Phase = tuple[float, int, list[type[User]]]


class _ShardqShape(LoadTestShape):
    abstract = True

    def __init__(self) -> None:
        super().__init__()
        self.reset_time()

    def reset_time(self) -> None:
        super().reset_time()
        self._classes: list[type[User]] | None = None
        self._switch_started: float | None = None
        self._shift = 0.0  # seconds spent switching user classes; phases are not charged
        self._load_end: float | None = None

    def phases(self, o: Any) -> list[Phase]:
        raise NotImplementedError

    def tick(self) -> tuple[int, float, list[type[User]]] | None:
        assert self.runner is not None
        env = self.runner.environment
        o = _opts(env)
        now = self.get_run_time()
        if self._switch_started is not None and not self.get_current_user_count():
            # the previous phase's users are gone: the next phase starts now
            self._shift += now - self._switch_started
            self._switch_started = None
            self._classes = None
        t = now - self._shift
        start = 0.0
        for length, users, classes in self.phases(o):
            if t < start + length:
                if self._classes not in (None, classes) and self.get_current_user_count():
                    # locust keeps running users when only the classes change: go through 0
                    if self._switch_started is None:
                        self._switch_started = now
                    return 0, 100.0, self._classes
                self._classes = classes
                return users, 100.0, classes
            start += length
        self._classes = None
        # drain: no producers until every job ran (known where the fleet runs) or timeout
        if self._load_end is None:
            self._load_end = now
        waited = now - self._load_end
        if waited < o.shardq_drain_timeout and not (waited > 1.0 and drained(env)):
            return 0, 100.0, [SteadyProducer]
        return None


class TourShape(_ShardqShape):
    """Steady, then bursts, then a large overdue backlog: a third of the duration each."""

    abstract = _hidden("tour")

    def phases(self, o: Any) -> list[Phase]:
        third = o.shardq_duration / 3
        fill = min(o.shardq_backlog_fill, third / 2)
        return [
            (third, o.shardq_users, [SteadyProducer]),
            (third, o.shardq_users, [BurstProducer]),
            (fill, o.shardq_users, [BacklogProducer]),
            (third - fill, o.shardq_users, [SteadyProducer]),
        ]


class SteadyShape(_ShardqShape):
    """``--shardq-rate`` jobs/s for the whole duration."""

    abstract = _hidden("steady")

    def phases(self, o: Any) -> list[Phase]:
        return [(o.shardq_duration, o.shardq_users, [SteadyProducer])]


class BurstShape(_ShardqShape):
    """Bursts of jobs due at the same instant for the whole duration."""

    abstract = _hidden("burst")

    def phases(self, o: Any) -> list[Phase]:
        return [(o.shardq_duration, o.shardq_users, [BurstProducer])]


class BacklogShape(_ShardqShape):
    """A large backlog all due at one instant, then a steady trickle arriving behind it."""

    abstract = _hidden("backlog")

    def phases(self, o: Any) -> list[Phase]:
        fill = min(o.shardq_backlog_fill, o.shardq_duration / 2)
        return [
            (fill, o.shardq_users, [BacklogProducer]),
            (o.shardq_duration - fill, o.shardq_users, [SteadyProducer]),
        ]
