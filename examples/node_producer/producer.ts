// A TypeScript service enqueues jobs that Python workers run (jobs.py here):
//   npm install && npx tsc && node dist/producer.js [redis://127.0.0.1:7000]
// It prints one job id per line, for jobs due in 2 s whose results are kept for 10 minutes.
import { Client } from 'shardq-producer';

async function main(): Promise<void> {
  const url = process.argv[2] ?? process.env.SHARDQ_REDIS_URL ?? 'redis://127.0.0.1:7000';
  const client = await Client.fromUrl(url); // cluster or standalone: detected
  try {
    await client.createQueue('signups', { partitions: 16 }); // safe to repeat
    const { jobId } = await client.enqueue('signups', 'email.send', { to: 'a@example.com' }, {
      delayMs: 2_000,
      idempotencyKey: 'welcome:a@example.com', // a repeat returns this job, writes nothing
      maxAttempts: 5,
      keepResultMs: 600_000,
    });
    console.log(jobId);
    const many = await client.enqueueMany(
      'signups',
      ['b', 'c', 'd'].map((name) => ({
        type: 'email.send',
        payload: { to: `${name}@example.com` },
        delayMs: 2_000,
        keepResultMs: 600_000,
      })),
    );
    for (const r of many) console.log(r.jobId);
  } finally {
    await client.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
