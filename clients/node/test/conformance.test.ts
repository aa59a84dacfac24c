// Runs the wire vectors (wire/vectors/*.json, docs/wire.md) written from the Python client:
// the pure ones always (keys, routing, timed ids, bodies, schedules, and the FCALLs each call
// step sends), calls.json against Redis when SHARDQ_NODE_TEST_CLUSTER_URL and/or
// SHARDQ_NODE_TEST_STANDALONE_URL are set (each case's queue keys deleted first).
// SHARDQ_WIRE_VECTORS overrides where the vectors are (default: the repository's wire/vectors).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import Redis, { Cluster } from 'ioredis';
import {
  Client, Layout, checkJobId, QUEUES_KEY, SentCall, allPartitionKeys, compactPays, controlInitOp, getOp, cancelOp, groupCreateCmd,
  lanesOp, partitionFor, partitionKeys, planBulk, prepareEnqueue, prepareMany, queueCreateOp, queueMetaKey,
  registerCmd, requestFromVector, rescheduleOp, sent, setMetaFieldCmd, settingsFromVector, slotOf, timedHead,
} from '../src/index';
import { runStep, wireResult } from '../src/driver';

const DIR = process.env.SHARDQ_WIRE_VECTORS ?? path.resolve(__dirname, '../../../../wire/vectors');
const load = (name: string): any => JSON.parse(readFileSync(path.join(DIR, name), 'utf8'));
const have = existsSync(path.join(DIR, 'calls.json'));
const skip = have ? false : `no vectors in ${DIR}`;

test('vectors: keys.json', { skip }, () => {
  const doc = load('keys.json');
  assert.equal(doc.wire, 'wire/1');
  for (const c of doc.cases) {
    const pk = partitionKeys(c.queue, c.partition, c.partitions, c.generation);
    assert.equal(pk.tag, c.tag, JSON.stringify(c));
    assert.equal(slotOf(pk.due), c.slot);
    for (const [kind, name] of Object.entries(c.keys)) assert.equal(pk.byKind(kind), name, `${c.tag} ${kind}`);
  }
  for (const q of doc.queue_keys) {
    assert.equal(queueMetaKey(q.queue), q.meta);
    assert.equal(QUEUES_KEY, q.registry);
  }
});

test('vectors: routing.json', { skip }, () => {
  for (const c of load('routing.json').cases) assert.equal(partitionFor(c.key, c.partitions), c.partition, JSON.stringify(c));
});

test('vectors: timed_ids.json', { skip }, () => {
  for (const c of load('timed_ids.json').cases) {
    if ('head' in c) assert.equal(timedHead(c.due_ms), c.head, String(c.due_ms));
    else assert.equal(compactPays(c.body_bytes), c.compact_pays, String(c.body_bytes));
  }
});

test('vectors: bodies.json', { skip }, () => {
  const doc = load('bodies.json');
  for (const c of doc.cases) {
    const s = settingsFromVector({ ...doc.settings, ...(c.settings ?? {}) });
    const run = () => prepareEnqueue({ queue: 'q', partitions: 1 }, requestFromVector(c.request), s).body;
    if (c.error) assert.throws(run, (e: Error) => e.name === c.error, `${JSON.stringify(c.request)}: ${c.error}`);
    else assert.equal(run(), c.body, JSON.stringify(c.request));
  }
});

test('vectors: schedules.json', { skip }, () => {
  for (const c of load('schedules.json').cases) {
    const argv = prepareEnqueue({ queue: 'q', partitions: 1 }, requestFromVector(c.request), settingsFromVector(null)).argv;
    assert.deepEqual([argv[2], argv[3]], [c.mode, c.ms], JSON.stringify(c.request));
  }
});

/** What a step sends, computed without Redis (as wire.spec.step_calls); null when
 *  the client refuses it before sending. */
