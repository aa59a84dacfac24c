"""The stored job envelope, read back: ``<state><attempt>|<body>`` in a partition's jobs hash
(or a compact due-set member's body), the body's JSON and the options a producer wrote in it;
the Python twin of lua/includes/envelope.lua (the scripts write and rewrite the header, this
module reads it).

- state: one letter; ``S`` waiting (due set, lane or ready stream), ``A`` running (held by a
  worker), ``D`` dead (in the dead-letter stream), ``L`` waiting for the start a rate limit
  reserved for it (lua/defer-4.lua), else as ``S``;
- attempt: how many times a worker has started it, a whole number 0..:data:`MAX_ATTEMPT`;
- body: the job's JSON (:func:`decode_body`), untouched by every script.

Every reader of an envelope (``Client.get``, the inspector's listings, the dead-letter views)
splits it here (:func:`read`), so a header that is not what the scripts write reads the same
everywhere: the part that cannot be read is named in ``malformed`` and read as unset, never
fatal to a read.

:func:`shardq.jobs.encode_body` writes the body (it checks a job as a producer gives it); this
module reads what Redis holds, which may have been written by hand or by a buggy release, so
every option is checked as a producer writes it (numbers through :mod:`shardq.store.numbers`)
and one that is not is refused, or reported as malformed, never trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from shardq.errors import InvalidJobError
from shardq.jobs import (
    MAX_ATTEMPT,
    MAX_ATTEMPTS_LIMIT,
    MAX_BACKOFF,
    MAX_JOB_TIMEOUT,
    MAX_RESULT_RETENTION,
    MAX_RUN_AT,
    MIN_RESULT_RETENTION,
    Backoff,
    BackoffKind,
    split_flow,
)
from shardq.store import numbers
from shardq.store.numbers import Checked, shown

WAITING = b"S"
RUNNING = b"A"
DEAD = b"D"
DEFERRED = b"L"


def decode_backoff(raw: list[Any]) -> Backoff:
    """A stored backoff (``[kind letter, base ms, cap ms]``, :meth:`Backoff.encode`);
    ValueError (InvalidJobError or BadNumber, naming the value) for one no producer writes."""
    kinds: dict[str, BackoffKind] = {"f": "fixed", "e": "exponential", "j": "jitter"}
    # The kind is tested as text first: a list there is unhashable (TypeError, not ValueError).
    if (
        not isinstance(raw, list)
        or len(raw) != 3
        or not isinstance(raw[0], str)
        or raw[0] not in kinds
    ):
        raise InvalidJobError(f"stored backoff {raw!r:.60} is not [kind, base ms, cap ms]")
    top = MAX_BACKOFF * 1000
    base = numbers.real(json_number(raw[1], "backoff base ms"), 0, top, what="backoff base ms")
    cap = numbers.real(json_number(raw[2], "backoff cap ms"), 0, top, what="backoff cap ms")
    return Backoff(kinds[raw[0]], base / 1000, cap / 1000)


def json_number(value: Any, what: str) -> int | float:
    """A number of a stored body as JSON gave it (producers write numbers there, never text
    that the checked parsers would read as one); BadNumber for anything else."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    raise numbers.BadNumber(what, value, "a JSON number")


def split_envelope(raw: bytes) -> tuple[bytes, bytes, bytes]:
    """A stored envelope ``<state><attempt>|<body>`` as (state letter, attempt text, body); an
    envelope without the bar gives an empty body (which :func:`decode_body` refuses)."""
    bar = raw.find(b"|")
    if bar < 0:
        return raw[:1], raw[1:], b""
    return raw[:1], raw[1:bar], raw[bar + 1 :]


class StoredOptions(NamedTuple):
    """A stored body's options, as a producer writes them (None: not set)."""

    max_attempts: int | None
    backoff: Backoff | None
    headers: dict[str, str]
    idempotency_key: str | None
    limit_key: str | None
    keep_result: float | None = None
    """Seconds the job's result is kept once it completes (body option ``r``, ms)."""
    timeout: float | None = None
    """Seconds one attempt may run (body option ``o``, ms)."""
    deadline_ms: int | None = None
    """Epoch ms after which the job must not start (body option ``d``)."""
    start_within: float | None = None
    """Seconds after its due time the job may still start (body option ``w``, ms)."""
    workflow: tuple[str, int, bool] | None = None
    """(batch id, index, carries its value) of a batch child or chain step (body option
    ``g``): its end is reported to the batch (shardq.plans.workflows)."""
    previous: Any = None
    """A chain step's previous step's return value (body option ``pr``)."""
    callback_of: str | None = None
    """The batch whose callback this job is (body option ``gb``)."""


