"""The console's routes: pages, their ``/live/...`` JSON twins (polled by static/console.js),
the health probes, login and the actions.  See :mod:`shardq.web` for the stack and the rules."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

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

from shardq import backoff, names
from shardq import format as fmt
from shardq.aio import AsyncClient
from shardq.config import RedisSettings, redact_url
from shardq.connection import connect_async, ping_async
from shardq.errors import (
    BatchNotFoundError,
    FunctionsNotLoadedError,
    JobNotFoundError,
    JobRunningError,
    RedisUnavailableError,
    ShardqError,
    UnknownQueueError,
)
from shardq.inspector import EMPTY_STATES, AsyncInspector, InvalidCursorError
from shardq.logs import log_event
from shardq.web import auth, data
from shardq.web.data import HEAT_METRICS, Rates, fleet, overview, queue_view

log = logging.getLogger("shardq.web")
HERE = Path(__file__).resolve().parent
PAGE_LIMITS = (20, 50, 100, 200)
# Partition tables above this size are drawn at page load only (the heat map stays live).
LIVE_TABLE_MAX = 256

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
    """How the console runs, and its boundary (see :mod:`shardq.web.auth`).

    ``host`` is the address it binds: beyond loopback, every page needs the token
    (``require_login`` is forced on), so it refuses to start without one; actions and
    ``require_login`` need it too.  ``allowed_hosts`` are the names it answers to besides its
    address and loopback's; ``trusted_proxies`` the addresses (or networks) whose
    X-Forwarded-Proto/-For it believes.  ``auth_failures`` wrong tokens per ``auth_window_s``
    seconds are allowed per client address before it answers 429."""

    redis: RedisSettings = field(default_factory=RedisSettings)
    allow_actions: bool = False
    token: str | None = None
    poll_seconds: float = 3.0
    host: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()
    require_login: bool = False
    trusted_proxies: tuple[str, ...] = ()
    auth_failures: int = auth.AUTH_FAILURES
    auth_window_s: float = auth.AUTH_WINDOW_S

    def __post_init__(self) -> None:
        self.allowed_hosts = tuple(self.allowed_hosts)
        self.trusted_proxies = tuple(self.trusted_proxies)
        auth.parse_networks(self.trusted_proxies)  # a bad one fails here, not per request
        why = None
        if not auth.is_loopback(self.host):
            self.require_login = True
            why = f"--host {self.host} listens beyond loopback, so every page"
        elif self.allow_actions:
            why = "--allow-actions"
        elif self.require_login:
            why = "--require-login"
        if why:
            self.token = auth.check_token(self.token, why)

    @property
    def login(self) -> bool:
        """Whether there is anything to log in to (actions, or reads behind the token)."""
        return self.allow_actions or self.require_login


@dataclass
class Console:
    config: WebConfig
    templates: Jinja2Templates
    sessions: auth.Sessions = field(default_factory=auth.Sessions)
    forms: auth.LoginForms = field(default_factory=auth.LoginForms)
    rates: Rates = field(default_factory=Rates)
    client: AsyncClient | None = None
    redis_error: str | None = "connecting"
    limiter: auth.FailureLimiter = field(init=False)
    hosts: auth.HostRule = field(init=False)
    proxies: auth.ProxyRule = field(init=False)

    def __post_init__(self) -> None:
        c = self.config
        self.limiter = auth.FailureLimiter(c.auth_failures, c.auth_window_s)
        self.hosts = auth.HostRule(c.host, c.allowed_hosts)
        self.proxies = auth.ProxyRule(c.trusted_proxies)

    @property
    def connected(self) -> AsyncClient:
        """The console's client, once connected (a shardq AsyncClient, not a redis-py one)."""
        if self.client is None:
            raise RedisUnavailableError(
                f"Redis is unreachable ({self.redis_error}); the console keeps retrying (every "
                "few seconds) and this page works again once Redis answers"
            )
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


# Paths anyone may fetch: the probes (kubelet, load balancers: any Host, no token), the assets
# (the package's CSS and JS) and the login form.  Actions check the token themselves.
PROBES = ("/healthz", "/readyz")
OPEN_PATHS = ("/login", "/logout")
ACTION_PATH = re.compile(r"/q/[^/]+/action/[^/]+")


