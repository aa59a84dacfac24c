"""What every route of the console shares: its configuration (:class:`WebConfig`), its state
(:class:`Console`: the client, the sessions, the rates), and the helpers that read a request and
render a page."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from shardq.aio import AsyncClient
from shardq.config import RedisSettings
from shardq.errors import RedisUnavailableError
from shardq.web import auth
from shardq.web.data import Rates

PAGE_LIMITS = (20, 50, 100, 200)


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


# reading a request -----------------------------------------------------------------------------


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def session_of(request: Request) -> auth.Session | None:
    return console_of(request).sessions.get(request.cookies.get(auth.SESSION_COOKIE))


def remote(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def queue_of(request: Request) -> str:
    return str(request.path_params["queue"])


def page_limit(raw: str | None) -> int:
    try:
        value = int(raw or 50)
    except ValueError:
        return 50
    return max(1, min(200, value))


def local_target(target: str | None, fallback: str) -> str:
    """A redirect target on this console only (no scheme, no host, no ``//``)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return fallback


def job_url(queue: str, job_id: str, live: bool = False) -> str:
    """A job's page (``live``: its JSON twin).  The id is quoted whole, so '/', '%', '?', '#'
    are part of it; an id of dots only goes in the query (``?id=``), because a browser resolves
    '.' and '..' path segments (also spelt %2e) before it sends the request."""
    base = ("/live" if live else "") + f"/q/{queue}/job"
    if not job_id.strip("."):
        return f"{base}?{urlencode({'id': job_id})}"
    return f"{base}/{quote(job_id, safe='')}"


def job_id_of(request: Request) -> str:
    return str(request.path_params.get("job_id") or request.query_params.get("id") or "")


def batch_url(queue: str, batch_id: str, live: bool = False) -> str:
    """A batch's page (``live``: its JSON twin); an id of dots only goes in the query, as in
    :func:`job_url`."""
    base = ("/live" if live else "") + f"/q/{queue}/batch"
    if not batch_id.strip("."):
        return f"{base}?{urlencode({'id': batch_id})}"
    return f"{base}/{quote(batch_id, safe='')}"


def batch_id_of(request: Request) -> str:
    return str(request.path_params.get("batch_id") or request.query_params.get("id") or "")


# rendering -------------------------------------------------------------------------------------


def context(request: Request, **extra: Any) -> dict[str, Any]:
    """What every template is rendered with: the session's rights and CSRF token, its flash
    messages (taken), the poll interval, this page's path."""
    console = console_of(request)
    session = session_of(request)
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


def page(request: Request, template: str, status: int = 200, **extra: Any) -> Response:
    return console_of(request).templates.TemplateResponse(
        request, template, context(request, **extra), status_code=status
    )


def fragment(request: Request, template_name: str, **extra: Any) -> str:
    template = console_of(request).templates.get_template(template_name)
    return template.render(context(request, **extra))


def error_page(request: Request, status: int, title: str, detail: str) -> Response:
    return page(request, "error.html", status=status, title=title, detail=detail)
