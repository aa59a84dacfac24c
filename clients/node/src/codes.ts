// Script return codes: the one place they become typed errors (port of shardq/store/codes.py).
import {
  CorruptKeyError,
  DuplicateJobError,
  FencedError,
  IdempotencyKeyInUseError,
  InvalidScheduleError,
  JobMovingError,
  JobNotFoundError,
  JobNotScheduledError,
  JobRunningError,
  LayoutMovedError,
  NotPermittedError,
  QueueConfigConflictError,
  ScheduleNotFoundError,
  ScriptArgumentError,
  ScriptError,
  ShardqError,
  repr,
} from './errors';

export const Code = {
  FENCED: -1,
  DUE_IN_PAST: -2,
  BEYOND_HORIZON: -3,
  DUPLICATE_JOB_ID: -4,
  NOT_SCHEDULED: -5,
  JOB_NOT_FOUND: -6,
  JOB_RUNNING: -7,
  QUEUE_CONFLICT: -8,
  JOB_DEAD: -9,
  WRONG_TYPE: -10,
  BAD_ARGUMENT: -11,
  SCHEDULE_NOT_FOUND: -12,
  SCHEDULE_CHANGED: -13,
  NOT_PERMITTED: -14,
  TOO_MANY_ARGUMENTS: -15,
  LAYOUT_MOVED: -16,
  JOB_MOVING: -17,
  KEY_IN_USE: -20,
} as const;

const ROLES: Record<string, string> = {
  operator: 'operator or admin',
  producer: 'producer, operator or admin',
};

const isDigits = (s: string): boolean => /^[0-9]+$/.test(s);

