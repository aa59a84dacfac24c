// Typed errors: the classes of shardq/errors.py (errors.generated.ts), and here those with
// fields of their own.  Each class's `name` is the Python class name, so the conformance
// vectors (which name errors by the Python class) compare by `err.name`, and the inheritance
// follows Python's (an InvalidScheduleError is an InvalidJobError, ...).
import { MalformedRecordError, ShardqError } from './errors.generated';

export * from './errors.generated';

/** Redis did not answer; `written` says whether the call may have taken effect. */
export class RedisUnavailableError extends ShardqError {
  /** false: surely not written; null: unknown (sent, no reply). */
  readonly written: boolean | null;
  constructor(message: string, written: boolean | null = null) {
    super(message);
    this.written = written;
  }
}

/** A number read from Redis that is not what the field holds (shardq/store/numbers.py). */
export class BadNumber extends MalformedRecordError {
  readonly what: string;
  readonly raw: unknown;
  readonly allowed: string;
  constructor(what: string, raw: unknown, allowed: string) {
    super(`${what} is ${shown(raw)}, not ${allowed}`);
    this.what = what;
    this.raw = raw;
    this.allowed = allowed;
  }
}

export class LayoutMovedError extends ShardqError {
  readonly generation: number;
  readonly partitions: number;
  constructor(message: string, generation = 0, partitions = 0) {
    super(message);
    this.generation = generation;
    this.partitions = partitions;
  }
}

export class NotDurableError extends ShardqError {
  readonly jobIds: string[];
  /** From enqueueMany: every request's result (all were stored). */
  readonly results: unknown[];
  constructor(message: string, jobIds: string[] = [], results: unknown[] = []) {
    super(message);
    this.jobIds = jobIds;
    this.results = results;
  }
}

export class BulkEnqueueError extends ShardqError {
  /** One entry per request: its EnqueueResult when stored, else null. */
  readonly results: unknown[];
  /** Request index -> the error it met (not known to be stored). */
  readonly failed: Map<number, Error>;
  /** The failed requests with their chosen job ids filled in: resending them is safe. */
  readonly retryRequests: unknown[];
  constructor(message: string, results: unknown[], failed: Map<number, Error>, retryRequests: unknown[]) {
    super(message);
    this.results = results;
    this.failed = failed;
    this.retryRequests = retryRequests;
  }
  /** Job ids known to be stored. */
  get stored(): string[] {
    return this.results.filter((r): r is { jobId: string } => r != null).map((r) => r.jobId);
  }
}

const SHOWN = 40;

/** Python's repr() of a str, as the Python messages show names ('x', or "it's"). */
export function repr(value: unknown): string {
  if (typeof value !== 'string') {
    if (value === null || value === undefined) return 'None';
    if (value === true) return 'True';
    if (value === false) return 'False';
    if (typeof value === 'number') return pyFloatRepr(value);
    if (typeof value === 'bigint') return value.toString();
    try {
      return JSON.stringify(value) ?? String(value);
    } catch {
      return String(value);
    }
  }
  const quote = value.includes("'") && !value.includes('"') ? '"' : "'";
  let out = '';
  for (const ch of value) {
    const c = ch.codePointAt(0)!;
    if (ch === '\\') out += '\\\\';
    else if (ch === quote) out += '\\' + ch;
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (c < 0x20 || c === 0x7f) out += '\\x' + c.toString(16).padStart(2, '0');
    else out += ch;
  }
  return quote + out + quote;
}

function pyFloatRepr(n: number): string {
  if (Number.isNaN(n)) return 'nan';
  if (n === Infinity) return 'inf';
  if (n === -Infinity) return '-inf';
  return String(n);
}

/** A raw value as a message shows it (shardq.errors.shown): a number as it is, text quoted and
 *  cut short. */
export function shown(raw: unknown): string {
  if (typeof raw === 'number' || typeof raw === 'bigint') return repr(raw);
  let text = Buffer.isBuffer(raw) ? raw.toString('utf8') : String(raw);
  if (raw === null || raw === undefined) text = 'None';
  if (text.length > SHOWN) text = text.slice(0, SHOWN) + '...';
  return repr(text);
}

/** `repr(value)` cut to `n` characters, as Python's f"{value!r:.n}". */
export function reprCut(value: unknown, n: number): string {
  return repr(value).slice(0, n);
}
