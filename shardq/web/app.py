"""The console's routes: pages, their ``/live/...`` JSON twins (polled by static/console.js),
the health probes, login and the actions.  See :mod:`shardq.web` for the stack and the rules."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shardq import cli_format as fmt
from shardq.aio import AsyncClient
from shardq.config import RedisSettings
from shardq.connection import connect_async
from shardq.errors import (
    JobNotFoundError,
    JobRunningError,
    RedisUnavailableError,
    ShardqError,
    UnknownQueueError,
)
from shardq.inspector import EMPTY_STATES, LIST_STATES, AsyncInspector, InvalidCursorError
from shardq.logs import log_event
from shardq.web import auth
from shardq.web.data import HEAT_METRICS, Rates, fleet, overview, queue_view

log = logging.getLogger("shardq.web")
HERE = Path(__file__).resolve().parent
PAGE_LIMITS = (20, 50, 100, 200)
# Partition tables above this size are drawn at page load only (the heat map stays live).
LIVE_TABLE_MAX = 256

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


@dataclass
class WebConfig:
    """How the console runs.  ``token`` is required (and checked) when ``allow_actions``."""

    redis: RedisSettings = field(default_factory=RedisSettings)
    allow_actions: bool = False
    token: str | None = None
    poll_seconds: float = 3.0

    def __post_init__(self) -> None:
        if self.allow_actions:
            self.token = auth.check_token(self.token)


@dataclass
class Console:
    config: WebConfig
    templates: Jinja2Templates
    sessions: auth.Sessions = field(default_factory=auth.Sessions)
    rates: Rates = field(default_factory=Rates)
    client: AsyncClient | None = None

    @property
    def redis(self) -> AsyncClient:
        if self.client is None:  # pragma: no cover - only before startup
            raise RuntimeError("the console has not connected to Redis yet")
        return self.client


class SecurityHeaders:
    """Adds the CSP and its companions to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


# helpers ---------------------------------------------------------------------------------------


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def _session(request: Request) -> auth.Session | None:
    return _console(request).sessions.get(request.cookies.get(auth.SESSION_COOKIE))


