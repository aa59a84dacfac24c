// Jobs as the producer writes them: validation, the JSON body stored in Redis, the schedule
// (port of shardq/jobs/: body.py's writers, due.make_schedule, options.Backoff, models.debounced).
// Times are in ms in this API; each is converted as a Python caller's seconds would be
// (ms / 1000, then Python's round(seconds * 1000)), so the argv and body match Python's.
import { InvalidJobError, InvalidScheduleError, PayloadNotSerializableError, PayloadTooLargeError, repr, reprCut, shown } from './errors';
import { JsonEncodeError, dumps } from './json';
import { checkJobType, checkLimitKey, checkPriority, checkTenant } from './names';
import { ProducerSettings, pyRound } from './settings';
import {
  BACKOFF_KINDS,
  BODY_KEY,
  BackoffKind,
  MAX_ATTEMPTS_LIMIT,
  MAX_BACKOFF,
  MAX_JOB_TIMEOUT,
  MAX_RESULT_RETENTION,
  MAX_RUN_AT,
  MIN_RESULT_RETENTION,
  Priority,
} from './constants.generated';

export interface Backoff {
  kind: BackoffKind;
  baseMs: number;
  capMs: number;
}

/** One job to enqueue (times in ms; `runAt` and `deadline` also take a Date). */
export interface JobRequest {
  type: string;
  payload?: unknown;
  jobId?: string | null;
  idempotencyKey?: string | null;
  delayMs?: number | null;
  runAt?: Date | number | null;
  maxAttempts?: number | null;
  backoff?: Backoff | null;
  headers?: Record<string, string> | null;
  priority?: Priority | null;
  tenant?: string | null;
  limitKey?: string | null;
  keepResultMs?: number | null;
  timeoutMs?: number | null;
  /** An absolute time (Date or epoch ms) after which the job must not start. */
  deadline?: Date | number | null;
  /** How late after its due time the job may still start (ms). */
  startWithinMs?: number | null;
  uniqueUntil?: 'done' | 'debounce' | null;
  /** Debounce by this many ms: due then, the idempotency key in debounce mode. */
  debounceMs?: number | null;
}

export type ScheduleMode = 'at' | 'in' | 'keep' | 'tat' | 'tin';
export interface Schedule {
  mode: ScheduleMode;
  ms: number;
}

const given = <T>(v: T | null | undefined): v is T => v !== null && v !== undefined;
const isNum = (v: unknown): v is number => typeof v === 'number';

/** The backoff checked as Backoff.__post_init__ checks it (seconds 0..MAX_BACKOFF). */
export function checkBackoff(b: unknown): Backoff {
  if (typeof b !== 'object' || b === null) throw new InvalidJobError('backoff must be a {kind, baseMs, capMs}');
  const { kind, baseMs, capMs } = b as Backoff;
  if (!(BACKOFF_KINDS as readonly unknown[]).includes(kind)) {
    throw new InvalidJobError(`backoff kind ${repr(kind)}: use fixed, exponential or jitter`);
  }
  for (const [name, ms] of [['base', baseMs], ['cap', capMs]] as const) {
    const seconds = isNum(ms) ? ms / 1000 : NaN;
    if (!(0 <= seconds && seconds <= MAX_BACKOFF)) {
      throw new InvalidJobError(
        `backoff ${name} must be 0..${MAX_BACKOFF.toFixed(0)} seconds (a retry waits at most a year), got ${shown(isNum(ms) ? ms / 1000 : ms)}`,
      );
    }
  }
  return { kind, baseMs, capMs };
}

/** Backoff.encode: [kind letter, base ms, cap ms]. */
export function encodeBackoff(b: Backoff): [string, number, number] {
  return [b.kind[0], pyRound((b.baseMs / 1000) * 1000), pyRound((b.capMs / 1000) * 1000)];
}

function epochSeconds(value: Date | number, what: string): number {
  if (value instanceof Date) return value.getTime() / 1000;
  if (isNum(value)) return value / 1000;
  throw new InvalidScheduleError(`${what} must be a Date or epoch ms, got ${reprCut(value, 40)}`);
}

