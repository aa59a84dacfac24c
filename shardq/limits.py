"""Limits, per job type, per limit key or per tenant, fleet-wide: at most N job starts per
period (rate) and at most M jobs running at once (concurrency).

A limit is kept in Redis (``shardq limit set``, :meth:`Client.set_limit`) and applies to jobs
of one type (``type:<job type>``) or to jobs whose producer set one ``limit_key``
(``key:<limit key>``, e.g. a customer or an API host), or to the jobs of a tenant
(``tenant:<tenant>``; ``tenant:*`` gives every tenant a limit of its own, e.g. a per-tenant
concurrency cap beside the lanes' fair sharing).  Workers read the queue's limits every few
seconds.

How it is enforced on a sharded Redis (shardq/worker/limiter.py and its scripts): each limit has
two small keys of its own, on the slot its name hashes to, so the limits of a queue spread over
the primaries and none sits with a partition's hot keys; queues and types without a limit never
touch them.

- Rate (lua/limit-take-1.lua): the limit's next free start (GCRA).  A worker asks it for start
  times once per fetched batch of that limit's jobs.  A job whose time is now runs; any other
  goes back to its partition's due set until its reserved time, attempt given back
  (lua/defer-4.lua), and runs then without asking again: a backlog is spread at the limit's
  pace, each job fetched at most twice.
- Concurrency (lua/limit-acquire-1.lua, lua/limit-release-1.lua): the jobs holding running
  slots, scored by hold expiry.  A job takes a slot before it runs and gives it back when its
  handler ends; the worker's heartbeat renews its holds, so a worker that dies gives its slots
  back within one visibility timeout, as its deliveries.  A job refused a slot waits in due for
  about one handler run per round of slots ahead of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from shardq import names
from shardq.errors import InvalidLimitError
from shardq.names import JOB_TYPE_RULE, TENANT_RULE, check_limit_key, is_job_type, is_tenant

LimitKind = Literal["type", "key", "tenant"]
#: ``tenant:*``: a limit every tenant gets a copy of, counted per tenant.
EACH_TENANT = "*"

# The rules for limit keys and names live in shardq.names; their old names here keep working.
LIMIT_KEY_RE = names.LIMIT_KEY_RE
check_name_text = names.check_limit_name
MAX_RATE = 1_000_000
MAX_CONCURRENCY = 1_000_000
MIN_PERIOD = 0.001
MAX_PERIOD = 7 * 86400.0
_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_RATE_RE = re.compile(r"\s*(\d+)\s*/\s*(\d*\.?\d*)\s*([a-z]+)\s*")


def parse_rate(text: str) -> tuple[int, float]:
    """``"100/s"``, ``"10/min"``, ``"5/2s"``, ``"1000/h"`` -> (count, period seconds)."""
    m = _RATE_RE.fullmatch(text.lower()) if isinstance(text, str) else None
    if m is None or m.group(3) not in _UNITS:
        raise InvalidLimitError(
            f"rate {text!r:.40} is not COUNT/PERIOD: write e.g. 100/s, 10/min, 5/2s or 1000/h "
            f"(units: {', '.join(sorted(_UNITS))})"
        )
    count = int(m.group(1))
    multiple = float(m.group(2)) if m.group(2) else 1.0
    return count, multiple * _UNITS[m.group(3)]


@dataclass(frozen=True, slots=True)
class Limit:
    """Limits on the jobs it matches (a job type, or a limit key): at most ``rate`` starts
    per ``per`` seconds (up to ``burst``, by default ``rate``, at once after an idle spell),
    and/or at most ``concurrency`` running at once across the fleet.  At least one is set."""

    kind: LimitKind
    match: str
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("type", "key", "tenant"):
            raise InvalidLimitError(
                f"a limit applies to a job 'type', a 'key' or a 'tenant', not {self.kind!r}"
            )
        if self.kind == "key":
            check_limit_key(self.match)
        elif self.kind == "tenant":
            if self.match != EACH_TENANT and not is_tenant(self.match):
                raise InvalidLimitError(
                    f"tenant {self.match!r:.80} is invalid: {TENANT_RULE}, or '*' for a limit "
                    "of its own for every tenant"
                )
        elif not is_job_type(self.match):
            raise InvalidLimitError(f"job type {self.match!r:.80} is invalid: {JOB_TYPE_RULE}")
        if self.rate is None and self.concurrency is None:
            raise InvalidLimitError(
                f"limit {self.name} sets neither a rate nor a concurrency: give one or both"
            )
        if self.rate is not None and not _whole(self.rate, 1, MAX_RATE):
            raise InvalidLimitError(
                f"rate must be a whole number of jobs 1..{MAX_RATE} per period, got "
                f"{self.rate!r}: to stop these jobs, pause the queue instead"
            )
        if (
            isinstance(self.per, bool)
            or not isinstance(self.per, int | float)
            or not MIN_PERIOD <= self.per <= MAX_PERIOD
        ):
            raise InvalidLimitError(
                f"period must be {MIN_PERIOD}..{MAX_PERIOD:.0f} seconds, got {self.per!r}"
            )
        if self.burst is not None and (self.rate is None or not _whole(self.burst, 1, self.rate)):
            raise InvalidLimitError(
                f"burst must be a whole number 1..rate ({self.rate}), got {self.burst!r}"
            )
        if self.concurrency is not None and not _whole(self.concurrency, 1, MAX_CONCURRENCY):
            raise InvalidLimitError(
                f"concurrency must be a whole number 1..{MAX_CONCURRENCY} jobs running at once, "
                f"got {self.concurrency!r}: to stop these jobs, pause the queue instead"
            )

    @property
    def name(self) -> str:
        """``type:<job type>``, ``key:<limit key>`` or ``tenant:<tenant>``: its id in Redis."""
        return f"{self.kind}:{self.match}"

    @property
    def interval_ms(self) -> float:
        """One start every this many ms at the limit's pace (rate limits only)."""
        assert self.rate is not None
        return self.per * 1000.0 / self.rate

    @property
    def allowed_burst(self) -> int:
        assert self.rate is not None
        return self.burst if self.burst is not None else self.rate

    def describe(self) -> str:
        parts = []
        if self.rate is not None:
            per = f"{self.per:g}s" if self.per != 1 else "s"
            burst = f", burst {self.burst}" if self.burst is not None else ""
            parts.append(f"{self.rate}/{per}{burst}")
        if self.concurrency is not None:
            parts.append(f"{self.concurrency} at once")
        return ", ".join(parts)

    def to_json(self) -> bytes:
        data: dict[str, Any] = {}
        if self.rate is not None:
            data["rate"], data["per"] = self.rate, self.per
        if self.burst is not None:
            data["burst"] = self.burst
        if self.concurrency is not None:
            data["concurrency"] = self.concurrency
        return orjson.dumps(data)

    @classmethod
    def from_stored(cls, name: str, raw: bytes | str) -> Limit:
        """Parse one field of the limits hash; InvalidLimitError when it is damaged."""
        kind, _, match = name.partition(":")
        try:
            data = orjson.loads(raw)
            return cls(
                kind,  # type: ignore[arg-type]
                match,
                data.get("rate"),
                data.get("per", 1.0),
                data.get("burst"),
                data.get("concurrency"),
            )
        except Exception as exc:  # (an InvalidLimitError too: the name says which one)
            raise InvalidLimitError(
                f"stored limit {name!r} cannot be read ({exc}): set it again with `shardq limit "
                "set`, or drop it with `shardq limit remove`"
            ) from None