class Refused(Exception):
    def __init__(self, status: int, reason: str, detail: str, retry_after: int = 0) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after else {}


def _bearer(console: Console, request: Request) -> bool:
    """Whether the request carries the operator token as a bearer; :class:`Refused` for a
    wrong one (401, counted) or a wrong one from a client that guessed too often (429).  The
    token is compared first: the right one is never held up by wrong ones from its address
    (clients behind one port-forward or NAT share it)."""
    header = request.headers.get("authorization", "")
    if not header:
        return False
    scheme, _, token = header.partition(" ")
    assert console.config.token is not None
    if scheme.lower() == "bearer" and auth.same(token.strip(), console.config.token):
        return True
    remote = _remote(request)
    wait = console.limiter.retry_after(remote)
    if wait:
        raise Refused(429, "rate limited", f"too many wrong tokens from {remote}: retry in "
                      f"{wait} s", retry_after=wait)  # fmt: skip
    console.limiter.failed(remote)
    raise Refused(401, "bad token", "the bearer token is not this console's token")


class Boundary:
    """Who may read: the trusted proxy's scheme and client address first, then the Host header
    (DNS rebinding), then, when reads need the token, a session or a bearer token."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        console = self.console
        request = Request(scope)
        peer = scope["client"][0] if scope.get("client") else None
        if console.proxies.networks:
            client, scheme = console.proxies.resolve(
                peer,
                scope.get("scheme", "http"),
                request.headers.get("x-forwarded-proto"),
                request.headers.get("x-forwarded-for"),
            )
            scope["scheme"] = scheme
            if client is not None:
                scope["client"] = (client, 0)
        path = scope["path"]
        if path in PROBES:
            await self.app(scope, receive, send)
            return
        host = request.headers.get("host")
        if not console.hosts.allows(host):
            log_event(log, "web.host_refused", host=(host or "")[:100], remote=_remote(request))
            refused = PlainTextResponse(
                f"this console does not answer to the Host {(host or '')[:100]!r}: reach it by "
                "its address or a name it was given (--allowed-host, SHARDQ_WEB_ALLOWED_HOSTS)",
                status_code=400,
            )
            await refused(scope, receive, send)
            return
        if (
            console.config.require_login
            and path not in OPEN_PATHS
            and not path.startswith("/static/")
            and not (scope["method"] == "POST" and ACTION_PATH.fullmatch(path))
        ):
            response = self._login_needed(request)
            if response is not None:
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _login_needed(self, request: Request) -> Response | None:
        """None if the request may read; else what to answer instead."""
        console = self.console
        wants_json = request.url.path.startswith("/live/") or bool(
            request.headers.get("authorization")
        )
        try:
            if _bearer(console, request):
                return None
        except Refused as refused:
            log_event(log, "web.read_refused", reason=refused.reason, remote=_remote(request))
            return JSONResponse(
                {"ok": False, "error": refused.detail}, refused.status, refused.headers()
            )
        if console.sessions.get(request.cookies.get(auth.SESSION_COOKIE)) is not None:
            return None
        if wants_json:
            return JSONResponse(
                {"ok": False, "error": "log in with the operator token first (or send "
                 "Authorization: Bearer <token>)"}, 401,
            )  # fmt: skip
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse("/login?" + urlencode({"next": target}), status_code=303)


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
        "can_act": console.config.allow_actions and session is not None,
        "csrf": session.csrf if session else "",
        "who": session.who if session else None,
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


def job_url(queue: str, job_id: str, live: bool = False) -> str:
    """A job's page (``live``: its JSON twin).  The id is quoted whole, so '/', '%', '?', '#'
    are part of it; an id of dots only goes in the query (``?id=``), because a browser resolves
    '.' and '..' path segments (also spelt %2e) before it sends the request."""
    base = ("/live" if live else "") + f"/q/{queue}/job"
    if not job_id.strip("."):
        return f"{base}?{urlencode({'id': job_id})}"
    return f"{base}/{quote(job_id, safe='')}"


def _job_id(request: Request) -> str:
    return str(request.path_params.get("job_id") or request.query_params.get("id") or "")


def batch_url(queue: str, batch_id: str, live: bool = False) -> str:
    """A batch's page (``live``: its JSON twin); an id of dots only goes in the query, as in
    :func:`job_url`."""
    base = ("/live" if live else "") + f"/q/{queue}/batch"
    if not batch_id.strip("."):
        return f"{base}?{urlencode({'id': batch_id})}"
    return f"{base}/{quote(batch_id, safe='')}"


def _batch_id(request: Request) -> str:
    return str(request.path_params.get("batch_id") or request.query_params.get("id") or "")


# pages -----------------------------------------------------------------------------------------


async def overview_page(request: Request) -> Response:
    queues = await overview(_console(request).connected, _console(request).rates)
    return _page(request, "overview.html", queues=queues, live="/live/overview")


async def overview_live(request: Request) -> Response:
    queues = await overview(_console(request).connected, _console(request).rates)
    html = _fragment(request, "_overview_rows.html", queues=queues)
    return JSONResponse({"data": queues, "regions": {"queues": html}})


async def _queue_view(request: Request) -> dict[str, Any]:
    metric = request.query_params.get("metric", "backlog")
    console = _console(request)
    return await queue_view(console.connected, console.rates, _queue(request), metric)


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
            "partitions": [[fmt.partition(r["partition"]), r["heat"]] for r in view["partitions"]],
            "regions": regions,
        }
    )


async def jobs_page(request: Request, state: str | None = None) -> Response:
    queue = _queue(request)
    q = request.query_params
    try:
        # (an old word, ?state=active, is taken for the state it names now: shardq.names)
        state = names.job_state(state or q.get("state", "scheduled"))
    except ValueError as exc:
        return _error(request, 400, "Unknown state", str(exc))
    job_type = q.get("type") or None
    limit = _limit(q.get("limit"))
    console = _console(request)
    try:
        page = await AsyncInspector(console.connected).list_jobs(
            queue, state, job_type=job_type, limit=limit, cursor=q.get("cursor") or None
        )
    except InvalidCursorError as exc:
        return _error(request, 400, "Invalid cursor", str(exc))
    view = await queue_view(console.connected, console.rates, queue)
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
    queue, job_id = _queue(request), _job_id(request)
    client = _console(request).connected
    try:
        info = await client.get(queue, job_id)
        kept = await client.result_info(queue, job_id) if info is None else None
    except ValueError as exc:
        return _error(request, 400, "Invalid job id", str(exc))
    if info is None and kept is not None:
        # Completed, and it kept its result (keep_result): the result is all that is left.
        return _page(request, "job.html", queue=queue, job=None, kept=kept,
                     result=_pretty(kept.value) if kept.stored else None, live=None)  # fmt: skip
    if info is None:
        return _error(
            request, 404, "Job not found", f"job {job_id!r} is not in queue {queue!r}: it "
            "completed without keeping its result, was cancelled, or never existed",
        )  # fmt: skip
    return _page(
        request,
        "job.html",
        queue=queue,
        job=info,
        kept=None,
        payload=_pretty(info.payload),
        live=job_url(queue, job_id, live=True),
    )


#: The most of a payload or kept result a job page shows (a result may be 16 MiB):
#: `shardq job result` prints it whole.
SHOWN_CHARS = 64 * 1024


def _pretty(value: Any) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    if len(text) <= SHOWN_CHARS:
        return text
    return (
        f"{text[:SHOWN_CHARS]}\n... cut here: {len(text)} characters in all "
        "(shardq job result prints it whole)"
    )


async def job_live(request: Request) -> Response:
    queue, job_id = _queue(request), _job_id(request)
    client = _console(request).connected
    kept = None
    try:
        info = await client.get(queue, job_id)
        if info is None:
            kept = await client.result_info(queue, job_id)
    except ValueError:
        info = None
    html = _fragment(request, "_job_facts.html", queue=queue, job=info, kept=kept)
    state = info.state if info else "completed" if kept else "gone"
    return JSONResponse({"data": {"state": state}, "regions": {"facts": html}})


async def search(request: Request) -> Response:
    queue = _queue(request)
    text = request.query_params.get("q", "").strip()
    if not text:
        return RedirectResponse(f"/q/{queue}/jobs", status_code=303)
    client = _console(request).connected
    with contextlib.suppress(ValueError):
        if await client.get(queue, text) is not None:
            return RedirectResponse(job_url(queue, text), status_code=303)
    with contextlib.suppress(ValueError):
        found = await AsyncInspector(client).find(queue, text)
        if found is not None:
            return RedirectResponse(job_url(queue, found.id), status_code=303)
    return _error(
        request, 404, "No such job", f"no job in {queue!r} has the id or idempotency key "
        f"{text!r} (finished jobs are gone; idempotency keys expire)",
    )  # fmt: skip


async def schedules_page(request: Request) -> Response:
    queue = _queue(request)
    items = await _console(request).connected.schedules.list(queue)
    return _page(request, "schedules.html", queue=queue, schedules=items)


async def batches_page(request: Request) -> Response:
    queue = _queue(request)
    limit = _limit(request.query_params.get("limit"))
    items = await data.batches(_console(request).connected, queue, limit)
    return _page(request, "batches.html", queue=queue, batches=items, limit=limit,
                 limits=PAGE_LIMITS)  # fmt: skip


async def batch_page(request: Request) -> Response:
    queue, batch_id = _queue(request), _batch_id(request)
    try:
        found = await data.batch(_console(request).connected, queue, batch_id)
    except ValueError as exc:
        return _error(request, 400, "Invalid batch id", str(exc))
    if found is None:
        return _error(
            request, 404, "Batch not found", f"batch {batch_id!r} is not in queue {queue!r}: it "
            "was never created, or it ended and its record expired after its retention",
        )  # fmt: skip
    return _page(request, "batch.html", queue=queue, batch=found,
                 live=batch_url(queue, batch_id, live=True))  # fmt: skip


async def batch_live(request: Request) -> Response:
    queue, batch_id = _queue(request), _batch_id(request)
    try:
        found = await data.batch(_console(request).connected, queue, batch_id)
    except ValueError:
        found = None
    html = _fragment(request, "_batch_facts.html", queue=queue, batch=found)
    return JSONResponse({"data": found, "regions": {"facts": html}})


async def fleet_page(request: Request) -> Response:
    queue = _queue(request)
    members = await fleet(_console(request).connected, queue)
    return _page(request, "fleet.html", queue=queue, fleet=members, live=f"/live/q/{queue}/fleet")


async def fleet_live(request: Request) -> Response:
    queue = _queue(request)
    members = await fleet(_console(request).connected, queue)
    html = _fragment(request, "_fleet.html", queue=queue, fleet=members)
    return JSONResponse({"data": members, "regions": {"fleet": html}})


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


async def readyz(request: Request) -> Response:
    console = _console(request)
    if console.client is None:
        return PlainTextResponse(f"Redis unreachable: {console.redis_error}", status_code=503)
    try:
        await asyncio.wait_for(ping_async(console.client.redis), 2.0)
    except (RedisError, ShardqError, OSError, TimeoutError) as exc:
        return PlainTextResponse(f"Redis unreachable: {exc}", status_code=503)
    return PlainTextResponse("ready")


# login -----------------------------------------------------------------------------------------


def _cookie(request: Request, response: Response, name: str, value: str, max_age: float,
            path: str = "/") -> None:  # fmt: skip
    # Secure whenever the browser speaks https to us, also through a trusted TLS proxy (the
    # Boundary middleware set the scheme from its X-Forwarded-Proto).
    response.set_cookie(
        name,
        value,
        max_age=int(max_age),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=path,
    )


def _no_login(request: Request) -> Response:
    return _error(request, 404, "Nothing to log in to", "this console was started read-only "
                  "and open on loopback (no --allow-actions, no --require-login)")  # fmt: skip


def _login_form(request: Request, nxt: str, failed: bool, status: int = 200) -> Response:
    """The login page with a fresh signed form token, also set as the browser's cookie."""
    console = _console(request)
    token = console.forms.issue()
    response = console.templates.TemplateResponse(
        request,
        "login.html",
        _context(request, csrf=token, next=nxt, failed=failed),
        status_code=status,
    )
    _cookie(request, response, auth.LOGIN_COOKIE, token, console.forms.ttl, path="/login")
    return response


