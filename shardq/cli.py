"""The ``shardq`` command line: run dispatchers and workers, manage queues and jobs, benchmark."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import signal
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import click
import orjson

from shardq.cli_common import (
    friendly_errors,
    redis_options,
    restart_without_password_in_argv,
    settings_from,
)
from shardq.cli_dev import dev
from shardq.cli_ops import dlq, owners, rebalance, stats
from shardq.cli_security import acl_group, functions_group
from shardq.cli_settings import build_settings, settings_options
from shardq.client import Client
from shardq.config import DispatcherSettings, WorkerSettings
from shardq.errors import ShardqError
from shardq.logs import setup_logging

F = TypeVar("F", bound=Callable[..., Any])


@click.group()
@click.option("--log-level", default="INFO", show_default=True, envvar="SHARDQ_LOG_LEVEL")
def main(log_level: str) -> None:
    """shardq: delayed jobs over the partitions of a Redis Cluster."""
    setup_logging(log_level)


main.add_command(dev)
for _command in (owners, rebalance, stats, dlq, acl_group, functions_group):
    main.add_command(_command)


# queues ------------------------------------------------------------------------------------


@main.group()
def queue() -> None:
    """Create and list queues."""


@queue.command("create")
@click.argument("name")
@click.option("--partitions", default=64, show_default=True, help="Partition count (fixed).")
@click.option(
    "--ack-retention",
    default=0.0,
    show_default=True,
    help="Seconds to keep acknowledged ready entries before trimming.",
)
@click.option(
    "--dead-letter-cap",
    default=100_000,
    show_default=True,
    help="Most dead letters kept per partition; older ones are dropped and counted.",
)
@click.option(
    "--allow-evicting-redis",
    is_flag=True,
    envvar="SHARDQ_ALLOW_EVICTING_REDIS",
    help="Create it even if a primary's maxmemory-policy evicts keys (jobs would vanish).",
)
@redis_options
@friendly_errors
def queue_create(
    name: str,
    partitions: int,
    ack_retention: float,
    dead_letter_cap: int,
    allow_evicting_redis: bool,
    url: str,
    username: str | None,
    password: str | None,
) -> None:
    """Create queue NAME (safe to repeat with the same partition count).

    Refused when a Redis primary's maxmemory-policy would evict keys."""
    with Client(settings_from(url, username, password)) as client:
        created = client.create_queue(
            name,
            partitions,
            ack_retention=ack_retention,
            dead_letter_cap=dead_letter_cap,
            allow_evicting_redis=allow_evicting_redis,
        )
    click.echo(f"queue {name}: {'created' if created else 'exists'} with {partitions} partitions")


@queue.command("list")
@redis_options
@friendly_errors
def queue_list(url: str, username: str | None, password: str | None) -> None:
    """List queues with their partition counts."""
    with Client(settings_from(url, username, password)) as client:
        for name in client.queues():
            try:
                count: object = client.partitions(name)
            except ShardqError as exc:  # a registry entry whose queue is gone or damaged
                count = f"? ({type(exc).__name__})"
            click.echo(f"{name}\t{count}")


# jobs --------------------------------------------------------------------------------------


@main.command()
@click.argument("queue_name", metavar="QUEUE")
@click.argument("job_type")
@click.option("--payload", default="null", help="JSON payload.")
@click.option("--delay", type=float, default=None, help="Seconds from now (Redis clock).")
@click.option(
    "--at", "run_at", default=None, help="ISO-8601 time with zone, e.g. 2030-01-01T00:00:00+00:00."
)
@click.option("--job-id", default=None)
@click.option("--idempotency-key", default=None)
@click.option("--max-attempts", type=int, default=None)
@redis_options
@friendly_errors
def enqueue(
    queue_name: str,
    job_type: str,
    payload: str,
    delay: float | None,
    run_at: str | None,
    job_id: str | None,
    idempotency_key: str | None,
    max_attempts: int | None,
    url: str,
    username: str | None,
    password: str | None,
) -> None:
    """Enqueue one job and print its id."""
    try:
        # orjson: rejects NaN/Infinity literals and documents nested deeper than 1024 levels
        # with a JSONDecodeError (json.loads would hit RecursionError).
        data = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--payload") from None
    when: datetime | None = None
    if run_at is not None:
        try:
            when = datetime.fromisoformat(run_at)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--at") from None
    with Client(settings_from(url, username, password)) as client:
        click.echo(
            client.enqueue(
                queue_name,
                job_type,
                data,
                run_at=when,
                delay=delay,
                job_id=job_id,
                idempotency_key=idempotency_key,
                max_attempts=max_attempts,
            )
        )


