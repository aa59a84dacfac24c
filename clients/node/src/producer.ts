// Producer operations as data: each function validates its input fully (throwing a typed
// error before anything is sent) and returns the call to make (function, KEYS, ARGV, and the
// parser of its reply).  Port of shardq/store/producer.py and routing.py (and the plain
// commands of shardq/store/queues.py and shardq/store/inspection.py a producer sends).
// Nothing here talks to Redis: a conformance runner compares these calls with the vectors'
// before sending them.
import { Backoff, JobRequest, Schedule, checkBackoff, compactPays, debounced, encodeBody, makeSchedule } from './body';
import { check, errorFor, isCode } from './codes';
import {
  BATCH_JOBS,
  Code,
  DEFAULT_DEAD_CAP,
  JobState,
  LAYOUT_VERSION,
  LEVEL_PRIORITIES,
  MAX_ACK_RETENTION_MS,
  MAX_ATTEMPT,
  MAX_ATTEMPTS_LIMIT,
  MAX_BACKOFF,
  MAX_DEAD_CAP,
  MAX_JOB_TIMEOUT,
  MAX_PARTITIONS,
  MAX_RESULT_RETENTION,
  MAX_RUN_AT,
  MAX_TIME_MS,
  MIN_RESULT_RETENTION,
  PRIORITY_LEVELS,
  Priority,
  QUEUES_KEY,
  TENANT_CHARS,
  WORKER_GROUP,
  queueMetaKey,
} from './constants.generated';
import { BadNumber, InvalidJobError, InvalidScheduleError, LanesOffError, MalformedRecordError, ShardqError, reprCut, shown } from './errors';
import { newJobId, newTimedJobId, timedHead } from './ids';
import { RUNS, supports } from './sticky';
import { Layout, PartitionKeys, partitionFor } from './keys';
import { QueueMeta, integer, isCompact, keyLayout, parseMeta } from './meta';
import { checkIdempotencyKey, checkJobId, checkNewQueueName, checkPriority } from './names';
import { ProducerSettings, msRound } from './settings';

// -- calls ------------------------------------------------------------------------------------

/** A call of one of shardq's functions: `function` is the operation's name without the
 *  library prefix ('enqueue', 'enqueue-batch', ...). */
export interface Op<T> {
  kind: 'fcall';
  function: string;
  keys: string[];
  argv: string[];
  parse: (reply: unknown) => T;
  safeToRepeat: boolean;
}

/** A plain command on shardq's keys; it goes to the node serving `route`. */
export interface Command<T> {
  kind: 'command';
  command: string[];
  route: string;
  parse: (reply: unknown) => T;
  safeToRepeat: boolean;
}

export type Call<T> = Op<T> | Command<T>;

/** The key whose slot decides which node runs the call. */
export function routeKey(call: Call<unknown>): string {
  return call.kind === 'fcall' ? call.keys[0] : call.route;
}

function op<T>(fn: string, keys: string[], argv: (string | number)[], parse: (r: unknown) => T, safeToRepeat = true): Op<T> {
  return { kind: 'fcall', function: fn, keys, argv: argv.map(String), parse, safeToRepeat };
}

function cmd<T>(args: (string | number)[], parse: (r: unknown) => T, route?: string): Command<T> {
  const command = args.map(String);
  return { kind: 'command', command, route: route ?? command[1], parse, safeToRepeat: true };
}

/** A call as the vectors write what is sent: {function, keys, argv} or {command}. */
export function sent(call: Call<unknown>): { function: string; keys: string[]; argv: string[] } | { command: string[] } {
  return call.kind === 'fcall' ? { function: call.function, keys: [...call.keys], argv: [...call.argv] } : { command: [...call.command] };
}

const text = (v: unknown): string => (Buffer.isBuffer(v) ? v.toString('utf8') : String(v));
const int = (v: unknown): number => {
  const n = typeof v === 'number' ? v : Number(text(v));
  if (!Number.isFinite(n)) throw new MalformedRecordError(`reply ${shown(v)} is not a number`);
  return n;
};

// -- the Redis clock ----------------------------------------------------------------------------

/** This process's estimate of the Redis clock in ms: the local clock plus the offset the last
 *  enqueue reply showed (its `now`).  A timed job id carries it plus the delay. */