async def login_page(request: Request) -> Response:
    if not _console(request).config.login:
        return _no_login(request)
    return _login_form(request, _local(request.query_params.get("next"), "/"), failed=False)


async def login_submit(request: Request) -> Response:
    console = _console(request)
    if not console.config.login:
        return _no_login(request)
    form = await request.form()
    nxt = _local(str(form.get("next", "")), "/")
    remote = _remote(request)
    if not console.forms.valid(str(form.get("csrf", "")), request.cookies.get(auth.LOGIN_COOKIE)):
        log_event(log, "web.login_refused", reason="csrf", remote=remote)
        return _error(request, 403, "Refused", "the form's CSRF token does not match this "
                      "browser's, or is too old: reload the login page and try again")  # fmt: skip
    assert console.config.token is not None
    # Compared first, wrong ones counted: the right token always logs in (see _bearer).
    if not auth.same(str(form.get("token", "")), console.config.token):
        wait = console.limiter.retry_after(remote)
        if wait:
            log_event(log, "web.login_refused", reason="rate limited", remote=remote)
            page = _error(request, 429, "Too many attempts", f"too many wrong tokens from "
                          f"{remote}: retry in {wait} s")  # fmt: skip
            page.headers["Retry-After"] = str(wait)
            return page
        console.limiter.failed(remote)
        log_event(log, "web.login_refused", reason="bad token", remote=remote)
        await asyncio.sleep(0.5)  # slows a single guesser further
        return _login_form(request, nxt, failed=True, status=401)
    old = _session(request)
    if old is not None:
        console.sessions.drop(old.sid)
    fresh = console.sessions.new()
    log_event(log, "web.login", logging.INFO, who=fresh.who, remote=remote)
    done = RedirectResponse(nxt, status_code=303)
    _cookie(request, done, auth.SESSION_COOKIE, fresh.sid, console.sessions.ttl)
    done.delete_cookie(auth.LOGIN_COOKIE, path="/login")
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
    needs_batch: bool = False


