// The producer's operations written once over a Runner (what sends calls): queues, lanes,
// enqueue (one, many, durable), cancel, reschedule, get.  Port of shardq/plans/producer.py,
// including a resize's redirects (E_LAYOUT_MOVED: follow to the generation it names when the
// meta names it too, up to 8 hops) and a job a resize is moving (E_JOB_MOVING: ask again for
// up to 5 s).
import { JobRequest } from './body';
import { CONTROL_LAYOUT, MAX_REDIRECTS, MOVING_PAUSE_MS, MOVING_WAIT_MS } from './constants.generated';
import { BulkEnqueueError, JobMovingError, LayoutMovedError, MalformedRecordError, NotDurableError, ShardqError } from './errors';
import { Layout, PartitionKeys, allPartitionKeys, partitionFor, partitionKeys } from './keys';
import { QueueCache, QueueMeta, isCompact, keyLayout } from './meta';
import { checkJobId, checkQueueName } from './names';
import {
  BulkCall,
  Call,
  CreateQueueOptions,
  EnqueueResult,
  JobInfo,
  Outcome,
  PreparedEnqueue,
  RedisClock,
  REDIS_CLOCK,
  RescheduleTo,
  cancelOp,
  controlInitOp,
  duplicate,
  getOp,
  groupCreateCmd,
  idempotentJobCmd,
  lanesOff,
  lanesOp,
  metaFieldCmd,
  needsLanes,
  planBulk,
  prepareEnqueue,
  prepareMany,
  priorityNeedsLanes,
  queueCreateOp,
  readMetaCmd,
  registerCmd,
  rescheduleOp,
  setMetaFieldCmd,
  storedBodyOp,
} from './producer';
import { ProducerSettings } from './settings';

/** What sends calls (the client's transport with its retry layer). */
export interface Runner {
  /** One call: its parsed result, or throws what it met. */
  run<T>(call: Call<T>): Promise<T>;
  /** Many calls pipelined per node: per call its parsed result or the error it met. */
  runMany<T>(calls: Call<T>[]): Promise<(T | Error)[]>;
  /** Calls per node each followed by WAIT replicas timeoutMs on the connection that wrote
   *  them: per call its result, and how many replicas acknowledged (null: not answered). */
  runWaiting<T>(calls: Call<T>[], replicas: number, timeoutMs: number): Promise<[(T | Error)[], (number | null)[]]>;
  sleep(ms: number): Promise<void>;
}

// Also in this namespace (`plans.MAX_REDIRECTS`), as before they were generated.
export { MAX_REDIRECTS, MOVING_PAUSE_MS, MOVING_WAIT_MS };

export interface Context {
  runner: Runner;
  cache: QueueCache;
  settings: ProducerSettings;
  clock?: RedisClock;
}

// -- queues ------------------------------------------------------------------------------------

export async function meta(ctx: Context, queue: string): Promise<QueueMeta> {
  return ctx.cache.get(queue) ?? readMeta(ctx, queue);
}

export async function readMeta(ctx: Context, queue: string): Promise<QueueMeta> {
  checkQueueName(queue);
  return ctx.cache.keep(await ctx.runner.run(readMetaCmd(queue)));
}

/** Create the queue (the script refuses another partition count), then its consumer groups,
 *  its registry entry and its partitions' control hashes; idempotent follow-ups. */
export async function createQueue(ctx: Context, queue: string, opts: CreateQueueOptions): Promise<boolean> {
  const call = queueCreateOp(queue, opts.partitions, opts.ackRetentionMs ?? 0, opts.deadLetterCap);
  const created = await ctx.runner.run(call);
  const groups = await ctx.runner.runMany(allPartitionKeys(queue, opts.partitions).map(groupCreateCmd));
  for (const r of groups) if (r instanceof Error && !r.message.includes('BUSYGROUP')) throw r;
  await ctx.runner.run(registerCmd(queue));
  ctx.cache.forget(queue);
  const read = await readMeta(ctx, queue); // with its layout (an existing queue keeps its own)
  if (read.layout >= CONTROL_LAYOUT) await each(ctx, keyLayout(read).every().map(controlInitOp));
  if (opts.lanes) await setLanes(ctx, queue, true);
  return created;
}

async function each<T>(ctx: Context, calls: Call<T>[]): Promise<T[]> {
  const results = await ctx.runner.runMany(calls);
  for (const r of results) if (r instanceof Error) throw r;
  return results as T[];
}

