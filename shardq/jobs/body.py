"""A job's stored body: written once at enqueue (:func:`request_body`, :func:`encode_body`) and
read back by every reader (:func:`decode_body`, :func:`stored_options`), both here, one
option beside the other.

The body is ``[type, payload]`` or ``[type, payload, {options}]`` with only the options that are
set, each under its key letter (declared with the option, :mod:`shardq.jobs.options`), so a
small job stays small in Redis: a job with a 20-byte payload stays well under 250 bytes of
Redis memory in all.  A job with a priority other than the default or a tenant has a
``@<level><tenant>@`` prefix before the JSON, which the lane scripts read without parsing
JSON (lua/includes/lanes.lua).  The scripts read nothing else of a body but its job type
(lua/enqueue-8.lua, a debounce key's owner) and the option ``g`` (lua/includes/outbox.lua, a
batch child's end); the enqueue script replaces a debounced job's body whole.

Reading, a body may have been written by hand or by a buggy release: every option is checked as
a producer writes it (numbers through :mod:`shardq.store.numbers`), and one that is not is
refused, or reported as malformed, never trusted.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

from shardq.config import ProducerSettings
from shardq.errors import InvalidJobError, PayloadNotSerializableError, PayloadTooLargeError
from shardq.jobs.options import (
    MAX_ATTEMPTS_LIMIT,
    MAX_BACKOFF,
    MAX_JOB_TIMEOUT,
    MAX_RESULT_RETENTION,
    MAX_RUN_AT,
    MIN_RESULT_RETENTION,
    Backoff,
    BackoffKind,
    attempt_timeout_ms,
    check_backoff,
    check_headers,
    check_limit_key,
    check_max_attempts,
    deadline_option,
    result_retention_ms,
)
from shardq.names import LEVEL_PRIORITIES, TENANT_CHARS, VALID_JOB_TYPES, Priority, check_job_type
from shardq.names import check_priority as _check_priority
from shardq.names import check_tenant as _check_tenant
from shardq.store import numbers

# -- the lane prefix: priority and tenant ---------------------------------------------------

_FLOW_PREFIX_RE = re.compile(("@([hnl])(" + TENANT_CHARS + "{0,64})@").encode())


def flow_prefix(priority: str | None, tenant: str | None) -> bytes:
    """The body prefix that carries a job's priority and tenant (empty for neither)."""
    level = _check_priority(priority) if priority is not None else "n"
    name = _check_tenant(tenant) if tenant is not None else ""
    if level == "n" and not name:
        return b""
    return b"@" + level.encode() + name.encode() + b"@"


def split_flow(raw: bytes) -> tuple[Priority, str | None, bytes]:
    """A stored body's priority, tenant and JSON part."""
    if raw[:1] != b"@":
        return "default", None, raw
    m = _FLOW_PREFIX_RE.match(raw)
    if m is None:
        raise ValueError("job body has a malformed priority/tenant prefix")
    return LEVEL_PRIORITIES[m[1].decode()], (m[2].decode() or None), raw[m.end() :]


# -- the options object: each option's writer and its letters' readers, side by side --------
#
# A writer checks a value as a caller gives it (the option's declared check) and gives the JSON
# stored under its letter (None: nothing stored), or, for an option of more than one letter,
# the letters with their JSON; a reader takes a stored letter's JSON back to what StoredOptions
# holds, or raises ValueError for a value no producer writes.


