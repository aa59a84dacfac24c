"""Jobs as users see them, in five modules along their seams:

- :mod:`shardq.jobs.models`: a job as its handler receives it, one to enqueue
  (:class:`JobRequest`), what enqueue did, a job's snapshot, its kept result;
- :mod:`shardq.jobs.options`: every option a job may have, declared once (name, type, meaning,
  check, body letter, CLI flags), and what each surface derives from it;
- :mod:`shardq.jobs.body`: the body stored in Redis, written at enqueue and read back;
- :mod:`shardq.jobs.due`: when a job is due (``run_at``/``delay``);
- :mod:`shardq.jobs.ids`: random and timed job ids.

Every name shardq.jobs had before the split is importable from here.  A model imports nothing
of the store.
"""

from __future__ import annotations

from shardq import names
from shardq.jobs.body import (
    decode_body,
    encode_body,
    flow_prefix,
    request_body,
    split_flow,
    stored_options,
)
from shardq.jobs.due import Schedule, make_schedule
from shardq.jobs.ids import compact_pays, new_job_id, new_timed_job_id, timed_head, timed_id_due
from shardq.jobs.models import (
    MAX_ATTEMPT,
    MAX_PROGRESS_BYTES,
    STAMP_BYTES,
    EnqueueResult,
    Job,
    JobInfo,
    JobRequest,
    JobResult,
    JobState,
    debounced,
)
from shardq.jobs.options import (
    DEFAULT_BACKOFF,
    MAX_ATTEMPTS_LIMIT,
    MAX_BACKOFF,
    MAX_JOB_TIMEOUT,
    MAX_RESULT_RETENTION,
    MAX_RUN_AT,
    MIN_RESULT_RETENTION,
    Backoff,
    BackoffKind,
    JobOptions,
    attempt_timeout_ms,
    deadline_option,
    result_retention_ms,
)

# The identifier rules live in shardq.names; the names they had here stay importable.
Priority = names.Priority
PRIORITY_LEVELS = names.PRIORITY_LEVELS
LEVEL_PRIORITIES = names.LEVEL_PRIORITIES
TENANT_RE = names.TENANT_RE
JOB_TYPE_RE = names.JOB_TYPE_RE
JOB_ID_RE = names.JOB_ID_RE
MAX_IDEMPOTENCY_KEY = names.MAX_IDEMPOTENCY_KEY
check_queue_name = names.check_queue_name
check_job_id = names.check_job_id
check_idempotency_key = names.check_idempotency_key
check_priority = names.check_priority
check_tenant = names.check_tenant

__all__ = [
    "DEFAULT_BACKOFF",
    "JOB_ID_RE",
    "JOB_TYPE_RE",
    "LEVEL_PRIORITIES",
    "MAX_ATTEMPT",
    "MAX_ATTEMPTS_LIMIT",
    "MAX_BACKOFF",
    "MAX_IDEMPOTENCY_KEY",
    "MAX_JOB_TIMEOUT",
    "MAX_PROGRESS_BYTES",
    "MAX_RESULT_RETENTION",
    "MAX_RUN_AT",
    "MIN_RESULT_RETENTION",
    "PRIORITY_LEVELS",
    "STAMP_BYTES",
    "TENANT_RE",
    "Backoff",
    "BackoffKind",
    "EnqueueResult",
    "Job",
    "JobInfo",
    "JobOptions",
    "JobRequest",
    "JobResult",
    "JobState",
    "Priority",
    "Schedule",
    "attempt_timeout_ms",
    "check_idempotency_key",
    "check_job_id",
    "check_priority",
    "check_queue_name",
    "check_tenant",
    "compact_pays",
    "deadline_option",
    "debounced",
    "decode_body",
    "encode_body",
    "flow_prefix",
    "make_schedule",
    "new_job_id",
    "new_timed_job_id",
    "request_body",
    "result_retention_ms",
    "split_flow",
    "stored_options",
    "timed_head",
    "timed_id_due",
]
