"""Kept results: the record a worker stores for a job that keeps its result, and the read of it.

A job enqueued with ``keep_result=<seconds>`` (body option ``r``) is settled by
lua/complete-5.lua instead of an ack: its result record is stored under the job's result key
(:meth:`shardq.store.keys.PartitionKeys.result`) as ``<finished ms>|<record JSON>``, expiring
after the retention (Redis expires it: no sweeper), and the key's name is published on (sharded
pub/sub, the partition's slot) for a producer waiting on it.  A job that ends dead keeps its
envelope and last error as every dead job does (its result is read from them: no record), and
the fail script publishes on the same channel (lua/fail-7.lua ARGV[7]).

The record is ``{"t": type, "a": attempt, "v": value}``, or, when the return value could not be
kept (over ``max_result_bytes``, or not JSON), ``{"t", "a", "x": error type, "m": message}``:
the job still completed (its handler ran, a retry would run it again), and the result says why
there is none.  Queues that keep no result never write, read or publish any of this.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from shardq.config import MAX_RESULT_BYTES
from shardq.errors import (
    JobFailedError,
    MalformedRecordError,
    ResultNotFoundError,
    ResultNotKeptError,
    ResultNotStoredError,
)
from shardq.jobs import STAMP_BYTES, Job, JobInfo, JobResult
from shardq.store import keys, producer
from shardq.store.codes import check
from shardq.store.numbers import Checked, shown
from shardq.store.op import Op, op

#: Jobs per complete call (lua/complete-5.lua's Max KEYS: 5 + 1 per job).
MAX_COMPLETE = 100
#: The longest stored result complete-5 writes: result-6 reads no more, and answers a longer
#: one (written by hand) as a number, refused here (:func:`read`).
STORED_MAX = MAX_RESULT_BYTES + STAMP_BYTES
#: Bytes of result records per complete call: a call of 100 results of 64 KiB would hold the
#: primary ~10 ms; the settler splits a batch at this size.
MAX_COMPLETE_BYTES = 1024 * 1024


def record(job: Job, value: Any, max_bytes: int) -> bytes:
    """The result record of ``job`` whose handler returned ``value`` (see the module
    docstring); never raises: a value that cannot be kept gives a record saying why."""
    head = {"t": job.type, "a": job.attempt}
    try:
        data = orjson.dumps({**head, "v": value})
    except (TypeError, orjson.JSONEncodeError) as exc:
        return orjson.dumps(
            {
                **head,
                "x": "ResultNotSerializableError",
                "m": f"the handler returned {type(value).__name__}, which JSON cannot carry "
                f"({exc}): return dicts, lists, str, int, float, bool or None",
            }
        )
    if len(data) > max_bytes:
        return orjson.dumps(
            {
                **head,
                "x": "ResultTooLargeError",
                "m": f"the result encodes to {len(data)} bytes, over max_result_bytes "
                f"({max_bytes}): store large results elsewhere and return a reference, or "
                "raise the worker's max_result_bytes",
            }
        )
    return data


class Completion(NamedTuple):
    """One succeeded job as the complete script takes it: its delivery, the result it keeps
    (retention 0: none) and, for a workflow child, its ref and the value its report carries."""

    entry_id: bytes
    raw_id: bytes
    retention_ms: int
    record: bytes
    workflow_ref: str = ""
    carried: bytes = b""


def complete(pk: keys.PartitionKeys, entries: list[Completion]) -> Op[int]:
    """Settle succeeded jobs that keep their result or belong to a workflow (at most
    MAX_COMPLETE); the op returns how many were still pending."""
    if len(entries) > MAX_COMPLETE:
        raise ValueError(f"at most {MAX_COMPLETE} results per call, got {len(entries)}")
    result_keys = [pk.result(c.raw_id.decode(errors="replace")) for c in entries]
    argv: list[Any] = [keys.WORKER_GROUP, pk.due_hint]
    for c in entries:
        argv += [c.entry_id, c.raw_id, c.retention_ms, c.record, c.workflow_ref, c.carried]
    return op(
        "complete",
        [pk.ready, pk.jobs, pk.errors, pk.stats, pk.outbox, *result_keys],
        argv,
        lambda r: int(check(r)[0]),
    )


class ResultRead(NamedTuple):
    """One read of a job and its kept result (lua/result-6.lua): the job's snapshot while it
    is stored (waiting, running, retrying or dead), its result once it completed, and the
    channel its end is published on."""

    job: JobInfo | None
    result: JobResult | None
    channel: str


def parse_record(pk: keys.PartitionKeys, job_id: str, raw: bytes | str) -> JobResult:
    """A stored result (``<finished ms>|<record JSON>``); MalformedRecordError for one no
    worker writes."""
    data = raw if isinstance(raw, bytes) else str(raw).encode()
    bar = data.find(b"|")
    c = Checked()
    finished = c.integer("finished_ms", data[:bar] if bar > 0 else b"", None, 0, 2**53)
    try:
        body = orjson.loads(data[bar + 1 :]) if bar > 0 else None
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("t"), str):
        raise MalformedRecordError(
            f"the result of job {job_id!r} of {pk.queue} is not a result record "
            f"({shown(data)}): delete {pk.result(job_id)} by hand"
        )
    attempt = body.get("a")
    stored = "x" not in body
    return JobResult(
        id=job_id,
        queue=pk.queue,
        partition=pk.fleet_id,
        type=body["t"],
        attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
        finished_ms=finished,
        value=body.get("v") if stored else None,
        stored=stored,
        error=None if stored else f"{body.get('x')}: {body.get('m')}",
    )


def _too_long(pk: keys.PartitionKeys, job_id: str) -> JobResult:
    """A stored result longer than any worker writes: not read, and not a value."""
    return JobResult(
        id=job_id,
        queue=pk.queue,
        partition=pk.partition,
        type="",
        attempt=None,
        finished_ms=None,
        value=None,
        stored=False,
        error=f"ResultTooLargeError: the stored result is over {STORED_MAX} bytes, more than "
        f"a worker writes (max_result_bytes is at most {MAX_RESULT_BYTES}): not read; delete "
        f"{pk.result(job_id)} by hand",
    )


def verdict(read: ResultRead, job_id: str, queue: str) -> tuple[bool, Any]:
    """What a read says to a caller waiting for the job's result: ``(True, value)`` once it
    completed with its result kept, ``(False, None)`` while it may still end (waiting, running
    or retrying); raises the typed error of every other case (see :mod:`shardq.errors`):
    JobFailedError (dead), ResultNotStoredError (completed, its value could not be kept),
    ResultNotKeptError (it keeps no result), ResultNotFoundError (no job, no result)."""
    if read.result is not None:
        if read.result.stored:
            return True, read.result.value
        reason = (read.result.error or "").split(":", 1)[0]
        raise ResultNotStoredError(
            f"job {job_id} of {queue} completed but its result was not kept: {read.result.error}",
            job_id,
            reason,
        )
    job = read.job
    if job is None:
        raise ResultNotFoundError(
            f"no job {job_id} in {queue} and no result kept for it: it never existed, was "
            "cancelled, completed without keep_result, or its result expired after the "
            "retention it was enqueued with",
            job_id,
        )
    if job.state == "dead":
        raise JobFailedError(
            f"job {job_id} of {queue} is dead (attempt {job.attempt}): {job.last_error}",
            job_id,
            job.last_error,
        )
    if job.keep_result is None:
        raise ResultNotKeptError(
            f"job {job_id} of {queue} was enqueued without keep_result: it will keep no "
            "result to wait for (enqueue with keep_result=<seconds>, or declare the task so)",
            job_id,
        )
    return False, None


def read(pk: keys.PartitionKeys, job_id: str) -> Op[ResultRead]:
    """A job's snapshot and its kept result, read together (lua/result-6.lua); E_LAYOUT_MOVED
    and E_JOB_MOVING as the get script (:func:`shardq.store.producer.get`)."""

    def parse(reply: Any) -> ResultRead:
        envelope, due, error, kept = check(reply)
        job = producer.job_info(pk, job_id, envelope, due, error)
        # A result is final only once its job is done (the complete script stores it and
        # drops the envelope in one call): while the job is stored, waiting, running or
        # dead, a record beside it is not its result (a worker's raw SET, or an earlier
        # job's of the same id), and the job's state answers.
        result = None
        if kept is None or job is not None:
            pass
        elif isinstance(kept, int) or len(kept) - kept.find(b"|") - 1 > MAX_RESULT_BYTES:
            result = _too_long(pk, job_id)  # over what complete-5 takes: written by hand
        else:
            result = parse_record(pk, job_id, kept)
        return ResultRead(job, result, pk.result(job_id))

    return op(
        "result",
        [pk.jobs, pk.due, pk.errors, pk.ctl, pk.moving, pk.result(job_id)],
        [job_id],
        parse,
    )