export class RedisClock {
  offsetMs = 0;
  nowMs(): number {
    return Math.trunc(Date.now() + this.offsetMs);
  }
  saw(redisNowMs: number): void {
    this.offsetMs = redisNowMs - Date.now();
  }
}

export const REDIS_CLOCK = new RedisClock();

// -- the queue a producer writes to ---------------------------------------------------------

/** What the ops need of a queue: its meta (or, as the vectors give it, a name and a count). */
export type QueueShape =
  | QueueMeta
  | { queue?: string; name?: string; partitions: number; layout?: number; generation?: number; draining?: [number, number] | null; coming?: [number, number] | null };

function layoutOf(q: QueueShape | Layout): { layout: Layout; compact: boolean } {
  if (q instanceof Layout) return { layout: q, compact: false };
  const shape = q as { queue?: string; name?: string; partitions: number; layout?: number; generation?: number; draining?: [number, number] | null; coming?: [number, number] | null };
  const queue = shape.queue ?? shape.name;
  if (typeof queue !== 'string') throw new TypeError('queue shape needs a queue name');
  const meta = { ...shape, queue } as QueueMeta;
  return {
    layout: keyLayout({ ...meta, generation: meta.generation ?? 0, draining: meta.draining ?? null, coming: meta.coming ?? null }),
    compact: isCompact({ ...meta, layout: meta.layout ?? 0 }),
  };
}

// -- enqueue -------------------------------------------------------------------------------------

export interface EnqueueResult {
  jobId: string;
  /** False: the idempotency key or job id was already used; nothing written. */
  created: boolean;
  /** Its due time on the Redis clock (null when not new, or not reported). */
  dueMs: number | null;
  /** The partition's fleet id (generation * 16384 + p: p before any resize), as Python's. */
  partition: number;
}

/** The due ms a new job's timed id should carry, or null for a plain id. */
export function timedDue(schedule: Schedule, bodyLength: number, compact: boolean, clock: RedisClock = REDIS_CLOCK): number | null {
  if (!compact || !compactPays(bodyLength)) return null;
  if (schedule.mode === 'in') return schedule.ms > 0 ? clock.nowMs() + schedule.ms : null;
  return schedule.ms > clock.nowMs() ? schedule.ms : null;
}

/** The schedule as sent with a timed id just generated: 'tin'/'tat'. */
export function timedMode(schedule: Schedule): Schedule {
  return { mode: schedule.mode === 'in' ? 'tin' : 'tat', ms: schedule.ms };
}

export function checkIds(jobId: string | null | undefined, idempotencyKey: string | null | undefined): void {
  if (idempotencyKey !== null && idempotencyKey !== undefined) checkIdempotencyKey(idempotencyKey);
  if (jobId !== null && jobId !== undefined) checkJobId(jobId);
}

/** Pick the job id and partition (a generated id is timed when `dueMs` is given). */
export function route(partitions: number, jobId: string | null | undefined, idempotencyKey: string | null | undefined, dueMs: number | null = null): [string, number] {
  if (idempotencyKey !== null && idempotencyKey !== undefined) {
    const partition = partitionFor(idempotencyKey, partitions);
    if (jobId !== null && jobId !== undefined) {
      if (partitionFor(jobId, partitions) !== partition) {
        throw new InvalidJobError(
          'job_id and idempotency_key map to different partitions: pass only one (a custom job_id is itself deduplicated)',
        );
      }
      return [jobId, partition];
    }
    const base = dueMs === null ? newJobId() : newTimedJobId(dueMs);
    for (let n = 0; ; n++) {
      const candidate = n ? base + n.toString(16) : base;
      if (partitionFor(candidate, partitions) === partition) return [candidate, partition];
    }
  }
  const id = jobId ?? (dueMs === null ? newJobId() : newTimedJobId(dueMs));
  return [id, partitionFor(id, partitions)];
}

/** One validated job with its id chosen: sent alone (`op()`) or in a partition batch. */
export class PreparedEnqueue {
  constructor(
    readonly request: JobRequest,
    readonly jobId: string,
    readonly partition: number,
    readonly pk: PartitionKeys,
    readonly body: string,
    readonly schedule: Schedule,
    readonly settings: ProducerSettings,
    private readonly clock: RedisClock = REDIS_CLOCK,
  ) {}

  get idempotencyKey(): string | null {
    return this.request.idempotencyKey ?? null;
  }