ACTIONS: dict[str, Action] = {
    "pause": Action("Pause every partition of the queue", destructive=True),
    "resume": Action("Resume every partition of the queue", destructive=False),
    "run-now": Action("Run the job now", destructive=False, needs_job=True),
    "replay": Action("Replay the dead job (attempts reset, due now)", False, needs_job=True),
    "retry-dead": Action("Replay every dead job", destructive=True),
    "cancel": Action("Cancel the job", destructive=True, needs_job=True),
    "empty": Action("Delete every job in a state", destructive=True),
    "cancel-batch": Action(
        "Cancel the batch (no callback fires; its waiting children are cancelled)",
        destructive=True,
        needs_batch=True,
    ),
}


def _authorise(request: Request, form: FormData) -> tuple[str, bool]:
    """(who, by bearer) for an action request, or :class:`Refused`."""
    console = _console(request)
    if not console.config.allow_actions:
        raise Refused(403, "read-only", "this console is read-only: start it with "
                      "--allow-actions (and SHARDQ_WEB_TOKEN) to act on queues")  # fmt: skip
    if _bearer(console, request):
        return "bearer", True
    session = _session(request)
    if session is None:
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
        # A running job too: its worker is told to stop it, and it ends as cancelled.
        if await client.cancel(queue, job_id, running=True):
            return f"cancelled job {job_id}"
        return f"job {job_id} was not cancelled (finished, or not found)"
    if name == "empty":
        state = names.job_state(str(form.get("state", "")), EMPTY_STATES)
        return f"deleted {await ins.empty(queue, state)} {state} jobs"
    if name == "cancel-batch":
        batch_id = str(form.get("batch_id", "")).strip()
        out = await ins.cancel_batch(queue, batch_id)
        children = (f"{out.cancelled_children} waiting children cancelled, "
                    f"{out.running_children} running (they end as they will)")  # fmt: skip
        if out.was in ("open", "running"):
            return f"cancelled batch {batch_id} (was {out.was}): {children}"
        return f"batch {batch_id} had already ended ({out.was}), its state kept: {children}"
    raise ValueError(f"unknown action {name!r}")  # pragma: no cover - checked before


