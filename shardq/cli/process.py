"""The long-running processes and their probe: ``shardq dispatcher run``, ``shardq worker
run`` (until SIGTERM/SIGINT, with a metrics/health endpoint) and ``shardq redis check``
(``shardq health`` is its old name, for scripts and manifests)."""

from __future__ import annotations

import importlib
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from shardq import format as fmt
from shardq.cli.connection import open_client, redis_options, redis_settings
from shardq.cli.errors import to_click
from shardq.cli.options import deprecated_alias, queue_option
from shardq.cli.params import QUEUE_CHOICE
from shardq.cli.settings import build_settings, settings_options
from shardq.config import DispatcherSettings, WorkerSettings
from shardq.errors import ShardqError
from shardq.store import keys, numbers

if TYPE_CHECKING:
    from shardq.worker.pool import QueueChoice

F = TypeVar("F", bound=Callable[..., Any])


@click.group("redis")
def redis_group() -> None:
    """The Redis shardq runs on: is it fit to hold jobs?"""


@redis_group.command("check")
@queue_option(required=False, help="Also check that this queue exists. Env: SHARDQ_QUEUE.")
@click.option(
    "--require-appendonly",
    is_flag=True,
    envvar="SHARDQ_REQUIRE_APPENDONLY",
    help="Also fail when a primary has appendonly off. Env: SHARDQ_REQUIRE_APPENDONLY.",
)
@click.option(
    "--allow-evicting-redis",
    is_flag=True,
    envvar="SHARDQ_ALLOW_EVICTING_REDIS",
    help="Report an evicting maxmemory-policy without failing. Env: SHARDQ_ALLOW_EVICTING_REDIS.",
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
    from shardq.runtime import redis_config

    settings = redis_settings()
    try:
        with open_client() as client:
            ping(client.redis)
            if queue_name is not None:
                client.partitions(queue_name)
            found = client.check_redis(require_appendonly)
            servers = sorted({n.describe_server for n in redis_config.read_sync(client.redis)})
            unavailable = _unavailable_features(client, queue_name)
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
                "server": servers,
                "findings": [{"node": f.node, "check": f.check, "detail": f.detail} for f in found],
                "unavailable": [{"feature": k, "why": v} for k, v in unavailable.items()],
            }
        )
        if failing:
            raise click.exceptions.Exit(1)
        return
    for f in found:
        click.echo(f"{f.node}: {f.detail}", err=True)
    click.echo(f"server: {', '.join(servers)}", err=True)
    for feature, why in unavailable.items():
        click.echo(f"unavailable here: {feature}: {why}", err=True)
    if failing:
        raise click.ClickException("unhealthy: Redis would lose jobs silently (see above)")
    click.echo("ok" + (f": queue {queue_name} reachable" if queue_name else ""))


#: ``shardq health``: the old name, for scripts, health checks and manifests.
health_alias = deprecated_alias(health, "health", "redis check")


def _unavailable_features(client: Any, queue_name: str | None) -> dict[str, str]:
    """Features this Redis (a managed service, a single node) does not let this user have:
    feature -> why.  Health is not failed by them: the fleet runs without them."""
    from shardq.admin import slots

    feature = "slot moves (rebalance apply, rebalance move-partition, balancer run)"
    try:
        missing = slots.slot_moves_unavailable(client, queue_name)
    except slots.SlotMoveError as exc:  # a single node: no slots
        return {feature: str(exc)}
    except ShardqError as exc:  # the user cannot even ask (the library not loaded, ...)
        return {feature: f"could not ask ({exc})"}
    return {} if missing is None else {feature: f"{missing}: {slots.MANAGED_HINT}"}


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
    import asyncio

    from shardq.runtime.startup import connect_async_waiting

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
    """Options every long-running process of one queue takes."""
    return queue_option()(_serving_options(fn))  # type: ignore[no-any-return]