  /** How long after the due time the idempotency key lives (ms). */
  private retentionMs(): number {
    const mode = this.request.uniqueUntil;
    if (mode === 'debounce') return 1000;
    return mode ? msRound(this.settings.uniqueRetentionMs) : msRound(this.settings.idempotencyRetentionMs);
  }

  op(): Op<EnqueueResult> {
    const { settings: s, pk } = this;
    const idem = this.idempotencyKey;
    return op(
      'enqueue',
      [pk.jobs, pk.due, pk.ready, idem ? pk.idem(idem) : pk.idemPlaceholder, pk.stats, pk.lane, pk.vtime, pk.ctl],
      [
        this.jobId,
        this.body,
        this.schedule.mode,
        this.schedule.ms,
        msRound(s.pastToleranceMs),
        msRound(s.maxHorizonMs),
        this.retentionMs(),
        idem ? '1' : '0',
        pk.dueHint,
        pk.readyHint,
        this.request.uniqueUntil || '',
      ],
      (reply) => this.parse(reply),
    );
  }

  get function(): string {
    return 'enqueue';
  }
  get keys(): string[] {
    return this.op().keys;
  }
  get argv(): string[] {
    return this.op().argv;
  }

  parse(reply: unknown): EnqueueResult {
    const r = check(reply);
    this.clock.saw(int(r[3]));
    const status = r[0];
    const due = status === 1 || status === 3 ? int(r[2]) : null; // 3: debounced, the new due time
    return { jobId: text(r[1]), created: status === 1 || status === 2, dueMs: due, partition: this.pk.fleetId };
  }

  /** The request with its chosen id filled in: resending it cannot duplicate the job. */
  withId(): JobRequest {
    const req = this.request;
    if ((req.jobId ?? null) !== null || (req.idempotencyKey ?? null) !== null) return req;
    return { ...req, jobId: this.jobId };
  }
}

/** Validate one job fully; throws before anything is sent.  `queue`: its meta (layout >= 3
 *  makes a waiting job's generated id a timed one), or a Layout (never compact). */
export function prepareEnqueue(queue: QueueShape | Layout, request: JobRequest, settings: ProducerSettings, clock: RedisClock = REDIS_CLOCK): PreparedEnqueue {
  const { layout, compact } = layoutOf(queue);
  if (typeof request !== 'object' || request === null) throw new InvalidJobError(`enqueue takes a job request, got ${reprCut(request, 40)}`);
  // As a Python caller builds it: the Backoff and the debounce are checked first.
  if (request.backoff !== null && request.backoff !== undefined) checkBackoff(request.backoff);
  const req = debounced(request);
  let schedule = makeSchedule(req.runAt, req.delayMs, settings);
  checkIds(req.jobId, req.idempotencyKey);
  if (req.uniqueUntil !== null && req.uniqueUntil !== undefined) {
    if (req.uniqueUntil !== 'done' && req.uniqueUntil !== 'debounce') {
      throw new InvalidJobError(`unique_until must be 'done' or None (or debounce=<seconds>), got ${reprCut(req.uniqueUntil, 40)}`);
    }
    if (req.idempotencyKey === null || req.idempotencyKey === undefined) {
      throw new InvalidJobError(`unique_until=${reprCut(req.uniqueUntil, 40)} works on the idempotency key: pass idempotency_key too`);
    }
  }
  const body = encodeBody(req, settings);
  const hasId = req.jobId !== null && req.jobId !== undefined;
  const due = hasId ? null : timedDue(schedule, Buffer.byteLength(body, 'utf8'), compact, clock);
  let jobId: string;
  let partition: number;
  const keyed = req.idempotencyKey !== null && req.idempotencyKey !== undefined;
  if (!hasId && !keyed && settings.stickyJobs > 1 && supports(layout.partitions)) {
    // Sticky routing (src/sticky.ts): jobs due together share a partition, so their calls.
    const head = due === null ? '' : timedHead(Math.max(0, Math.trunc(due)));
    const at = schedule.mode === 'in' ? clock.nowMs() + schedule.ms : schedule.ms;
    [jobId, partition] = RUNS.place(layout.queue, layout.partitions, head, at, settings);
  } else {
    [jobId, partition] = route(layout.partitions, req.jobId, req.idempotencyKey, due);
  }
  if (due !== null) schedule = timedMode(schedule);
  return new PreparedEnqueue(req, jobId, partition, layout.pk(partition), body, schedule, settings, clock);
}

