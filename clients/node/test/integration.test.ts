// End to end against Redis, checked with the Python client (the reference): jobs this client
// enqueues are read back by shardq.Client.get identically, and jobs Python enqueues are read
// by this client identically.  Needs SHARDQ_NODE_TEST_CLUSTER_URL and/or
// SHARDQ_NODE_TEST_STANDALONE_URL (skipped otherwise), and the repository's Python venv
// (SHARDQ_PYTHON, default /work/main/.venv/bin/python relative to this package).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import Redis, { Cluster } from 'ioredis';
import {
  BulkEnqueueError, Client, DuplicateJobError, JobInfo, JobRequest, LanesOffError, MalformedRecordError, NotDurableError,
  QUEUES_KEY, UnknownQueueError, functionName, partitionFor, partitionKeys, slotOf,
} from '../src/index';

/** A whole second a week from now (run times are bounded by max_horizon, a year). */
const RUN_AT_MS = Math.floor(Date.now() / 1000) * 1000 + 7 * 86400_000;
const PYTHON = process.env.SHARDQ_PYTHON ?? path.resolve(__dirname, '../../../../.venv/bin/python');
const havePython = existsSync(PYTHON);

const PY_GET = `
import dataclasses, json, sys
from shardq import Client
c = Client.from_url(sys.argv[1])
out = []
for job_id in sys.argv[3:]:
    info = c.get(sys.argv[2], job_id)
    out.append(None if info is None else dataclasses.asdict(info))
print(json.dumps(out))
c.close()
`;

const PY_ENQUEUE = `
import json, sys
from datetime import timedelta
from shardq import Client, Backoff
c = Client.from_url(sys.argv[1])
q = sys.argv[2]
ids = [
    c.enqueue(q, "py.send", {"n": 1, "f": 2.5, "s": "ünï ✓"}, delay=60, job_id="py-1", max_attempts=4,
              backoff=Backoff("exponential", 0.5, 60), headers={"traceparent": "00-a-b-01"},
              limit_key="acme", keep_result=3600, timeout=30, deadline=timedelta(seconds=90)),
    c.enqueue(q, "py.send", [1, None, True], run_at=float(sys.argv[3]), idempotency_key="py-key-2",
              priority=None, unique_until="done"),
]
print(json.dumps(ids))
c.close()
`;

function pyGet(url: string, queue: string, ids: string[]): any[] {
  return JSON.parse(execFileSync(PYTHON, ['-c', PY_GET, url, queue, ...ids], { encoding: 'utf8', timeout: 30_000 }));
}

/** The fields of a Python JobInfo this client's JobInfo must equal. */
function asPython(info: JobInfo): Record<string, unknown> {
  const s = (ms: number | null) => (ms === null ? null : ms / 1000);
  return {
    id: info.id, queue: info.queue, partition: info.partition, state: info.state, type: info.type, payload: info.payload,
    attempt: info.attempt, max_attempts: info.maxAttempts, due_ms: info.dueMs, last_error: info.lastError,
    idempotency_key: info.idempotencyKey, limit_key: info.limitKey, priority: info.priority, tenant: info.tenant,
    keep_result: s(info.keepResultMs), timeout: s(info.timeoutMs), deadline_ms: info.deadlineMs, start_within: s(info.startWithinMs),
    progress: info.progress, progress_ms: info.progressMs, malformed: info.malformed,
  };
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
  const registry = redis instanceof Cluster ? redis : redis;
  await registry.srem(QUEUES_KEY, queue);
}

