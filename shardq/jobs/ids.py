"""A job's ids: a random one (:func:`new_job_id`), or a timed one that carries its due time
(:func:`new_timed_job_id`, read back by :func:`timed_id_due`), and whether a waiting job's
body is cheaper stored compactly under a timed id (:func:`compact_pays`)."""

from __future__ import annotations

import base64
import secrets
import string
from collections import deque
from functools import lru_cache

_ID_POOL: deque[str] = deque()
_ID_BATCH = 512


def new_job_id() -> str:
    """A random job id: 72 bits from the OS CSPRNG, 12 URL-safe characters (short ids save
    memory per job).  Ids are drawn in batches: one urandom call per 512 ids."""
    try:
        return _ID_POOL.popleft()  # deque operations are atomic: safe across threads
    except IndexError:
        # '-' becomes '.' so an id never looks like a command-line option.
        raw = base64.urlsafe_b64encode(secrets.token_bytes(9 * _ID_BATCH))
        text = raw.replace(b"-", b".").decode()
        _ID_POOL.extend(text[i : i + 12] for i in range(12, len(text), 12))
        return text[:12]


_last_head: tuple[int, str] = (-1, "")


def timed_head(due_ms: int) -> str:
    """The first 8 characters of a timed job id: ``due_ms`` as 6 bytes, base64 ('.' for '-')."""
    global _last_head
    last_ms, last = _last_head
    if due_ms == last_ms:
        return last  # a bulk enqueue with one delay: many jobs share each ms
    head = base64.urlsafe_b64encode(due_ms.to_bytes(6, "big")).replace(b"-", b".").decode()
    _last_head = (due_ms, head)
    return head


def new_timed_job_id(due_ms: int) -> str:
    """A random job id that carries its due time: 8 characters of due ms (:func:`timed_head`),
    then 72 random bits in 12 more (as many as a plain id: the enqueue script trusts a fresh
    timed id to be unique and does not search for it).  A queue of layout 3 keeps a waiting
    job whose id encodes exactly its due time as one member of the partition's due set, with
    no jobs-hash entry (lua/includes/compact.lua): about 60 B less per waiting job."""
    return timed_head(max(0, int(due_ms))) + new_job_id()


def _allocation(size: int) -> int:
    """The bytes jemalloc (Redis's allocator) hands out for ``size``: multiples of 16 up to 128,
    then four size classes per doubling (160, 192, 224, 256, 320, ...)."""
    if size <= 8:
        return 8
    if size <= 128:
        return (size + 15) // 16 * 16
    step = 1 << ((size - 1).bit_length() - 3)
    return (size + step - 1) // step * step


def _sds(length: int) -> int:
    """The allocation of a Redis string of ``length`` bytes (header and terminator included)."""
    return _allocation(length + (3 if length < 256 else 5) + 1)


@lru_cache(maxsize=4096)
def compact_pays(body_len: int) -> bool:
    """Whether a waiting job with a body of ``body_len`` bytes costs Redis less as one compact
    due-set member ('<20-char id> <body>') than plain (a 12-character id in the due set, the
    envelope 'S0|<body>' in the jobs hash, whose entry costs a 32-byte dict entry, ~10 bytes
    of buckets and the id's string).  Nearly always; not when the 18 bytes more in the string
    cross an allocation class the plain envelope stays under (a 1,000-byte payload: 1,280
    bytes against 1,024)."""
    compact = _sds(21 + body_len)
    plain = _sds(12) + _sds(3 + body_len) + _sds(12) + 32 + 10
    return compact < plain


_B64_VALUE = {
    c: i for i, c in enumerate(string.ascii_uppercase + string.ascii_lowercase + "0123456789._")
}


def timed_id_due(job_id: str) -> int | None:
    """The due ms a timed job id encodes (as lua/includes/compact.lua reads it), or None."""
    if len(job_id) < 20:
        return None
    value = 0
    for c in job_id[:8]:
        digit = _B64_VALUE.get(c)
        if digit is None:
            return None
        value = value * 64 + digit
    return value
