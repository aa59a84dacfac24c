"""``shardq web``: serve the console (shardq.web) with uvicorn."""

from __future__ import annotations

import os

import click

from shardq.cli_common import redis_options, redis_settings


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    envvar="SHARDQ_WEB_HOST",
    help="Address to bind. Loopback by default: reach it through an SSH tunnel or "
    "`kubectl port-forward`; bind 0.0.0.0 only behind an authenticating proxy. "
    "Env: SHARDQ_WEB_HOST.",
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
    "--poll",
    "poll_seconds",
    default=3.0,
    show_default=True,
    type=click.FloatRange(0.5, 300),
    help="Seconds between the pages' live refreshes.",
)
@redis_options
def web(host: str, port: int, allow_actions: bool, poll_seconds: float) -> None:
    """Serve the web console: queues, partitions, jobs, dead letters, schedules and the fleet.

    Read-only unless --allow-actions; see docs/deploy.md to expose it safely.
    Needs the `web` extra: pip install 'shardq[web]'.
    """
    try:
        import uvicorn

        from shardq.web import WebConfig, create_app
        from shardq.web.auth import TOKEN_ENV, TokenError
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
        )
    except TokenError as exc:
        raise click.ClickException(str(exc)) from None
    mode = "actions enabled (token required)" if allow_actions else "read-only"
    click.echo(f"shardq console on http://{host}:{port}/ ({mode})", err=True)
    uvicorn.run(
        create_app(config),
        host=host,
        port=port,
        log_config=None,  # shardq's own JSON logging (set up by the root command)
        access_log=False,
        proxy_headers=False,
        server_header=False,
    )
