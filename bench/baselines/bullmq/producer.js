'use strict';
// Enqueue delayed BullMQ jobs: one "<job id> <due epoch ms>" line per job on stdin.
//
//   node producer.js --url redis://127.0.0.1:7310 --queue bl-x [--prefix {bq}] [--cluster]
//        [--body-bytes 20] [--chunk 1000] < jobs.txt
//
// Each job gets opts.jobId = "j" + the harness's id (BullMQ refuses a custom id that reads as an
// integer, as an all-digit hex id does; consumer.js strips the "j"), opts.timestamp = the moment its chunk is built
// and opts.delay = due - timestamp, so BullMQ's due time (timestamp + delay, the score in the
// "delayed" zset) is exactly the given due ms.  A job already due (delay <= 0) goes straight
// to "wait", as BullMQ does with any undelayed job.  Chunks go through Queue.addBulk (one
// MULTI of addDelayedJob script calls per chunk).  Prints one JSON line: {"jobs", "ms"}.

const fs = require('node:fs');
const { Queue } = require('bullmq');
const { parseArgs, connection } = require('./common');

async function main() {
  const args = parseArgs(process.argv.slice(2), {
    url: 'redis://127.0.0.1:6379',
    queue: '',
    prefix: '{bq}',
    cluster: false,
    bodyBytes: 20,
    chunk: 1000,
  });
  if (!args.queue) throw new Error('--queue is required');
  const lines = fs.readFileSync(0, 'utf8').split('\n').filter(Boolean);
  const body = 'x'.repeat(args.bodyBytes);
  const conn = connection(args.url, args.cluster);
  const queue = new Queue(args.queue, { connection: conn, prefix: args.prefix });
  await queue.waitUntilReady();
  const t0 = process.hrtime.bigint();
  for (let start = 0; start < lines.length; start += args.chunk) {
    const now = Date.now();
    const bulk = [];
    for (const line of lines.slice(start, start + args.chunk)) {
      const [harnessId, due] = line.split(' ');
      const id = `j${harnessId}`;
      const delay = Number(due) - now;
      bulk.push({
        name: 'job',
        data: body,
        opts: delay > 0 ? { jobId: id, timestamp: now, delay } : { jobId: id, timestamp: now },
      });
    }
    await queue.addBulk(bulk);
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  await queue.close();
  await conn.quit();
  process.stdout.write(JSON.stringify({ jobs: lines.length, ms }) + '\n');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