/** Validate runAt/delayMs (make_schedule).  A delay is applied on the Redis clock. */
export function makeSchedule(runAt: Date | number | null | undefined, delayMs: number | null | undefined, settings: ProducerSettings): Schedule {
  const past = settings.pastToleranceMs / 1000;
  const horizon = settings.maxHorizonMs / 1000;
  if (given(runAt) && given(delayMs)) throw new InvalidScheduleError('pass run_at or delay, not both');
  if (!given(runAt)) {
    if (!given(delayMs)) return { mode: 'in', ms: 0 };
    if (!isNum(delayMs)) throw new InvalidScheduleError(`delay must be seconds or a timedelta, got ${reprCut(delayMs, 40)}`);
    const seconds = delayMs / 1000;
    if (!Number.isFinite(seconds)) throw new InvalidScheduleError(`delay must be a finite number of seconds, got ${seconds}`);
    if (seconds < -past) {
      throw new InvalidScheduleError(
        `delay ${shown(seconds)} s is further in the past than past_tolerance (${past} s): use delay=0 to run now`,
      );
    }
    if (seconds > horizon) {
      throw new InvalidScheduleError(
        `delay ${shown(seconds)} s is beyond max_horizon (${horizon} s): schedule closer to now or raise max_horizon`,
      );
    }
    return { mode: 'in', ms: Math.max(0, pyRound(seconds * 1000)) };
  }
  if (runAt instanceof Date && Number.isNaN(runAt.getTime())) throw new InvalidScheduleError('run_at is an invalid Date');
  const epoch = epochSeconds(runAt, 'run_at');
  if (!Number.isFinite(epoch)) throw new InvalidScheduleError(`run_at must be a finite time, got ${epoch}`);
  if (!(0 < epoch && epoch <= MAX_RUN_AT)) {
    throw new InvalidScheduleError(
      `run_at ${shown(epoch)} is not a time after 1970 and before the year 10000: pass epoch seconds 0..${Math.trunc(MAX_RUN_AT)} or a datetime`,
    );
  }
  return { mode: 'at', ms: pyRound(epoch * 1000) };
}

/** A keepResult retention as the ms a body carries (option r). */
export function resultRetentionMs(ms: unknown): number {
  const seconds = isNum(ms) ? ms / 1000 : NaN;
  if (!(MIN_RESULT_RETENTION <= seconds && seconds <= MAX_RESULT_RETENTION)) {
    throw new InvalidJobError(
      `keep_result must be ${MIN_RESULT_RETENTION.toFixed(0)}..${MAX_RESULT_RETENTION.toFixed(0)} seconds (how long the result is kept after the job completes; at most 30 days), got ${shown(isNum(ms) ? ms / 1000 : ms)}`,
    );
  }
  return pyRound(seconds * 1000);
}

function seconds(value: unknown, what: string, lo: number, hi: number, hint: string, shownValue: unknown): number {
  const s = isNum(value) ? value : NaN;
  if (!(lo <= s && s <= hi)) {
    throw new InvalidJobError(`${what} must be ${String(lo)}..${hi.toFixed(0)} seconds (${hint}), got ${shown(shownValue)}`);
  }
  return s;
}

/** A job's timeout as the ms its body carries (option o). */
export function attemptTimeoutMs(ms: unknown): number {
  const hint = 'how long one attempt may run before it fails and is retried';
  const s = isNum(ms) ? ms / 1000 : ms;
  return Math.max(1, pyRound(seconds(s, 'timeout', 0.001, MAX_JOB_TIMEOUT, hint, s) * 1000));
}

/** An absolute deadline as {d: epoch ms}, a relative one (startWithinMs) as {w: ms} (BODY_KEY). */
export function deadlineOption(deadline: Date | number | null | undefined, startWithinMs: number | null | undefined): Record<string, number> {
  if (given(startWithinMs)) {
    const hint = 'how late after its due time the job may still start';
    // timedelta(milliseconds=x).total_seconds(): microseconds rounded half to even
    const s = isNum(startWithinMs) ? pyRound(startWithinMs * 1000) / 1e6 : startWithinMs;
    return { [BODY_KEY.startWithin]: pyRound(seconds(s, 'deadline', 0, MAX_BACKOFF, hint, s) * 1000) };
  }
  let epoch: unknown = deadline;
  if (deadline instanceof Date) epoch = deadline.getTime() / 1000;
  else if (isNum(deadline)) epoch = deadline / 1000;
  if (!isNum(epoch) || !(0 < epoch && epoch <= MAX_RUN_AT)) {
    throw new InvalidJobError(
      `deadline must be a datetime, epoch seconds 0..${Math.trunc(MAX_RUN_AT)}, or a timedelta (how late after its due time the job may still start), got ${shown(epoch)}`,
    );
  }
  return { [BODY_KEY.deadlineMs]: pyRound(epoch * 1000) };
}

/** The body prefix that carries a job's priority and tenant ('' for neither). */
export function flowPrefix(priority: string | null | undefined, tenant: string | null | undefined): string {
  const level = given(priority) ? checkPriority(priority) : 'n';
  const name = given(tenant) ? checkTenant(tenant) : '';
  if (level === 'n' && !name) return '';
  return '@' + level + name + '@';
}

function checkHeaders(headers: unknown): Record<string, string> {
  const ok =
    typeof headers === 'object' &&
    headers !== null &&
    !Array.isArray(headers) &&
    (Object.getPrototypeOf(headers) === Object.prototype || Object.getPrototypeOf(headers) === null) &&
    Object.values(headers).every((v) => typeof v === 'string');
  if (!ok) {
    throw new InvalidJobError(`headers must be a dict of str to str (e.g. W3C traceparent), got ${reprCut(headers, 80)}`);
  }
  return headers as Record<string, string>;
}

/** Validate a job and build its stored body text (shardq.jobs.body).  Throws before anything
 *  is written.  `[type, payload]` or `[type, payload, {options}]` with only the options set,
 *  each under its BODY_KEY, in the order m, b, k, h, l, r, o, d|w (the Python codec's); a
 *  priority or tenant adds the `@<level><tenant>@` prefix. */
