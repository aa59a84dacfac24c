"""Metrics, stream trimming, `shardq queue stats` and the dead-letter commands, on real Redis."""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.request

import orjson
import pytest
from click.testing import CliRunner
from support.helpers import (
    FAST_DISPATCHER,
    FAST_WORKER,
    TIME_FACTOR,
    Runner,
    Runs,
    free_port,
    scaled,
    wait_for,
)

from shardq import JobRequest, PermanentError, metrics
from shardq.cli import main as cli
from shardq.client import Client
from shardq.config import DispatcherSettings
from shardq.errors import FencedError
from shardq.store import delivery, fleet, keys
from shardq.store.transport import SyncTransport


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one series in Prometheus text format."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


METRIC_DISPATCHER = DispatcherSettings(
    batch=FAST_DISPATCHER.batch,
    lease_time=FAST_DISPATCHER.lease_time,
    renew_interval=FAST_DISPATCHER.renew_interval,
    max_sleep=FAST_DISPATCHER.max_sleep,
    membership_timeout=FAST_DISPATCHER.membership_timeout,
    metrics_interval=0.5,
    trim_interval=0.5,
)


def test_prometheus_endpoint(cluster_client: Client, cluster_url: str, queue: str) -> None:
    partitions = 8
    cluster_client.create_queue(queue, partitions)
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    runs = Runs()

    def fail(job: object) -> None:
        raise PermanentError("nope")

    with Runner(
        cluster_url, queue, {"t": runs.add, "bad": fail}, dispatcher_settings=METRIC_DISPATCHER
    ):
        cluster_client.enqueue_many(queue, [JobRequest("t", i, delay=0.2) for i in range(200)])
        cluster_client.enqueue(queue, "bad", None)
        cluster_client.enqueue_many(queue, [JobRequest("t", i, delay=3600) for i in range(30)])
        wait_for(lambda: len(runs.count()) >= 200, 20, "jobs did not run")

        def ready() -> bool:
            text = scrape(port)
            due = [
                sample(text, "shardq_partition_due_jobs", queue=queue, partition=str(p))
                for p in range(partitions)
            ]
            completed = sum(
                sample(text, "shardq_jobs_completed_total", queue=queue, partition=str(p)) or 0
                for p in range(partitions)
            )
            hot = sample(text, "shardq_hot_partition_ratio", queue=queue)
            return (
                None not in due
                and sum(d or 0 for d in due) == 30
                and completed >= 200
                and (hot is not None)
            )

        wait_for(ready, 10, "partition metrics did not show up")
        text = scrape(port)
    held = sample(text, "shardq_dispatcher_leases_held", queue=queue)
    assert held == partitions
    acquired = sample(text, "shardq_dispatcher_lease_events_total", queue=queue, event="acquired")
    assert acquired is not None and acquired >= partitions
    assert (sample(text, "shardq_job_lateness_seconds_count", queue=queue) or 0) >= 200
    assert sample(text, "shardq_job_duration_seconds_count", queue=queue, job_type="t") == 200
    assert sample(text, "shardq_job_duration_seconds_count", queue=queue, job_type="bad") == 1
    by_outcome = {"completed": 200, "dead": 1}
    for job_type, outcome in (("t", "completed"), ("bad", "dead")):
        series = sample(
            text, "shardq_worker_jobs_total", queue=queue, job_type=job_type, outcome=outcome
        )
        assert series == by_outcome[outcome], (job_type, outcome, series)
    assert sample(text, "shardq_build_info", version=metrics._shardq_version()) == 1
    assert sample(text, "shardq_node_load_share_ratio", queue=queue) is not None
    dead = sum(
        sample(text, "shardq_partition_dead_letters", queue=queue, partition=str(p)) or 0
        for p in range(partitions)
    )
    assert dead == 1
    assert sample(text, "shardq_hot_partition_ratio", queue=queue) is not None
    # Bounded labels: never a job id, never a per-process id; no *_created series.
    for line in text.splitlines():
        if line.startswith("shardq_"):
            assert "job_id" not in line and "dispatcher=" not in line, line
        assert "_created" not in line, line


