'use strict';
// Producer call rates in Node: shardq's TypeScript client (clients/node, built) or BullMQ's
// Queue, the same jobs (20-byte payload, delayed 10 minutes so nothing runs).
//
//   node producer_rates.js --design shardq|bullmq --url URL --queue Q [--cluster]
//        [--single 3000] [--bulk 20000] [--chunk 1000] [--concurrency 1]
//
// single: --single calls of enqueue / Queue.add, --concurrency of them in flight at a time;
// bulk: --bulk jobs through enqueueMany / Queue.addBulk, --chunk per call, one call at a time.
// Prints one JSON line: {"design", "single_per_s", "bulk_per_s"}.

const path = require('node:path');
const { parseArgs, connection } = require('./common');

async function main() {
  const a = parseArgs(process.argv.slice(2), {
    design: 'shardq', url: 'redis://127.0.0.1:7310', queue: '', cluster: false,
    single: 3000, bulk: 20000, chunk: 1000, concurrency: 1,
  });
  if (!a.queue) throw new Error('--queue is required');
  const payload = 'x'.repeat(20);
  const delay = 600_000;
  let add, addBulk, close;
  if (a.design === 'shardq') {
    const { Client } = require(path.resolve(__dirname, '../../../clients/node/dist/src/index.js'));
    const client = await Client.fromUrl(a.url);
    add = () => client.enqueue(a.queue, 't', payload, { delayMs: delay });
    addBulk = (n) => client.enqueueMany(a.queue, Array.from({ length: n }, () => ({ type: 't', payload, delayMs: delay })));
    close = () => client.close();
  } else if (a.design === 'bullmq') {
    const { Queue } = require('bullmq');
    const conn = connection(a.url, a.cluster);
    const queue = new Queue(a.queue, { connection: conn, prefix: '{bq}' });
    add = () => queue.add('t', payload, { delay });
    addBulk = (n) => queue.addBulk(Array.from({ length: n }, () => ({ name: 't', data: payload, opts: { delay } })));
    close = async () => { await queue.close(); conn.disconnect(); };
  } else {
    throw new Error(`--design is shardq or bullmq, got ${a.design}`);
  }
  await add(); // warm: connections, the library, the queue's meta
  let t = performance.now();
  let next = 0;
  const lane = async () => { while (next < a.single) { next += 1; await add(); } };
  await Promise.all(Array.from({ length: a.concurrency }, lane));
  const single = a.single / ((performance.now() - t) / 1000);
  t = performance.now();
  for (let done = 0; done < a.bulk; done += a.chunk) await addBulk(Math.min(a.chunk, a.bulk - done));
  const bulk = a.bulk / ((performance.now() - t) / 1000);
  await close();
  process.stdout.write(JSON.stringify({ design: a.design, single_per_s: Math.round(single), bulk_per_s: Math.round(bulk) }) + '\n');
}

main().catch((err) => { console.error(err); process.exit(1); });
