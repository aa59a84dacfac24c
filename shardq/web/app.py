"""The console as an ASGI app (:func:`create_app`): its routes, its error pages, its template
filters and its connection to Redis.  See :mod:`shardq.web` for the stack and the rules; the
routes are :mod:`~shardq.web.pages` (pages, their ``/live/...`` JSON twins, probes),
:mod:`~shardq.web.login` and :mod:`~shardq.web.actions`; the middleware is
:mod:`~shardq.web.middleware`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from shardq import backoff, names
from shardq import format as fmt
from shardq.aio import AsyncClient
from shardq.config import redact_url
from shardq.connection import connect_async
from shardq.errors import FunctionsNotLoadedError, RedisUnavailableError, UnknownQueueError
from shardq.logs import log_event
from shardq.web import pages
from shardq.web.actions import action
from shardq.web.console import Console, WebConfig, batch_url, error_page, job_url
from shardq.web.login import login_page, login_submit, logout
from shardq.web.middleware import Boundary, SecurityHeaders

__all__ = ["UVICORN_OPTIONS", "WebConfig", "create_app"]

log = logging.getLogger("shardq.web")
HERE = Path(__file__).resolve().parent

# How uvicorn serves the console (`shardq web`, and the tests' server): shardq's own JSON logging
# (set up by the root command), no access log, no Server header, and no X-Forwarded-* handling
# by uvicorn (which trusts 127.0.0.1 by default): the app reads them itself, from the
# configured proxies only (WebConfig.trusted_proxies).
UVICORN_OPTIONS: dict[str, Any] = {
    "log_config": None,
    "access_log": False,
    "proxy_headers": False,
    "server_header": False,
}


# errors ----------------------------------------------------------------------------------------


async def _unknown_queue(request: Request, exc: Exception) -> Response:
    return error_page(request, 404, "Unknown queue", str(exc))


async def _redis_down(request: Request, exc: Exception) -> Response:
    return error_page(request, 503, "Redis unavailable", f"{type(exc).__name__}: {exc}")


async def _no_functions(request: Request, exc: Exception) -> Response:
    # A node without shardq's library, and a user that may not load it (the viewer never may).
    return error_page(request, 503, "Functions not loaded", str(exc))


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_page(request, exc.status_code, "Error", str(exc.detail))


# app -------------------------------------------------------------------------------------------


def _filters(templates: Jinja2Templates) -> None:
    env = templates.env
    env.filters["iso"] = lambda ms: fmt.iso(ms) or "-"
    env.filters["rel"] = lambda ms: fmt.relative(ms) or "-"
    env.filters["span"] = fmt.span
    env.filters["partition"] = fmt.partition  # a fleet id as every surface names it
    env.filters["num"] = lambda n: "-" if n is None else f"{n:,}"
    env.filters["pct"] = lambda x: f"{100 * float(x):.0f}%"
    env.globals["job_url"] = job_url
    env.globals["batch_url"] = batch_url
    # The one list of job states (shardq.names): the tabs of a queue's jobs are these.
    env.globals["job_states"] = names.JOB_STATES


def _routes() -> list[Route | Mount]:
    q = "/q/{queue:str}"
    return [
        Route("/", pages.overview_page),
        Route(q, pages.queue_page),
        Route(q + "/jobs", pages.jobs_page),
        Route(q + "/dead", pages.dead_page),
        # a job id may hold '/', '%', '?', '#' (see job_url): the path form takes the rest of
        # the path, the query form (?id=) takes ids a browser would rewrite as a path
        Route(q + "/job/{job_id:path}", pages.job_page),
        Route(q + "/job", pages.job_page),
        Route(q + "/search", pages.search),
        Route(q + "/schedules", pages.schedules_page),
        Route(q + "/batches", pages.batches_page),
        Route(q + "/batch/{batch_id:str}", pages.batch_page),
        Route(q + "/batch", pages.batch_page),
        Route(q + "/fleet", pages.fleet_page),
        Route(q + "/action/{action:str}", action, methods=["POST"]),
        Route("/live/overview", pages.overview_live),
        Route("/live" + q, pages.queue_live),
        Route("/live" + q + "/fleet", pages.fleet_live),
        Route("/live" + q + "/job/{job_id:path}", pages.job_live),
        Route("/live" + q + "/job", pages.job_live),
        Route("/live" + q + "/batch/{batch_id:str}", pages.batch_live),
        Route("/live" + q + "/batch", pages.batch_live),
        Route("/healthz", pages.healthz),
        Route("/readyz", pages.readyz),
        Route("/login", login_page),
        Route("/login", login_submit, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]


def create_app(
    config: WebConfig, client_factory: Callable[[], Awaitable[AsyncClient]] | None = None
) -> Starlette:
    """The console as an ASGI app.  It connects to Redis at startup (``client_factory``, or
    ``config.redis``) and closes the connection at shutdown."""
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    _filters(templates)
    console = Console(config, templates)

    async def connect() -> AsyncClient:
        return AsyncClient(await connect_async(config.redis))

    factory = client_factory or connect

    async def attempt() -> bool:
        try:
            console.client = await factory()
        except Exception as exc:
            # Whatever it is (down, refused credentials, a cluster still forming), an operator
            # is better served by a console that says so on every page and recovers by itself
            # than by one that exits: `shardq web` has already refused what waiting cannot fix
            # (see shardq/cli/web.py).  /readyz stays 503 meanwhile.
            console.redis_error = f"{type(exc).__name__}: {exc}"
            return False
        console.redis_error = None
        return True

    async def keep_trying() -> None:
        failures = 1
        while True:
            if failures == 1 or failures % 20 == 0:
                log_event(log, "web.redis_unreachable", logging.WARNING,
                          url=redact_url(config.redis.url), error=console.redis_error,
                          attempts=failures)  # fmt: skip
            await asyncio.sleep(backoff.delay(failures))
            if await attempt():
                log_event(log, "web.redis_connected", logging.INFO, attempts=failures + 1)
                return
            failures += 1

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # One attempt before serving (so a console whose Redis answers never shows "not
        # connected"); if it fails, serve at once and keep trying in the background, so the
        # probes and the pages answer (with 503) during the outage.
        retrying = None if await attempt() else asyncio.create_task(keep_trying())
        try:
            yield
        finally:
            if retrying is not None:
                retrying.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await retrying
            if console.client is not None:
                await console.client.close()
                console.client = None

    app = Starlette(
        routes=_routes(),
        lifespan=lifespan,
        exception_handlers={
            UnknownQueueError: _unknown_queue,
            RedisUnavailableError: _redis_down,
            FunctionsNotLoadedError: _no_functions,
            RedisError: _redis_down,
            HTTPException: _http,
        },
    )
    app.state.console = console
    app.add_middleware(Boundary, console=console)
    app.add_middleware(SecurityHeaders)  # outermost: refusals get the headers too
    return app
