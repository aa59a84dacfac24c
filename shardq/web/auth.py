"""Who may act: the operator token, login sessions and CSRF tokens.

- The token comes from the environment (``SHARDQ_WEB_TOKEN``), never from the command line
  (where ``ps`` and shell history would show it).  A request proves it either with
  ``Authorization: Bearer <token>`` (scripts; no cookie, so no CSRF exposure) or through the
  login form, which sets a session cookie (HttpOnly, SameSite=Strict, Secure over https).
- Each session has its own CSRF token; every form POST carries it and is refused without it
  (a cookie alone never authorises an action).  The login form itself carries the CSRF token
  of a pre-login session, and a successful login starts a new session (new id, new token).
- Sessions live in this process only (a restart logs everyone out), expire after
  ``SESSION_TTL_S`` and are capped in number, so a flood of login pages costs bounded memory.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

TOKEN_ENV = "SHARDQ_WEB_TOKEN"
MIN_TOKEN_LENGTH = 16
SESSION_COOKIE = "shardq_session"
SESSION_TTL_S = 8 * 3600.0
MAX_SESSIONS = 1000


class TokenError(ValueError):
    """The console cannot start with actions enabled (no token, or too short a one)."""


def check_token(token: str | None) -> str:
    if not token:
        raise TokenError(
            f"--allow-actions needs an operator token in the environment: set {TOKEN_ENV} "
            "(e.g. to the output of `openssl rand -hex 32`); it is never read from the "
            "command line"
        )
    if len(token) < MIN_TOKEN_LENGTH:
        raise TokenError(f"{TOKEN_ENV} is too short: use at least {MIN_TOKEN_LENGTH} characters")
    return token


def same(a: str, b: str) -> bool:
    """Constant-time comparison of two secrets."""
    return hmac.compare_digest(a.encode(), b.encode())


def label(sid: str) -> str:
    """A session's name in logs: a short hash, never the id that authenticates it."""
    return "session:" + hashlib.sha256(sid.encode()).hexdigest()[:10]


@dataclass
class Session:
    sid: str
    csrf: str
    authenticated: bool
    created: float = field(default_factory=time.monotonic)
    flash: list[str] = field(default_factory=list)

    @property
    def who(self) -> str:
        return label(self.sid)


class Sessions:
    """In-memory sessions, oldest dropped first past ``MAX_SESSIONS``."""

    def __init__(self, ttl: float = SESSION_TTL_S, cap: int = MAX_SESSIONS) -> None:
        self.ttl = ttl
        self.cap = cap
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def new(self, authenticated: bool) -> Session:
        while len(self._by_id) >= self.cap:
            self._by_id.popitem(last=False)
        s = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), authenticated)
        self._by_id[s.sid] = s
        return s

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        s = self._by_id.get(sid)
        if s is None:
            return None
        if time.monotonic() - s.created > self.ttl:
            self._by_id.pop(sid, None)
            return None
        return s

    def drop(self, sid: str) -> None:
        self._by_id.pop(sid, None)

    def __len__(self) -> int:
        return len(self._by_id)