/** prepareEnqueue of every request (all validated before any is sent). */
export function prepareMany(queue: QueueShape | Layout, requests: Iterable<JobRequest>, settings: ProducerSettings, clock: RedisClock = REDIS_CLOCK): PreparedEnqueue[] {
  const out: PreparedEnqueue[] = [];
  for (const req of requests) out.push(prepareEnqueue(queue, req, settings, clock));
  return out;
}

/** Whether a reschedule to `priority` needs lanes on (any level but the default). */
export function priorityNeedsLanes(priority: string | null | undefined): boolean {
  return priority !== null && priority !== undefined && checkPriority(priority) !== PRIORITY_LEVELS.default;
}

/** Whether any of the jobs has a priority other than the default or a tenant. */
export function needsLanes(prepared: Iterable<PreparedEnqueue>): boolean {
  for (const p of prepared) if (p.body.startsWith('@')) return true;
  return false;
}

export function lanesOff(queue: string): LanesOffError {
  return new LanesOffError(
    `queue '${queue}' has lanes off, so it would deliver jobs in due order and ignore their priority and tenant: turn lanes on with \`shardq queue lanes --queue ${queue} --on\` or client.set_lanes(queue, True)`,
  );
}

export type Outcome = EnqueueResult | ShardqError;

/** One script call of a bulk enqueue and the requests (indexes) it carries. */
export interface BulkCall {
  op: Op<Outcome[]>;
  members: number[];
}

function single(prepared: PreparedEnqueue): Op<Outcome[]> {
  const one = prepared.op();
  return {
    ...one,
    parse: (reply) => {
      try {
        return [one.parse(reply)];
      } catch (exc) {
        if (exc instanceof ShardqError) return [exc]; // a rejected job: per job
        throw exc;
      }
    },
  };
}

function batch(chunk: PreparedEnqueue[], clock: RedisClock): Op<Outcome[]> {
  const first = chunk[0];
  const s = first.settings;
  const pk = first.pk;
  const argv: (string | number)[] = [msRound(s.pastToleranceMs), msRound(s.maxHorizonMs), pk.dueHint, pk.readyHint];
  for (const p of chunk) argv.push(p.jobId, p.body, p.schedule.mode, p.schedule.ms);
  const parse = (reply: unknown): Outcome[] => {
    const r = check(reply);
    clock.saw(int(r[0]));
    const now = text(r[0]);
    return chunk.map((p, n): Outcome => {
      const status = int(r[1 + 2 * n]);
      const detail = int(r[2 + 2 * n]);
      if (status === 1 || status === 2) return { jobId: p.jobId, created: true, dueMs: status === 1 ? detail : null, partition: p.pk.fleetId };
      if (status === Code.DUPLICATE_JOB_ID) return errorFor(status, [p.jobId]);
      const limit = status === Code.DUE_IN_PAST ? s.pastToleranceMs : s.maxHorizonMs;
      return errorFor(status, [String(detail), now, String(msRound(limit))]);
    });
  };
  return op('enqueue-batch', [pk.jobs, pk.due, pk.ready, pk.stats, pk.lane, pk.vtime, pk.ctl], argv, parse);
}

/** Group jobs without an idempotency key into per-partition batches (at most BATCH_JOBS each);
 *  jobs with one go through the single enqueue, which owns the key's dedupe. */
export function planBulk(prepared: PreparedEnqueue[], clock: RedisClock = REDIS_CLOCK): BulkCall[] {
  const calls: BulkCall[] = [];
  const byPartition = new Map<number, number[]>();
  prepared.forEach((p, i) => {
    if (p.idempotencyKey !== null) calls.push({ op: single(p), members: [i] });
    else {
      let list = byPartition.get(p.pk.fleetId);
      if (list === undefined) byPartition.set(p.pk.fleetId, (list = []));
      list.push(i);
    }
  });
  for (const indexes of byPartition.values()) {
    for (let start = 0; start < indexes.length; start += BATCH_JOBS) {
      const chunk = indexes.slice(start, start + BATCH_JOBS);
      calls.push({ op: batch(chunk.map((i) => prepared[i]), clock), members: chunk });
    }
  }
  return calls;
}

// -- by id -------------------------------------------------------------------------------------