async def action(request: Request) -> Response:
    queue, name = _queue(request), str(request.path_params["action"])
    form = await request.form()
    remote = _remote(request)
    job_id = str(form.get("job_id", "")).strip() or None
    batch_id = str(form.get("batch_id", "")).strip() or None
    what: dict[str, Any] = {"action": name, "queue": queue, "job_id": job_id, "remote": remote}
    if batch_id is not None:
        what["batch_id"] = batch_id
    try:
        who, bearer = _authorise(request, form)
    except Refused as refused:
        log_event(log, "web.action_refused", reason=refused.reason, **what)
        if request.headers.get("authorization") or "json" in request.headers.get("accept", ""):
            return JSONResponse(
                {"ok": False, "error": refused.detail}, refused.status, refused.headers()
            )
        page = _error(request, refused.status, "Refused", refused.detail)
        page.headers.update(refused.headers())
        return page
    spec = ACTIONS.get(name)
    if spec is None or (spec.needs_job and not job_id) or (spec.needs_batch and not batch_id):
        detail = (
            f"unknown action {name!r}"
            if spec is None
            else f"{name} needs a {'job_id' if spec.needs_job else 'batch_id'}"
        )
        return (
            JSONResponse({"ok": False, "error": detail}, 400)
            if bearer
            else _error(request, 400, "Bad request", detail)
        )
    await _console(request).connected.partitions(queue)  # an unknown queue is a 404, first
    if spec.destructive and str(form.get("confirm", "")) != queue:
        if bearer:
            return JSONResponse(
                {"ok": False, "error": f"{name} is destructive: send confirm={queue}"}, 409
            )
        shown = ("job_id", "batch_id", "state", "type", "back")
        fields = {k: str(v) for k, v in form.items() if k in shown}
        return _page(request, "confirm.html", queue=queue, name=name, spec=spec, fields=fields)
    ok = True
    try:
        result = await _perform(_console(request).connected, queue, name, form)
    except (JobRunningError, JobNotFoundError, BatchNotFoundError, ValueError) as exc:
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


