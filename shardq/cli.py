"""The ``shardq`` command line: run dispatchers and workers, manage queues and jobs, benchmark."""

from __future__ import annotations

import asyncio
import importlib
import json
import signal
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from shardq import (
    __version__,
    cli_inspect,  # noqa: F401 - adds the inspector's commands to job and queue
)
from shardq import cli_format as fmt
from shardq.cli_common import (
    ShardqGroup,
    open_client,
    queue_option,
    redis_options,
    redis_settings,
    restart_without_password_in_argv,
    warn_password_was_in_argv,
)
from shardq.cli_dev import dev
from shardq.cli_errors import to_click
from shardq.cli_jobs import enqueue, job, queue
from shardq.cli_limits import limit
from shardq.cli_ops import dlq, owners, rebalance, stats
from shardq.cli_params import LOG_LEVELS
from shardq.cli_schedules import schedule
from shardq.cli_security import acl_group, functions_group
from shardq.cli_settings import build_settings, settings_options
from shardq.cli_web import web
from shardq.config import DispatcherSettings, WorkerSettings
from shardq.logs import LOG_FORMATS, LogFormat, setup_logging
from shardq.store import keys, numbers

F = TypeVar("F", bound=Callable[..., Any])


@click.group(cls=ShardqGroup)
@click.version_option(__version__, "--version", prog_name="shardq")
@click.option(
    "--log-level",
    type=LOG_LEVELS,
    default="INFO",
    show_default=True,
    envvar="SHARDQ_LOG_LEVEL",
    help="Logging threshold (logs go to stderr). Env: SHARDQ_LOG_LEVEL.",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS, case_sensitive=False),
    default="json",
    show_default=True,
    envvar="SHARDQ_LOG_FORMAT",
    help="json: one JSON object per line (for log collectors); text: for a terminal. "
    "Env: SHARDQ_LOG_FORMAT.",
)
@redis_options
def main(log_level: str, log_format: LogFormat) -> None:
    """shardq: delayed jobs over the partitions of a Redis Cluster.

    Connection options (--url, --username, --password-file, --ca-certs) go here or after any
    command that talks to Redis; every one also reads a SHARDQ_REDIS_* variable.  Commands
    name their queue with --queue/-q (or SHARDQ_QUEUE).
    """
    setup_logging(log_level, log_format)
    warn_password_was_in_argv()


for _command in (
    dev,
    queue,
    enqueue,
    job,
    schedule,
    owners,
    rebalance,
    stats,
    dlq,
    acl_group,
    functions_group,
    web,
    limit,
):
    main.add_command(_command)


@main.command()
@queue_option(required=False, help="Also check that this queue exists. Env: SHARDQ_QUEUE.")
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
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@redis_options
def health(
    queue_name: str | None, require_appendonly: bool, allow_evicting_redis: bool, as_json: bool
) -> None:
    """Exit 0 when Redis answers (every primary, in cluster mode), the queue exists, and no
    primary runs with a setting that loses jobs (an evicting maxmemory-policy; appendonly off
    with --require-appendonly).

    Meant for container health checks and readiness probes; prints one line per finding.
    """
    from redis.exceptions import RedisError

    from shardq.connection import ping

    settings = redis_settings()
    try:
        with open_client() as client:
            ping(client.redis)
            if queue_name is not None:
                client.partitions(queue_name)
            found = client.check_redis(require_appendonly)
    except RedisError as exc:
        mapped = to_click(exc)
        why = mapped.message if mapped is not None else str(exc)
        raise click.ClickException(f"unhealthy: Redis at {settings.url}: {why}") from None
    failing = any(f.check != "eviction" or not allow_evicting_redis for f in found)
    if as_json:
        fmt.echo_json(
            {
                "ok": not failing,
                "queue": queue_name,
                "findings": [{"node": f.node, "check": f.check, "detail": f.detail} for f in found],
            }
        )
        if failing:
            raise click.exceptions.Exit(1)
        return
    for f in found:
        click.echo(f"{f.node}: {f.detail}", err=True)
    if failing:
        raise click.ClickException("unhealthy: Redis would lose jobs silently (see above)")
    click.echo("ok" + (f": queue {queue_name} reachable" if queue_name else ""))