def json_number(value: Any, what: str) -> int | float:
    """A number of a stored body as JSON gave it (producers write numbers there, never text
    that the checked parsers would read as one); BadNumber for anything else."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    raise numbers.BadNumber(what, value, "a JSON number")


def _stored_ms(raw: Any, what: str, lo: int, hi: int) -> int:
    return numbers.integer(json_number(raw, what), lo, hi, what=what)


# m: max_attempts (written by its check, check_max_attempts)
def _read_m(raw: Any) -> int:
    return numbers.integer(
        json_number(raw, "max attempts"), 1, MAX_ATTEMPTS_LIMIT, what="max attempts"
    )


# b: backoff, [kind letter, base ms, cap ms]
def _write_backoff(value: Any) -> list[Any]:
    return check_backoff(value).encode()


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


# k: idempotency_key (checked with the job id before the body is written: store.producer)
def _write_idempotency_key(value: Any) -> Any:
    return value


def _read_k(raw: Any) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"idempotency key {raw!r:.40} is not a string")
    return raw


# h: headers (none written when empty)
def _write_headers(value: Any) -> dict[str, str] | None:
    return check_headers(value) or None


def _read_h(raw: Any) -> dict[str, str]:
    if not raw:
        return {}
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise ValueError(f"headers {raw!r:.40} are not an object of strings")
    return raw


# l: limit_key (written by its check, check_limit_key)
def _read_l(raw: Any) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"limit key {raw!r:.40} is not a string")
    return raw


# r: keep_result, ms (written by its check, result_retention_ms; read as seconds)
def _read_r(raw: Any) -> float:
    lo, hi = round(MIN_RESULT_RETENTION * 1000), round(MAX_RESULT_RETENTION * 1000)
    return _stored_ms(raw, "result retention ms", lo, hi) / 1000


# o: timeout, ms (written by its check, attempt_timeout_ms; read as seconds)
def _read_o(raw: Any) -> float:
    return _stored_ms(raw, "timeout ms", 1, round(MAX_JOB_TIMEOUT * 1000)) / 1000


# d or w: deadline, an absolute epoch ms (d) or ms after the due time (w, read as seconds),
# written by its check, deadline_option
def _read_d(raw: Any) -> int:
    return _stored_ms(raw, "deadline ms", 1, round(MAX_RUN_AT * 1000))


def _read_w(raw: Any) -> float:
    return _stored_ms(raw, "deadline window ms", 0, round(MAX_BACKOFF * 1000)) / 1000


# g, pr, gb: workflow (built by shardq.plans.workflows, written as given)
def _write_workflow(value: Any) -> Any:
    return value


def _read_g(raw: Any) -> tuple[str, int, bool]:
    if (
        isinstance(raw, list)
        and len(raw) == 3
        and isinstance(raw[0], str)
        and "|" not in raw[0]
        and type(raw[1]) is int
        and 0 <= raw[1] <= 2**32 - 1
        and raw[2] in (0, 1)
    ):
        return (raw[0], raw[1], bool(raw[2]))
    raise ValueError(f"workflow membership {raw!r:.60} is not [batch id, index, 0|1]")


def _read_pr(raw: Any) -> Any:
    return raw


def _read_gb(raw: Any) -> str | None:
    return raw if isinstance(raw, str) else None  # anything else: not a callback


class Writer(NamedTuple):
    """How an option is written: under its letter, or (None) as the letters its writer gives."""

    letter: str | None
    write: Callable[[Any], Any]


#: Each body option's writer, in the order its letters are written (the body's bytes).
WRITERS: dict[str, Writer] = {
    "max_attempts": Writer("m", check_max_attempts),
    "backoff": Writer("b", _write_backoff),
    "idempotency_key": Writer("k", _write_idempotency_key),
    "headers": Writer("h", _write_headers),
    "limit_key": Writer("l", check_limit_key),
    "keep_result": Writer("r", result_retention_ms),
    "timeout": Writer("o", attempt_timeout_ms),
    "deadline": Writer(None, deadline_option),
    "workflow": Writer(None, _write_workflow),
}


class Reader(NamedTuple):
    """How a stored letter is read back: into which :class:`StoredOptions` field, with what."""

    field: str
    read: Callable[[Any], Any]


#: Each letter's reader, in the order a stored body's letters are checked.
READERS: dict[str, Reader] = {
    "m": Reader("max_attempts", _read_m),
    "b": Reader("backoff", decode_backoff),
    "h": Reader("headers", _read_h),
    "k": Reader("idempotency_key", _read_k),
    "l": Reader("limit_key", _read_l),
    "r": Reader("keep_result", _read_r),
    "o": Reader("timeout", _read_o),
    "d": Reader("deadline_ms", _read_d),
    "w": Reader("start_within", _read_w),
    "g": Reader("workflow", _read_g),
    "pr": Reader("previous", _read_pr),
    "gb": Reader("callback_of", _read_gb),
}


# -- writing ----------------------------------------------------------------------------------

#: The options the body's prefix carries, as :func:`flow_prefix` takes them.
PREFIXED = ("priority", "tenant")
# Every option the body carries, as JobRequest names them: the written ones in WRITERS' order,
# then the prefixed ones (a tuple of their values is what _encode takes).
_CARRIED = (*WRITERS, *PREFIXED)
_CARRIED_VALUES = operator.attrgetter(*_CARRIED)
_WRITE = tuple(WRITERS.values())
_WRITTEN = len(WRITERS)
_NO_OPTIONS = (None,) * len(_CARRIED)
_NO_WRITTEN = _NO_OPTIONS[:_WRITTEN]


def request_body(request: Any, settings: ProducerSettings) -> bytes:
    """The stored body of a :class:`~shardq.jobs.JobRequest`: its type, payload and every
    option the body carries.  Raises the typed error of a bad one before anything is written."""
    values = _CARRIED_VALUES(request)
    if values == _NO_OPTIONS and (data := _plain(request.job_type, request.payload, settings)):
        return data
    return _encode(request.job_type, request.payload, values, settings)


def encode_body(
    job_type: str, payload: Any, *, settings: ProducerSettings, **options: Any
) -> bytes:
    """The stored body of a job of ``job_type`` with ``payload`` and the body options given by
    name (``max_attempts=3``, ``priority="high"``, ...; None: not set).  Raises the typed error
    of a bad one before anything is written; TypeError for a name that is not a body option."""
    unknown = set(options).difference(_CARRIED)
    if unknown:
        raise TypeError(f"encode_body: {sorted(unknown)} are not options a job body carries")
    return _encode(job_type, payload, tuple(map(options.get, _CARRIED)), settings)


def _plain(job_type: str, payload: Any, settings: ProducerSettings) -> bytes:
    """The body of a job without options, the common case, without the option checks (same
    encoding and limits: only valid type strings are ever added to VALID_JOB_TYPES); b"" when
    the full path must check it (and report what is wrong)."""
    if type(job_type) is not str or job_type not in VALID_JOB_TYPES:
        return b""
    try:
        data = orjson.dumps([job_type, payload])
    except (TypeError, orjson.JSONEncodeError):
        return b""
    if len(data) > settings.max_payload_bytes or b"null" in data:
        return b""
    return data


def _encode(
    job_type: str, payload: Any, values: tuple[Any, ...], settings: ProducerSettings
) -> bytes:
    """The body of ``values`` (each option's, in ``_CARRIED``'s order), checked in the order
    its errors are reported: the prefix, the type, each written option, the payload."""
    priority, tenant = values[_WRITTEN:]
    prefix = b""
    if priority is not None or tenant is not None:
        prefix = flow_prefix(priority, tenant)
    written = values[:_WRITTEN]
    if written == _NO_WRITTEN and (data := _plain(job_type, payload, settings)):
        return prefix + data
    check_job_type(job_type)
    body: dict[str, Any] = {}
    for writer, value in zip(_WRITE, written):  # noqa: B905 (both _WRITTEN long)
        if value is None:
            continue
        letter, write = writer  # unpacked only for the options given: most are not
        if letter is None:
            body.update(write(value) or {})
        elif (json := write(value)) is not None:
            body[letter] = json
    try:
        data = orjson.dumps([job_type, payload, body] if body else [job_type, payload])
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise PayloadNotSerializableError(
            f"payload of {job_type!r} cannot be encoded as JSON ({exc}): pass dicts, lists, str "
            "(valid Unicode), int (64-bit), float, bool or None (convert datetimes, sets, "
            "big integers and objects first)"
        ) from None
    if b"null" in data and _has_non_finite(payload):
        # orjson writes NaN and infinity as null: the handler would get None, silently.
        raise PayloadNotSerializableError(
            f"payload of {job_type!r} holds NaN or infinity, which JSON cannot carry: send "
            "None or a string instead"
        )
    if len(data) > settings.max_payload_bytes:
        raise PayloadTooLargeError(
            f"job {job_type!r} encodes to {len(data)} bytes, over max_payload_bytes "
            f"({settings.max_payload_bytes}): store large data elsewhere and pass a reference, "
            "or raise the limit"
        )
    return prefix + data


def _has_non_finite(value: Any) -> bool:
    """Whether a (JSON-encodable, so at most 255 deep) value holds a NaN or infinite float."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_non_finite(v) for v in value)
    return False


# -- reading ----------------------------------------------------------------------------------


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


class StoredOptions(NamedTuple):
    """A stored body's options, as a producer writes them (None: not set)."""

    headers: dict[str, str]
    max_attempts: int | None = None
    backoff: Backoff | None = None
    idempotency_key: str | None = None
    limit_key: str | None = None
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
    """The options of a decoded body (:func:`decode_body`), each letter checked by its reader
    (:data:`READERS`) as a producer writes it.  An option no producer writes (a job stored by
    hand or by a buggy release) raises ValueError naming it; with ``bad`` given, it is put
    there instead (letter -> raw value shown) and read as not set."""
    read: dict[str, Any] = {"headers": {}}
    for letter, reader in READERS.items():
        raw = body.get(letter)
        if raw is None:
            continue
        try:
            read[reader.field] = reader.read(raw)
        except ValueError as exc:
            if bad is None:
                raise ValueError(str(exc)) from None
            bad[letter] = numbers.shown(raw)
    return StoredOptions(**read)
