"""Settings as frozen dataclasses: from code, from a URL, or from SHARDQ_* environment variables.

Secrets (the Redis password) never appear in repr() or logs.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlparse, urlsplit

from shardq.errors import ConfigError

DEFAULT_URL = "redis://127.0.0.1:7000"
#: The last epoch ms a datetime can show (9999-12-31T23:59:59.999Z): no time shardq takes can
#: be later, and a stored time past it cannot be a real one (and would fail whoever formats
#: it).  Here, below every layer, for the models' checks and the store's readers alike.
MAX_TIME_MS = 253_402_300_799_999
#: The default lateness budget of dispatchers and workers (seconds): see
#: DispatcherSettings.lateness_budget; chosen from the cost/lateness curve in
#: docs/benchmarks.md, "The lateness budget".
LATENESS_BUDGET = 0.010
#: Past this a budget stops buying anything (calls are full long before) and starts to look
#: like an outage: a second.
MAX_LATENESS_BUDGET = 1.0
#: A partition lease's life in Redis without a renewal (DispatcherSettings.lease_ttl): liveness
#: is the dispatcher's membership, so this only clears leases of a fleet that went away.
LEASE_TTL = 86_400.0
#: The most WorkerSettings.max_result_bytes may be: the complete script refuses a longer
#: result record, and readers refuse a longer stored one (lua/complete-5.lua, result-6).
MAX_RESULT_BYTES = 16 * 1024 * 1024
#: The most WorkerSettings.max_error_bytes may be: the fail script keeps no more of an error.
MAX_ERROR_BYTES = 1_000_000
#: The most jobs or batches one listing page holds (Inspector.jobs, Inspector.batches; the
#: CLI's --limit).
MAX_LIMIT = 1000
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


# A password may hold '#', '/', '?', '@', ':' or '[' unescaped: urllib would read them as a
# fragment, a path, a query, a port or an IPv6 host, and then put the password in a "bad port"
# message.  So the credentials are cut out by hand first, between '://' and the LAST '@',
# before anything parses the rest; every message shows the URL through redact_url.
_QUERY_SECRET = re.compile(r"(?i)([?&;](?:password|pass|passwd|pwd)=)[^&;#]*")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")


def split_credentials(url: str) -> tuple[str, str | None, str]:
    """``url`` as (scheme with '://', the credentials or None, the rest): split after a
    leading scheme (absent: everything up to the last '@' is credentials) and at the LAST '@'."""
    scheme = _SCHEME.match(url)
    head = scheme.group() if scheme else ""
    rest = url[len(head) :]
    userinfo, at, hostpart = rest.rpartition("@")
    if not at:
        return head, None, rest
    return head, userinfo, hostpart


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (for messages and logs): what lies between
    '://' and the last '@' (the username stays when it is ``user:password``), and a
    ``password=`` query argument."""
    if not isinstance(url, str):
        return "<not a string>"
    head, userinfo, rest = split_credentials(url)
    rest = _QUERY_SECRET.sub(r"\1***", rest)
    if userinfo is None:
        return head + rest
    user, colon, _ = userinfo.partition(":")
    # Without a ':' the credentials may be a bare password (some clients read them so).
    return f"{head}{user}:***@{rest}" if colon else f"{head}***@{rest}"


def url_has_password(url: str) -> bool:
    """Whether ``url`` carries a password (``user:password@`` or ``:password@``)."""
    _, userinfo, _ = split_credentials(url)
    return userinfo is not None and ":" in userinfo


def without_password(url: str) -> tuple[str, str | None]:
    """``url`` with its password cut out (the username stays), and the password (decoded)."""
    head, userinfo, rest = split_credentials(url)
    if userinfo is None or ":" not in userinfo:
        return url, None
    user, _, secret = userinfo.partition(":")
    return f"{head}{user}@{rest}" if user else head + rest, unquote(secret)