/** Turn lanes on or off in every partition; returns how many changed.  The meta's flag is on
 *  only while every partition is (set after them, cleared before). */
export async function setLanes(ctx: Context, queue: string, on: boolean): Promise<number> {
  ctx.cache.forget(queue);
  const pks = keyLayout(await meta(ctx, queue)).every();
  if (!on) await ctx.runner.run(setMetaFieldCmd(queue, 'lanes', '0'));
  const changed = (await each(ctx, pks.map((pk) => lanesOp(pk, on)))).filter(Boolean).length;
  if (on) await ctx.runner.run(setMetaFieldCmd(queue, 'lanes', '1'));
  ctx.cache.sawLanes(queue, on);
  return changed;
}

/** Whether the queue has lanes on (read from Redis, not cached). */
export async function lanes(ctx: Context, queue: string): Promise<boolean> {
  await meta(ctx, queue);
  return (await ctx.runner.run(metaFieldCmd(queue, 'lanes'))) === '1';
}

/** LanesOffError unless the queue has lanes on (seen on within the last 10 s). */
export async function requireLanes(ctx: Context, queue: string): Promise<void> {
  if (ctx.cache.lanesTrusted(queue)) return;
  const on = await lanes(ctx, queue);
  ctx.cache.sawLanes(queue, on);
  if (!on) throw lanesOff(queue);
}

// -- by id ----------------------------------------------------------------------------------------

/** Run `make(pk, key)` for each job id where its job is (see shardq.plans.producer.at_home);
 *  per key its result or the error it ended with. */
export async function atHome<T>(ctx: Context, queue: string, routingKeys: string[], make: (pk: PartitionKeys, key: string) => Call<T>): Promise<(T | Error)[]> {
  const here = keyLayout(await meta(ctx, queue));
  const homes = routingKeys.map((k) => here.homes(k)[0]);
  const out: (T | Error)[] = routingKeys.map(() => new JobMovingError('not asked'));
  let todo = routingKeys.map((_, i) => i);
  let hops = 0;
  let waited = 0;
  while (todo.length > 0) {
    const results = await ctx.runner.runMany(todo.map((i) => make(homes[i], routingKeys[i])));
    const again: number[] = [];
    let moving = false;
    let fresh: QueueMeta | null = null; // the meta read again, once per round of redirects
    for (const [n, i] of todo.entries()) {
      const r = results[n];
      out[i] = r;
      if (r instanceof LayoutMovedError && hops < MAX_REDIRECTS) {
        if (fresh === null) {
          ctx.cache.forget(queue);
          fresh = await readMeta(ctx, queue);
        }
        try {
          homes[i] = redirectedHome(fresh, homes[i], r, routingKeys[i]);
        } catch (exc) {
          if (!(exc instanceof MalformedRecordError)) throw exc;
          out[i] = exc;
          continue;
        }
        again.push(i);
      } else if (r instanceof JobMovingError && waited < MOVING_WAIT_MS) {
        moving = true;
        again.push(i);
      }
    }
    if (again.some((i) => out[i] instanceof LayoutMovedError)) hops += 1;
    if (moving) {
      await ctx.runner.sleep(MOVING_PAUSE_MS);
      waited += MOVING_PAUSE_MS;
    }
    todo = again;
  }
  return out;
}

/** The generations the meta names, [generation, partitions]: draining, active, coming. */
function liveGenerations(read: QueueMeta): [number, number][] {
  const gens: ([number, number] | null)[] = [read.draining, [read.generation, read.partitions], read.coming];
  return gens.filter((g): g is [number, number] => g !== null);
}

/** A sealed partition's redirect the meta does not back (see shardq.plans.producer.unknown_redirect). */
export function unknownRedirect(read: QueueMeta, asked: PartitionKeys, moved: LayoutMovedError): MalformedRecordError {
  const live = liveGenerations(read).map(([g, n]) => `${g} (${n} partitions)`).join(', ');
  return new MalformedRecordError(
    `partition ${asked.label} of queue '${read.queue}' is sealed toward generation ${moved.generation} ` +
      `(${moved.partitions} partitions), which the queue's meta does not name (its generations: ${live}): ` +
      'nothing was written. Only a resize seals a partition: if one was cut short, ' +
      `\`shardq queue resize --queue ${read.queue} --resume\`; else the field was written by hand ` +
      `(HGET ${asked.ctl} sealed): set it back, or delete it from a partition of the active generation`,
  );
}

