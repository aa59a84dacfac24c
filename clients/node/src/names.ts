// Identifier rules (port of shardq/names.py: its rules and their sentences are generated,
// constants.generated.ts; the checks are here).
import {
  JOB_ID_RE,
  JOB_ID_RULE,
  JOB_TYPE_RE,
  JOB_TYPE_RULE,
  LIMIT_KEY_RE,
  LIMIT_KEY_RULE,
  MAX_IDEMPOTENCY_KEY,
  PRIORITY_LEVELS,
  Priority,
  QUEUE_NAME_RE,
  QUEUE_NAME_RULE,
  TENANT_RE,
  TENANT_RULE,
} from './constants.generated';
import { InvalidJobError, InvalidLimitError, UnknownQueueError, repr, reprCut } from './errors';

/** UnknownQueueError unless `queue` is a name a queue can have. */
export function checkQueueName(queue: unknown): asserts queue is string {
  if (typeof queue !== 'string' || !QUEUE_NAME_RE.test(queue)) {
    throw new UnknownQueueError(`queue name ${repr(queue)} is invalid: ${QUEUE_NAME_RULE}`);
  }
}

/** As checkQueueName, for a queue being created: also refuses a name of dots only. */
export function checkNewQueueName(queue: unknown): asserts queue is string {
  checkQueueName(queue);
  if (queue.replace(/^\.+|\.+$/g, '') === '') {
    throw new UnknownQueueError(
      `queue name ${repr(queue)} is invalid: ${QUEUE_NAME_RULE}, and not only dots (URLs would lose it)`,
    );
  }
}

export function isJobType(jobType: unknown): jobType is string {
  return typeof jobType === 'string' && JOB_TYPE_RE.test(jobType);
}

export function checkJobType(jobType: unknown): string {
  if (!isJobType(jobType)) throw new InvalidJobError(`job type ${repr(jobType)} is invalid: ${JOB_TYPE_RULE}`);
  return jobType;
}

export function checkJobId(jobId: unknown): asserts jobId is string {
  if (typeof jobId !== 'string' || !JOB_ID_RE.test(jobId)) {
    throw new InvalidJobError(`job_id ${repr(jobId)} is invalid: ${JOB_ID_RULE}`);
  }
}

/** Whether a JS string holds a lone surrogate (Python: not encodable as UTF-8). */
export function hasLoneSurrogate(s: string): boolean {
  return /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);
}

/** Python's len() of a str: code points, not UTF-16 units. */
export function codePoints(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

export function checkIdempotencyKey(key: unknown): asserts key is string {
  if (typeof key !== 'string' || !(1 <= codePoints(key) && codePoints(key) <= MAX_IDEMPOTENCY_KEY)) {
    throw new InvalidJobError(
      `idempotency_key must be a str of 1..${MAX_IDEMPOTENCY_KEY} characters, got ${reprCut(key, 80)}`,
    );
  }
  if (hasLoneSurrogate(key)) {
    throw new InvalidJobError(
      `idempotency_key ${reprCut(key, 80)} is not valid Unicode (a lone surrogate): fix its source`,
    );
  }
}

/** The level letter of a priority name; InvalidJobError for anything else. */
export function checkPriority(priority: unknown): string {
  const level = typeof priority === 'string' && Object.hasOwn(PRIORITY_LEVELS, priority) ? PRIORITY_LEVELS[priority as Priority] : undefined;
  if (level === undefined) {
    throw new InvalidJobError(`priority ${repr(priority)} is unknown: use 'high', 'default' or 'low'`);
  }
  return level;
}

export function isTenant(tenant: unknown): tenant is string {
  return typeof tenant === 'string' && TENANT_RE.test(tenant);
}

export function checkTenant(tenant: unknown): string {
  if (!isTenant(tenant)) throw new InvalidJobError(`tenant ${repr(tenant)} is invalid: ${TENANT_RULE}`);
  return tenant;
}

/** A limit key as given, or InvalidLimitError saying what is allowed. */
export function checkLimitKey(key: unknown): string {
  if (typeof key !== 'string' || !LIMIT_KEY_RE.test(key)) {
    throw new InvalidLimitError(`limit key ${reprCut(key, 80)} is invalid: ${LIMIT_KEY_RULE}`);
  }
  return key;
}
