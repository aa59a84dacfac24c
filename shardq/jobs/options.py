"""Every option a job may have, declared once (:data:`OPTIONS`): its name, its type
(:class:`JobOptions`), what it means, how a value is checked, where it travels (a key letter of
the stored body, the body's lane prefix, or the enqueue call), the flags of ``shardq enqueue``
that set it and the facts a job view shows of it.

Every surface derives from this module: :class:`~shardq.jobs.JobRequest`'s fields and
documentation, the signatures and documentation of ``Client.enqueue``, ``AsyncClient.enqueue``
and ``Task.enqueue`` (:func:`takes_job_options`), the body codec (:mod:`shardq.jobs.body`), the
CLI's ``enqueue`` flags and help, the console's job view (:meth:`JobInfo.option_facts
<shardq.jobs.JobInfo.option_facts>`) and the Node producer's generated constants.  Adding an
option is a change here, in the codec, in the scripts that read it (lua/) and in the Node
producer (clients/node); tests/unit/test_job_options.py fails until each has it.

Every option defaults to None: not set (the worker's, the queue's or the settings' value
applies).  A value is checked by the option's ``check`` where it is given alone (the body
codec's writers call it), and with the others where they depend on each other: the due time
with the producer's settings (:func:`shardq.jobs.due.make_schedule`), ``unique_until`` with
the idempotency key (shardq.store.producer.prepare_enqueue).
"""

from __future__ import annotations

import inspect
import random
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple, TypedDict, TypeVar

from shardq import backoff as backoff_math
from shardq import names
from shardq.config import MAX_TIME_MS
from shardq.errors import InvalidJobError, shown
from shardq.names import Priority

# -- caps -----------------------------------------------------------------------------------

MAX_ATTEMPTS_LIMIT = 1000
BackoffKind = Literal["fixed", "exponential", "jitter"]
#: Longest backoff base or cap: the fail script takes a retry delay of at most a year.
MAX_BACKOFF = 366 * 86400.0
#: Longest a job's result may be kept (``keep_result``, seconds): results are for callers
#: waiting on an outcome, not an archive; a longer record belongs in the application's store.
MAX_RESULT_RETENTION = 30 * 86400.0
#: Shortest retention: a result must outlive the round trip of the caller asking for it.
MIN_RESULT_RETENTION = 1.0
#: Longest per-job timeout (as WorkerSettings.handler_timeout's bound).
MAX_JOB_TIMEOUT = 30 * 86400.0
#: Latest run_at (epoch seconds): 9999-12-31, the last time a datetime or the CLI can show.
MAX_RUN_AT = MAX_TIME_MS / 1000


# -- the values of options, checked --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry ``attempt`` (1-based count of failures so far).

    ``fixed``: always ``base``.  ``exponential``: ``base * 2**(attempt-1)``, capped at ``cap``.
    ``jitter``: a uniform random delay in [0, exponential], which spreads retries of a burst.
    """

    kind: BackoffKind = "jitter"
    base: float = 1.0
    cap: float = 3600.0

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "exponential", "jitter"):
            raise InvalidJobError(f"backoff kind {self.kind!r}: use fixed, exponential or jitter")
        for name in ("base", "cap"):
            value = getattr(self, name)
            # A comparison, not math.isfinite: it refuses nan, inf and huge ints alike.
            if isinstance(value, bool) or not isinstance(value, int | float):
                value = None
            if value is None or not 0 <= value <= MAX_BACKOFF:
                raise InvalidJobError(
                    f"backoff {name} must be 0..{MAX_BACKOFF:.0f} seconds (a retry waits at "
                    f"most a year), got {shown(getattr(self, name))}"
                )

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt``."""
        if self.kind == "fixed":
            return min(self.base, self.cap)
        exp = backoff_math.exponential(attempt, self.base, self.cap)
        if self.kind == "exponential":
            return exp
        return float((rng or random).uniform(0.0, exp))

    def encode(self) -> list[Any]:
        return [self.kind[0], round(self.base * 1000), round(self.cap * 1000)]