function stepCalls(queue: any, step: any, s: ReturnType<typeof settingsFromVector>): SentCall[] | null {
  const q = { queue: queue.name, partitions: queue.partitions, layout: queue.layout ?? 0 };
  try {
    switch (step.op) {
      case 'create_queue': {
        const pks = allPartitionKeys(q.queue, step.partitions);
        const out = [queueCreateOp(q.queue, step.partitions), ...pks.map(groupCreateCmd), registerCmd(q.queue), ...pks.map(controlInitOp)];
        if (step.lanes) out.push(...pks.map((pk) => lanesOp(pk, true)), setMetaFieldCmd(q.queue, 'lanes', '1'));
        return out.map(sent);
      }
      case 'enqueue':
        return [sent(prepareEnqueue(q, requestFromVector(step.request), s).op())];
      case 'enqueue_many':
        return planBulk(prepareMany(q, step.requests.map(requestFromVector), s)).map((c) => sent(c.op));
      default: {
        checkJobId(step.job_id);
        const pk = new Layout(q.queue, q.partitions).route(step.job_id);
        if (step.op === 'get') return [sent(getOp(pk, step.job_id))];
        if (step.op === 'cancel') return [sent(cancelOp(pk, step.job_id, Boolean(step.running)))];
        return [sent(rescheduleOp(pk, step.job_id, { delayMs: step.delay_ms, runAt: step.run_at_ms, priority: step.priority }, s))];
      }
    }
  } catch (exc) {
    if ((exc as Error).name.endsWith('Error') && exc instanceof Error && 'name' in exc && exc.constructor.name !== 'Error') return null;
    throw exc;
  }
}

// Refused from the state of Redis (checked by the run against Redis), not from the request.
const STATE_ERRORS = new Set(['LanesOffError', 'UnknownQueueError']);

test('vectors: calls.json sends (computed, no Redis)', { skip }, () => {
  const doc = load('calls.json');
  for (const c of doc.cases) {
    for (const step of c.steps) {
      const where = `${c.name} ${step.op} ${JSON.stringify(step.request ?? step.job_id ?? '')}`;
      const s = settingsFromVector({ ...doc.settings, ...(step.settings ?? {}) });
      const calls = stepCalls(c.queue, step, s);
      if (step.send === undefined || (step.error && step.send.length === 0)) {
        if (!STATE_ERRORS.has(step.error)) assert.equal(calls, null, `${where}: the client must refuse before sending`);
      } else if (step.error) {
        // what was sent until the error (a script's refusal stops the plan there)
        assert.deepEqual(calls?.slice(0, step.send.length), step.send, where);
      } else assert.deepEqual(calls, step.send, where);
    }
  }
});

// -- against Redis --------------------------------------------------------------------------

const SLACK_MS = 2000;

function matches(actual: unknown, expect: unknown, window: [number, number], where: string): void {
  if (expect !== null && typeof expect === 'object' && !Array.isArray(expect)) {
    const e = expect as Record<string, any>;
    if ('from_now_ms' in e && Object.keys(e).length <= 2) {
      const slack = e.slack_ms ?? SLACK_MS;
      const n = Number(actual);
      assert.ok(
        Number.isFinite(n) && n >= window[0] + e.from_now_ms - slack && n <= window[1] + e.from_now_ms + slack,
        `${where}: ${String(actual)} is not ${e.from_now_ms} ms from now (${window[0]}..${window[1]})`,
      );
      return;
    }
    if ('ttl_ms' in e && Object.keys(e).length <= 2) {
      const slack = e.slack_ms ?? SLACK_MS;
      const n = Number(actual);
      assert.ok(Math.abs(n - e.ttl_ms) <= slack + (window[1] - window[0]), `${where}: ttl ${String(actual)}, want ${e.ttl_ms}`);
      return;
    }
    if ('re' in e && Object.keys(e).length === 1) {
      assert.match(String(actual), new RegExp(e.re), where);
      return;
    }
    assert.ok(actual !== null && typeof actual === 'object', `${where}: ${JSON.stringify(actual)} is not an object`);
    for (const [k, v] of Object.entries(e)) matches((actual as Record<string, unknown>)[k], v, window, `${where}.${k}`);
    return;
  }
  if (Array.isArray(expect)) {
    assert.ok(Array.isArray(actual) && actual.length === expect.length, `${where}: ${JSON.stringify(actual)} vs ${JSON.stringify(expect)}`);
    expect.forEach((v, i) => matches((actual as unknown[])[i], v, window, `${where}[${i}]`));
    return;
  }
  assert.deepEqual(actual, expect, where);
}

