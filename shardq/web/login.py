"""Logging in to the console and out: the login form (with a signed form token, no server state
before login), the token check with its rate limit, the session cookie."""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from shardq.logs import log_event
from shardq.web import auth
from shardq.web.console import console_of, context, error_page, local_target, remote, session_of

log = logging.getLogger("shardq.web")


def set_cookie(request: Request, response: Response, name: str, value: str, max_age: float,
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
    return error_page(
        request, 404, "Nothing to log in to", "this console was started read-only and open on "
        "loopback (no --allow-actions, no --require-login)",
    )  # fmt: skip


def _login_form(request: Request, nxt: str, failed: bool, status: int = 200) -> Response:
    """The login page with a fresh signed form token, also set as the browser's cookie."""
    console = console_of(request)
    token = console.forms.issue()
    response = console.templates.TemplateResponse(
        request,
        "login.html",
        context(request, csrf=token, next=nxt, failed=failed),
        status_code=status,
    )
    set_cookie(request, response, auth.LOGIN_COOKIE, token, console.forms.ttl, path="/login")
    return response


async def login_page(request: Request) -> Response:
    if not console_of(request).config.login:
        return _no_login(request)
    return _login_form(request, local_target(request.query_params.get("next"), "/"), failed=False)


async def login_submit(request: Request) -> Response:
    console = console_of(request)
    if not console.config.login:
        return _no_login(request)
    form = await request.form()
    nxt = local_target(str(form.get("next", "")), "/")
    address = remote(request)
    if not console.forms.valid(str(form.get("csrf", "")), request.cookies.get(auth.LOGIN_COOKIE)):
        log_event(log, "web.login_refused", reason="csrf", remote=address)
        return error_page(
            request, 403, "Refused", "the form's CSRF token does not match this browser's, or "
            "is too old: reload the login page and try again",
        )  # fmt: skip
    assert console.config.token is not None
    # Compared first, wrong ones counted: the right token always logs in (see middleware.bearer).
    if not auth.same(str(form.get("token", "")), console.config.token):
        wait = console.limiter.retry_after(address)
        if wait:
            log_event(log, "web.login_refused", reason="rate limited", remote=address)
            refused = error_page(request, 429, "Too many attempts", f"too many wrong tokens "
                                 f"from {address}: retry in {wait} s")  # fmt: skip
            refused.headers["Retry-After"] = str(wait)
            return refused
        console.limiter.failed(address)
        log_event(log, "web.login_refused", reason="bad token", remote=address)
        await asyncio.sleep(0.5)  # slows a single guesser further
        return _login_form(request, nxt, failed=True, status=401)
    old = session_of(request)
    if old is not None:
        console.sessions.drop(old.sid)
    fresh = console.sessions.new()
    log_event(log, "web.login", logging.INFO, who=fresh.who, remote=address)
    done = RedirectResponse(nxt, status_code=303)
    set_cookie(request, done, auth.SESSION_COOKIE, fresh.sid, console.sessions.ttl)
    done.delete_cookie(auth.LOGIN_COOKIE, path="/login")
    return done


async def logout(request: Request) -> Response:
    form = await request.form()
    session = session_of(request)
    if session is not None and auth.same(str(form.get("csrf", "")), session.csrf):
        console_of(request).sessions.drop(session.sid)
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(auth.SESSION_COOKIE, path="/")
    return response
