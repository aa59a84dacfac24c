"""A stored job envelope, ``<state><attempt>|<body>``: the Python twin of
lua/includes/envelope.lua (the scripts write and rewrite the header; this module reads it).

- state: one letter; ``S`` waiting (due set, lane or ready stream), ``A`` running (held by a
  worker), ``D`` dead (in the dead-letter stream), ``L`` waiting for the start a rate limit
  reserved for it (lua/defer-4.lua), else as ``S``;
- attempt: how many times a worker has started it, a whole number 0..:data:`MAX_ATTEMPT`;
- body: the job's JSON (:func:`shardq.jobs.decode_body`), untouched by every script.

Every reader of an envelope (``Client.get``, the inspector's listings, the dead-letter views)
splits it here, so a header that is not what the scripts write reads the same everywhere: the
part that cannot be read is named in ``malformed`` and read as unset, never fatal to a read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardq import jobs as jobmod
from shardq.store.numbers import Checked, shown

#: Most attempts an envelope's header may count (above any max_attempts a producer can set,
#: with room for deliveries reclaimed on top; a header beyond it is malformed).
MAX_ATTEMPT = jobmod.MAX_ATTEMPT

WAITING = b"S"
RUNNING = b"A"
DEAD = b"D"
DEFERRED = b"L"


def split(raw: bytes) -> tuple[bytes, bytes, bytes]:
    """(state letter, attempt text, body) of ``<state><attempt>|<body>``; an envelope without
    the bar gives an empty body (which :func:`shardq.jobs.decode_body` refuses)."""
    bar = raw.find(b"|")
    if bar < 0:
        return raw[:1], raw[1:], b""
    return raw[:1], raw[1:bar], raw[bar + 1 :]


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
    letter, attempt_raw, body_raw = split(data)
    attempt = c.integer("attempt", attempt_raw, None, 0, MAX_ATTEMPT)
    error: str | None = None
    try:
        body = jobmod.decode_body(body_raw)
    except ValueError as exc:
        c.bad["body"] = shown(body_raw)
        body, error = {}, str(exc)
    return Envelope(letter, attempt, body, error, c.bad)
