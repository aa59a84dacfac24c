"""The console's boundary: who may read, who may act, and from where.

- **The token** comes from the environment (``SHARDQ_WEB_TOKEN``), never from the command line
  (where ``ps`` and shell history would show it).  A request proves it either with
  ``Authorization: Bearer <token>`` (scripts; no cookie, so no CSRF exposure) or through the
  login form, which sets a session cookie (HttpOnly, SameSite=Strict, Secure over https,
  including https terminated by a trusted proxy).  Actions always need it; reads need it when
  the console listens beyond loopback, or with ``--require-login``.
- **Sessions** exist only after a successful login (only the token holder can make one), each
  with its own CSRF token that every form POST carries.  They live in this process (a restart
  logs everyone out), expire after ``SESSION_TTL_S`` and are capped in number.  Before login
  there is no server state at all: the login form carries a signed, dated token that must match
  a cookie of the same browser (:class:`LoginForms`), so any number of anonymous login pages
  costs nothing and evicts nobody.
- **Guessing** is rate limited per client address (:class:`FailureLimiter`, bounded memory):
  past a burst of wrong tokens, every wrong token from that address is answered 429 with
  ``Retry-After`` until the budget refills.  The token is compared first and only failures
  count, so the right token always gets in: behind ``kubectl port-forward`` or a NAT every
  client has one address, and a locked-out operator would be locked out by anyone.  What stops
  guessing is the token's length (:data:`MIN_TOKEN_LENGTH`; a random one, as docs/deploy.md
  says), not the limit.
- **The Host header** must name this console (:class:`HostRule`): a web page whose name was
  rebound to 127.0.0.1 (DNS rebinding) sends its own name, and is refused.
- **A TLS proxy** in front is believed about the scheme and the client address
  (``X-Forwarded-Proto``/``-For``) only when the request comes from one of the configured
  proxy addresses (:class:`ProxyRule`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

TOKEN_ENV = "SHARDQ_WEB_TOKEN"
MIN_TOKEN_LENGTH = 16
SESSION_COOKIE = "shardq_session"
LOGIN_COOKIE = "shardq_login"
SESSION_TTL_S = 8 * 3600.0
LOGIN_FORM_TTL_S = 3600.0
MAX_SESSIONS = 1000
# Wrong tokens a client address may send per window before it waits (bearer and login form).
AUTH_FAILURES = 10
AUTH_WINDOW_S = 60.0
MAX_LIMITED_CLIENTS = 10_000
LOOPBACK_NAMES = ("localhost",)
WILDCARD_BINDS = ("0.0.0.0", "::", "")


class TokenError(ValueError):
    """The console cannot start: it needs an operator token (none, or too short a one)."""


def check_token(token: str | None, why: str) -> str:
    """``token`` if it is long enough; else :class:`TokenError` saying ``why`` it is needed and
    what to set."""
    if not token:
        raise TokenError(
            f"{why} needs an operator token in the environment: set {TOKEN_ENV} "
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


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """Whether a bind address (or Host name) is this machine only: 127.0.0.0/8, ::1, localhost."""
    if host.lower().rstrip(".") in LOOPBACK_NAMES:
        return True
    ip = _ip(host)
    return ip is not None and ip.is_loopback


# sessions --------------------------------------------------------------------------------------


@dataclass
class Session:
    """A logged-in browser (sessions exist only after a successful login)."""

    sid: str
    csrf: str
    created: float = field(default_factory=time.monotonic)
    flash: list[str] = field(default_factory=list)

    @property
    def who(self) -> str:
        return label(self.sid)


class Sessions:
    """In-memory logged-in sessions, oldest dropped first past ``cap`` (only token holders can
    add one, so the cap bounds memory, not who stays logged in)."""

    def __init__(self, ttl: float = SESSION_TTL_S, cap: int = MAX_SESSIONS) -> None:
        self.ttl = ttl
        self.cap = cap
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def new(self) -> Session:
        now = time.monotonic()
        while self._by_id:  # expired ones first (oldest first, so stop at a live one)
            oldest = next(iter(self._by_id.values()))
            if now - oldest.created <= self.ttl:
                break
            self._by_id.popitem(last=False)
        while len(self._by_id) >= self.cap:
            self._by_id.popitem(last=False)
        s = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32))
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


class LoginForms:
    """The login form's CSRF token without server state: ``<issued s>.<nonce>.<mac>``, signed
    with a key of this process, valid for ``ttl`` seconds, and accepted only together with a
    cookie holding the same value (the browser that loaded the form is the one posting it)."""

    def __init__(self, ttl: float = LOGIN_FORM_TTL_S) -> None:
        self.ttl = ttl
        self._key = secrets.token_bytes(32)

    def _mac(self, body: str) -> str:
        digest = hmac.new(self._key, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def issue(self, now: float | None = None) -> str:
        body = f"{int(time.time() if now is None else now)}.{secrets.token_urlsafe(16)}"
        return f"{body}.{self._mac(body)}"

    def valid(self, form: str, cookie: str | None, now: float | None = None) -> bool:
        if not cookie or not same(form, cookie):
            return False
        body, _, mac = form.rpartition(".")
        issued, _, _ = body.partition(".")
        if not (issued.isascii() and issued.isdigit()) or not same(mac, self._mac(body)):
            return False
        age = (time.time() if now is None else now) - int(issued)
        return 0 <= age <= self.ttl


# guessing --------------------------------------------------------------------------------------


@dataclass
class _Budget:
    tokens: float
    at: float


class FailureLimiter:
    """Wrong tokens per client address: a bucket of ``burst`` failures refilled over
    ``window_s``.  An empty bucket blocks that address (429) until one failure's worth refills.

    Memory is bounded: at most ``max_clients`` addresses are remembered (least recently seen
    dropped first: forgetting one only forgives it).  IPv6 clients count per /64, the block one
    host usually holds, so walking through its addresses buys no extra guesses."""

    def __init__(
        self,
        burst: int = AUTH_FAILURES,
        window_s: float = AUTH_WINDOW_S,
        max_clients: int = MAX_LIMITED_CLIENTS,
    ) -> None:
        self.burst = burst
        self.rate = burst / window_s  # failures forgiven per second
        self.max_clients = max_clients
        self._clients: OrderedDict[str, _Budget] = OrderedDict()

    @staticmethod
    def key(address: str) -> str:
        ip = _ip(address)
        if ip is None:
            return address
        if isinstance(ip, ipaddress.IPv6Address):
            if ip.ipv4_mapped is not None:
                return str(ip.ipv4_mapped)
            return str(ipaddress.IPv6Network((ip, 64), strict=False))
        return str(ip)

    def _budget(self, address: str, now: float) -> tuple[str, _Budget | None]:
        k = self.key(address)
        b = self._clients.get(k)
        if b is not None:
            b.tokens = min(float(self.burst), b.tokens + (now - b.at) * self.rate)
            b.at = now
            if b.tokens >= self.burst:  # fully forgiven: forget it
                del self._clients[k]
                return k, None
        return k, b

    def retry_after(self, address: str, now: float | None = None) -> int:
        """0 if ``address`` may try a token now, else the seconds it must wait."""
        _, b = self._budget(address, time.monotonic() if now is None else now)
        if b is None or b.tokens >= 1:
            return 0
        return max(1, math.ceil((1 - b.tokens) / self.rate))

    def failed(self, address: str, now: float | None = None) -> None:
        at = time.monotonic() if now is None else now
        k, b = self._budget(address, at)
        if b is None:
            b = self._clients[k] = _Budget(float(self.burst), at)
        self._clients.move_to_end(k)
        b.tokens = max(0.0, b.tokens - 1)
        while len(self._clients) > self.max_clients:
            self._clients.popitem(last=False)

    def __len__(self) -> int:
        return len(self._clients)


# where requests come from ----------------------------------------------------------------------


def host_name(header: str) -> str:
    """The name of a Host header, without its port, lowercased, without a final dot
    (``[::1]:8080`` -> ``::1``, ``Example.COM.:443`` -> ``example.com``)."""
    h = header.strip().lower()
    if h.startswith("["):
        return h[1 : h.find("]")] if "]" in h else h
    name, colon, port = h.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        h = name
    return h.rstrip(".")


class HostRule:
    """Which Host headers this console answers to:

    - the names configured (``--allowed-host``), exactly (no suffix match), any port;
    - the loopback names and addresses, always: a browser sends them only for a page served
      from this machine's loopback (an SSH tunnel, ``kubectl port-forward``), never for a page
      of another site;
    - the bind address, and when bound to every address (0.0.0.0, ``::``) any IP literal: a
      rebinding attack needs a name of the attacker's, so an address as Host is never one.

    The port is not checked: a tunnel or port-forward changes it (``localhost:9000`` reaching
    a pod's 8080), and DNS rebinding is stopped by the name alone."""

    def __init__(self, bind: str, names: Iterable[str] = ()) -> None:
        self.bind = host_name(bind) if bind else ""
        self.wildcard = self.bind in WILDCARD_BINDS
        self.names = frozenset(host_name(n) for n in names if n.strip())

    def allows(self, header: str | None) -> bool:
        if not header:
            return False
        name = host_name(header)
        if not name:
            return False
        if name in self.names or name == self.bind or is_loopback(name):
            return True
        return self.wildcard and _ip(name) is not None


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """Addresses or CIDR networks; ValueError naming the one that is neither."""
    out: list[Network] = []
    for v in values:
        try:
            out.append(ipaddress.ip_network(v.strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"trusted proxy {v!r} is not an IP address or network (e.g. 10.0.0.7 or "
                "10.0.0.0/24)"
            ) from None
    return tuple(out)


class ProxyRule:
    """``X-Forwarded-Proto`` and ``X-Forwarded-For`` from the configured proxies only.  From
    anyone else they are the client's own claim, and ignored."""

    def __init__(self, proxies: Iterable[str] = ()) -> None:
        self.networks = parse_networks(proxies)

    def trusted(self, address: str | None) -> bool:
        ip = _ip(address) if address else None
        return ip is not None and any(ip in n for n in self.networks)

    def resolve(
        self, peer: str | None, scheme: str, forwarded_proto: str | None, forwarded_for: str | None
    ) -> tuple[str | None, str]:
        """(client address, scheme) of a request that ``peer`` sent us."""
        if not self.trusted(peer):
            return peer, scheme
        if forwarded_proto:
            # the nearest proxy's word (a chain appends): the last value
            last = forwarded_proto.split(",")[-1].strip().lower()
            if last in ("http", "https"):
                scheme = last
        client = peer
        if forwarded_for:
            hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
            # right to left: the first address that is not one of our proxies sent it to them
            for hop in reversed(hops):
                client = hop
                if not self.trusted(hop):
                    break
        return client, scheme