@main.group()
def job() -> None:
    """Inspect, cancel or reschedule a job by id."""


@job.command("get")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("job_id")
@redis_options
@friendly_errors
def job_get(
    queue_name: str, job_id: str, url: str, username: str | None, password: str | None
) -> None:
    """Show a job as JSON."""
    with Client(settings_from(url, username, password)) as client:
        info = client.get(queue_name, job_id)
    if info is None:
        raise click.ClickException(f"job {job_id!r} not found (completed, cancelled or unknown)")
    click.echo(json.dumps(dataclasses.asdict(info), indent=2, default=str))


@job.command("cancel")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("job_id")
@redis_options
@friendly_errors
def job_cancel(
    queue_name: str, job_id: str, url: str, username: str | None, password: str | None
) -> None:
    """Cancel a job that has not started."""
    with Client(settings_from(url, username, password)) as client:
        if not client.cancel(queue_name, job_id):
            raise click.ClickException(f"job {job_id!r} not found")
    click.echo(f"cancelled {job_id}")


@job.command("reschedule")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("job_id")
@click.option("--delay", type=float, required=True, help="Seconds from now (Redis clock).")
@redis_options
@friendly_errors
def job_reschedule(
    queue_name: str, job_id: str, delay: float, url: str, username: str | None, password: str | None
) -> None:
    """Move a waiting job to a new due time."""
    with Client(settings_from(url, username, password)) as client:
        due = client.reschedule(queue_name, job_id, delay=delay)
    click.echo(f"{job_id} due at {due} ms")


@main.command()
@click.option("--queue", "queue_name", default=None, help="Also check that this queue exists.")
@click.option(
    "--require-appendonly",
    is_flag=True,
    envvar="SHARDQ_REQUIRE_APPENDONLY",
    help="Also fail when a primary has appendonly off.",
)
@click.option(
    "--allow-evicting-redis",
    is_flag=True,
    envvar="SHARDQ_ALLOW_EVICTING_REDIS",
    help="Report an evicting maxmemory-policy without failing.",
)
@redis_options
@friendly_errors
def health(
    queue_name: str | None,
    require_appendonly: bool,
    allow_evicting_redis: bool,
    url: str,
    username: str | None,
    password: str | None,
) -> None:
    """Exit 0 when Redis answers (every primary, in cluster mode), the queue exists, and no
    primary runs with a setting that loses jobs (an evicting maxmemory-policy; appendonly off
    with --require-appendonly).

    Meant for container health checks and readiness probes; prints one line per finding.
    """
    from redis.exceptions import RedisError

    settings = settings_from(url, username, password)
    try:
        with Client(settings) as client:
            client.redis.ping()
            if queue_name is not None:
                client.partitions(queue_name)
            found = client.check_redis(require_appendonly)
    except RedisError as exc:
        raise click.ClickException(f"unhealthy: Redis at {settings.url}: {exc}") from None
    for f in found:
        click.echo(f"{f.node}: {f.detail}", err=True)
    if any(f.check != "eviction" or not allow_evicting_redis for f in found):
        raise click.ClickException("unhealthy: Redis would lose jobs silently (see above)")
    click.echo("ok" + (f": queue {queue_name} reachable" if queue_name else ""))


# processes ---------------------------------------------------------------------------------


def _parse_partitions(value: str | None) -> list[int] | None:
    if not value:
        return None
    out: list[int] = []
    for part in value.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


async def _run_until_signal(make: Callable[[Any], Any], url_settings: Any) -> None:
    """Connect (waiting out an outage: the process reports not ready meanwhile, it does not
    exit), build the runner, run it until SIGTERM/SIGINT."""
    from shardq.connection import connect_async_waiting

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    runner: Any = None

    def on_signal() -> None:
        stop.set()
        if runner is not None:
            runner.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    redis = await connect_async_waiting(url_settings, stop)
    if redis is None:
        return
    try:
        runner = make(redis)
        if stop.is_set():
            return
        await runner.run()
    finally:
        await redis.aclose()


def _serve_metrics(port: int | None, addr: str) -> None:
    if port is not None:
        from shardq.metrics import serve

        serve(port, addr)