/** Cancel a job that has not started (with `running`, one that runs too): true if cancelled,
 *  false if there is no such job in partition `pk`.  Not resent after an ambiguous fault. */
export function cancelOp(pk: PartitionKeys, jobId: string, running = false): Op<boolean> {
  return op(
    'cancel',
    [pk.jobs, pk.due, pk.errors, pk.stats, pk.ctl, pk.moving, pk.cancels],
    [jobId, running ? '1' : '0', pk.readyHint],
    (reply) => {
      if (isCode(reply, Code.JOB_NOT_FOUND)) return false;
      check(reply);
      return true;
    },
    false,
  );
}

export interface RescheduleTo {
  runAt?: Date | number | null;
  delayMs?: number | null;
  priority?: Priority | null;
}

/** Move a waiting job to a new due time, or give it a new priority; the op returns the due
 *  time in ms on the Redis clock. */
export function rescheduleOp(pk: PartitionKeys, jobId: string, to: RescheduleTo, settings: ProducerSettings): Op<number> {
  const level = to.priority !== null && to.priority !== undefined ? checkPriority(to.priority) : '';
  let schedule: Schedule;
  if ((to.runAt ?? null) === null && (to.delayMs ?? null) === null) {
    if (!level) throw new InvalidScheduleError('reschedule needs run_at, delay or priority');
    schedule = { mode: 'keep', ms: 0 };
  } else {
    schedule = makeSchedule(to.runAt, to.delayMs, settings);
  }
  return op(
    'reschedule',
    [pk.due, pk.jobs, pk.ctl, pk.moving],
    [jobId, schedule.mode, schedule.ms, msRound(settings.pastToleranceMs), msRound(settings.maxHorizonMs), pk.dueHint, level],
    (reply) => int(check(reply)[1]),
  );
}

function getKeys(pk: PartitionKeys, jobId: string): string[] {
  return [pk.jobs, pk.due, pk.errors, pk.ctl, pk.moving, pk.progress(jobId)];
}

/** A snapshot of one job, or null once it completed, was cancelled, or never existed. */
export function getOp(pk: PartitionKeys, jobId: string): Op<JobInfo | null> {
  return op('get', getKeys(pk, jobId), [jobId], (reply) => {
    const r = check(reply);
    return jobInfo(pk, jobId, r[0], r[1], r[2], r.length > 3 ? r[3] : null);
  });
}

/** The body a job is stored with in partition `pk`, or null when it is not there. */
export function storedBodyOp(pk: PartitionKeys, jobId: string): Op<string | null> {
  return op('get', getKeys(pk, jobId), [jobId], (reply) => {
    const envelope = check(reply)[0];
    if (envelope === null || envelope === undefined) return null;
    const raw = text(envelope);
    const bar = raw.indexOf('|');
    return bar < 0 ? '' : raw.slice(bar + 1);
  });
}

export function duplicate(jobId: string): ShardqError {
  return errorFor(Code.DUPLICATE_JOB_ID, [jobId]);
}

// -- job snapshots (shardq.store.producer.job_info, shardq.store.envelope) -----------------------

export interface JobInfo {
  id: string;
  queue: string;
  /** The partition's fleet id, as EnqueueResult's. */
  partition: number;
  state: JobState;
  type: string;
  payload: unknown;
  attempt: number;
  maxAttempts: number | null;
  dueMs: number | null;
  lastError: string | null;
  idempotencyKey: string | null;
  limitKey: string | null;
  priority: Priority;
  tenant: string | null;
  /** How long its result is kept once it completes (ms), or null. */
  keepResultMs: number | null;
  /** How long one attempt may run (ms), or null (the worker's). */
  timeoutMs: number | null;
  /** Epoch ms after which it is dead-lettered rather than started, or null. */
  deadlineMs: number | null;
  /** How late after its due time it may still start (ms), or null. */
  startWithinMs: number | null;
  backoff: Backoff | null;
  headers: Record<string, string>;
  progress: unknown;
  progressMs: number | null;
  /** Stored fields that are not what a producer writes (name -> raw value), read as unset. */
  malformed: Record<string, string>;
}

const FLOW_PREFIX_RE = new RegExp('^@([hnl])(' + TENANT_CHARS + '{0,64})@');

/** A stored body as {t, p, ...options, priority?, tenant?}; throws for one that is not a job
 *  body (shardq.store.envelope.decode_body). */