for (const [label, env] of [['cluster', 'SHARDQ_NODE_TEST_CLUSTER_URL'], ['standalone', 'SHARDQ_NODE_TEST_STANDALONE_URL']] as const) {
  const url = process.env[env];
  const skip = !url ? `${env} not set` : !havePython ? `no Python at ${PYTHON}` : false;

  test(`integration (${label})`, { skip }, async (t) => {
    const client = await Client.fromUrl(url!);
    const queue = `node-it-${label}`;
    const lanesQueue = `node-it-lanes-${label}`;
    const sealedQueue = `node-it-sealed-${label}`;
    try {
      assert.equal(client.transport.cluster, label === 'cluster');
      await dropQueue(client.redis, queue);
      await dropQueue(client.redis, lanesQueue);
      await dropQueue(client.redis, sealedQueue);

      await t.test('unknown queue', async () => {
        await assert.rejects(client.enqueue(queue, 't', 1), UnknownQueueError);
      });

      await t.test('createQueue is idempotent', async () => {
        assert.equal(await client.createQueue(queue, { partitions: 8 }), true);
        assert.equal(await client.createQueue(queue, { partitions: 8 }), false);
        const meta = await client.queueMeta(queue);
        assert.equal(meta.partitions, 8);
        assert.equal(meta.layout, 4);
      });

      await t.test('a missing library is loaded where it is missing', async () => {
        // Only on the node this test started itself: FUNCTION DELETE of this version's library.
        const node = client.transport.nodeOf('{sq:x}');
        const lib = functionName('enqueue').replace(/_enqueue$/, '');
        await node.call('FUNCTION', ['DELETE', lib]).catch(() => undefined);
        const r = await client.enqueue(queue, 'reload', 1, { jobId: 'reload-1', delayMs: 60000 });
        assert.equal(r.created, true);
        const nodes = client.redis instanceof Cluster ? client.redis.nodes('master') : [client.redis];
        await Promise.all(nodes.map((n) => n.call('FUNCTION', ['DELETE', lib]).catch(() => undefined)));
        const got = await client.get(queue, 'reload-1'); // FCALL_RO: loaded too
        assert.equal(got?.state, 'scheduled');
      });

      const options: [string, Parameters<Client['enqueue']>[3], unknown][] = [
        ['plain', {}, { x: 1 }],
        ['delay', { delayMs: 60000 }, 'later'],
        ['runAt', { runAt: new Date(Date.now() + 3600_000) }, [1, 2.5, 'ü']],
        ['runAtMs', { runAt: RUN_AT_MS }, null],
        ['maxAttempts', { maxAttempts: 7, delayMs: 1000 }, 1],
        ['backoff', { backoff: { kind: 'exponential', baseMs: 500, capMs: 60000 }, delayMs: 1000 }, 1],
        ['backoffJitter', { backoff: { kind: 'jitter', baseMs: 1000, capMs: 30000 }, delayMs: 1000 }, 1],
        ['headers', { headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' }, delayMs: 1000 }, 1],
        ['limitKey', { limitKey: 'tenant:acme', delayMs: 1000 }, 1],
        ['keepResult', { keepResultMs: 3600_000, delayMs: 1000 }, 1],
        ['timeout', { timeoutMs: 30_000, delayMs: 1000 }, 1],
        ['deadline', { deadline: new Date(4102444800000), delayMs: 1000 }, 1],
        ['startWithin', { startWithinMs: 60_000, delayMs: 1000 }, 1],
        ['idem', { idempotencyKey: 'order-42', delayMs: 5000 }, { order: 42 }],
        ['unique', { idempotencyKey: 'unique-7', uniqueUntil: 'done', delayMs: 5000 }, 7],
        ['debounce', { idempotencyKey: 'burst-1', debounceMs: 30_000 }, { v: 1 }],
        ['jobId', { jobId: 'my-job-1', delayMs: 2000 }, 'mine'],
        ['durable', { jobId: 'durable-1', delayMs: 2000, durable: true }, 'safe'],
      ];
      const enqueued: string[] = [];
      await t.test('enqueue with each option; Python reads each job back identically', async () => {
        for (const [name, opts, payload] of options) {
          if (name === 'durable' && label === 'standalone') {
            // No replica: stored, but not confirmed (as the Python client says it).
            await assert.rejects(client.enqueue(queue, `opt.${name}`, payload, opts), NotDurableError);
            enqueued.push('durable-1');
            continue;
          }
          const r = await client.enqueue(queue, `opt.${name}`, payload, opts);
          assert.equal(r.created, true, name);
          if (name === 'jobId' || name === 'durable') assert.equal(r.jobId, opts!.jobId);
          if (name === 'delay') assert.equal(r.jobId.length, 20, 'a generated id of a waiting job is timed (layout >= 3)');
          enqueued.push(r.jobId);
        }
        const fromPython = pyGet(url!, queue, enqueued);
        for (const [n, id] of enqueued.entries()) {
          const mine = await client.get(queue, id);
          assert.ok(mine !== null, id);
          assert.ok(fromPython[n] !== null, `python cannot see ${id}`);
          assert.deepEqual(asPython(mine), fromPython[n], `${options[n][0]}: ${id}`);
        }
        const byName = Object.fromEntries(options.map(([name], i) => [name, fromPython[i]]));
        assert.equal(byName.maxAttempts.max_attempts, 7);
        assert.equal(byName.limitKey.limit_key, 'tenant:acme');
        assert.equal(byName.keepResult.keep_result, 3600);
        assert.equal(byName.timeout.timeout, 30);
        assert.equal(byName.deadline.deadline_ms, 4102444800000);
        assert.equal(byName.startWithin.start_within, 60);
        assert.equal(byName.idem.idempotency_key, 'order-42');
        assert.equal(byName.plain.state, 'ready');
        assert.equal(byName.delay.state, 'scheduled');
        assert.equal(byName.runAtMs.due_ms, RUN_AT_MS);
        assert.equal(byName.debounce.state, 'scheduled');
      });

      await t.test('idempotency, debounce, duplicates', async () => {
        const again = await client.enqueue(queue, 'opt.idem', { order: 42 }, { idempotencyKey: 'order-42', delayMs: 5000 });
        assert.equal(again.created, false);
        assert.equal(again.jobId, enqueued[options.findIndex(([n]) => n === 'idem')]);
        const deb = await client.enqueue(queue, 'opt.debounce', { v: 2 }, { idempotencyKey: 'burst-1', debounceMs: 30_000 });
        assert.equal(deb.created, false);
        const info = await client.get(queue, deb.jobId);
        assert.deepEqual(info?.payload, { v: 2 });
        await assert.rejects(client.enqueue(queue, 'other', 1, { jobId: 'my-job-1' }), DuplicateJobError);
      });

      await t.test('get, reschedule, cancel', async () => {
        assert.equal(await client.get(queue, 'nope'), null);
        const before = await client.get(queue, 'my-job-1');
        const due = await client.reschedule(queue, 'my-job-1', { delayMs: 120_000 });
        assert.ok(due > before!.dueMs!, 'moved later');
        const [py] = pyGet(url!, queue, ['my-job-1']);
        assert.equal(py.due_ms, due);
        assert.equal(await client.cancel(queue, 'my-job-1'), true);
        assert.equal(await client.cancel(queue, 'my-job-1'), false);
        assert.deepEqual(pyGet(url!, queue, ['my-job-1']), [null]);
      });

      await t.test('jobs Python enqueued read the same here', async () => {
        const ids = JSON.parse(execFileSync(PYTHON, ['-c', PY_ENQUEUE, url!, queue, String(RUN_AT_MS / 1000)], { encoding: 'utf8', timeout: 30_000 }));
        const fromPython = pyGet(url!, queue, ids);
        for (const [n, id] of ids.entries()) assert.deepEqual(asPython((await client.get(queue, id))!), fromPython[n], id);
        const info = await client.get(queue, 'py-1');
        assert.deepEqual(info?.backoff, { kind: 'exponential', baseMs: 500, capMs: 60000 });
        assert.deepEqual(info?.headers, { traceparent: '00-a-b-01' });
      });

      await t.test('enqueueMany: batches by partition, pipelined per node', async () => {
        const jobs: JobRequest[] = [];
        for (let i = 0; i < 450; i++) jobs.push({ type: 'bulk', payload: i, delayMs: 60_000 });
        jobs.push({ type: 'bulk', payload: 'keyed', idempotencyKey: 'bulk-key' });
        const results = await client.enqueueMany(queue, jobs);
        assert.equal(results.length, 451);
        assert.ok(results.every((r) => r.created));
        const sample = [results[0].jobId, results[200].jobId, results[450].jobId];
        const fromPython = pyGet(url!, queue, sample);
        assert.deepEqual(fromPython.map((j) => j.payload), [0, 200, 'keyed']);
        // a resend of a stored job is recognised; a duplicate id is reported per job
        const err = await client
          .enqueueMany(queue, [{ type: 'x', jobId: 'dup-a', delayMs: 1000 }, { type: 'x', jobId: 'durable-1' }])
          .catch((e) => e);
        assert.ok(err instanceof BulkEnqueueError);
        assert.deepEqual([...err.failed.keys()], [1]);
        assert.equal(err.failed.get(1)?.name, 'DuplicateJobError');
        assert.deepEqual(err.stored, ['dup-a']);
        if (label === 'cluster') {
          const durable = await client.enqueueMany(queue, [{ type: 'x', delayMs: 1000 }, { type: 'y', delayMs: 1000 }], { durable: true });
          assert.equal(durable.length, 2);
        }
      });

      await t.test('lanes: priority and tenant need lanes on', async () => {
        await client.createQueue(lanesQueue, { partitions: 4 });
        await assert.rejects(client.enqueue(lanesQueue, 't', 1, { priority: 'high' }), LanesOffError);
        assert.equal(await client.createQueue(lanesQueue, { partitions: 4, lanes: true }), false);
        const r = await client.enqueue(lanesQueue, 't', 1, { priority: 'high', tenant: 'acme', jobId: 'lane-1', delayMs: 60_000 });
        const [py] = pyGet(url!, lanesQueue, [r.jobId]);
        assert.equal(py.priority, 'high');
        assert.equal(py.tenant, 'acme');
        assert.deepEqual(asPython((await client.get(lanesQueue, r.jobId))!), py);
        const due = await client.reschedule(lanesQueue, 'lane-1', { priority: 'low' });
        assert.equal(typeof due, 'number');
      });

      await t.test('a sealed field naming a generation the meta does not is refused, not followed', async () => {
        // (M13: the operator may write the control hash; tests/integration/test_acl.py forges it
        // as that user.)  Nothing is written, here or in the generation it names.
        await client.createQueue(sealedQueue, { partitions: 2 });
        const pk = partitionKeys(sealedQueue, 0, 2);
        await client.redis.hset(pk.ctl, 'sealed', '999:4');
        const ids: string[] = [];
        for (let n = 0; ids.length < 3; n++) if (partitionFor(`sealed-${n}`, 2) === 0) ids.push(`sealed-${n}`);
        await assert.rejects(client.enqueue(sealedQueue, 't', 1, { jobId: ids[0], delayMs: 60_000 }), (e: Error) => e instanceof MalformedRecordError && /generation 999/.test(e.message));
        const err = await client.enqueueMany(sealedQueue, ids.map((jobId) => ({ type: 't', jobId, delayMs: 60_000 }))).catch((e) => e);
        assert.ok(err instanceof BulkEnqueueError);
        assert.ok([...err.failed.values()].every((e) => e instanceof MalformedRecordError), String([...err.failed.values()]));
        await assert.rejects(client.get(sealedQueue, ids[0]), MalformedRecordError);
        assert.equal(await client.redis.exists(pk.jobs, pk.due), 0);
        for (let p = 0; p < 4; p++) {
          const forged = partitionKeys(sealedQueue, p, 4, 999);
          assert.equal(await client.redis.exists(forged.jobs, forged.due, forged.ready), 0);
        }
      });
    } finally {
      await dropQueue(client.redis, queue).catch(() => undefined);
      await dropQueue(client.redis, lanesQueue).catch(() => undefined);
      await dropQueue(client.redis, sealedQueue).catch(() => undefined);
      await client.close();
    }
  });
}

test('slot of a key this suite uses', () => assert.equal(slotOf('{sq:x}'), slotOf('sq:x')));