# processes ---------------------------------------------------------------------------------


def _parse_partitions(value: str | None) -> list[int] | None:
    if not value:
        return None
    out: list[int] = []
    top = keys.MAX_PARTITIONS - 1  # (a range past it would also build a list of that size)
    try:
        for part in value.split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                out.extend(range(numbers.integer(lo, 0, top), numbers.integer(hi, 0, top) + 1))
            else:
                out.append(numbers.integer(part, 0, top))
    except ValueError:
        raise click.BadParameter(
            f"{value!r:.40}: use partition numbers 0-{top} and ranges of them, e.g. 0-15,32",
            param_hint="--partitions",
        ) from None
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
    return queue_option()(fn)  # type: ignore[no-any-return]


@main.group()
def dispatcher() -> None:
    """Run a dispatcher (promotes due jobs)."""


@dispatcher.command("run")
@_process_options
@settings_options(DispatcherSettings, "SHARDQ_DISPATCHER_")
@redis_options
def dispatcher_run(
    queue_name: str,
    partitions: str | None,
    instance: str | None,
    metrics_port: int | None,
    metrics_addr: str,
    **given: Any,
) -> None:
    """Promote due jobs of the queue until SIGTERM/SIGINT (leases are released on the way out).

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
            redis_settings(),
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
def worker_run(
    handlers_spec: str,
    queue_name: str,
    partitions: str | None,
    instance: str | None,
    metrics_port: int | None,
    metrics_addr: str,
    **given: Any,
) -> None:
    """Run jobs of the queue until SIGTERM/SIGINT, then finish in-flight jobs within the grace.

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

    asyncio.run(_run_until_signal(make, redis_settings()))


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
) -> None:
    """Run a fresh queue end to end in subprocesses and report throughput, lateness, memory."""
    from shardq.bench import E2EConfig, format_summary, run_e2e

    conn = redis_settings()
    cfg = E2EConfig(
        url=conn.url,
        jobs=jobs,
        spread=spread,
        dispatchers=dispatchers,
        workers=workers,
        partitions=partitions,
        payload_bytes=payload_bytes,
        backlog=backlog,
        timeout=timeout,
        password=conn.password,
        username=conn.username,
    )
    result = run_e2e(cfg, progress=None if as_json else sys.stderr)
    click.echo(json.dumps(result) if as_json else format_summary(result))


@bench.command("enqueue")
@click.option("--jobs", default=50_000, show_default=True, help="Jobs for enqueue_many.")
@click.option("--single-jobs", default=3_000, show_default=True, help="Jobs for the single loop.")
@click.option("--partitions", default=64, show_default=True)
@click.option(
    "--rounds", default=3, show_default=True, help="enqueue_many and script-limit runs each."
)
@redis_options
def bench_enqueue(
    jobs: int,
    single_jobs: int,
    partitions: int,
    rounds: int,
) -> None:
    """Enqueue rates in one run (JSON): single enqueues, enqueue_many, and the batched script's
    limit (the same calls prepared beforehand); each starts on an empty queue."""
    from shardq.bench import run_enqueue_bench

    conn = redis_settings()
    click.echo(
        json.dumps(
            run_enqueue_bench(
                conn.url,
                jobs,
                single_jobs,
                partitions,
                username=conn.username,
                password=conn.password,
                rounds=rounds,
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
def bench_fleet(
    dispatchers: int,
    partitions: int,
    workers: int,
    lease_time: float,
    renew_interval: float,
    idle_seconds: float,
) -> None:
    """Lease convergence after start, SIGKILL and SIGTERM, and the idle fleet's Redis calls/s."""
    from shardq.bench_fleet import run_fleet

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


@main.command()
@click.option("--base-port", default=7200, show_default=True, help="Ports of the demo cluster.")
@click.option("--jobs", default=100_000, show_default=True)
@click.option("--spread", default=10.0, show_default=True)
@click.option("--workers", default=2, show_default=True)
@click.option("--keep", is_flag=True, help="Leave the demo cluster running afterwards.")
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