export function decodeBody(raw: string): Record<string, unknown> {
  const flow: Record<string, unknown> = {};
  let json = raw;
  if (raw.startsWith('@')) {
    const m = FLOW_PREFIX_RE.exec(raw);
    if (m === null) throw new Error('job body has a malformed priority/tenant prefix');
    flow.priority = LEVEL_PRIORITIES[m[1]];
    flow.tenant = m[2] || null;
    json = raw.slice(m[0].length);
  }
  const body = JSON.parse(json);
  if (!Array.isArray(body) || body.length < 2 || body.length > 3 || typeof body[0] !== 'string') {
    throw new Error('job body is not [type, payload, options?]');
  }
  const options = body.length === 3 ? body[2] : {};
  if (typeof options !== 'object' || options === null || Array.isArray(options)) throw new Error('job body options are not an object');
  return { ...options, ...flow, t: body[0], p: body[1] };
}

function jsonInteger(value: unknown, lo: number, hi: number, what: string): number {
  if (typeof value !== 'number') throw new BadNumber(what, value, 'a JSON number');
  if (!Number.isInteger(value) || !(lo <= value && value <= hi)) throw new BadNumber(what, value, `an integer ${lo}..${hi}`);
  return value;
}

function jsonReal(value: unknown, lo: number, hi: number, what: string): number {
  if (typeof value !== 'number') throw new BadNumber(what, value, 'a JSON number');
  if (!Number.isFinite(value) || !(lo <= value && value <= hi)) throw new BadNumber(what, value, `a finite number ${lo}..${hi}`);
  return value;
}

const KINDS: Record<string, Backoff['kind']> = { f: 'fixed', e: 'exponential', j: 'jitter' };

interface StoredOptions {
  maxAttempts: number | null;
  backoff: Backoff | null;
  headers: Record<string, string>;
  idempotencyKey: string | null;
  limitKey: string | null;
  keepResultMs: number | null;
  timeoutMs: number | null;
  deadlineMs: number | null;
  startWithinMs: number | null;
}

/** A decoded body's options checked as a producer writes them; a bad one goes into `bad`. */
export function storedOptions(body: Record<string, unknown>, bad: Record<string, string>): StoredOptions {
  const present = (name: string): boolean => body[name] !== undefined && body[name] !== null;
  const attempt = <T>(name: string, f: () => T): T | null => {
    try {
      return f();
    } catch (exc) {
      if (!(exc instanceof Error)) throw exc;
      bad[name] = shown(typeof body[name] === 'object' ? JSON.stringify(body[name]) : body[name]);
      return null;
    }
  };
  const out: StoredOptions = {
    maxAttempts: null, backoff: null, headers: {}, idempotencyKey: null, limitKey: null,
    keepResultMs: null, timeoutMs: null, deadlineMs: null, startWithinMs: null,
  };
  if (present('m')) out.maxAttempts = attempt('m', () => jsonInteger(body.m, 1, MAX_ATTEMPTS_LIMIT, 'max attempts'));
  if (present('b')) {
    out.backoff = attempt('b', () => {
      const raw = body.b;
      if (!Array.isArray(raw) || raw.length !== 3 || typeof raw[0] !== 'string' || !(raw[0] in KINDS)) {
        throw new InvalidJobError(`stored backoff ${reprCut(raw, 60)} is not [kind, base ms, cap ms]`);
      }
      const top = MAX_BACKOFF * 1000;
      return { kind: KINDS[raw[0]], baseMs: jsonReal(raw[1], 0, top, 'backoff base ms'), capMs: jsonReal(raw[2], 0, top, 'backoff cap ms') };
    });
  }
  const headers = body.h ?? {};
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers) || !Object.values(headers).every((v) => typeof v === 'string')) {
    bad.h = shown(JSON.stringify(body.h));
  } else out.headers = headers as Record<string, string>;
  for (const [name, field] of [['k', 'idempotencyKey'], ['l', 'limitKey']] as const) {
    const value = body[name];
    if (value !== undefined && value !== null) {
      if (typeof value !== 'string') bad[name] = shown(JSON.stringify(value));
      else out[field] = value;
    }
  }
  if (present('r')) {
    out.keepResultMs = attempt('r', () =>
      jsonInteger(body.r, Math.round(MIN_RESULT_RETENTION * 1000), Math.round(MAX_RESULT_RETENTION * 1000), 'result retention ms'),
    );
  }
  if (present('o')) out.timeoutMs = attempt('o', () => jsonInteger(body.o, 1, Math.round(MAX_JOB_TIMEOUT * 1000), 'timeout ms'));
  if (present('d')) out.deadlineMs = attempt('d', () => jsonInteger(body.d, 1, Math.round(MAX_RUN_AT * 1000), 'deadline ms'));
  if (present('w')) out.startWithinMs = attempt('w', () => jsonInteger(body.w, 0, Math.round(MAX_BACKOFF * 1000), 'deadline window ms'));
  return out;
}

