"""``shardq web``: serve the console (shardq.web) with uvicorn."""

from __future__ import annotations

import os

import click

from shardq.cli.connection import redis_options, redis_settings
from shardq.cli.params import Duration
from shardq.config import RedisSettings, redact_url


def _check_redis(settings: RedisSettings) -> None:
    """Connect once before serving.  What waiting cannot fix (refused credentials, missing
    permissions) is raised, and the root command makes it one line and exit 1; Redis down or
    unreachable is only said: the console serves anyway, says so on every page, answers 503 on
    /readyz and connects as soon as Redis answers.  An operator opens the console during an
    incident; one that exits (or crash-loops in a pod, with back-off) while Redis is down is
    useless exactly then."""
    from shardq.connection import connect, ping
    from shardq.store.faults import is_transient

    try:
        client = connect(settings)
        try:
            ping(client)
        finally:
            client.close()
    except Exception as exc:
        if not is_transient(exc):
            raise
        click.echo(
            f"Redis at {redact_url(settings.url)} does not answer ({type(exc).__name__}: {exc});"
            " serving anyway: the pages say so and the console retries until it answers",
            err=True,
        )


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    envvar="SHARDQ_WEB_HOST",
    help="Address to bind. Loopback by default: reach it through an SSH tunnel or "
    "`kubectl port-forward`. Any other address makes every page need the operator token "
    "(SHARDQ_WEB_TOKEN): it refuses to start without one. Env: SHARDQ_WEB_HOST.",
)
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    envvar="SHARDQ_WEB_PORT",
    help="Port to listen on. Env: SHARDQ_WEB_PORT.",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    envvar="SHARDQ_WEB_ALLOW_ACTIONS",
    help="Enable pause/resume, run now, retry, cancel, replay and empty. They then need the "
    "operator token from SHARDQ_WEB_TOKEN (never given on the command line). "
    "Env: SHARDQ_WEB_ALLOW_ACTIONS.",
)
@click.option(
    "--require-login",
    is_flag=True,
    envvar="SHARDQ_WEB_REQUIRE_LOGIN",
    help="Every page needs the operator token (login form or bearer), on loopback too; always "
    "on beyond loopback. Env: SHARDQ_WEB_REQUIRE_LOGIN.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    envvar="SHARDQ_WEB_ALLOWED_HOSTS",
    help="A name the console answers to in the Host header, besides its bind address and "
    "the loopback names (repeat it; env: SHARDQ_WEB_ALLOWED_HOSTS, space-separated). Any "
    "other Host is refused (400): that stops DNS rebinding.",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    envvar="SHARDQ_WEB_TRUSTED_PROXIES",
    help="Address or network (10.0.0.0/24) of a proxy in front whose X-Forwarded-Proto and "
    "X-Forwarded-For are believed: https there makes the cookies Secure, and rate limits "
    "count the real client (repeat it; env: SHARDQ_WEB_TRUSTED_PROXIES, space-separated).",
)
@click.option(
    "--poll",
    "poll_seconds",
    default="3s",
    show_default=True,
    type=Duration(0.5, 300.0),
    help="How long between the pages' live refreshes (3s, 500ms).",
)
@redis_options
def web(
    host: str,
    port: int,
    allow_actions: bool,
    require_login: bool,
    allowed_hosts: tuple[str, ...],
    trusted_proxies: tuple[str, ...],
    poll_seconds: float,
) -> None:
    """Serve the web console: queues, partitions, jobs, dead letters, schedules and the fleet.

    Read-only unless --allow-actions; see docs/deploy.md to expose it safely.
    Needs the `web` extra: pip install 'shardq[web]'.
    """
    try:
        import uvicorn

        from shardq.web import WebConfig, create_app
        from shardq.web.app import UVICORN_OPTIONS
        from shardq.web.auth import TOKEN_ENV
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise click.ClickException(
            f"the web console needs the `web` extra ({exc.name} is missing): "
            "pip install 'shardq[web]'"
        ) from None
    try:
        config = WebConfig(
            redis=redis_settings(),
            allow_actions=allow_actions,
            token=os.environ.get(TOKEN_ENV) or None,
            poll_seconds=poll_seconds,
            host=host,
            allowed_hosts=allowed_hosts,
            require_login=require_login,
            trusted_proxies=trusted_proxies,
        )
    except ValueError as exc:  # TokenError, a bad --trusted-proxy
        raise click.ClickException(str(exc)) from None
    _check_redis(config.redis)
    mode = "actions enabled (token required)" if allow_actions else "read-only"
    if config.require_login:
        mode += ", every page behind the token"
    click.echo(f"shardq console on http://{host}:{port}/ ({mode})", err=True)
    uvicorn.run(create_app(config), host=host, port=port, **UVICORN_OPTIONS)