def test_lifecycle_counters_are_exported(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """Kept results, debounced enqueues and cancelled jobs are counted in Redis and exported
    per partition by the dispatcher that owns it."""
    partitions = 4
    cluster_client.create_queue(queue, partitions)
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}, dispatcher_settings=METRIC_DISPATCHER):
        kept = [cluster_client.enqueue(queue, "t", i, keep_result=60) for i in range(3)]
        for job_id in kept:
            cluster_client.result(queue, job_id, timeout=scaled(10))
        for i in range(3):  # one job, replaced twice
            cluster_client.enqueue(queue, "t", i, idempotency_key="k", debounce=3600)
        waiting = cluster_client.enqueue(queue, "t", None, delay=3600)
        assert cluster_client.cancel(queue, waiting)

        def totals() -> dict[str, float]:
            text = scrape(port)
            return {
                name: sum(
                    sample(text, f"shardq_jobs_{name}_total", queue=queue, partition=str(p)) or 0
                    for p in range(partitions)
                )
                for name in ("results", "debounced", "cancelled")
            }

        want = {"results": 3, "debounced": 2, "cancelled": 1}
        wait_for(lambda: totals() == want, 10, "the lifecycle counters did not show up")
    text = scrape(port)
    assert "Results kept" in text and "replaced a waiting job" in text


OUTCOMES = ("completed", "retried", "dead", "gone", "abandoned", "deferred")


def series_names(text: str, queue: str) -> set[str]:
    """The series (name and labels) of ``queue`` on a /metrics page."""
    mine = f'queue="{queue}"'
    return {
        line.rsplit(" ", 1)[0]
        for line in text.splitlines()
        if line.startswith("shardq_") and mine in line
    }


def job_types(text: str, queue: str) -> set[str]:
    """The job_type label values of ``queue``'s series."""
    return {
        n.split('job_type="', 1)[1].split('"', 1)[0]
        for n in series_names(text, queue)
        if 'job_type="' in n
    }


def series_count(text: str, queue: str | None = None) -> int:
    """shardq series on a /metrics page (only those of ``queue`` when given: other tests of
    this process leave series of their own queues, which may come and go meanwhile)."""
    mine = f'queue="{queue}"' if queue else ""
    return sum(1 for line in text.splitlines() if line.startswith("shardq_") and mine in line)