def _remote(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _context(request: Request, **extra: Any) -> dict[str, Any]:
    console = _console(request)
    session = _session(request)
    flash: list[str] = []
    if session is not None:
        flash, session.flash = session.flash, []
    return {
        "allow_actions": console.config.allow_actions,
        "can_act": console.config.allow_actions and session is not None and session.authenticated,
        "csrf": session.csrf if session else "",
        "who": session.who if session and session.authenticated else None,
        "poll_ms": int(console.config.poll_seconds * 1000),
        "flash": flash,
        "path": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        "live": None,
        **extra,
    }


def _page(request: Request, template: str, status: int = 200, **extra: Any) -> Response:
    return _console(request).templates.TemplateResponse(
        request, template, _context(request, **extra), status_code=status
    )


def _fragment(request: Request, template_name: str, **extra: Any) -> str:
    template = _console(request).templates.get_template(template_name)
    return template.render(_context(request, **extra))


def _error(request: Request, status: int, title: str, detail: str) -> Response:
    return _page(request, "error.html", status=status, title=title, detail=detail)


def _local(target: str | None, fallback: str) -> str:
    """A redirect target on this console only (no scheme, no host, no ``//``)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return fallback


def _limit(raw: str | None) -> int:
    try:
        value = int(raw or 50)
    except ValueError:
        return 50
    return max(1, min(200, value))


def _queue(request: Request) -> str:
    return str(request.path_params["queue"])


# pages -----------------------------------------------------------------------------------------


async def overview_page(request: Request) -> Response:
    queues = await overview(_console(request).redis, _console(request).rates)
    return _page(request, "overview.html", queues=queues, live="/live/overview")


async def overview_live(request: Request) -> Response:
    queues = await overview(_console(request).redis, _console(request).rates)
    html = _fragment(request, "_overview_rows.html", queues=queues)
    return JSONResponse({"data": queues, "regions": {"queues": html}})


async def _queue_view(request: Request) -> dict[str, Any]:
    metric = request.query_params.get("metric", "backlog")
    console = _console(request)
    return await queue_view(console.redis, console.rates, _queue(request), metric)


async def queue_page(request: Request) -> Response:
    view = await _queue_view(request)
    return _page(
        request,
        "queue.html",
        queue=_queue(request),
        view=view,
        metrics=HEAT_METRICS,
        live_table=len(view["partitions"]) <= LIVE_TABLE_MAX,
        empty_states=EMPTY_STATES,
        live=f"/live/q/{_queue(request)}?" + urlencode({"metric": view["metric"]}),
    )


async def queue_live(request: Request) -> Response:
    view = await _queue_view(request)
    queue = _queue(request)
    regions = {
        "summary": _fragment(request, "_queue_summary.html", queue=queue, view=view),
        "heat": _fragment(request, "_heat.html", queue=queue, view=view),
        "nodes": _fragment(request, "_nodes.html", view=view),
        "tabs": _fragment(
            request, "_tabs.html", queue=queue, view=view, state=request.query_params.get("state")
        ),
    }
    if len(view["partitions"]) <= LIVE_TABLE_MAX:
        regions["partitions"] = _fragment(request, "_partitions.html", view=view)
    return JSONResponse(
        {
            "data": {"summary": view["summary"], "nodes": view["nodes"]},
            "partitions": [[r["partition"], r["heat"]] for r in view["partitions"]],
            "regions": regions,
        }
    )


async def jobs_page(request: Request, state: str | None = None) -> Response:
    queue = _queue(request)
    q = request.query_params
    state = state or q.get("state", "scheduled")
    if state not in LIST_STATES:
        return _error(request, 400, "Unknown state", f"state must be one of {LIST_STATES}")
    job_type = q.get("type") or None
    limit = _limit(q.get("limit"))
    console = _console(request)
    try:
        page = await AsyncInspector(console.redis).list_jobs(
            queue, state, job_type=job_type, limit=limit, cursor=q.get("cursor") or None
        )
    except InvalidCursorError as exc:
        return _error(request, 400, "Invalid cursor", str(exc))
    view = await queue_view(console.redis, console.rates, queue)
    base = {"state": state, "limit": limit} | ({"type": job_type} if job_type else {})
    next_url = (
        f"/q/{queue}/jobs?" + urlencode(base | {"cursor": page.cursor}) if page.cursor else None
    )
    return _page(
        request,
        "jobs.html",
        queue=queue,
        state=state,
        page=page,
        job_type=job_type or "",
        limit=limit,
        limits=PAGE_LIMITS,
        next_url=next_url,
        first_url=f"/q/{queue}/jobs?" + urlencode(base),
        paged=bool(q.get("cursor")),
        view=view,
        live=f"/live/q/{queue}?" + urlencode({"state": state}),
    )


async def dead_page(request: Request) -> Response:
    return await jobs_page(request, "dead")


async def job_page(request: Request) -> Response:
    queue, job_id = _queue(request), str(request.path_params["job_id"])
    try:
        info = await _console(request).redis.get(queue, job_id)
    except ValueError as exc:
        return _error(request, 400, "Invalid job id", str(exc))
    if info is None:
        return _error(
            request, 404, "Job not found", f"job {job_id!r} is not in queue {queue!r}: it "
            "finished, was cancelled, or never existed",
        )  # fmt: skip
    return _page(
        request,
        "job.html",
        queue=queue,
        job=info,
        payload=json.dumps(info.payload, indent=2, sort_keys=True, ensure_ascii=False),
        live=f"/live/q/{queue}/job/{job_id}",
    )


async def job_live(request: Request) -> Response:
    queue, job_id = _queue(request), str(request.path_params["job_id"])
    try:
        info = await _console(request).redis.get(queue, job_id)
    except ValueError:
        info = None
    html = _fragment(request, "_job_facts.html", queue=queue, job=info)
    state = info.state if info else "gone"
    return JSONResponse({"data": {"state": state}, "regions": {"facts": html}})


async def search(request: Request) -> Response:
    queue = _queue(request)
    text = request.query_params.get("q", "").strip()
    if not text:
        return RedirectResponse(f"/q/{queue}/jobs", status_code=303)
    client = _console(request).redis
    with contextlib.suppress(ValueError):
        if await client.get(queue, text) is not None:
            return RedirectResponse(f"/q/{queue}/job/{text}", status_code=303)
    with contextlib.suppress(ValueError):
        found = await AsyncInspector(client).find(queue, text)
        if found is not None:
            return RedirectResponse(f"/q/{queue}/job/{found.id}", status_code=303)
    return _error(
        request, 404, "No such job", f"no job in {queue!r} has the id or idempotency key "
        f"{text!r} (finished jobs are gone; idempotency keys expire)",
    )  # fmt: skip


async def schedules_page(request: Request) -> Response:
    queue = _queue(request)
    items = await _console(request).redis.schedules.list(queue)
    return _page(request, "schedules.html", queue=queue, schedules=items)


async def fleet_page(request: Request) -> Response:
    queue = _queue(request)
    members = await fleet(_console(request).redis, queue)
    return _page(request, "fleet.html", queue=queue, fleet=members, live=f"/live/q/{queue}/fleet")


async def fleet_live(request: Request) -> Response:
    queue = _queue(request)
    members = await fleet(_console(request).redis, queue)
    html = _fragment(request, "_fleet.html", queue=queue, fleet=members)
    return JSONResponse({"data": members, "regions": {"fleet": html}})


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


async def readyz(request: Request) -> Response:
    try:
        await asyncio.wait_for(_console(request).redis.redis.ping(), 2.0)  # type: ignore[misc]
    except (RedisError, ShardqError, OSError, TimeoutError) as exc:
        return PlainTextResponse(f"Redis unreachable: {exc}", status_code=503)
    return PlainTextResponse("ready")


# login -----------------------------------------------------------------------------------------


def _set_session_cookie(request: Request, response: Response, session: auth.Session) -> None:
    response.set_cookie(
        auth.SESSION_COOKIE,
        session.sid,
        max_age=int(auth.SESSION_TTL_S),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


async def login_page(request: Request) -> Response:
    console = _console(request)
    if not console.config.allow_actions:
        return _error(request, 404, "Read-only console", "this console was started without "
                      "--allow-actions: there is nothing to log in to")  # fmt: skip
    session = _session(request)
    if session is None:
        session = console.sessions.new(authenticated=False)
    nxt = _local(request.query_params.get("next"), "/")
    response = console.templates.TemplateResponse(
        request, "login.html", _context(request, csrf=session.csrf, next=nxt, failed=False)
    )
    _set_session_cookie(request, response, session)
    return response


async def login_submit(request: Request) -> Response:
    console = _console(request)
    if not console.config.allow_actions:
        return _error(request, 404, "Read-only console", "actions are disabled")
    form = await request.form()
    session = _session(request)
    nxt = _local(str(form.get("next", "")), "/")
    if session is None or not auth.same(str(form.get("csrf", "")), session.csrf):
        log_event(log, "web.login_refused", reason="csrf", remote=_remote(request))
        return _error(request, 403, "Refused", "the form's CSRF token does not match this "
                      "session: reload the login page and try again")  # fmt: skip
    assert console.config.token is not None
    if not auth.same(str(form.get("token", "")), console.config.token):
        log_event(log, "web.login_refused", reason="bad token", remote=_remote(request))
        await asyncio.sleep(0.5)  # slows guessing; the token is long anyway
        response = console.templates.TemplateResponse(
            request,
            "login.html",
            _context(request, csrf=session.csrf, next=nxt, failed=True),
            status_code=401,
        )
        return response
    console.sessions.drop(session.sid)
    fresh = console.sessions.new(authenticated=True)
    log_event(log, "web.login", logging.INFO, who=fresh.who, remote=_remote(request))
    done = RedirectResponse(nxt, status_code=303)
    _set_session_cookie(request, done, fresh)
    return done


async def logout(request: Request) -> Response:
    form = await request.form()
    session = _session(request)
    if session is not None and auth.same(str(form.get("csrf", "")), session.csrf):
        _console(request).sessions.drop(session.sid)
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(auth.SESSION_COOKIE, path="/")
    return response


# actions ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    title: str
    destructive: bool
    needs_job: bool = False


ACTIONS: dict[str, Action] = {
    "pause": Action("Pause every partition of the queue", destructive=True),
    "resume": Action("Resume every partition of the queue", destructive=False),
    "run-now": Action("Run the job now", destructive=False, needs_job=True),
    "replay": Action("Replay the dead job (attempts reset, due now)", False, needs_job=True),
    "retry-dead": Action("Replay every dead job", destructive=True),
    "cancel": Action("Cancel the job", destructive=True, needs_job=True),
    "empty": Action("Delete every job in a state", destructive=True),
}


class Refused(Exception):
    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


def _authorise(request: Request, form: FormData) -> tuple[str, bool]:
    """(who, by bearer) for an action request, or :class:`Refused`."""
    console = _console(request)
    if not console.config.allow_actions:
        raise Refused(403, "read-only", "this console is read-only: start it with "
                      "--allow-actions (and SHARDQ_WEB_TOKEN) to act on queues")  # fmt: skip
    assert console.config.token is not None
    header = request.headers.get("authorization", "")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and auth.same(token.strip(), console.config.token):
            return "bearer", True
        raise Refused(401, "bad token", "the bearer token is not this console's token")
    session = _session(request)
    if session is None or not session.authenticated:
        raise Refused(401, "no token", "log in with the operator token first (or send "
                      "Authorization: Bearer <token>)")  # fmt: skip
    if not auth.same(str(form.get("csrf", "")), session.csrf):
        raise Refused(403, "csrf", "the form's CSRF token is missing or does not match this "
                      "session: reload the page and try again")  # fmt: skip
    return session.who, False


async def _perform(client: AsyncClient, queue: str, name: str, form: FormData) -> str:
    ins = AsyncInspector(client)
    job_id = str(form.get("job_id", "")).strip()
    if name == "pause":
        return f"paused {await ins.pause(queue)} partitions"
    if name == "resume":
        return f"resumed {await ins.resume(queue)} partitions"
    if name in ("run-now", "replay"):
        was = await ins.run_now(queue, job_id)
        return f"job {job_id} ({was}) is due now"
    if name == "retry-dead":
        job_type = str(form.get("type", "")).strip() or None
        return f"replayed {await ins.retry_dead(queue, job_type)} dead jobs"
    if name == "cancel":
        if await client.cancel(queue, job_id):
            return f"cancelled job {job_id}"
        return f"job {job_id} was not cancelled (running, finished, or not found)"
    if name == "empty":
        state = str(form.get("state", ""))
        if state not in EMPTY_STATES:
            raise ValueError(f"state must be one of {', '.join(EMPTY_STATES)}")
        return f"deleted {await ins.empty(queue, state)} {state} jobs"
    raise ValueError(f"unknown action {name!r}")  # pragma: no cover - checked before


async def action(request: Request) -> Response:
    queue, name = _queue(request), str(request.path_params["action"])
    form = await request.form()
    remote = _remote(request)
    job_id = str(form.get("job_id", "")).strip() or None
    what: dict[str, Any] = {"action": name, "queue": queue, "job_id": job_id, "remote": remote}
    try:
        who, bearer = _authorise(request, form)
    except Refused as refused:
        log_event(log, "web.action_refused", reason=refused.reason, **what)
        if request.headers.get("authorization") or "json" in request.headers.get("accept", ""):
            return JSONResponse({"ok": False, "error": refused.detail}, refused.status)
        return _error(request, refused.status, "Refused", refused.detail)
    spec = ACTIONS.get(name)
    if spec is None or (spec.needs_job and not job_id):
        detail = f"unknown action {name!r}" if spec is None else f"{name} needs a job_id"
        return (
            JSONResponse({"ok": False, "error": detail}, 400)
            if bearer
            else _error(request, 400, "Bad request", detail)
        )
    await _console(request).redis.partitions(queue)  # an unknown queue is a 404, first
    if spec.destructive and str(form.get("confirm", "")) != queue:
        if bearer:
            return JSONResponse(
                {"ok": False, "error": f"{name} is destructive: send confirm={queue}"}, 409
            )
        fields = {k: str(v) for k, v in form.items() if k in ("job_id", "state", "type", "back")}
        return _page(request, "confirm.html", queue=queue, name=name, spec=spec, fields=fields)
    ok = True
    try:
        result = await _perform(_console(request).redis, queue, name, form)
    except (JobRunningError, JobNotFoundError, ValueError) as exc:
        ok, result = False, str(exc)
    log_event(
        log,
        "web.action",
        logging.INFO if ok else logging.WARNING,
        who=who,
        ok=ok,
        result=result,
        state=str(form.get("state", "")) or None,
        job_type=str(form.get("type", "")) or None,
        **what,
    )
    if bearer:
        return JSONResponse({"ok": ok, "result": result}, 200 if ok else 409)
    session = _session(request)
    if session is not None:
        session.flash.append(result if ok else f"refused: {result}")
    back = _local(str(form.get("back", "")), f"/q/{queue}")
    return RedirectResponse(back, status_code=303)


# errors ----------------------------------------------------------------------------------------


async def _unknown_queue(request: Request, exc: Exception) -> Response:
    return _error(request, 404, "Unknown queue", str(exc))


async def _redis_down(request: Request, exc: Exception) -> Response:
    return _error(request, 503, "Redis unavailable", f"{type(exc).__name__}: {exc}")


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(request, exc.status_code, "Error", str(exc.detail))


# app -------------------------------------------------------------------------------------------


def _filters(templates: Jinja2Templates) -> None:
    env = templates.env
    env.filters["iso"] = lambda ms: fmt.iso(ms) or "-"
    env.filters["rel"] = lambda ms: fmt.relative(ms) or "-"
    env.filters["span"] = fmt.span
    env.filters["num"] = lambda n: "-" if n is None else f"{n:,}"
    env.filters["pct"] = lambda x: f"{100 * float(x):.0f}%"


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

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        console.client = await (client_factory or connect)()
        try:
            yield
        finally:
            await console.client.close()
            console.client = None

    q = "/q/{queue:str}"
    routes = [
        Route("/", overview_page),
        Route(q, queue_page),
        Route(q + "/jobs", jobs_page),
        Route(q + "/dead", dead_page),
        Route(q + "/job/{job_id:str}", job_page),
        Route(q + "/search", search),
        Route(q + "/schedules", schedules_page),
        Route(q + "/fleet", fleet_page),
        Route(q + "/action/{action:str}", action, methods=["POST"]),
        Route("/live/overview", overview_live),
        Route("/live" + q, queue_live),
        Route("/live" + q + "/fleet", fleet_live),
        Route("/live" + q + "/job/{job_id:str}", job_live),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/login", login_page),
        Route("/login", login_submit, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            UnknownQueueError: _unknown_queue,
            RedisUnavailableError: _redis_down,
            RedisError: _redis_down,
            HTTPException: _http,
        },
    )
    app.state.console = console
    app.add_middleware(SecurityHeaders)
    return app