def is_text(value: object) -> bool:
    """None, or a str that can be sent (no lone surrogates: bytes that were not UTF-8 on a
    command line or in the environment arrive as those, and fail only when sent)."""
    if value is None:
        return True
    if not isinstance(value, str):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _parse_bool(name: str, value: str) -> bool:
    low = value.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ConfigError(f"{name}={value!r}: use one of true/false, 1/0, yes/no")


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """How to reach Redis.  ``cluster=None`` asks the server whether it runs in cluster mode."""

    url: str = DEFAULT_URL
    """The seed node, ``redis://host:port`` (``rediss://`` for TLS); a cluster is found from it."""
    username: str | None = None
    """The Redis ACL user (one per role: ``shardq acl print`` shows them)."""
    password: str | None = field(default=None, repr=False)
    """The user's password: never shown in repr, logs or errors."""
    cluster: bool | None = None
    """True: a Redis Cluster; False: a standalone server; None: ask the server."""
    ssl: bool = False
    """TLS, with the certificate and its host name verified (``rediss://`` sets it)."""
    ssl_ca_certs: str | None = None
    """The CA file that signed the server's certificate (default: the system's store)."""
    socket_timeout: float = 5.0
    """Seconds a call waits for its reply."""
    socket_connect_timeout: float = 5.0
    """Seconds a connection attempt waits."""
    max_connections: int = 64
    """Connections per Redis node and client.  A burst that wants more waits up to 10 s for
    a free one, except on redis-py's asyncio cluster client, which fails a call past the cap
    at once (MaxConnectionsError; shardq's own calls retry it)."""
    client_name: str | None = None
    """The name the connections give themselves (CLIENT SETNAME), as CLIENT LIST shows it."""

    def __post_init__(self) -> None:
        for name in ("username", "password"):
            if not is_text(getattr(self, name)):
                # (never the value: it may be the password)
                raise ConfigError(
                    f"the Redis {name} is not valid text (it holds bytes that are not UTF-8): "
                    "write it in UTF-8"
                )

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> Self:
        """Parse ``redis://[user:password@]host:port[?cluster=true]`` (``rediss://`` for TLS).

        The credentials move out of the stored URL, so ``repr`` never shows them.
        """
        if not isinstance(url, str):
            raise ConfigError(f"Redis URL must be a string, got {type(url).__name__}")
        shown = redact_url(url)
        head, userinfo, rest = split_credentials(url)
        scheme = head[:-3].lower()
        if scheme not in ("redis", "rediss"):
            raise ConfigError(f"Redis URL must start with redis:// or rediss://, got {shown!r}")
        username = password = None
        if userinfo is not None:
            user, colon, secret = userinfo.partition(":")
            username = unquote(user) or None
            password = unquote(secret) if colon and secret else None
        try:
            # The credentials are out: nothing urllib says about the rest can hold them.
            parsed = urlsplit(f"{scheme}://{rest}")
            hostname = parsed.hostname
        except ValueError as exc:
            raise ConfigError(
                f"Redis URL {shown!r} cannot be parsed ({exc}): write redis://host:port, an IPv6 "
                "host in brackets (redis://[::1]:6379)"
            ) from None
        if not hostname:
            raise ConfigError(f"Redis URL {shown!r} has no host: use redis://host:port")
        try:
            port = parsed.port or 6379
        except ValueError as exc:
            raise ConfigError(
                f"Redis URL {shown!r} has a bad port ({exc}): use a number 1-65535, as in "
                "redis://host:6379"
            ) from None
        query = parse_qs(parsed.query)
        if any(_QUERY_SECRET.match("?" + name + "=") for name in query):
            raise ConfigError(
                f"Redis URL {shown!r} has a password as a query argument, which shardq does not "
                "read: write redis://user:password@host:port, or set SHARDQ_REDIS_PASSWORD"
            )
        cluster: bool | None = None
        if "cluster" in query:
            try:
                cluster = _parse_bool("cluster", query["cluster"][-1])
            except ConfigError as exc:
                raise ConfigError(
                    f"Redis URL {shown!r}: {exc} (or leave ?cluster= out: it is detected)"
                ) from None
        host = hostname if ":" not in hostname else f"[{hostname}]"
        clean = f"{parsed.scheme}://{host}:{port}"
        values: dict[str, Any] = {
            "url": clean,
            "username": username,
            "password": password,
            "cluster": cluster,
            "ssl": scheme == "rediss",
        }
        values.update(overrides)
        return cls(**values)

    @classmethod
    def from_env(cls, prefix: str = "SHARDQ_REDIS_") -> Self:
        """Read SHARDQ_REDIS_URL, _USERNAME, _PASSWORD, _CLUSTER and _SSL_CA_CERTS."""
        settings = cls.from_url(os.environ.get(prefix + "URL", DEFAULT_URL))
        return replace(settings, **cls.env_overrides(prefix))

    @staticmethod
    def env_overrides(prefix: str = "SHARDQ_REDIS_") -> dict[str, Any]:
        """What SHARDQ_REDIS_USERNAME, _PASSWORD, _CLUSTER and _SSL_CA_CERTS set (the URL is
        not read: a caller with a URL of its own needs only these)."""
        env = os.environ
        overrides: dict[str, Any] = {}
        if prefix + "USERNAME" in env:
            overrides["username"] = env[prefix + "USERNAME"]
        if prefix + "PASSWORD" in env:
            overrides["password"] = env[prefix + "PASSWORD"]
        if prefix + "CLUSTER" in env:
            overrides["cluster"] = _parse_bool(prefix + "CLUSTER", env[prefix + "CLUSTER"])
        if prefix + "SSL_CA_CERTS" in env:
            overrides["ssl_ca_certs"] = env[prefix + "SSL_CA_CERTS"]
        return overrides

    def host_port(self) -> tuple[str, int]:
        """The seed node's host and port."""
        parsed = urlparse(self.url)
        return parsed.hostname or "127.0.0.1", parsed.port or 6379

    def connection_kwargs(self) -> dict[str, Any]:
        """Keyword arguments common to redis-py's standalone and cluster clients."""
        host, port = self.host_port()
        kwargs: dict[str, Any] = {
            "host": host,
            "port": port,
            "username": self.username,
            "password": self.password,
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_connect_timeout,
            "max_connections": self.max_connections,
            "client_name": self.client_name,
        }
        if self.ssl:
            # Verify the certificate and that it names the host, explicitly: older redis-py
            # releases did not check the hostname by default.
            kwargs["ssl"] = True
            kwargs["ssl_ca_certs"] = self.ssl_ca_certs
            kwargs["ssl_cert_reqs"] = "required"
            kwargs["ssl_check_hostname"] = True
        return kwargs