const REAL = /^[-+]?(?:[0-9]{1,40}(?:\.[0-9]{0,40})?|\.[0-9]{1,40})(?:[eE][-+]?[0-9]{1,3})?$/;

/** numbers.time_ms: an epoch time in ms, fractions dropped; else BadNumber. */
export function timeMs(raw: unknown, what = 'time', lo = 0, hi = MAX_TIME_MS): number {
  let value: number | null = null;
  if (typeof raw === 'number') value = raw;
  else if (raw !== null && raw !== undefined) {
    const t = text(raw);
    if (REAL.test(t)) value = parseFloat(t);
  }
  if (value === null || !Number.isFinite(value) || !(lo <= value && value <= hi)) {
    throw new BadNumber(what, raw, `a time in ms ${lo}..${hi}`);
  }
  return Math.floor(value);
}

/** A job's snapshot from the get script's reply, or null. */
export function jobInfo(pk: PartitionKeys, jobId: string, envelope: unknown, due: unknown, error: unknown, progress: unknown = null): JobInfo | null {
  if (envelope === null || envelope === undefined) return null;
  const raw = text(envelope);
  const bad: Record<string, string> = {};
  const bar = raw.indexOf('|');
  const letter = raw.slice(0, 1);
  const attemptText = bar < 0 ? raw.slice(1) : raw.slice(1, bar);
  const bodyText = bar < 0 ? '' : raw.slice(bar + 1);
  let attempt = 0;
  try {
    attempt = integer(attemptText, 0, MAX_ATTEMPT, 'attempt');
  } catch {
    bad.attempt = shown(attemptText);
  }
  let body: Record<string, unknown>;
  try {
    body = decodeBody(bodyText);
  } catch (exc) {
    throw new MalformedRecordError(
      `job '${jobId}' of ${pk.queue} has a malformed body (${(exc as Error).message}): \`shardq job cancel\` removes it`,
    );
  }
  const options = storedOptions(body, bad);
  let progressValue: unknown = null;
  let progressMs: number | null = null;
  if (progress !== null && progress !== undefined) {
    const p = text(progress);
    const pbar = p.indexOf('|');
    let ok = pbar > 0;
    if (ok) {
      try {
        progressMs = integer(p.slice(0, pbar), 0, 2 ** 53, 'progress_ms');
      } catch {
        bad.progress_ms = shown(p.slice(0, pbar));
      }
      try {
        progressValue = JSON.parse(p.slice(pbar + 1));
      } catch {
        ok = false;
      }
    }
    if (!ok) {
      bad.progress = shown(p);
      progressValue = null;
      progressMs = null;
    }
  }
  let state: JobState;
  if (due !== null && due !== undefined) state = error === null || error === undefined ? 'scheduled' : 'retrying';
  else if (letter === 'A') state = 'running';
  else if (letter === 'D') state = 'dead';
  else state = 'ready';
  let dueMs: number | null = null;
  if (due !== null && due !== undefined) {
    try {
      dueMs = timeMs(due, 'due_ms');
    } catch {
      bad.due_ms = shown(text(due));
    }
  }
  return {
    id: jobId,
    queue: pk.queue,
    partition: pk.fleetId,
    state,
    type: body.t as string,
    payload: body.p ?? null,
    attempt,
    maxAttempts: options.maxAttempts,
    dueMs,
    lastError: error === null || error === undefined ? null : text(error),
    idempotencyKey: options.idempotencyKey,
    limitKey: options.limitKey,
    priority: (body.priority as Priority | undefined) ?? 'default',
    tenant: (body.tenant as string | null | undefined) ?? null,
    keepResultMs: options.keepResultMs,
    timeoutMs: options.timeoutMs,
    deadlineMs: options.deadlineMs,
    startWithinMs: options.startWithinMs,
    backoff: options.backoff,
    headers: options.headers,
    progress: progressValue,
    progressMs,
    malformed: bad,
  };
}

