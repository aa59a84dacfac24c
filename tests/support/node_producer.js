// A Node producer under faults (tests/fleet/test_node_interop.py): enqueues single jobs and
// batches of 20 into a queue with shardq's TypeScript client (clients/node, built) until its
// stdin closes, and prints one JSON line per call: {"stored": [ids], "started_ms"} for what the
// client said was stored (started_ms: when the call began, epoch ms), {"error": name,
// "message"} for a call that failed.  A BulkEnqueueError's stored
// jobs are reported and the rest resent with their ids (safe: a resend cannot duplicate).
'use strict';
const path = require('node:path');
const { Client } = require(path.resolve(__dirname, '../../clients/node/dist/src/index.js'));

const [url, queue] = process.argv.slice(2);
let stop = false;
process.stdin.on('end', () => { stop = true; });
process.stdin.resume();
const say = (o) => process.stdout.write(JSON.stringify(o) + '\n');

async function main() {
  const client = await Client.fromUrl(url, { retryTimeoutMs: 30_000 });
  let pending = [];
  let n = 0;
  while (!stop || pending.length) {
    const startedMs = Date.now();
    try {
      if (n % 2 === 0 && !pending.length) {
        const r = await client.enqueue(queue, 't', n, { delayMs: Math.floor(Math.random() * 1000) });
        say({ stored: [r.jobId], started_ms: startedMs });
      } else {
        const jobs = pending.length ? pending : Array.from({ length: 20 }, (_, i) => ({ type: 't', payload: i, delayMs: Math.floor(Math.random() * 1000) }));
        pending = [];
        const results = await client.enqueueMany(queue, jobs);
        say({ stored: results.map((r) => r.jobId), started_ms: startedMs });
      }
    } catch (err) {
      if (err && err.name === 'BulkEnqueueError') {
        say({ stored: err.stored, started_ms: startedMs, resent: err.retryRequests.length });
        pending = err.retryRequests;
      } else {
        say({ error: err && err.name, message: String(err && err.message) });
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    n += 1;
  }
  await client.close();
  say({ done: true, calls: n });
}

main().catch((err) => { say({ error: 'fatal', message: String(err && err.stack) }); process.exit(1); });