DEFAULT_BACKOFF = Backoff()


def check_max_attempts(value: Any) -> int:
    """``max_attempts`` as given, or InvalidJobError."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= MAX_ATTEMPTS_LIMIT
    ):
        raise InvalidJobError(
            f"max_attempts must be an integer 1..{MAX_ATTEMPTS_LIMIT}, got {value!r}"
        )
    return value


def check_backoff(value: Any) -> Backoff:
    """``backoff`` as given (a :class:`Backoff` checks its numbers when made), or
    InvalidJobError."""
    if not isinstance(value, Backoff):
        raise InvalidJobError("backoff must be a shardq.Backoff")
    return value


def check_headers(value: Any) -> dict[str, str]:
    """``headers`` as given, or InvalidJobError."""
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidJobError(
            f"headers must be a dict of str to str (e.g. W3C traceparent), got {value!r:.80}"
        )
    return value


def check_limit_key(value: Any) -> str:
    """``limit_key`` as given, or InvalidJobError (the limits' rule, :mod:`shardq.names`)."""
    try:
        return names.check_limit_key(value)
    except ValueError as exc:
        raise InvalidJobError(str(exc)) from None


def result_retention_ms(keep_result: timedelta | float) -> int:
    """A ``keep_result`` retention (seconds or a timedelta) as the ms a body carries;
    InvalidJobError outside MIN_RESULT_RETENTION..MAX_RESULT_RETENTION."""
    seconds = keep_result.total_seconds() if isinstance(keep_result, timedelta) else keep_result
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not MIN_RESULT_RETENTION <= seconds <= MAX_RESULT_RETENTION
    ):
        raise InvalidJobError(
            f"keep_result must be {MIN_RESULT_RETENTION:.0f}..{MAX_RESULT_RETENTION:.0f} seconds "
            f"(how long the result is kept after the job completes; at most 30 days), got "
            f"{shown(keep_result)}"
        )
    return round(seconds * 1000)


