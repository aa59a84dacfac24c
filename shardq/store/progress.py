"""A running job's progress (``job.progress``): the write, and the record read back.

One string per running job that reports progress, ``{<partition tag>}:progress:<job id>`` =
``<ms>|<JSON>``, written by lua/progress-2.lua only while the job runs and expiring
:data:`PROGRESS_TTL` after its last report (no sweeper: a job that completes leaves its last
report to expire; readers show progress only of a job that is running).  A queue whose handlers
report none has no such key and no call.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from shardq.jobs import MAX_PROGRESS_BYTES, STAMP_BYTES
from shardq.store import keys
from shardq.store.codes import check
from shardq.store.numbers import Checked, shown
from shardq.store.op import Command, Op, cmd, op

#: A progress key outlives its job's last report by this long (ms).
PROGRESS_TTL_MS = 3600 * 1000
#: The longest stored record progress-2 writes; a reader takes no more (a longer one was
#: written by hand: shown as malformed).
STORED_MAX = MAX_PROGRESS_BYTES + STAMP_BYTES


class Progress(NamedTuple):
    """A job's last reported progress: its value and when it was written (Redis ms)."""

    value: Any
    at_ms: int | None


def write(pk: keys.PartitionKeys, job_id: str, data: bytes) -> Op[bool]:
    """Record ``data`` (JSON) as the running job's progress; False when it is not running."""
    return op(
        "progress",
        [pk.jobs, pk.progress(job_id)],
        [job_id, data, PROGRESS_TTL_MS],
        lambda r: bool(check(r)[0]),
    )


def read(pk: keys.PartitionKeys, job_id: str) -> Command[Any]:
    """The raw progress record of a job (None: none reported, or expired), read up to one
    byte past :data:`STORED_MAX` (a longer one is not read whole: :func:`parse` refuses it)."""
    return cmd("GETRANGE", pk.progress(job_id), 0, STORED_MAX, parse=lambda r: r or None)


def parse(raw: Any, bad: dict[str, str] | None = None) -> Progress | None:
    """A progress record, ``<ms>|<JSON>``; one no worker writes (or longer than any: over
    :data:`STORED_MAX`, which get-6 answers as a number) is put in ``bad`` (name
    ``progress``) and read as none."""
    if isinstance(raw, int) or len(raw) > STORED_MAX:
        if bad is not None:
            bad["progress"] = f"over {STORED_MAX} bytes, more than a worker writes"
        return None
    data = raw if isinstance(raw, bytes) else str(raw).encode()
    bar = data.find(b"|")
    c = Checked()
    at = c.integer("progress_ms", data[:bar] if bar > 0 else b"", None, 0, 2**53)
    try:
        value = orjson.loads(data[bar + 1 :]) if bar > 0 else None
    except orjson.JSONDecodeError:
        bar = -1
    if bar <= 0:
        if bad is not None:
            bad["progress"] = shown(data)
        return None
    return Progress(value, at)