def test_unknown_job_types_add_no_series(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """1,000 jobs of 1,000 distinct types no handler is registered for: each is counted under
    job_type="other", and the number of series on /metrics does not change."""
    cluster_client.create_queue(queue, 8)
    port = free_port()
    metrics.serve(port, "127.0.0.1")

    def others(text: str, outcome: str) -> float:
        value = sample(
            text, "shardq_worker_jobs_total", queue=queue, job_type="other", outcome=outcome
        )
        return value or 0

    with Runner(cluster_url, queue, {"t": lambda job: None}, dispatcher_settings=METRIC_DISPATCHER):
        # Warm up: every series this run exports exists (one unknown type already seen, the
        # dispatcher's samples and hot-shard figures in).
        cluster_client.enqueue_many(
            queue,
            [JobRequest("t", i) for i in range(50)] + [JobRequest("warm-up", None, max_attempts=1)],
        )
        wait_for(
            lambda: (
                others(scrape(port), "dead") == 1
                and sample(scrape(port), "shardq_hot_partition_ratio", queue=queue) is not None
            ),
            30,
            "warm-up jobs did not settle",
        )
        time.sleep(1.5 * TIME_FACTOR)  # a few more sample rounds
        before = scrape(port)
        requests = [JobRequest(f"unknown-{i}", None, max_attempts=1) for i in range(1000)]
        cluster_client.enqueue_many(queue, requests)
        wait_for(lambda: others(scrape(port), "dead") == 1001, 60, "unknown types not settled")
        time.sleep(1.5 * TIME_FACTOR)
        after = scrape(port)
    # A job's type reaches a series only as its job_type label (and a rate limit's name,
    # none here): the same job_type values before and after, 1,000 new types added none, and
    # no label anywhere names one.  A series may still appear for an outcome seen for the
    # first time under load (a "gone" settle of type other, say): bounded by types x
    # outcomes, whatever producers send.  Series without a job type (lease events, loop
    # errors: what load alone may add meanwhile) are not the types' doing.
    assert job_types(after, queue) == job_types(before, queue) == {"t", "other"}
    new = {n for n in series_names(after, queue) - series_names(before, queue) if 'job_type="' in n}
    assert len(new) <= 2 * len(OUTCOMES), sorted(new)
    assert all('job_type="other"' in n or 'job_type="t"' in n for n in new), sorted(new)
    assert "unknown-" not in after
    assert sample(after, "shardq_job_duration_seconds_count", queue=queue, job_type="other") == 1001


def test_lease_released_drops_partition_series_at_once(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """A dispatcher that gives a lease back stops exporting that partition in the same step,
    not a metrics interval later (its new owner exports it from then on)."""
    import asyncio

    from prometheus_client import REGISTRY, generate_latest

    cluster_client.create_queue(queue, 4)
    with Runner(cluster_url, queue, {}, dispatcher_settings=METRIC_DISPATCHER) as runner:
        d = runner.dispatcher
        assert d is not None and runner.loop is not None

        def exported(text: str) -> set[str]:
            return {
                p
                for p in map(str, range(4))
                if sample(text, "shardq_partition_due_jobs", queue=queue, partition=p) is not None
            }

        wait_for(
            lambda: exported(generate_latest(REGISTRY).decode()) == {"0", "1", "2", "3"},
            15,
            "partition series did not show up",
        )

        async def release_and_scrape() -> str:
            assert d.leases is not None
            await d.leases.release([1, 2], "test")
            return generate_latest(REGISTRY).decode()

        text = asyncio.run_coroutine_threadsafe(release_and_scrape(), runner.loop).result(10)
        assert exported(text) == {"0", "3"}


def test_partition_series_follow_a_resize(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """After `queue resize` the dispatcher exports the new generation's partitions (their
    figures and counters), named as every other surface names them (``g1.5``), and no series
    of the old generation is left."""
    from prometheus_client import REGISTRY, generate_latest

    from shardq.admin.resize import Resizer

    cluster_client.create_queue(queue, 4)
    names = {keys.partition_label(1, p) for p in range(8)}

    def exported(name: str) -> set[str]:
        lines = generate_latest(REGISTRY).decode().splitlines()
        mine = [x for x in lines if x.startswith(name + "{") and f'queue="{queue}"' in x]
        return {m.group(1) for x in mine if (m := re.search(r'partition="([^"]*)"', x))}

    with Runner(cluster_url, queue, {}, dispatcher_settings=METRIC_DISPATCHER):
        assert Resizer(cluster_client, queue).run(8).phase == "done"
        cluster_client.enqueue_many(queue, [JobRequest("t", i, delay=600) for i in range(40)])
        for name in ("shardq_partition_due_jobs", "shardq_jobs_enqueued_total"):
            wait_for(
                lambda name=name: exported(name) == names,  # type: ignore[misc]
                15,
                lambda name=name: f"{name}: {sorted(exported(name))}",  # type: ignore[misc]
            )


def test_hot_partition_is_reported(cluster_client: Client, queue: str) -> None:
    partitions = 8
    cluster_client.create_queue(queue, partitions)
    pks = keys.all_partition_keys(queue, partitions)
    watch = metrics.HotShardWatch(queue, multiple=3.0)
    watch.observe(metrics.snapshot_sync(cluster_client.redis, pks))
    # 400 jobs whose ids all hash to partition 5, 80 spread over every partition.
    hot = []
    for i in range(400):
        jid = next(
            f"h{i}-{j}" for j in range(10_000) if keys.partition_for(f"h{i}-{j}", partitions) == 5
        )
        hot.append(JobRequest("t", i, job_id=jid, delay=60))
    cluster_client.enqueue_many(queue, hot)
    cluster_client.enqueue_many(queue, [JobRequest("t", i, delay=60) for i in range(80)])
    time.sleep(0.2)
    report = watch.observe(metrics.snapshot_sync(cluster_client.redis, pks))
    assert report is not None
    assert report.hottest(1)[0][0] == 5
    assert report.hot_partition_ratio > 3.0
    assert abs(sum(report.node_share().values()) - 1.0) < 1e-6
    assert metrics.PARTITIONS.hot[queue] is report


def test_trim_never_drops_a_pending_or_undelivered_entry(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """A worker paused mid-job while trimming runs still has its job reclaimable afterwards."""
    partitions = 1
    cluster_client.create_queue(queue, partitions)
    r = cluster_client.redis
    pk = keys.partition_keys(queue, 0, partitions)
    ids = [cluster_client.enqueue(queue, "t", i) for i in range(5)]
    # A "paused" worker takes two deliveries and never acks them.
    fetched = SyncTransport(r).run(delivery.fetch(pk, "paused", 2))
    assert len(fetched.jobs) == 2
    token = SyncTransport(r).run(fleet.lease_acquire(pk, "trimmer", 60_000)).token
    for _ in range(3):
        trimmed = SyncTransport(r).run(fleet.trim(pk, token, 0, 100, 1000))
        # nothing removed, and the stream says it owes jobs a run (the trimmer's back-off)
        assert trimmed == (0, 0, True)
    assert r.xlen(pk.ready) == 5  # 2 pending + 3 undelivered: nothing trimmed
    SyncTransport(r).run(fleet.lease_release(pk, token))
    # Another worker reclaims the paused one's deliveries and runs everything.
    runs = Runs()
    fast = FAST_WORKER
    with Runner(cluster_url, queue, {"t": runs.add}, worker_settings=fast):
        wait_for(
            lambda: len(runs.count()) == 5,
            fast.visibility_timeout + 15,
            "paused deliveries were not reclaimed",
        )
    assert set(runs.count()) == set(ids)


def test_ready_streams_stay_bounded(cluster_client: Client, cluster_url: str, queue: str) -> None:
    """During a run every ready stream holds only what is undelivered or pending (the CI-sized
    version of the 1,000,000-job check; `-m slow` runs the full one)."""
    run_bounded(cluster_client, cluster_url, queue, jobs=20_000, partitions=8)


def busiest_window(runs: Runs, partitions: int, window: float) -> int:
    """The most jobs one partition started within ``window`` seconds."""
    by_partition: dict[int, list[float]] = {}
    for job, at in zip(runs.jobs, runs.times, strict=True):
        by_partition.setdefault(keys.partition_for(job.id, partitions), []).append(at)
    most = 0
    for times in by_partition.values():
        times.sort()
        first = 0
        for last, at in enumerate(times):
            while at - times[first] > window:
                first += 1
            most = max(most, last - first + 1)
    return most


def run_bounded(client: Client, url: str, queue: str, jobs: int, partitions: int) -> None:
    client.create_queue(queue, partitions)
    runs = Runs()
    pks = keys.all_partition_keys(queue, partitions)
    spread = 5.0
    worst = 0
    with Runner(url, queue, {"t": runs.add}, dispatcher_settings=METRIC_DISPATCHER):
        now = time.time()
        for start in range(0, jobs, 50_000):
            client.enqueue_many(
                queue,
                [
                    JobRequest("t", None, run_at=now + 1 + spread * i / jobs)
                    for i in range(start, min(jobs, start + 50_000))
                ],
            )
        deadline = time.monotonic() + scaled(120 + jobs / 5000)
        while len(runs.jobs) < jobs and time.monotonic() < deadline:
            for s in metrics.snapshot_sync(client.redis, pks):
                length = int(
                    client.redis.xlen(keys.partition_keys(queue, s.partition, partitions).ready)
                )
                # Entries are undelivered, pending, or settled and not trimmed yet.
                worst = max(worst, length - (s.ready + s.pending))
            time.sleep(0.2)
        assert len(runs.count()) == jobs
        # Settled entries wait for the next trim (acks do not delete them): at most what a
        # partition settles in about two trim intervals, plus a stream node.  The rate is the
        # one measured (a loaded machine runs late, then catches up faster than the schedule),
        # the busiest partition's most jobs started in any window of two trim intervals.
        window = METRIC_DISPATCHER.trim_interval * 2 * TIME_FACTOR
        bound = busiest_window(runs, partitions, window) + 200
        assert worst <= bound, f"ready streams kept {worst} settled entries (bound {bound:.0f})"
        wait_for(
            lambda: sum(int(client.redis.xlen(pk.ready)) for pk in pks) == 0,
            30,
            "settled entries were not trimmed",
        )


def test_stats_cli(cluster_client: Client, cluster_url: str, queue: str) -> None:
    cluster_client.create_queue(queue, 4)
    cluster_client.enqueue_many(queue, [JobRequest("t", i, delay=60) for i in range(40)])
    cluster_client.enqueue_many(queue, [JobRequest("t", i, delay=0) for i in range(7)])
    runner = CliRunner()
    out = runner.invoke(
        cli, ["queue", "stats", "--queue", queue, "--url", cluster_url, "--json", "--window", "0.2"]
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["queue"]["due"] == 40
    assert data["queue"]["ready"] == 7
    assert len(data["partitions"]) == 4
    assert sum(n["due"] for n in data["nodes"]) == 40
    text = runner.invoke(
        cli, ["queue", "stats", "--queue", queue, "--url", cluster_url, "--window", "0.1"]
    )
    assert text.exit_code == 0 and f"queue {queue}" in text.output and "hottest" in text.output


def test_dlq_commands(cluster_client: Client, cluster_url: str, queue: str) -> None:
    partitions = 4
    cluster_client.create_queue(queue, partitions)
    attempts: list[int] = []

    def flaky(job: object) -> None:
        attempts.append(1)
        if len(attempts) <= 3:
            raise PermanentError("first time fails")

    ids = [cluster_client.enqueue(queue, "t", i) for i in range(3)]
    runner = CliRunner()
    base = ["--queue", queue, "--url", cluster_url]
    with Runner(cluster_url, queue, {"t": flaky}):
        wait_for(lambda: len(attempts) >= 3, 15, "jobs did not run")
        wait_for(
            lambda: (
                sum(
                    int(cluster_client.redis.xlen(pk.dead))
                    for pk in keys.all_partition_keys(queue, partitions)
                )
                == 3
            ),
            10,
            "jobs not dead-lettered",
        )
        listed = runner.invoke(cli, ["dlq", "list", *base, "--json"])
        assert listed.exit_code == 0, listed.output
        letters = [json.loads(line) for line in listed.output.splitlines()]
        assert sorted(d["job_id"] for d in letters) == sorted(ids)
        assert all("first time fails" in d["error"] for d in letters)
        shown = runner.invoke(cli, ["dlq", "show", *base, ids[0], "--json"])
        assert shown.exit_code == 0 and json.loads(shown.output)["state"] == "dead"
        dry = runner.invoke(cli, ["dlq", "replay", *base, "--all"])
        assert "add --yes" in dry.output and len(attempts) == 3
        replay = runner.invoke(cli, ["dlq", "replay", *base, "--all", "--yes"])
        assert replay.exit_code == 0 and "replayed 3 job(s)" in replay.output, replay.output
        wait_for(lambda: len(attempts) >= 6, 15, "replayed jobs did not run")
        wait_for(
            lambda: all(cluster_client.get(queue, j) is None for j in ids),
            10,
            "replayed jobs did not complete",
        )
    # Purge: a fresh dead job, purged with its envelope.
    # One attempt: a type no worker handles is retried by backoff first (a newer worker of a
    # rolling deploy may take it), dead once its attempts are used up.
    cluster_client.enqueue(queue, "nobody-handles-this", None, max_attempts=1)
    with Runner(cluster_url, queue, {"t": flaky}):
        wait_for(
            lambda: (
                sum(
                    int(cluster_client.redis.xlen(pk.dead))
                    for pk in keys.all_partition_keys(queue, partitions)
                )
                == 1
            ),
            10,
            "unknown type not dead-lettered",
        )
    purge = runner.invoke(cli, ["dlq", "purge", *base, "--all", "--yes"])
    assert purge.exit_code == 0 and "purged 1" in purge.output
    for pk in keys.all_partition_keys(queue, partitions):
        assert cluster_client.redis.xlen(pk.dead) == 0
        assert cluster_client.redis.hlen(pk.jobs) == 0


def test_dead_letter_cap(cluster_client: Client, queue: str) -> None:
    cluster_client.create_queue(queue, 1, dead_letter_cap=3)
    r = cluster_client.redis
    pk = keys.partition_keys(queue, 0, 1)
    for i in range(5):
        jid = cluster_client.enqueue(queue, "t", i)
        [job] = SyncTransport(r).run(delivery.fetch(pk, "w", 1)).jobs
        assert job.raw_id == jid.encode()
        outcome = SyncTransport(r).run(delivery.fail(pk, job.entry_id, job.raw_id, -1, "boom"))
        assert outcome.outcome == "dead"
    assert r.xlen(pk.dead) == 5
    token = SyncTransport(r).run(fleet.lease_acquire(pk, "t", 60_000)).token
    assert SyncTransport(r).run(fleet.trim(pk, token, 0, 3, 1000)) == (0, 2, False)
    assert r.xlen(pk.dead) == 3
    assert r.hlen(pk.jobs) == 3  # the two dropped dead jobs went with their entries
    assert int(r.hget(pk.stats, "dead_dropped")) == 2
    # A stale token is fenced like promote.
    with pytest.raises(FencedError):
        SyncTransport(r).run(fleet.trim(pk, "999", 0, 3, 1000))


def test_failure_logs_are_json(cluster_client: Client, cluster_url: str, queue: str) -> None:
    cluster_client.create_queue(queue, 2)
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect(logging.WARNING)
    logging.getLogger("shardq").addHandler(handler)

    def fail(job: object) -> None:
        raise ValueError("bad thing")

    try:
        jid = cluster_client.enqueue(
            queue, "t", None, max_attempts=1, headers={"traceparent": "00-abc-def-01"}
        )
        with Runner(cluster_url, queue, {"t": fail}):
            wait_for(lambda: any("job.dead" in line for line in lines), 10, "no job.dead log")
    finally:
        logging.getLogger("shardq").removeHandler(handler)
    event = orjson.loads(next(line for line in lines if "job.dead" in line))
    assert event["job_id"] == jid and event["queue"] == queue and event["attempt"] == 1
    assert event["error_type"] == "ValueError" and event["trace_id"] == "00-abc-def-01"
    assert "partition" in event


@pytest.mark.slow
def test_ready_streams_stay_bounded_million(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    run_bounded(cluster_client, cluster_url, queue, jobs=1_000_000, partitions=64)