/** Where a by-id call goes after `asked` answered a redirect (see
 *  shardq.plans.producer.redirected_home). */
export function redirectedHome(read: QueueMeta, asked: PartitionKeys, moved: LayoutMovedError, routingKey: string): PartitionKeys {
  const live = liveGenerations(read);
  const named = live.some(([g, n]) => g === moved.generation && n === moved.partitions);
  if (named && moved.generation !== asked.generation) {
    return partitionKeys(read.queue, partitionFor(routingKey, moved.partitions), moved.partitions, moved.generation);
  }
  const retired = !live.some(([g]) => g === asked.generation);
  if (retired && moved.generation <= Math.max(...live.map(([g]) => g))) return keyLayout(read).homes(routingKey)[0];
  throw unknownRedirect(read, asked, moved);
}

async function oneAtHome<T>(ctx: Context, queue: string, key: string, make: (pk: PartitionKeys, key: string) => Call<T>): Promise<T> {
  const [r] = await atHome(ctx, queue, [key], make);
  if (r instanceof Error) throw r;
  return r;
}

export async function cancel(ctx: Context, queue: string, jobId: string, running = false): Promise<boolean> {
  checkJobId(jobId);
  return oneAtHome(ctx, queue, jobId, (pk, id) => cancelOp(pk, id, running));
}

export async function reschedule(ctx: Context, queue: string, jobId: string, to: RescheduleTo): Promise<number> {
  if (priorityNeedsLanes(to.priority)) await requireLanes(ctx, queue);
  checkJobId(jobId);
  return oneAtHome(ctx, queue, jobId, (pk, id) => rescheduleOp(pk, id, to, ctx.settings));
}

export async function get(ctx: Context, queue: string, jobId: string): Promise<JobInfo | null> {
  checkJobId(jobId);
  return oneAtHome(ctx, queue, jobId, getOp);
}

// -- enqueue ---------------------------------------------------------------------------------------

export function notDurable(jobIds: string[], acked: number, settings: ProducerSettings, results: EnqueueResult[] = []): NotDurableError {
  return new NotDurableError(
    `${jobIds.slice(0, 5).join(', ')}${jobIds.length > 5 ? ' ...' : ''}: stored on the primary but only ${acked} of ${settings.durableReplicas} replica(s) confirmed within ${settings.durableTimeoutMs / 1000} s. The job runs unless that primary fails before replicating it; resending with the same idempotency_key or job_id is safe. Check that the partition's primary has a replica in sync (after a failover it may have none).`,
    jobIds,
    results,
  );
}

/** The outcome of one bulk enqueue (shardq.plans.producer.BulkRun). */
export class BulkRun {
  results: (EnqueueResult | null)[];
  failed = new Map<number, Error>();
  short: string[] = [];
  fewestAcked: number | null = null;
  calls: BulkCall[];

  constructor(
    public prepared: PreparedEnqueue[],
    readonly settings: ProducerSettings,
    clock: RedisClock = REDIS_CLOCK,
  ) {
    this.results = prepared.map(() => null);
    this.calls = planBulk(prepared, clock);
  }

  get ops(): Call<Outcome[]>[] {
    return this.calls.map((c) => c.op);
  }

  settle(replies: (Outcome[] | Error)[], acked: (number | null)[] | null = null): void {
    this.calls.forEach((call, n) => {
      const reply = replies[n];
      if (reply instanceof Error) {
        for (const i of call.members) this.failed.set(i, reply);
        return;
      }
      call.members.forEach((i, k) => {
        const outcome = reply[k];
        if (outcome instanceof ShardqError) this.failed.set(i, outcome);
        else {
          this.results[i] = outcome;
          if (acked !== null && (acked[n] ?? 0) < this.settings.durableReplicas) {
            this.short.push(outcome.jobId);
            this.shortBy(acked[n] ?? 0);
          }
        }
      });
    });
  }

  shortBy(acked: number | null): void {
    if (acked !== null) this.fewestAcked = this.fewestAcked === null ? acked : Math.min(this.fewestAcked, acked);
  }