const ERRORS: Record<number, (d: string[]) => ShardqError> = {
  [Code.FENCED]: (d) =>
    new FencedError(
      `fencing token ${d[0]} is stale (lease now ${d[1] || 'free'}): another dispatcher owns this partition; stop draining it`,
    ),
  [Code.DUE_IN_PAST]: (d) =>
    new InvalidScheduleError(
      `run time ${d[0]} ms is more than ${d[2]} ms before the Redis clock (${d[1]} ms): pass a time in the future, use delay=0 to run now, or raise past_tolerance`,
    ),
  [Code.BEYOND_HORIZON]: (d) =>
    new InvalidScheduleError(
      `run time ${d[0]} ms is more than ${d[2]} ms after the Redis clock (${d[1]} ms): schedule closer to now or raise max_horizon`,
    ),
  [Code.DUPLICATE_JOB_ID]: (d) =>
    new DuplicateJobError(
      `job ${repr(d[0])} already exists: pick another job_id, or pass idempotency_key to get the existing job back instead of an error`,
    ),
  [Code.NOT_SCHEDULED]: (d) =>
    new JobNotScheduledError(
      `job ${repr(d[0])} is already due and handed to the ready stream: cancel it (if it has not started) and enqueue it again`,
    ),
  [Code.JOB_NOT_FOUND]: (d) =>
    new JobNotFoundError(`job ${repr(d[0])} not found: it completed, was cancelled, or never existed`),
  [Code.JOB_RUNNING]: (d) =>
    new JobRunningError(
      `job ${repr(d[0])} is running on a worker: cancel(..., running=True) (\`shardq job cancel --running\`) stops it there and ends it as cancelled`,
    ),
  [Code.QUEUE_CONFLICT]: (d) =>
    new QueueConfigConflictError(
      `queue exists with ${d[0]} partitions, not ${d[1]}: use the existing count (partitions cannot change in place)`,
    ),
  [Code.JOB_DEAD]: (d) =>
    new JobNotScheduledError(
      `job ${repr(d[0])} is in the dead-letter stream: replay it with \`shardq dlq replay\` instead`,
    ),
  [Code.WRONG_TYPE]: (d) =>
    new CorruptKeyError(
      `key ${d[0]} holds ${d[1]} where shardq keeps ${d[2]}: something other than shardq wrote it. Nothing was written. Inspect it (TYPE, DUMP), then restore or delete that key`,
    ),
  [Code.BAD_ARGUMENT]: (d) =>
    new ScriptArgumentError(
      `argument ${d[0]} = ${repr(d[1])} is outside ${d[2]}..${d[3]}: a bug or a version mismatch between shardq and its Redis functions (run \`shardq functions load\` after upgrading)`,
    ),
  [Code.SCHEDULE_NOT_FOUND]: (d) =>
    new ScheduleNotFoundError(`no periodic schedule ${repr(d[0])} on this queue: see \`shardq schedule list\``),
  [Code.SCHEDULE_CHANGED]: (d) =>
    new ScriptError(`periodic schedule ${repr(d[0])} was updated while this call ran: run it again`),
  [Code.NOT_PERMITTED]: (d) => {
    const roles = ROLES[d[0]] ?? d[0];
    if (d[2] !== '?') {
      return new NotPermittedError(
        `${d[1]} is ${d[2]}: a bug, or a version mismatch between shardq and its Redis functions. Nothing was written`,
      );
    }
    return new NotPermittedError(
      `only the ${roles} Redis user may do this (this user may not write ${d[1]}). Nothing was written. Run it as the shardq-${d[0]} user (docs/deploy.md, \`shardq acl print\`)`,
    );
  },
  [Code.TOO_MANY_ARGUMENTS]: (d) =>
    new ScriptArgumentError(
      `the call carries ${d[1]} ${d[0]} where the function takes at most ${d[2]}: refused before anything ran (a bug, or a version mismatch: run \`shardq functions load\` after upgrading)`,
    ),
  [Code.LAYOUT_MOVED]: (d) => {
    const at = d[0].indexOf(':');
    const generation = at < 0 ? d[0] : d[0].slice(0, at);
    const partitions = at < 0 ? '' : d[0].slice(at + 1);
    const gen = isDigits(generation) ? parseInt(generation, 10) : 0;
    const count = isDigits(partitions) ? parseInt(partitions, 10) : 0;
    return new LayoutMovedError(
      `a resize moves this partition's jobs to generation ${gen} (${count} partitions): ask there (the clients follow this themselves; a tool pointed at one partition should read the queue's meta again)`,
      gen,
      count,
    );
  },
  [Code.JOB_MOVING]: (d) =>
    new JobMovingError(
      `job ${repr(d[0])} is being moved by a resize: ask again in a moment; if this lasts, finish the resize with \`shardq queue resize --queue Q --resume\``,
    ),
  [Code.KEY_IN_USE]: (d) =>
    new IdempotencyKeyInUseError(
      `the idempotency key belongs to job ${repr(d[0])}, which no debounce of this job type and tenant enqueued: nothing was written. Idempotency keys are queue-global; give this burst a key of its own (e.g. '<job type>:<tenant>:<your key>')`,
    ),
};

function text(value: unknown): string {
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  if (value === null || value === undefined) return 'None';
  return String(value);
}

/** The typed error for a script's negative return code and its detail fields. */
export function errorFor(code: number, detail: unknown[]): ShardqError {
  const factory = ERRORS[code];
  if (factory === undefined) {
    return new ScriptError(`script returned unknown code ${code} ${JSON.stringify(detail)}: upgrade shardq`);
  }
  const texts = detail.map(text);
  while (texts.length < 4) texts.push('?'); // a short reply still makes an error
  return factory(texts);
}

/** Whether `reply` is the script's `{code, ...}` answer. */
export function isCode(reply: unknown, code: number): boolean {
  return Array.isArray(reply) && reply.length > 0 && reply[0] === code;
}

/** Throw the typed error for a negative script code (or a raised reply); else the reply as an
 *  array. */
export function check(reply: unknown): unknown[] {
  if (reply instanceof Error) throw reply;
  if (Array.isArray(reply)) {
    if (reply.length > 0 && typeof reply[0] === 'number' && Number.isInteger(reply[0]) && reply[0] < 0) {
      throw errorFor(reply[0], reply.slice(1));
    }
    return reply;
  }
  return [reply];
}
