"""The stored job envelope, read back: ``<state><attempt>|<body>`` in a partition's jobs hash
(or a compact due-set member's body); the Python twin of lua/includes/envelope.lua (the
scripts write and rewrite the header, this module reads it).

- state: one letter; ``S`` waiting (due set, lane or ready stream), ``A`` running (held by a
  worker), ``D`` dead (in the dead-letter stream), ``L`` waiting for the start a rate limit
  reserved for it (lua/defer-4.lua), else as ``S``;
- attempt: how many times a worker has started it, a whole number 0..:data:`MAX_ATTEMPT`;
- body: the job's JSON (:func:`decode_body`), which no script changes (the enqueue of a
  debounced job replaces it whole).

Every reader of an envelope (``Client.get``, the inspector's listings, the dead-letter views)
splits it here (:func:`read`), so a header that is not what the scripts write reads the same
everywhere: the part that cannot be read is named in ``malformed`` and read as unset, never
fatal to a read.

The body is written and read by its codec, :mod:`shardq.jobs.body` (:func:`decode_body`,
:func:`stored_options`): this module reads the header, which may have been written by hand or
by a buggy release, so a number that is not what a script writes is reported as malformed,
never trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardq.jobs.body import decode_body
from shardq.jobs.body import stored_options as stored_options  # an envelope's readers use it
from shardq.jobs.models import MAX_ATTEMPT
from shardq.store.numbers import Checked, shown

WAITING = b"S"
RUNNING = b"A"
DEAD = b"D"
DEFERRED = b"L"


def split_envelope(raw: bytes) -> tuple[bytes, bytes, bytes]:
    """A stored envelope ``<state><attempt>|<body>`` as (state letter, attempt text, body); an
    envelope without the bar gives an empty body (which :func:`decode_body` refuses)."""
    bar = raw.find(b"|")
    if bar < 0:
        return raw[:1], raw[1:], b""
    return raw[:1], raw[1:bar], raw[bar + 1 :]


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