async function nodeFor(redis: Redis | Cluster, key: string): Promise<Redis> {
  if (!(redis instanceof Cluster)) return redis;
  const owner = redis.slots[slotOf(key)]?.[0];
  const node = redis.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === owner);
  if (!node) throw new Error(`no node for ${key}`);
  return node;
}

async function redisNow(redis: Redis | Cluster): Promise<number> {
  const node = redis instanceof Cluster ? redis.nodes('master')[0] : redis;
  const [sec, micro] = (await node.call('TIME')) as [string, string];
  return Number(sec) * 1000 + Math.floor(Number(micro) / 1000);
}

async function dropQueue(redis: Redis | Cluster, queue: string): Promise<void> {
  const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis];
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, found] = (await node.call('SCAN', [cursor, 'MATCH', `{sq:${queue}*`, 'COUNT', 1000])) as [string, string[]];
      for (const key of found) await node.call('DEL', [key]);
      cursor = next;
    } while (cursor !== '0');
  }
  await (await nodeFor(redis, QUEUES_KEY)).call('SREM', [QUEUES_KEY, queue]);
}

/** A bulk enqueue's calls may go in any order (per node): put them in the vector's. */
function sameOrder(calls: SentCall[], step: any): SentCall[] {
  if (step.op !== 'enqueue_many' || !step.send) return calls;
  const key = (c: SentCall) => JSON.stringify(c);
  const want = step.send.map(key);
  return [...calls].sort((a, b) => {
    const ia = want.indexOf(key(a));
    const ib = want.indexOf(key(b));
    return (ia < 0 ? Infinity : ia) - (ib < 0 ? Infinity : ib);
  });
}

const READS = new Set(['HGETALL', 'HGET', 'GET', 'TIME']);

for (const [label, env] of [['cluster', 'SHARDQ_NODE_TEST_CLUSTER_URL'], ['standalone', 'SHARDQ_NODE_TEST_STANDALONE_URL']] as const) {
  const url = process.env[env];
  test(`vectors: calls.json against Redis (${label})`, { skip: skip || (url ? false : `${env} not set`) }, async (t) => {
    const doc = load('calls.json');
    for (const c of doc.cases) {
      await t.test(c.name, async () => {
        const recorded: SentCall[] = [];
        const client = await Client.fromUrl(url!, { onSend: (call) => recorded.push(call) });
        try {
          await dropQueue(client.redis, c.queue.name);
          for (const [n, step] of c.steps.entries()) {
            const where = `${c.name} step ${n} (${step.op})`;
            recorded.length = 0;
            const before = await redisNow(client.redis);
            let result: unknown;
            let error: Error | null = null;
            try {
              result = await runStep(client, c.queue, { ...step, settings: { ...doc.settings, ...(step.settings ?? {}) } });
            } catch (exc) {
              error = exc as Error;
            }
            const after = await redisNow(client.redis);
            const sentNow = recorded.filter((r) => !('command' in r && READS.has(r.command[0])));
            if (step.error) {
              assert.ok(error !== null, `${where}: wanted ${step.error}, got ${JSON.stringify(wireResult(result))}`);
              assert.equal(error.name, step.error, `${where}: ${error.message}`);
              assert.deepEqual(sameOrder(sentNow, step), step.send ?? [], `${where}: sent`);
            } else {
              if (error !== null) throw error;
              if ('result' in step) matches(wireResult(result), step.result, [before, after], `${where}: result`);
              if (step.send !== undefined) assert.deepEqual(sameOrder(sentNow, step), step.send, `${where}: sent`);
            }
            for (const st of step.state ?? []) {
              const [verb, key, ...args] = st.command as string[];
              const reply = await (await nodeFor(client.redis, key)).call(verb, [key, ...args]);
              matches(reply, st.expect, [before, after], `${where}: ${st.command.join(' ')}`);
            }
          }
        } finally {
          await dropQueue(client.redis, c.queue.name).catch(() => undefined);
          await client.close();
        }
      });
    }
  });
}