// -- queues ------------------------------------------------------------------------------------

export interface CreateQueueOptions {
  partitions: number;
  ackRetentionMs?: number;
  deadLetterCap?: number;
  lanes?: boolean;
}

/** Record a queue's settings once; the op returns true when the queue is new. */
export function queueCreateOp(queue: string, partitions: number, ackRetentionMs = 0, deadLetterCap = DEFAULT_DEAD_CAP): Op<boolean> {
  checkNewQueueName(queue);
  if (typeof partitions !== 'number' || !Number.isInteger(partitions) || !(1 <= partitions && partitions <= MAX_PARTITIONS)) {
    throw new InvalidJobError(`partitions must be an integer 1..${MAX_PARTITIONS}, got ${String(partitions)}`);
  }
  if (typeof ackRetentionMs !== 'number' || !(0 <= ackRetentionMs / 1000 && ackRetentionMs / 1000 <= MAX_ACK_RETENTION_MS / 1000)) {
    throw new InvalidJobError(`ack_retention must be 0..${MAX_ACK_RETENTION_MS / 1000} seconds`);
  }
  if (typeof deadLetterCap !== 'number' || !Number.isInteger(deadLetterCap) || !(1 <= deadLetterCap && deadLetterCap <= MAX_DEAD_CAP)) {
    throw new InvalidJobError(`dead_letter_cap must be an integer 1..${MAX_DEAD_CAP}`);
  }
  return op('queue-create', [queueMetaKey(queue)], [partitions, LAYOUT_VERSION, msRound(ackRetentionMs), deadLetterCap], (reply) => check(reply)[0] === 1);
}

/** XGROUP CREATE of the partition's ready stream (MKSTREAM, from the start); BUSYGROUP (made
 *  before) comes back as the call's error and is ignored by the plan. */
export function groupCreateCmd(pk: PartitionKeys): Command<boolean> {
  return cmd(['XGROUP', 'CREATE', pk.ready, WORKER_GROUP, '0', 'MKSTREAM'], () => true, pk.ready);
}

export function registerCmd(queue: string): Command<number> {
  return cmd(['SADD', QUEUES_KEY, queue], (r) => int(r));
}

/** Start using the partition's control hash for its flags; true when it did now. */
export function controlInitOp(pk: PartitionKeys): Op<boolean> {
  return op('control-init', [pk.ctl, pk.stats], [], (reply) => check(reply)[0] === 1);
}

/** Turn lanes on or off in one partition; true when it changed. */
export function lanesOp(pk: PartitionKeys, on: boolean): Op<boolean> {
  return op('lanes', [pk.ctl, pk.stats, pk.lane], [on ? '1' : '0'], (reply) => check(reply)[0] === 1);
}

function asObject(reply: unknown): Record<string, string> {
  if (Array.isArray(reply)) {
    const out: Record<string, string> = {};
    for (let i = 0; i + 1 < reply.length; i += 2) out[text(reply[i])] = text(reply[i + 1]);
    return out;
  }
  return (reply ?? {}) as Record<string, string>;
}

/** HGETALL of the queue's meta; UnknownQueueError (from the parser) when never created. */
export function readMetaCmd(queue: string): Command<QueueMeta> {
  return cmd(['HGETALL', queueMetaKey(queue)], (r) => parseMeta(queue, asObject(r)));
}

export function metaFieldCmd(queue: string, field: string): Command<string | null> {
  return cmd(['HGET', queueMetaKey(queue), field], (r) => (r === null || r === undefined ? null : text(r)));
}

export function setMetaFieldCmd(queue: string, field: string, value: string | number): Command<number> {
  return cmd(['HSET', queueMetaKey(queue), field, value], (r) => int(r));
}

/** The job id an idempotency key maps to while it is retained, else null. */
export function idempotentJobCmd(pk: PartitionKeys, idempotencyKey: string): Command<string | null> {
  // A debounce's key holds '<job id> d:<type>@<tenant>' (lua/enqueue-8.lua); ids have no spaces.
  return cmd(['GET', pk.idem(idempotencyKey)], (r) => (r === null || r === undefined ? null : text(r).split(' ', 1)[0]));
}

export { Layout };
