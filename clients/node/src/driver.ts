// A conformance driver for the wire runner (docs/wire.md "Conformance"): reads one JSON object
// per line, {"url", "queue": {"name", "partitions"}, "step"}, runs the step with this client and
// writes one line, {"ok": true, "result": ...} or {"ok": false, "error": "<name>", "message"}.
//   node dist/src/driver.js
import { createInterface } from 'node:readline';
import { Client } from './client';
import * as plans from './plans';
import { settingsFromVector, requestFromVector } from './wire';

const clients = new Map<string, Promise<Client>>();

/** A result in the vectors' snake_case shape (times in ms; Python's seconds beside them). */
export function wireResult(value: any): unknown {
  if (value === null || value === undefined || typeof value !== 'object') return value ?? null;
  if (Array.isArray(value)) return value.map(wireResult);
  if ('jobId' in value) return { job_id: value.jobId, created: value.created, due_ms: value.dueMs, partition: value.partition };
  if ('state' in value) {
    const s = (ms: number | null) => (ms === null ? null : ms / 1000);
    return {
      id: value.id, queue: value.queue, partition: value.partition, state: value.state, type: value.type, payload: value.payload,
      attempt: value.attempt, max_attempts: value.maxAttempts, due_ms: value.dueMs, last_error: value.lastError,
      idempotency_key: value.idempotencyKey, limit_key: value.limitKey, priority: value.priority, tenant: value.tenant,
      keep_result_ms: value.keepResultMs, timeout_ms: value.timeoutMs, deadline_ms: value.deadlineMs,
      start_within_ms: value.startWithinMs, keep_result: s(value.keepResultMs), timeout: s(value.timeoutMs),
      start_within: s(value.startWithinMs), progress: value.progress, progress_ms: value.progressMs, malformed: value.malformed,
    };
  }
  return value;
}

export async function runStep(client: Client, queue: { name: string }, step: any): Promise<unknown> {
  const settings = settingsFromVector(step.settings ?? null);
  const ctx: plans.Context = { runner: client.transport, cache: client.cache, settings };
  switch (step.op) {
    case 'create_queue':
      return plans.createQueue(ctx, queue.name, { partitions: step.partitions, lanes: Boolean(step.lanes) });
    case 'enqueue':
      return plans.enqueue(ctx, queue.name, requestFromVector(step.request));
    case 'enqueue_many':
      return plans.enqueueMany(ctx, queue.name, step.requests.map(requestFromVector));
    case 'get':
      return plans.get(ctx, queue.name, step.job_id);
    case 'cancel':
      return plans.cancel(ctx, queue.name, step.job_id, Boolean(step.running));
    case 'reschedule':
      return plans.reschedule(ctx, queue.name, step.job_id, { delayMs: step.delay_ms, runAt: step.run_at_ms, priority: step.priority });
    default:
      throw new Error(`unknown op ${JSON.stringify(step.op)}`);
  }
}

async function handle(line: string): Promise<unknown> {
  try {
    const { url, queue, step } = JSON.parse(line);
    let client = clients.get(url);
    if (client === undefined) clients.set(url, (client = Client.fromUrl(url)));
    const c = await client;
    // The runner deletes a case's keys before it: what is cached of the queue may be stale.
    if (step.op !== 'get' && step.op !== 'cancel' && step.op !== 'reschedule') c.cache.forget(queue.name);
    return { ok: true, result: wireResult(await runStep(c, queue, step)) };
  } catch (exc) {
    const err = exc instanceof Error ? exc : new Error(String(exc));
    return { ok: false, error: err.name, message: err.message };
  }
}

async function main(): Promise<void> {
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (!line.trim()) continue;
    process.stdout.write(JSON.stringify(await handle(line), (_k, v) => (typeof v === 'bigint' ? v.toString() : v)) + '\n');
  }
  await Promise.all([...clients.values()].map(async (c) => (await c).close()));
}

if (require.main === module) {
  main().catch((exc) => {
    process.stderr.write(String(exc?.stack ?? exc) + '\n');
    process.exit(1);
  });
}