def _seconds(value: timedelta | float, what: str, lo: float, hi: float, hint: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not lo <= seconds <= hi:
        raise InvalidJobError(
            f"{what} must be {lo:g}..{hi:.0f} seconds ({hint}), got {shown(value)}"
        )
    return float(seconds)


def attempt_timeout_ms(timeout: timedelta | float) -> int:
    """A job's ``timeout`` (seconds or a timedelta) as the ms its body carries (option ``o``)."""
    hint = "how long one attempt may run before it fails and is retried"
    return max(1, round(_seconds(timeout, "timeout", 0.001, MAX_JOB_TIMEOUT, hint) * 1000))


def deadline_option(deadline: datetime | timedelta | float) -> dict[str, int]:
    """A job's ``deadline`` as its body carries it: an absolute time (a timezone-aware datetime
    or epoch seconds) as ``{"d": epoch ms}``, a timedelta (how late after its due time it may
    still start) as ``{"w": ms}``."""
    if isinstance(deadline, timedelta):
        hint = "how late after its due time the job may still start"
        return {"w": round(_seconds(deadline, "deadline", 0, MAX_BACKOFF, hint) * 1000)}
    if isinstance(deadline, datetime):
        if deadline.tzinfo is None:
            raise InvalidJobError(
                "deadline is a naive datetime: pass a timezone-aware one, or a timedelta (how "
                "late after its due time the job may still start)"
            )
        epoch: Any = deadline.timestamp()
    else:
        epoch = deadline
    if isinstance(epoch, bool) or not isinstance(epoch, int | float) or not 0 < epoch <= MAX_RUN_AT:
        raise InvalidJobError(
            f"deadline must be a datetime, epoch seconds 0..{int(MAX_RUN_AT)}, or a timedelta "
            f"(how late after its due time the job may still start), got {shown(deadline)}"
        )
    return {"d": round(epoch * 1000)}


def check_unique_until(value: Any) -> str:
    """``unique_until`` as given, or InvalidJobError (that it needs an idempotency key is
    checked with the request: shardq.store.producer.prepare_enqueue)."""
    if value not in ("done", "debounce"):
        raise InvalidJobError(
            f"unique_until must be 'done' or None (or debounce=<seconds>), got {value!r:.40}"
        )
    return str(value)


# -- the declaration ------------------------------------------------------------------------


class JobOptions(TypedDict, total=False):
    """The options of one job, as keyword arguments of ``Client.enqueue``, ``Task.enqueue`` and
    :class:`~shardq.jobs.JobRequest` (``**options: Unpack[JobOptions]``).  What each means:
    :data:`OPTIONS`; JobRequest's fields have these types (tests/unit/test_job_options.py)."""

    delay: timedelta | float | None
    run_at: datetime | float | None
    job_id: str | None
    idempotency_key: str | None
    max_attempts: int | None
    backoff: Backoff | None
    headers: dict[str, str] | None
    limit_key: str | None
    priority: Priority | None
    tenant: str | None
    keep_result: timedelta | float | None
    unique_until: Literal["done", "debounce"] | None
    timeout: timedelta | float | None
    deadline: datetime | timedelta | float | None


#: Where an option's value travels: a key of the stored body's options object (``body``), the
#: body's ``@<level><tenant>@`` lane prefix (``prefix``), or the enqueue script's arguments
#: (``call``: the id, the due time, the key's mode).
Carried = Literal["body", "prefix", "call"]


class Fact(NamedTuple):
    """One line a job view shows of an option (the console's job page): a field of
    :class:`~shardq.jobs.JobInfo`, its label, and how its value reads (``text``: as is;
    ``name``: as is, a name or key typed as given; ``seconds``: ``<n> s`` and the note;
    ``time``: an epoch-ms time)."""

    field: str
    label: str
    kind: Literal["text", "name", "seconds", "time"] = "name"
    note: str = ""


@dataclass(frozen=True, slots=True)
class JobOption:
    """One option of a job (see the module docstring)."""

    name: str
    doc: str
    """What it means, for the API reference (JobRequest's and enqueue's documentation)."""
    carried: Carried
    letters: tuple[str, ...] = ()
    """Its keys in the stored body's options object (shardq.jobs.body), for ``body``."""
    check: Callable[[Any], object] | None = None
    """Raises the typed error for a bad value given alone (None: checked with others, as the
    doc says)."""
    flags: tuple[str, ...] = ()
    """The flags of ``shardq enqueue`` that set it."""
    help: tuple[str, ...] = ()
    """Each flag's help text."""
    facts: tuple[Fact, ...] = ()
    """What a job view shows of it once stored (none: not shown, or shown elsewhere)."""
    task: bool = False
    """A :class:`~shardq.tasks.Task` may declare a default for it."""
    public: bool = True
    """Given by callers (in JobOptions); False: set by shardq itself."""


#: Every option, in the order ``shardq enqueue --help`` lists their flags.
OPTIONS: tuple[JobOption, ...] = (
    JobOption(
        "delay",
        "Seconds (or a timedelta) until the job is due, counted on the Redis clock: at most "
        "``max_horizon``, and no further in the past than ``past_tolerance`` (0 or less: now).  "
        "Pass ``delay`` or ``run_at``, not both; neither: due now.",
        "call",
        flags=("--delay",),
        help=("Run after this long (Redis clock): 90, 90s, 5m, 2h, 1d.",),
    ),
    JobOption(
        "run_at",
        "When the job is due: a timezone-aware datetime or epoch seconds (until 9999-12-31).",
        "call",
        flags=("--at",),
        help=("Run at, e.g. 2030-01-01T09:00Z.",),
    ),
    JobOption(
        "job_id",
        "Your own job id (default: a random one).  An id already stored is not enqueued again: "
        "the enqueue returns it with ``created`` False and writes nothing.",
        "call",
        check=names.check_job_id,
        flags=("--job-id",),
        help=("Your own job id (default: random).",),
    ),
    JobOption(
        "idempotency_key",
        "A repeat with the same key returns the first job's id and writes nothing (the key is "
        "kept ``idempotency_retention`` after the job's due time; see ``unique_until``).",
        "body",
        ("k",),
        check=names.check_idempotency_key,
        flags=("--idempotency-key",),
        help=("A repeat with the same key returns the first job and writes nothing.",),
        facts=(Fact("idempotency_key", "idempotency key"),),
    ),
    JobOption(
        "max_attempts",
        f"Attempts before the job goes dead, 1..{MAX_ATTEMPTS_LIMIT} (default: the worker's "
        "``default_max_attempts``).",
        "body",
        ("m",),
        check=check_max_attempts,
        flags=("--max-attempts",),
        help=("Attempts before the job goes dead [default: the worker's --default-max-attempts].",),
        task=True,
    ),
    JobOption(
        "backoff",
        "How long a failed job waits before its next attempt (a :class:`Backoff`; default: "
        "jitter, base 1 s, cap 3600 s).",
        "body",
        ("b",),
        check=check_backoff,
        flags=("--backoff", "--backoff-base", "--backoff-cap"),
        help=(
            "Delay between retries [default: jitter, base 1 s, cap 3600 s].",
            "Backoff base delay.",
            "Longest backoff delay.",
        ),
        task=True,
    ),
    JobOption(
        "headers",
        "Strings that travel with the job to its handler (``job.headers``), e.g. a W3C "
        "``traceparent``: a dict of str to str.",
        "body",
        ("h",),
        check=check_headers,
        flags=("--header",),
        help=("A job header name=value (repeat), e.g. traceparent=00-....",),
    ),
    JobOption(
        "limit_key",
        "The job is under this key's rate limits (``Client.set_limit``, ``key:<limit key>``) "
        "as well as its type's.",
        "body",
        ("l",),
        check=check_limit_key,
        flags=("--limit-key",),
        help=(
            "Put the job under this key's rate limit (shardq limit set --key), e.g. an API host.",
        ),
        facts=(Fact("limit_key", "limit key"),),
        task=True,
    ),
    JobOption(
        "priority",
        "``'high'``, ``'default'`` or ``'low'``: with the queue's lanes on "
        "(``Client.set_lanes``), due jobs are delivered high, default and low shared 6:3:1 "
        "instead of in due order.  LanesOffError on a queue with lanes off.",
        "prefix",
        check=names.check_priority,
        flags=("--priority",),
        help=("Delivery priority (a queue with lanes on: shardq queue lanes).",),
        facts=(Fact("priority", "priority", "text"),),
        task=True,
    ),
    JobOption(
        "tenant",
        "The tenant (group) the job belongs to: with the queue's lanes on, due jobs are shared "
        "round-robin between tenants.  LanesOffError on a queue with lanes off.",
        "prefix",
        check=names.check_tenant,
        flags=("--tenant",),
        help=(
            "Tenant (group) the job belongs to: due jobs are shared between tenants (lanes on).",
        ),
        facts=(Fact("tenant", "tenant"),),
    ),
    JobOption(
        "keep_result",
        "Seconds or a timedelta, 1 s to 30 days: the handler's return value is kept that long "
        "after the job completes, for ``Client.result`` (default: it is dropped).",
        "body",
        ("r",),
        check=result_retention_ms,
        flags=("--keep-result",),
        help=(
            "Keep the handler's return value this long after the job completes (1s..30d), "
            "for `shardq job result`.",
        ),
        facts=(Fact("keep_result", "keeps result", "seconds", " after it completes"),),
        task=True,
    ),
    JobOption(
        "unique_until",
        "``'done'`` (with ``idempotency_key``): the key returns the first job only while that "
        "job is waiting, running or retrying; once it completed, was cancelled or died, an "
        "enqueue with the key creates a new job (the key is kept ``unique_retention``).  "
        "``'debounce'`` is what ``debounce=`` sets: a repeat replaces the waiting job's "
        "payload and due time.",
        "call",
        check=check_unique_until,
        flags=("--unique-until-done",),
        help=(
            "With --idempotency-key: the key returns the first job only until that job is done "
            "(completed, cancelled or dead); then a new one is created.",
        ),
    ),
    JobOption(
        "timeout",
        "Seconds (or a timedelta) one attempt may run, then it fails with HandlerTimeoutError "
        "and is retried (default: the worker's ``handler_timeout``).",
        "body",
        ("o",),
        check=attempt_timeout_ms,
        flags=("--timeout",),
        help=(
            "Longest one attempt may run (then it fails and is retried); default: the worker's "
            "handler_timeout.",
        ),
        facts=(Fact("timeout", "timeout", "seconds"),),
    ),
    JobOption(
        "deadline",
        "A job that would start after it is dead-lettered (DeadlineExceededError), never run: "
        "a timezone-aware datetime or epoch seconds, or a timedelta, how late after its due "
        "time (a retry's included) it may still start.",
        "body",
        ("d", "w"),
        check=deadline_option,
        flags=("--deadline", "--deadline-in"),
        help=(
            "Do not start after this time (e.g. 2030-01-01T09:00Z): dead-lettered instead.",
            "Do not start later than this after its due time (a retry's too): dead-lettered "
            "instead.",
        ),
        facts=(
            Fact("deadline_ms", "deadline", "time"),
            Fact("start_within", "start within", "seconds", " of its due time"),
        ),
    ),
    JobOption(
        "workflow",
        "Set by shardq's batches and chains on their children, steps and callbacks "
        "(shardq.plans.workflows), not by callers: the body options that tie the job to its "
        "batch (``g``: [batch id, index, carry]; ``pr``: a chain step's previous result; "
        "``gb``: the batch whose callback it is).",
        "body",
        ("g", "pr", "gb"),
        public=False,
    ),
)

#: Each option by name.
OPTION: dict[str, JobOption] = {o.name: o for o in OPTIONS}
#: The options callers give (JobOptions' keys).
PUBLIC: tuple[JobOption, ...] = tuple(o for o in OPTIONS if o.public)


def _type_text(name: str) -> str:
    """An option's type as JobOptions spells it."""
    hint: Any = JobOptions.__annotations__[name]
    return str(getattr(hint, "__forward_arg__", hint))


def reference(options: tuple[JobOption, ...] = OPTIONS) -> str:
    """The options' documentation, as JobRequest's and enqueue's docstrings carry it."""
    out = []
    for o in options:
        kind = _type_text(o.name) if o.public else "dict[str, Any] | None"
        text = textwrap.fill(o.doc, 92, initial_indent="    ", subsequent_indent="    ")
        out.append(f"``{o.name}`` ({kind})\n{text}")
    return "\n".join(out)


F = TypeVar("F", bound=Callable[..., Any])


def takes_job_options(fn: F) -> F:
    """For a function taking ``**options: Unpack[JobOptions]``: its signature
    (``inspect.signature``, ``help()``) lists each option as a keyword parameter with its type
    and default, and its docstring (if it has one) ends with the options' reference."""
    signature = inspect.signature(fn)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    keyword = inspect.Parameter.KEYWORD_ONLY
    params += [
        inspect.Parameter(o.name, keyword, default=None, annotation=_type_text(o.name))
        for o in PUBLIC
    ]
    fn.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    if fn.__doc__:
        head = inspect.cleandoc(fn.__doc__)
        fn.__doc__ = f"{head}\n\nJob options (shardq.jobs.options):\n\n{reference(PUBLIC)}"
    return fn


def task_options() -> tuple[str, ...]:
    """The options a Task may declare defaults for."""
    return tuple(o.name for o in OPTIONS if o.task)