def _check_int(name: str, value: object, lo: int, hi: int, why: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(
            f"{name} must be an integer {lo}..{hi}{f' ({why})' if why else ''}, got {value!r}"
        )


def _check_range(name: str, value: object, lo: float, hi: float) -> None:
    """A finite number of seconds (int or float) within [lo, hi]."""
    # The comparison refuses nan and inf, and (unlike math.isfinite) huge ints without an
    # OverflowError.
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ConfigError(f"{name} must be a number of seconds in [{lo}, {hi}], got {value!r}")


def _check_seconds(name: str, value: float, *, positive: bool = True) -> None:
    if not isinstance(value, int | float) or math.isnan(value) or math.isinf(value):
        raise ConfigError(f"{name} must be a finite number of seconds, got {value!r}")
    if positive and value <= 0:
        raise ConfigError(f"{name} must be > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class ProducerSettings:
    """Limits the producer enforces before anything is written."""

    max_payload_bytes: int = 64 * 1024
    """The largest job an enqueue accepts, in bytes: its type, payload and options as stored
    (JSON)."""
    past_tolerance: float = 300.0
    """A run time this many seconds before the Redis clock runs now; older is an error."""
    max_horizon: float = 366 * 24 * 3600.0
    """A run time more than this many seconds after the Redis clock is an error."""
    idempotency_retention: float = 24 * 3600.0
    """How long after a job's due time its idempotency key keeps returning the same job."""
    unique_retention: float = 7 * 24 * 3600.0
    """The longest a ``unique_until="done"`` key holds after its job's due time: a job still
    not done this long after it was due (waiting, running or retrying) no longer blocks a new
    one (the bound that keeps a key from being held forever)."""
    durable_replicas: int = 1
    """``durable=True`` enqueues wait until this many replicas confirm the write."""
    durable_timeout: float = 1.0
    """How long a durable enqueue waits for them before raising NotDurableError."""
    retry_timeout: float = 15.0
    """How long a call keeps resending through failovers, slot moves and restarts (a killed
    primary is replaced in about 3-5 s) before it raises RedisUnavailableError."""
    sticky_jobs: int = 16
    """The most jobs one run holds: jobs without a job id or idempotency key that come due
    within one ``sticky_window`` go to the same partition, this many at most, so they share
    their calls (a job's promote, read and ack cost about as much alone as with dozens;
    shardq.store.sticky).  1: each job to a partition of its own (a hash of its random id)."""
    sticky_window: float = 0.01
    """Jobs due within one window of this many seconds may share a run: about the fleet's
    lateness budget (10 ms by default), since jobs due further apart go in separate calls
    anyway, and a longer run would only keep one partition busier for longer."""
    # Why 16: a call costs about a fixed part plus a part per job, so its fixed part charged
    # to each of 16 jobs is already small (most of the saving at 16:
    # bench/reference/2026-12-06/sticky-sweep-5d7cabd.txt), while a burst of slow jobs still
    # starts on several partitions, hence several workers (a partition's jobs go first to the
    # worker it is assigned to).

    def __post_init__(self) -> None:
        for name, (lo, hi) in PRODUCER_BOUNDS.items():
            if name in _PRODUCER_COUNTS:
                _check_int(name, getattr(self, name), int(lo), int(hi))
            else:
                _check_range(name, getattr(self, name), lo, hi)


#: Each ProducerSettings field's bounds: a count for its int fields, else seconds.  They match
#: what the scripts accept (times travel as ms), so a setting that passes here is never refused
#: by Redis later.  The Node producer's bounds are generated from these.
PRODUCER_BOUNDS: dict[str, tuple[float, float]] = {
    "max_payload_bytes": (1, 512 * 1024 * 1024),
    "past_tolerance": (0, 1e10),
    "max_horizon": (0.001, 1e10),
    "idempotency_retention": (0.001, 1e10),
    "unique_retention": (0.001, 1e10),
    "durable_timeout": (0.001, 3600),
    "retry_timeout": (0, 3600),
    "durable_replicas": (1, 64),
    "sticky_jobs": (1, 1_000_000),
    "sticky_window": (0.001, 3600),
}
_PRODUCER_COUNTS = {f.name for f in fields(ProducerSettings) if f.type == "int"}


@dataclass(frozen=True, slots=True)
class DispatcherSettings:
    """How a dispatcher drains its partitions."""

    batch: int = 100
    """K: most jobs one promote call moves (about 3-5 us of Redis time per job)."""
    max_sleep: float = 1.0
    """Longest sleep with no due job in sight; wake-up hints usually come first."""
    max_idle_sleep: float = 30.0
    """Sleep of a partition found idle again and again (no job due before it): its sleep
    doubles from max_sleep while below this; from then on it is looked at only by the
    dispatcher's safety net, every max(this, partitions held / 2 s), so an idle dispatcher
    sends about 2 such promotes a second whatever the partitions it holds.  Hints wake it at
    once, and every partition gets one after each (re)subscription, so this only bounds how
    late a job whose hint was lost can be (at most 1.5x that period)."""
    coalesce: float = 0.002
    """Extra wait after the earliest due time before a primary's promote round, so partitions
    coming due within this window go in one round: fewer, fuller calls at high rates, at most
    this much more lateness at any rate (0: promote each partition the moment it is due)."""
    lateness_budget: float = LATENESS_BUDGET
    """How late a job may start, on top of Redis and network time, so that calls carry more
    jobs (less Redis and process CPU per job).  Workers go first: the worker reads a partition
    up to half of it after its head job is due or a ready hint, and that read promotes the due
    jobs itself; the dispatcher promotes what no worker read within the whole budget (longer
    while its calls find the jobs already taken, at most 1 s more), and partitions with lanes
    on at half of it (shardq/runtime/budget.py).  Set the same on dispatchers and workers
    (SHARDQ_LATENESS_BUDGET sets both); 0: every wait sized for punctuality."""
    lease_time: float = 10.0
    """How long a lease that names a live dispatcher which does not serve the partition (a
    lease written by hand, or a dispatcher that lost track of it) blocks that partition before a
    peer takes it over.  A lease lasts as long as its dispatcher is a live member of the fleet:
    peers take a dead or paused owner's partitions as soon as its membership expires
    (membership_timeout), so an idle partition's lease costs no call (``lease_ttl``)."""
    renew_interval: float = 1.0
    """How often the lease loop runs: heartbeat, renew, balance to the fair share."""
    membership_timeout: float = 2.5
    """A dispatcher that has not heartbeated for this long counts as dead: peers take its
    partitions at once (fencing makes that safe even if it was only paused)."""
    max_inflight_calls: int = 256
    """Most promote calls one round sends to one primary."""
    metrics_interval: float = 5.0
    """How often owned partitions are sampled for the Prometheus endpoint."""
    trim_interval: float = 1.0
    """How often owned ready streams are trimmed of acknowledged entries (acks leave them
    for this trim) and dead-letter streams cut to their cap."""
    hot_multiple: float = 3.0
    """Log a warning when a partition's rate passes this multiple of the mean."""
    allow_evicting_redis: bool = False
    """Start even when a primary's maxmemory-policy may evict keys (jobs would vanish without
    an error): only for throwaway setups.  The finding is still logged and exported."""
    require_appendonly: bool = False
    """Refuse to start when a primary has appendonly off (writes since the last snapshot are
    lost when it restarts)."""
    redis_check_interval: float = 60.0
    """How often each primary's maxmemory-policy and appendonly are checked again."""

    @property
    def lease_ttl(self) -> float:
        """How long a lease key lives in Redis unrenewed: a day, the backstop for a queue
        whose whole fleet went away (every live dispatcher renews its leases long before).
        Liveness is the dispatcher's membership heartbeat, not this: so an idle partition
        costs its owner a renewal every ``lease_ttl`` / 3, not every ``lease_time`` / 3."""
        return max(LEASE_TTL, self.lease_time)

    @property
    def tick(self) -> float:
        """The step of the process's wake-up grid: its periodic loops (membership, leases,
        layout, trim ...) and idle fallbacks end on multiples of it
        (shardq/runtime/supervisor.py)."""
        return self.renew_interval

    def __post_init__(self) -> None:
        _check_int("batch", self.batch, 1, 1000, "a call must stay short")
        _check_int("max_inflight_calls", self.max_inflight_calls, 1, 10_000)
        _check_range("max_sleep", self.max_sleep, 0.001, 3600.0)
        _check_range("max_idle_sleep", self.max_idle_sleep, 0.001, 3600.0)
        _check_range("coalesce", self.coalesce, 0.0, 1.0)
        _check_range("lateness_budget", self.lateness_budget, 0.0, MAX_LATENESS_BUDGET)
        _check_range("lease_time", self.lease_time, 0.1, 3600.0)
        _check_range("renew_interval", self.renew_interval, 0.01, 600.0)
        _check_range("membership_timeout", self.membership_timeout, 0.1, 3600.0)
        _check_range("metrics_interval", self.metrics_interval, 0.01, 3600.0)
        _check_range("trim_interval", self.trim_interval, 0.01, 3600.0)
        _check_range("hot_multiple", self.hot_multiple, 1.0, 1e6)
        _check_range("redis_check_interval", self.redis_check_interval, 0.01, 86400.0)
        if self.renew_interval * 2 > self.lease_time:
            raise ConfigError("renew_interval must be at most half of lease_time")
        if self.renew_interval * 2 > self.membership_timeout:
            raise ConfigError(
                "renew_interval must be at most half of membership_timeout (the lease loop "
                "heartbeats; one late round must not look like a death)"
            )


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How a worker reads, runs and settles jobs."""

    concurrency: int = 64
    """Jobs running at once in this process."""
    fetch_batch: int = 100
    """Most entries one fetch call reads from one partition."""
    visibility_timeout: float = 30.0
    """A delivery idle this long is taken over by another worker whoever holds it (a reply
    lost on the way, a worker stuck while its membership lives).  Deliveries of a worker that
    left the fleet are taken much sooner (see membership_timeout)."""
    heartbeat_interval: float = 0.75
    """How often running deliveries are claimed again and membership is renewed."""
    reclaim_interval: float = 5.0
    """How often the worker's safety-net sweep looks at a slice of its partitions for
    deliveries to take over (at most 16 partitions a second, so a whole cycle takes
    max(this, partitions / 16)); it reclaims at once when a member leaves the fleet, at start,
    and where it lost a reply once the visibility timeout has passed."""
    max_deliveries: int = 5
    """Deliveries without an ack after which a job is a poison job and goes dead."""
    default_max_attempts: int = 5
    """Attempts of a job that does not set max_attempts."""
    shutdown_grace: float = 25.0
    """On SIGTERM, how long running jobs get to finish (keep under the orchestrator's grace)."""
    idle_poll: float = 1.0
    """Longest wait between reads of an idle assigned partition; hints usually come first."""
    max_idle_poll: float = 30.0
    """Longest wait between reads of an assigned partition found empty again and again: the
    wait doubles from idle_poll up to this (at least idle_poll).  Ready hints wake it at once
    (and every partition gets one after each resubscription), so this only bounds how late a
    job whose hint was lost can start.  A worker's idle reads and sweeps together go at most 8
    a second: with more idle partitions than that covers, each waits up to partitions / 8."""
    lateness_budget: float = LATENESS_BUDGET
    """How late a job may start, on top of Redis and network time, so that calls carry more
    jobs (less Redis and process CPU per job).  Workers go first: the worker reads a partition
    up to half of it after its head job is due or a ready hint, and that read promotes the due
    jobs itself; the dispatcher promotes what no worker read within the whole budget (longer
    while its calls find the jobs already taken, at most 1 s more), and partitions with lanes
    on at half of it (shardq/runtime/budget.py).  Set the same on dispatchers and workers
    (SHARDQ_LATENESS_BUDGET sets both); 0: every wait sized for punctuality."""
    sweep_interval: float = 5.0
    """The fleet reads each partition at least this often even when it is not assigned to the
    reader (its worker is overloaded or just died)."""
    membership_timeout: float = 2.5
    """A worker that has not heartbeated for this long has left the fleet: its partitions are
    reassigned and its running deliveries are taken over (a worker paused this long may see
    its jobs run again elsewhere)."""
    prune_consumers_after: float = 3600.0
    """A consumer (worker name) with nothing pending and idle this long is removed from the
    group: what a worker killed with SIGKILL leaves behind."""
    max_error_bytes: int = 4096
    """Longest error text (message and traceback tail) stored with a failed job."""
    max_result_bytes: int = 64 * 1024
    """Largest result (its JSON) kept for a job that keeps its result (``keep_result``); a
    handler returning more completes, and its result says ResultTooLargeError instead."""
    dead_letter_unknown_types: bool = False
    """A job of a type this worker has no handler for fails and is retried by its backoff, so
    a worker that has one (a newer release, mid rolling deploy) can take it; it goes dead,
    naming the type, when its attempts are used up.  True: it goes dead at once."""
    handler_timeout: float | None = 600.0
    """A handler running longer fails with HandlerTimeoutError (and is retried); None: no limit.
    The heartbeat keeps a running job claimed however long it takes, so this is what stops a
    handler that never returns from holding its job forever."""
    settle_window: float = 60.0
    """How long a failed job's retry/dead settle is resent through Redis faults before the
    delivery is given up (left pending: another worker reclaims it)."""
    allow_evicting_redis: bool = False
    """Start even when a primary's maxmemory-policy may evict keys (jobs would vanish without
    an error): only for throwaway setups.  The finding is still logged and exported."""
    require_appendonly: bool = False
    """Refuse to start when a primary has appendonly off (writes since the last snapshot are
    lost when it restarts)."""
    redis_check_interval: float = 60.0
    """How often each primary's maxmemory-policy and appendonly are checked again."""

    @property
    def tick(self) -> float:
        """The step of the process's wake-up grid: its periodic loops (heartbeat, layout,
        limits ...) and idle fallbacks end on multiples of it (shardq/runtime/supervisor.py)."""
        return self.heartbeat_interval

    def __post_init__(self) -> None:
        _check_int("concurrency", self.concurrency, 1, 100_000)
        _check_int("fetch_batch", self.fetch_batch, 1, 1000)
        _check_int("max_deliveries", self.max_deliveries, 1, 1000)
        _check_int("default_max_attempts", self.default_max_attempts, 1, 1000)
        _check_int("max_error_bytes", self.max_error_bytes, 64, MAX_ERROR_BYTES)
        _check_int("max_result_bytes", self.max_result_bytes, 16, MAX_RESULT_BYTES)
        _check_range("visibility_timeout", self.visibility_timeout, 0.1, 7 * 86400.0)
        _check_range("heartbeat_interval", self.heartbeat_interval, 0.01, 3600.0)
        _check_range("reclaim_interval", self.reclaim_interval, 0.01, 3600.0)
        _check_range("shutdown_grace", self.shutdown_grace, 0.0, 86400.0)
        _check_range("idle_poll", self.idle_poll, 0.001, 3600.0)
        _check_range("max_idle_poll", self.max_idle_poll, 0.001, 3600.0)
        _check_range("sweep_interval", self.sweep_interval, 0.001, 3600.0)
        _check_range("lateness_budget", self.lateness_budget, 0.0, MAX_LATENESS_BUDGET)
        _check_range("membership_timeout", self.membership_timeout, 0.1, 3600.0)
        _check_range("prune_consumers_after", self.prune_consumers_after, 0.0, 30 * 86400.0)
        _check_range("settle_window", self.settle_window, 0.0, 86400.0)
        _check_range("redis_check_interval", self.redis_check_interval, 0.01, 86400.0)
        if self.handler_timeout is not None:
            _check_range("handler_timeout", self.handler_timeout, 0.001, 30 * 86400.0)
        if self.heartbeat_interval * 2 > self.visibility_timeout:
            raise ConfigError("heartbeat_interval must be at most half of visibility_timeout")
        if self.heartbeat_interval * 2 > self.membership_timeout:
            raise ConfigError(
                "heartbeat_interval must be at most half of membership_timeout (one late beat "
                "must not look like a death)"
            )