async def _no_functions(request: Request, exc: Exception) -> Response:
    # A node without shardq's library, and a user that may not load it (the viewer never may).
    return _error(request, 503, "Functions not loaded", str(exc))


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(request, exc.status_code, "Error", str(exc.detail))


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

    q = "/q/{queue:str}"
    routes = [
        Route("/", overview_page),
        Route(q, queue_page),
        Route(q + "/jobs", jobs_page),
        Route(q + "/dead", dead_page),
        # a job id may hold '/', '%', '?', '#' (see job_url): the path form takes the rest of
        # the path, the query form (?id=) takes ids a browser would rewrite as a path
        Route(q + "/job/{job_id:path}", job_page),
        Route(q + "/job", job_page),
        Route(q + "/search", search),
        Route(q + "/schedules", schedules_page),
        Route(q + "/batches", batches_page),
        Route(q + "/batch/{batch_id:str}", batch_page),
        Route(q + "/batch", batch_page),
        Route(q + "/fleet", fleet_page),
        Route(q + "/action/{action:str}", action, methods=["POST"]),
        Route("/live/overview", overview_live),
        Route("/live" + q, queue_live),
        Route("/live" + q + "/fleet", fleet_live),
        Route("/live" + q + "/job/{job_id:path}", job_live),
        Route("/live" + q + "/job", job_live),
        Route("/live" + q + "/batch/{batch_id:str}", batch_live),
        Route("/live" + q + "/batch", batch_live),
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
            FunctionsNotLoadedError: _no_functions,
            RedisError: _redis_down,
            HTTPException: _http,
        },
    )
    app.state.console = console
    app.add_middleware(Boundary, console=console)
    app.add_middleware(SecurityHeaders)  # outermost: refusals get the headers too
    return app
