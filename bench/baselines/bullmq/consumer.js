'use strict';
// A BullMQ Worker that appends "<job id> <lateness ms>\n" to a run log per handler run, with
// one write(2) on an O_APPEND descriptor (the format of bench/baselines/record.py, so a
// consumer killed with SIGKILL keeps every run it made).
//
//   node consumer.js --url redis://127.0.0.1:7310 --queue bl-x --out runs.log
//        [--prefix {bq}] [--cluster] [--concurrency 100] [--lock-ms 5000]
//        [--stalled-ms 5000] [--handler-ms 0]
//
// Lateness = handler start minus due time, both on this machine's wall clock: BullMQ has no
// server clock for delays.  The due time is the producer's Date.now() at add (job.timestamp)
// plus opts.delay, and a worker promotes what is due by the Date.now() it passes to the
// moveToActive script.  (Producer, worker and Redis share one box here, so one clock.)
//
// Completed jobs are removed (removeOnComplete: true), as shardq's ack removes a job.  A job
// held by a killed worker comes back once its lock (--lock-ms) has expired and a stalled check
// (every --stalled-ms, by any live worker) has seen it twice (maxStalledCount 1, BullMQ's
// default).  Prints "ready" once the worker's connections are up; SIGTERM closes it.

const fs = require('node:fs');
const { performance } = require('node:perf_hooks');
const { Worker } = require('bullmq');
const { parseArgs, connection } = require('./common');

async function main() {
  const args = parseArgs(process.argv.slice(2), {
    url: 'redis://127.0.0.1:6379',
    queue: '',
    prefix: '{bq}',
    cluster: false,
    out: '',
    concurrency: 100,
    lockMs: 5000,
    stalledMs: 5000,
    handlerMs: 0,
  });
  if (!args.queue || !args.out) throw new Error('--queue and --out are required');
  const fd = fs.openSync(args.out, 'a'); // O_WRONLY | O_CREAT | O_APPEND
  const now = () => performance.timeOrigin + performance.now(); // wall clock, sub-ms
  const handler = async (job) => {
    const late = now() - (job.timestamp + (job.opts.delay || 0));
    // producer.js made the id "j" + the harness's id
    fs.writeSync(fd, `${job.id.slice(1)} ${Math.max(0, late).toFixed(3)}\n`);
    if (args.handlerMs > 0) await new Promise((r) => setTimeout(r, args.handlerMs));
  };
  const conn = connection(args.url, args.cluster);
  const worker = new Worker(args.queue, handler, {
    connection: conn,
    prefix: args.prefix,
    concurrency: args.concurrency,
    lockDuration: args.lockMs,
    stalledInterval: args.stalledMs,
    removeOnComplete: { count: 0 },
    autorun: false,
  });
  worker.on('error', (err) => console.error('worker error:', err.message));
  let closing = false;
  const stop = async () => {
    if (closing) return;
    closing = true;
    await worker.close();
    await conn.quit().catch(() => {});
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  await worker.waitUntilReady();
  const running = worker.run();
  process.stdout.write('ready\n');
  await running;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