def _serving_options(fn: F) -> F:
    """Options every long-running process takes, its queue aside."""
    fn = click.option(
        "--metrics-addr",
        default="127.0.0.1",
        show_default=True,
        envvar="SHARDQ_METRICS_ADDR",
        help="Address the metrics/health endpoint binds (0.0.0.0 in a container). "
        "Env: SHARDQ_METRICS_ADDR.",
    )(fn)
    fn = click.option(
        "--metrics-port",
        type=int,
        default=None,
        envvar="SHARDQ_METRICS_PORT",
        help="Serve /metrics, /healthz and /readyz on this port. Env: SHARDQ_METRICS_PORT.",
    )(fn)
    fn = click.option(
        "--instance",
        default=None,
        envvar="SHARDQ_INSTANCE",
        help="Where this process runs (the pod name); a process restarted with the same "
        "instance takes over its predecessor's work at once. Default: host:pid. "
        "Env: SHARDQ_INSTANCE.",
    )(fn)
    fn = click.option("--partitions", default=None, help="Only these partitions, e.g. 0-15,32.")(fn)
    return fn


@click.group()
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
    import asyncio

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


@click.group()
def worker() -> None:
    """Run a worker (runs job handlers)."""


@worker.command("run")
@click.option(
    "--handlers",
    "handlers_spec",
    required=True,
    envvar="SHARDQ_HANDLERS",
    help="module:attribute holding a dict {job type: handler}, a shardq.Tasks (declared "
    "tasks, with their timeouts) or a callable(worker). Env: SHARDQ_HANDLERS.",
)
@click.option(
    "--queue",
    "-q",
    "queue_names",
    type=QUEUE_CHOICE,
    multiple=True,
    required=True,
    envvar="SHARDQ_QUEUE",
    help="Queue to serve, NAME or NAME:WEIGHT; repeat it to serve several queues with one "
    "concurrency pool (shared by weight, default 1; see --strict). Env: SHARDQ_QUEUE "
    "(space-separated).",
)
@click.option(
    "--strict",
    is_flag=True,
    default=False,
    envvar="SHARDQ_WORKER_STRICT",
    help="Several queues: serve them in the order given (a queue reads only while none before "
    "it has jobs waiting) instead of by weight. Env: SHARDQ_WORKER_STRICT.",
)
@_serving_options
@settings_options(WorkerSettings, "SHARDQ_WORKER_")
@redis_options
def worker_run(
    handlers_spec: str,
    queue_names: tuple[QueueChoice, ...],
    strict: bool,
    partitions: str | None,
    instance: str | None,
    metrics_port: int | None,
    metrics_addr: str,
    **given: Any,
) -> None:
    """Run jobs of the queue (or queues) until SIGTERM/SIGINT, then finish in-flight jobs
    within the grace.

    Every setting can also come from the environment (SHARDQ_WORKER_<SETTING>)."""
    import asyncio

    from shardq.tasks import Tasks
    from shardq.worker import Worker

    handlers = load_handlers(handlers_spec)
    if not (isinstance(handlers, dict | Tasks) or callable(handlers)):
        raise click.BadParameter(
            "must be a dict, a shardq.Tasks or a callable", param_hint="--handlers"
        )
    settings = build_settings(WorkerSettings, given)
    pinned = _parse_partitions(partitions)
    if pinned is not None and len(queue_names) > 1:
        raise click.BadParameter(
            "pin partitions of one queue only (run a worker per queue)", param_hint="--partitions"
        )
    if len(queue_names) > settings.concurrency:
        raise click.BadParameter(
            f"{len(queue_names)} queues need a concurrency of at least {len(queue_names)}",
            param_hint="--concurrency",
        )
    _serve_metrics(metrics_port, metrics_addr)
    queues: list[str | QueueChoice] = list(queue_names)

    def make(redis: Any) -> Worker:
        w = Worker(
            redis,
            queues,
            settings=settings,
            partitions=pinned,
            instance=instance,
            strict=strict,
        )
        if isinstance(handlers, Tasks):
            w.register_tasks(handlers)
        elif isinstance(handlers, dict):
            for job_type, fn in handlers.items():
                w.register(job_type, fn)
        else:
            handlers(w)
        return w

    asyncio.run(_run_until_signal(make, redis_settings()))
