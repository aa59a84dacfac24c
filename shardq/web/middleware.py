"""The console's ASGI middleware: :class:`Boundary` (who may read: the trusted proxy, the Host
header, the token) and :class:`SecurityHeaders` (the CSP and its companions on every response).
The rules they apply are :mod:`shardq.web.auth`'s."""

from __future__ import annotations

import logging
import re
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shardq.logs import log_event
from shardq.web import auth
from shardq.web.console import Console, remote

log = logging.getLogger("shardq.web")

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


def bearer(console: Console, request: Request) -> bool:
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
    address = remote(request)
    wait = console.limiter.retry_after(address)
    if wait:
        raise Refused(429, "rate limited", f"too many wrong tokens from {address}: retry in "
                      f"{wait} s", retry_after=wait)  # fmt: skip
    console.limiter.failed(address)
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
            log_event(log, "web.host_refused", host=(host or "")[:100], remote=remote(request))
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
            if bearer(console, request):
                return None
        except Refused as refused:
            log_event(log, "web.read_refused", reason=refused.reason, remote=remote(request))
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