def _process_options(fn: F) -> F:
    """Options every long-running process takes."""
    fn = click.option(
        "--metrics-addr",
        default="127.0.0.1",
        show_default=True,
        envvar="SHARDQ_METRICS_ADDR",
        help="Address the metrics/health endpoint binds (0.0.0.0 in a container).",
    )(fn)
    fn = click.option(
        "--metrics-port",
        type=int,
        default=None,
        envvar="SHARDQ_METRICS_PORT",
        help="Serve /metrics, /healthz and /readyz on this port.",
    )(fn)
    fn = click.option(
        "--instance",
        default=None,
        envvar="SHARDQ_INSTANCE",
        help="Where this process runs (the pod name); a process restarted with the same "
        "instance takes over its predecessor's work at once. Default: host:pid.",
    )(fn)
    fn = click.option("--partitions", default=None, help="Only these partitions, e.g. 0-15,32.")(fn)
    return click.option("--queue", "queue_name", required=True, envvar="SHARDQ_QUEUE")(fn)


@main.group()
def dispatcher() -> None:
    """Run a dispatcher (promotes due jobs)."""


@dispatcher.command("run")
@_process_options
@settings_options(DispatcherSettings, "SHARDQ_DISPATCHER_")
@redis_options
@friendly_errors
def dispatcher_run(
    queue_name: str,
    partitions: str | None,
    instance: str | None,
    metrics_port: int | None,
    metrics_addr: str,
    url: str,
    username: str | None,
    password: str | None,
    **given: Any,
) -> None:
    """Promote due jobs of QUEUE until SIGTERM/SIGINT (leases are released on the way out).

    Every setting can also come from the environment (SHARDQ_DISPATCHER_<SETTING>)."""
    from shardq.dispatcher import Dispatcher

    settings = build_settings(DispatcherSettings, given)
    pinned = _parse_partitions(partitions)
    _serve_metrics(metrics_port, metrics_addr)
    asyncio.run(
        _run_until_signal(
            lambda redis: Dispatcher(
                redis, queue_name, settings=settings, partitions=pinned, instance=instance
            ),
            settings_from(url, username, password),
        )
    )


def load_handlers(spec: str) -> Any:
    """Import ``module:attribute``: a dict of job type -> handler, or a callable(worker)."""
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise click.BadParameter(
            "use module:attribute, e.g. myapp.jobs:handlers", param_hint="--handlers"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name}: {exc}", param_hint="--handlers"
        ) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise click.BadParameter(f"{module_name} has no {attr}", param_hint="--handlers") from None


@main.group()
def worker() -> None:
    """Run a worker (runs job handlers)."""


@worker.command("run")
@click.option(
    "--handlers",
    "handlers_spec",
    required=True,
    envvar="SHARDQ_HANDLERS",
    help="module:attribute holding a dict {job type: handler} or a callable(worker).",
)
@_process_options
@settings_options(WorkerSettings, "SHARDQ_WORKER_")
@redis_options
@friendly_errors
def worker_run(
    handlers_spec: str,
    queue_name: str,
    partitions: str | None,
    instance: str | None,
    metrics_port: int | None,
    metrics_addr: str,
    url: str,
    username: str | None,
    password: str | None,
    **given: Any,
) -> None:
    """Run jobs of QUEUE until SIGTERM/SIGINT, then finish in-flight jobs within the grace.

    Every setting can also come from the environment (SHARDQ_WORKER_<SETTING>)."""
    from shardq.worker import Worker

    handlers = load_handlers(handlers_spec)
    if not (isinstance(handlers, dict) or callable(handlers)):
        raise click.BadParameter("must be a dict or a callable", param_hint="--handlers")
    settings = build_settings(WorkerSettings, given)
    pinned = _parse_partitions(partitions)
    _serve_metrics(metrics_port, metrics_addr)

    def make(redis: Any) -> Worker:
        w = Worker(redis, queue_name, settings=settings, partitions=pinned, instance=instance)
        if isinstance(handlers, dict):
            for job_type, fn in handlers.items():
                w.register(job_type, fn)
        else:
            handlers(w)
        return w

    asyncio.run(_run_until_signal(make, settings_from(url, username, password)))


# benchmarks and demo -----------------------------------------------------------------------


@main.group()
def bench() -> None:
    """Benchmarks that print figures."""