def stored_options(body: dict[str, Any], bad: dict[str, str] | None = None) -> StoredOptions:
    """The options of a decoded body (:func:`decode_body`), checked as a producer writes them:
    max attempts an integer 1..MAX_ATTEMPTS_LIMIT, a backoff of [kind, base ms, cap ms] within
    a year, headers of str to str, str keys, a result retention of whole ms within
    MIN/MAX_RESULT_RETENTION.  An option no producer writes (a job stored by
    hand or by a buggy release) raises ValueError naming it; with ``bad`` given, it is put
    there instead (option -> raw value shown) and read as not set."""

    def refuse(name: str, message: str) -> None:
        if bad is None:
            raise ValueError(message)
        bad[name] = numbers.shown(body.get(name))

    max_attempts: int | None = None
    if body.get("m") is not None:
        try:
            max_attempts = numbers.integer(
                json_number(body["m"], "max attempts"), 1, MAX_ATTEMPTS_LIMIT, what="max attempts"
            )
        except numbers.BadNumber as exc:
            refuse("m", str(exc))
    backoff: Backoff | None = None
    if body.get("b") is not None:
        try:
            backoff = decode_backoff(body["b"])
        except ValueError as exc:
            refuse("b", str(exc))
    headers = body.get("h") or {}
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        refuse("h", f"headers {headers!r:.40} are not an object of strings")
        headers = {}
    keys_: list[str | None] = []
    for name, what in (("k", "idempotency key"), ("l", "limit key")):
        value = body.get(name)
        if value is not None and not isinstance(value, str):
            refuse(name, f"{what} {value!r:.40} is not a string")
            value = None
        keys_.append(value)
    keep_result: float | None = None
    if body.get("r") is not None:
        try:
            ms = numbers.integer(
                json_number(body["r"], "result retention ms"),
                round(MIN_RESULT_RETENTION * 1000),
                round(MAX_RESULT_RETENTION * 1000),
                what="result retention ms",
            )
            keep_result = ms / 1000
        except numbers.BadNumber as exc:
            refuse("r", str(exc))
    timing: list[float | None] = []
    for name, what, lo, hi in (
        ("o", "timeout ms", 1, round(MAX_JOB_TIMEOUT * 1000)),
        ("d", "deadline ms", 1, round(MAX_RUN_AT * 1000)),
        ("w", "deadline window ms", 0, round(MAX_BACKOFF * 1000)),
    ):
        number: float | None = None
        if body.get(name) is not None:
            try:
                number = numbers.integer(json_number(body[name], what), lo, hi, what=what)
            except numbers.BadNumber as exc:
                refuse(name, str(exc))
        timing.append(number)
    timeout_ms, deadline, window_ms = timing
    workflow: tuple[str, int, bool] | None = None
    if body.get("g") is not None:
        g = body["g"]
        if (
            isinstance(g, list)
            and len(g) == 3
            and isinstance(g[0], str)
            and "|" not in g[0]
            and type(g[1]) is int
            and 0 <= g[1] <= 2**32 - 1
            and g[2] in (0, 1)
        ):
            workflow = (g[0], g[1], bool(g[2]))
        else:
            refuse("g", f"workflow membership {g!r:.60} is not [batch id, index, 0|1]")
    return StoredOptions(
        max_attempts,
        backoff,
        headers,
        keys_[0],
        keys_[1],
        keep_result,
        None if timeout_ms is None else timeout_ms / 1000,
        None if deadline is None else int(deadline),
        None if window_ms is None else window_ms / 1000,
        workflow,
        body.get("pr"),
        body["gb"] if isinstance(body.get("gb"), str) else None,
    )


def decode_body(raw: bytes | str) -> dict[str, Any]:
    """Parse a stored body into ``{"t": type, "p": payload, **options}``.

    A body with a priority or tenant prefix also gives ``"priority"`` and ``"tenant"``.
    Raises ValueError when it is not a job body.
    """
    if isinstance(raw, str):
        raw = raw.encode()
    flow: dict[str, Any] = {}
    if raw[:1] == b"@":
        priority, tenant, raw = split_flow(raw)
        flow = {"priority": priority, "tenant": tenant}
    body = orjson.loads(raw)
    if not isinstance(body, list) or not 2 <= len(body) <= 3 or not isinstance(body[0], str):
        raise ValueError("job body is not [type, payload, options?]")
    options = body[2] if len(body) == 3 else {}
    if not isinstance(options, dict):
        raise ValueError("job body options are not an object")
    return {**options, **flow, "t": body[0], "p": body[1]}


# Kept under the name the readers use.
split = split_envelope


@dataclass(frozen=True, slots=True)
class Envelope:
    """A stored envelope as read: ``attempt`` None and ``body`` {} where unreadable, with the
    unreadable parts in ``malformed`` (name -> raw value shown)."""

    state: bytes
    attempt: int | None
    body: dict[str, Any]
    body_error: str | None = None
    malformed: dict[str, str] = field(default_factory=dict)


def read(raw: bytes | str) -> Envelope:
    """Split and check one envelope (see the module docstring)."""
    data = raw if isinstance(raw, bytes) else str(raw).encode()
    c = Checked()
    letter, attempt_raw, body_raw = split_envelope(data)
    attempt = c.integer("attempt", attempt_raw, None, 0, MAX_ATTEMPT)
    error: str | None = None
    try:
        body = decode_body(body_raw)
    except ValueError as exc:
        c.bad["body"] = shown(body_raw)
        body, error = {}, str(exc)
    return Envelope(letter, attempt, body, error, c.bad)