  outcome(): EnqueueResult[] {
    if (this.failed.size > 0) {
      const first = this.failed.values().next().value as Error;
      const stored = this.results.filter((r) => r !== null).length;
      const order = [...this.failed.keys()].sort((a, b) => a - b);
      throw new BulkEnqueueError(
        `${this.failed.size} of ${this.prepared.length} jobs were not stored (${stored} were), e.g. ${first.name}: ${first.message}. Resend error.retryRequests: they carry the job ids chosen for this call, so a job that was stored after all is recognised, not duplicated.`,
        [...this.results],
        new Map(this.failed),
        order.map((i) => this.prepared[i].withId()),
      );
    }
    const done = this.results.filter((r): r is EnqueueResult => r !== null);
    if (this.short.length > 0) throw notDurable(this.short, this.fewestAcked ?? 0, this.settings, done);
    return done;
  }
}

/** The meta after the sealed partition `asked` refused a new job: read again; while the resize
 *  has sealed the active generation but not switched the meta, the layout of the coming
 *  generation the redirect names.  A redirect the meta does not back is MalformedRecordError
 *  (see shardq.plans.producer.moved_meta). */
export async function movedMeta(ctx: Context, queue: string, moved: LayoutMovedError, asked: PartitionKeys): Promise<QueueMeta> {
  ctx.cache.forget(queue);
  return routedMeta(ctx, await readMeta(ctx, queue), asked, moved);
}

/** movedMeta on the meta `read` just now. */
function routedMeta(ctx: Context, read: QueueMeta, asked: PartitionKeys, moved: LayoutMovedError): QueueMeta {
  if (read.coming !== null && read.coming[0] === moved.generation && read.coming[1] === moved.partitions) {
    ctx.cache.forget(read.queue);
    return { ...read, partitions: moved.partitions, generation: moved.generation, draining: [read.generation, read.partitions] };
  }
  if (asked.generation !== read.generation && moved.generation <= read.generation) return read;
  throw unknownRedirect(read, asked, moved);
}

/** While a resize runs, what the generation it empties already holds under this job's
 *  idempotency key or given id; null when nothing, or no resize runs. */
async function storedBefore(ctx: Context, layout: Layout, prepared: PreparedEnqueue): Promise<EnqueueResult | null> {
  const req = prepared.request;
  if (layout.draining === null || ((req.jobId ?? null) === null && (req.idempotencyKey ?? null) === null)) return null;
  const key = req.idempotencyKey ?? null;
  if (key !== null) {
    const old = layout.homes(key)[0];
    const existing = await ctx.runner.run(idempotentJobCmd(old, key));
    if (existing === null) return null;
    return { jobId: existing, created: false, dueMs: null, partition: layout.route(existing).fleetId };
  }
  const jobId = prepared.jobId;
  const old = layout.homes(jobId)[0];
  let waited = 0;
  for (;;) {
    const [body] = await ctx.runner.runMany([storedBodyOp(old, jobId)]);
    if (body instanceof JobMovingError && waited < MOVING_WAIT_MS) {
      await ctx.runner.sleep(MOVING_PAUSE_MS);
      waited += MOVING_PAUSE_MS;
      continue;
    }
    if (body instanceof LayoutMovedError || body === null) return null;
    if (body instanceof Error) throw body;
    if (body === prepared.body) return { jobId, created: true, dueMs: null, partition: prepared.pk.fleetId };
    throw duplicate(jobId);
  }
}

async function sendOne(ctx: Context, prepared: PreparedEnqueue, durable: boolean): Promise<EnqueueResult> {
  if (!durable) return ctx.runner.run(prepared.op());
  const run = new BulkRun([prepared], ctx.settings, ctx.clock);
  const [results, acked] = await ctx.runner.runWaiting(run.ops, ctx.settings.durableReplicas, ctx.settings.durableTimeoutMs);
  run.settle(results, acked);
  try {
    return run.outcome()[0];
  } catch (exc) {
    if (exc instanceof BulkEnqueueError) throw exc.failed.values().next().value;
    throw exc;
  }
}

/** Enqueue one job; with `durable`, confirmed by durableReplicas replicas or NotDurableError. */
export async function enqueue(ctx: Context, queue: string, request: JobRequest, durable = false): Promise<EnqueueResult> {
  let read = await meta(ctx, queue);
  let prepared = prepareEnqueue(read, request, ctx.settings, ctx.clock);
  if (prepared.body.startsWith('@')) await requireLanes(ctx, queue);
  let hops = 0;
  for (;;) {
    const found = await storedBefore(ctx, keyLayout(read), prepared);
    if (found !== null) return found;
    try {
      return await sendOne(ctx, prepared, durable);
    } catch (exc) {
      if (!(exc instanceof LayoutMovedError)) throw exc;
      // A resize sealed the partition: nothing was written.  The job goes to the new
      // generation with the id already chosen.
      hops += 1;
      if (hops > MAX_REDIRECTS) throw exc;
      read = await movedMeta(ctx, queue, exc, prepared.pk);
      prepared = prepareEnqueue(read, prepared.withId(), ctx.settings, ctx.clock);
    }
  }
}