@bench.command("e2e")
@click.option("--jobs", default=100_000, show_default=True)
@click.option("--spread", default=10.0, show_default=True, help="Seconds over which jobs come due.")
@click.option("--dispatchers", default=1, show_default=True)
@click.option("--workers", default=1, show_default=True)
@click.option("--partitions", default=64, show_default=True)
@click.option("--payload-bytes", default=20, show_default=True)
@click.option("--backlog", is_flag=True, help="Enqueue all jobs overdue before the fleet starts.")
@click.option("--timeout", default=300.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@redis_options
@friendly_errors
def bench_e2e(
    jobs: int,
    spread: float,
    dispatchers: int,
    workers: int,
    partitions: int,
    payload_bytes: int,
    backlog: bool,
    timeout: float,
    as_json: bool,
    url: str,
    username: str | None,
    password: str | None,
) -> None:
    """Run a fresh queue end to end in subprocesses and report throughput, lateness, memory."""
    from shardq.bench import E2EConfig, format_summary, run_e2e

    cfg = E2EConfig(
        url=url,
        jobs=jobs,
        spread=spread,
        dispatchers=dispatchers,
        workers=workers,
        partitions=partitions,
        payload_bytes=payload_bytes,
        backlog=backlog,
        timeout=timeout,
        password=password,
        username=username,
    )
    result = run_e2e(cfg, progress=None if as_json else sys.stderr)
    click.echo(json.dumps(result) if as_json else format_summary(result))


@bench.command("enqueue")
@click.option("--jobs", default=50_000, show_default=True, help="Jobs for enqueue_many.")
@click.option("--single-jobs", default=3_000, show_default=True, help="Jobs for the single loop.")
@click.option("--partitions", default=64, show_default=True)
@redis_options
@friendly_errors
def bench_enqueue(
    jobs: int,
    single_jobs: int,
    partitions: int,
    url: str,
    username: str | None,
    password: str | None,
) -> None:
    """Enqueue rate: a loop of single enqueues against bulk enqueue_many, in one run (JSON)."""
    from shardq.bench import run_enqueue_bench

    click.echo(
        json.dumps(
            run_enqueue_bench(
                url, jobs, single_jobs, partitions, username=username, password=password
            )
        )
    )


@bench.command("fleet")
@click.option("--dispatchers", default=8, show_default=True)
@click.option("--partitions", default=256, show_default=True)
@click.option("--workers", default=4, show_default=True)
@click.option("--lease-time", default=4.0, show_default=True)
@click.option("--renew-interval", default=1.0, show_default=True)
@click.option("--idle-seconds", default=10.0, show_default=True)
@redis_options
@friendly_errors
def bench_fleet(
    dispatchers: int,
    partitions: int,
    workers: int,
    lease_time: float,
    renew_interval: float,
    idle_seconds: float,
    url: str,
    username: str | None,
    password: str | None,
) -> None:
    """Lease convergence after start, SIGKILL and SIGTERM, and the idle fleet's Redis calls/s."""
    from shardq.bench_fleet import run_fleet

    click.echo(
        json.dumps(
            run_fleet(
                url,
                dispatchers,
                partitions,
                workers,
                lease_time,
                renew_interval,
                idle_seconds,
                password=password,
            )
        )
    )


@main.command()
@click.option("--base-port", default=7200, show_default=True, help="Ports of the demo cluster.")
@click.option("--jobs", default=100_000, show_default=True)
@click.option("--spread", default=10.0, show_default=True)
@click.option("--workers", default=2, show_default=True)
@click.option("--keep", is_flag=True, help="Leave the demo cluster running afterwards.")
@friendly_errors
def demo(base_port: int, jobs: int, spread: float, workers: int, keep: bool) -> None:
    """Start a local cluster, schedule JOBS due over SPREAD seconds, run a fleet, summarise."""
    from shardq.bench import E2EConfig, format_summary, run_e2e
    from shardq.devcluster import cluster_down, cluster_up

    url = cluster_up(base_port, progress=lambda m: click.echo(m, err=True))
    try:
        cfg = E2EConfig(
            url=url,
            jobs=jobs,
            spread=spread,
            dispatchers=1,
            workers=workers,
            partitions=64,
            payload_bytes=20,
            backlog=False,
            timeout=300.0,
        )
        result = run_e2e(cfg, progress=sys.stdout)
        click.echo(format_summary(result))
    finally:
        if not keep:
            cluster_down(base_port)


def entry() -> None:
    """The ``shardq`` command: keeps a password given on the command line off the process
    list, then runs the CLI."""
    restart_without_password_in_argv()
    main()


if __name__ == "__main__":
    entry()