def _whole(value: object, lo: int, hi: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and lo <= value <= hi


def for_type(
    job_type: str,
    rate: int | str | None = None,
    per: float = 1.0,
    burst: int | None = None,
    *,
    concurrency: int | None = None,
) -> Limit:
    """Limits on every job of ``job_type``: ``for_type("send", "100/s")``, ``for_type("send",
    100, 1.0)``, ``for_type("call", concurrency=10)``, or both."""
    return _make("type", job_type, rate, per, burst, concurrency)


def for_key(
    limit_key: str,
    rate: int | str | None = None,
    per: float = 1.0,
    burst: int | None = None,
    *,
    concurrency: int | None = None,
) -> Limit:
    """Limits on the jobs enqueued with ``limit_key=…``: ``for_key("api.example.com",
    "10/s", concurrency=5)``."""
    return _make("key", limit_key, rate, per, burst, concurrency)


def for_tenant(
    tenant: str,
    rate: int | str | None = None,
    per: float = 1.0,
    burst: int | None = None,
    *,
    concurrency: int | None = None,
) -> Limit:
    """Limits on the jobs enqueued with ``tenant=…``; ``for_tenant("*", concurrency=10)``
    caps every tenant at 10 running at once, each counted on its own."""
    return _make("tenant", tenant, rate, per, burst, concurrency)


def _make(
    kind: LimitKind,
    match: str,
    rate: int | str | None,
    per: float,
    burst: int | None,
    concurrency: int | None,
) -> Limit:
    if isinstance(rate, str):
        rate, per = parse_rate(rate)
    return Limit(kind, match, rate, per, burst, concurrency)


class LimitTable:
    """The limits a worker enforces, looked up per job."""

    def __init__(self, limits: list[Limit] | None = None) -> None:
        self.by_name = {limit.name: limit for limit in limits or []}
        self.each_tenant = self.by_name.get("tenant:" + EACH_TENANT)
        self._tenants: dict[str, Limit] = {}

    def __bool__(self) -> bool:
        return bool(self.by_name)

    def matching(
        self, job_type: str, limit_key: str | None, tenant: str | None = None
    ) -> list[Limit]:
        """The limits a job is under: its type's, then its key's, then its tenant's (its own,
        else its copy of ``tenant:*``)."""
        found = []
        by_type = self.by_name.get("type:" + job_type)
        if by_type is not None:
            found.append(by_type)
        if limit_key is not None:
            by_key = self.by_name.get("key:" + limit_key)
            if by_key is not None:
                found.append(by_key)
        if tenant is not None:
            by_tenant = self.by_name.get("tenant:" + tenant)
            if by_tenant is None and self.each_tenant is not None:
                by_tenant = self._tenants.get(tenant)
                if by_tenant is None:
                    e = self.each_tenant
                    by_tenant = Limit("tenant", tenant, e.rate, e.per, e.burst, e.concurrency)
                    if len(self._tenants) < 100_000:  # bounded: tenants come and go
                        self._tenants[tenant] = by_tenant
            if by_tenant is not None:
                found.append(by_tenant)
        return found

    def label(self, limit: Limit) -> str:
        """The metrics label of a limit: a tenant's copy of ``tenant:*`` counts as ``tenant:*``
        (one series, not one per tenant)."""
        if limit.kind == "tenant" and limit.name not in self.by_name:
            return "tenant:" + EACH_TENANT
        return limit.name