function merged(runs: BulkRun[], settings: ProducerSettings, clock?: RedisClock): BulkRun {
  if (runs.length === 1) return runs[0];
  const whole = new BulkRun([], settings, clock);
  for (const run of runs) {
    const offset = whole.prepared.length;
    whole.prepared.push(...run.prepared);
    whole.results.push(...run.results);
    for (const [i, exc] of run.failed) whole.failed.set(offset + i, exc);
    whole.short.push(...run.short);
    whole.shortBy(run.fewestAcked);
  }
  return whole;
}

/** Enqueue many jobs, `chunk` at a time, pipelined per node; results in request order;
 *  BulkEnqueueError (covering every chunk) when some were not stored. */
export async function enqueueMany(ctx: Context, queue: string, requests: Iterable<JobRequest>, chunk = 5000, durable = false): Promise<EnqueueResult[]> {
  const read = await meta(ctx, queue);
  // Every job is validated before any is sent, so a bad one writes nothing.
  const prepared = prepareMany(read, requests, ctx.settings, ctx.clock);
  if (needsLanes(prepared)) await requireLanes(ctx, queue);
  const runs: BulkRun[] = [];
  for (let start = 0; start < prepared.length; start += chunk) runs.push(new BulkRun(prepared.slice(start, start + chunk), ctx.settings, ctx.clock));
  for (const run of runs) {
    if (durable) {
      const [results, acked] = await ctx.runner.runWaiting(run.ops, ctx.settings.durableReplicas, ctx.settings.durableTimeoutMs);
      run.settle(results, acked);
    } else {
      run.settle(await ctx.runner.runMany(run.ops));
    }
  }
  const whole = merged(runs, ctx.settings, ctx.clock);
  await followResize(ctx, queue, whole, durable);
  return whole.outcome();
}

/** Send again, to the new generation, the jobs a partition sealed by a resize refused. */
async function followResize(ctx: Context, queue: string, whole: BulkRun, durable: boolean): Promise<void> {
  for (let hop = 0; hop < MAX_REDIRECTS; hop++) {
    const moved = [...whole.failed.entries()].filter(([, e]) => e instanceof LayoutMovedError).map(([i]) => i);
    if (moved.length === 0) return;
    ctx.cache.forget(queue);
    const fresh = await readMeta(ctx, queue);
    const send: number[] = [];
    for (const i of moved) {
      let read: QueueMeta;
      try {
        read = routedMeta(ctx, fresh, whole.prepared[i].pk, whole.failed.get(i) as LayoutMovedError);
      } catch (exc) {
        if (!(exc instanceof MalformedRecordError)) throw exc;
        whole.failed.set(i, exc);
        continue;
      }
      const again = prepareEnqueue(read, whole.prepared[i].withId(), ctx.settings, ctx.clock);
      whole.prepared[i] = again;
      try {
        const found = await storedBefore(ctx, keyLayout(read), again);
        if (found !== null) {
          whole.results[i] = found;
          whole.failed.delete(i);
        } else send.push(i);
      } catch (exc) {
        if (!(exc instanceof ShardqError)) throw exc;
        whole.failed.set(i, exc);
      }
    }
    if (send.length === 0) return;
    const run = new BulkRun(send.map((i) => whole.prepared[i]), ctx.settings, ctx.clock);
    if (durable) {
      const [results, acked] = await ctx.runner.runWaiting(run.ops, ctx.settings.durableReplicas, ctx.settings.durableTimeoutMs);
      run.settle(results, acked);
    } else run.settle(await ctx.runner.runMany(run.ops));
    send.forEach((i, j) => {
      whole.failed.delete(i);
      const failure = run.failed.get(j);
      if (failure !== undefined) whole.failed.set(i, failure);
      else whole.results[i] = run.results[j];
    });
    whole.short.push(...run.short);
    whole.shortBy(run.fewestAcked);
  }
}

export { isCompact };