export function encodeBody(req: JobRequest, settings: ProducerSettings): string {
  let prefix = '';
  if (given(req.priority) || given(req.tenant)) prefix = flowPrefix(req.priority, req.tenant);
  const jobType = checkJobType(req.type);
  const body: Record<string, unknown> = {};
  if (given(req.maxAttempts)) {
    const m = req.maxAttempts;
    if (typeof m !== 'number' || !Number.isInteger(m) || !(1 <= m && m <= MAX_ATTEMPTS_LIMIT)) {
      throw new InvalidJobError(`max_attempts must be an integer 1..${MAX_ATTEMPTS_LIMIT}, got ${repr(m)}`);
    }
    body[BODY_KEY.maxAttempts] = m;
  }
  if (given(req.backoff)) body[BODY_KEY.backoff] = encodeBackoff(checkBackoff(req.backoff));
  if (given(req.idempotencyKey)) body[BODY_KEY.idempotencyKey] = req.idempotencyKey;
  if (given(req.headers)) {
    const headers = checkHeaders(req.headers);
    if (Object.keys(headers).length > 0) body[BODY_KEY.headers] = headers;
  }
  if (given(req.limitKey)) {
    try {
      body[BODY_KEY.limitKey] = checkLimitKey(req.limitKey);
    } catch (exc) {
      throw new InvalidJobError((exc as Error).message);
    }
  }
  if (given(req.keepResultMs)) body[BODY_KEY.keepResult] = resultRetentionMs(req.keepResultMs);
  if (given(req.timeoutMs)) body[BODY_KEY.timeout] = attemptTimeoutMs(req.timeoutMs);
  if (given(req.deadline) || given(req.startWithinMs)) Object.assign(body, deadlineOption(req.deadline, req.startWithinMs));
  const payload = req.payload === undefined ? null : req.payload;
  let data: string;
  try {
    data = dumps(Object.keys(body).length > 0 ? [jobType, payload, body] : [jobType, payload]);
  } catch (exc) {
    if (!(exc instanceof JsonEncodeError)) throw exc;
    if (/finite/.test(exc.message)) {
      throw new PayloadNotSerializableError(
        `payload of ${repr(jobType)} holds NaN or infinity, which JSON cannot carry: send None or a string instead`,
      );
    }
    throw new PayloadNotSerializableError(
      `payload of ${repr(jobType)} cannot be encoded as JSON (${exc.message}): pass dicts, lists, str (valid Unicode), int (64-bit), float, bool or None (convert datetimes, sets, big integers and objects first)`,
    );
  }
  const size = Buffer.byteLength(data, 'utf8');
  if (size > settings.maxPayloadBytes) {
    throw new PayloadTooLargeError(
      `job ${repr(jobType)} encodes to ${size} bytes, over max_payload_bytes (${settings.maxPayloadBytes}): store large data elsewhere and pass a reference, or raise the limit`,
    );
  }
  return prefix + data;
}

/** The request debounced by `debounceMs` (shardq.jobs.debounced): due that long from now, its
 *  idempotency key in debounce mode. */
export function debounced(req: JobRequest): JobRequest {
  if (!given(req.debounceMs)) return req;
  if (given(req.runAt) || given(req.delayMs)) {
    throw new InvalidJobError('debounce sets the due time: pass debounce or run_at/delay, not both');
  }
  if (given(req.uniqueUntil)) throw new InvalidJobError('pass debounce or unique_until, not both');
  if (!given(req.idempotencyKey)) {
    throw new InvalidJobError("debounce works on the idempotency key (the burst's name): pass idempotency_key too");
  }
  const s = isNum(req.debounceMs) ? req.debounceMs / 1000 : NaN;
  if (!(0 <= s && s <= 86400)) throw new InvalidJobError(`debounce must be 0..86400 seconds, got ${shown(isNum(req.debounceMs) ? s : req.debounceMs)}`);
  return { ...req, debounceMs: null, delayMs: req.debounceMs, uniqueUntil: 'debounce' };
}

// -- the compact layout's cost model (shardq.jobs.ids._allocation, _sds, compact_pays) --------

/** The bytes jemalloc hands out for `size`. */
export function allocation(size: number): number {
  if (size <= 8) return 8;
  if (size <= 128) return Math.ceil(size / 16) * 16;
  const bitLength = 32 - Math.clz32(size - 1);
  const step = 2 ** (bitLength - 3);
  return Math.ceil(size / step) * step;
}

/** The allocation of a Redis string of `length` bytes (header and terminator included). */
export function sds(length: number): number {
  return allocation(length + (length < 256 ? 3 : 5) + 1);
}

/** Whether a waiting job with a body of `bodyLen` bytes costs Redis less as one compact
 *  due-set member than plain. */
export function compactPays(bodyLen: number): boolean {
  const compact = sds(21 + bodyLen);
  const plain = sds(12) + sds(3 + bodyLen) + sds(12) + 32 + 10;
  return compact < plain;
}
