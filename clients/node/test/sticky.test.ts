// Sticky routing (src/sticky.ts), as tests/unit/test_sticky.py checks the Python one: steered ids
// hash where asked (routing stays crc32(id) % P), jobs due together share a run, and ids, keys
// and stickyJobs=1 route one by one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Layout, partitionFor, prepareMany, producerSettings, sticky, timedHead } from '../src/index';

test('a steered id hashes to the partition asked and keeps its head', () => {
  const head = timedHead(1_765_000_000_000);
  for (const P of [2, 3, 5, 16, 64, 1024, 4096, 16384]) {
    for (let n = 0; n < 300; n++) {
      const target = (n * 7919) % P;
      const plain = sticky.steer('', target, P);
      const timed = sticky.steer(head, target, P);
      assert.equal(partitionFor(plain, P), target);
      assert.equal(partitionFor(timed, P), target);
      assert.equal(plain.length, 12);
      assert.ok(timed.startsWith(head) && timed.length === 20);
    }
  }
  const ids = new Set(Array.from({ length: 20000 }, () => sticky.steer('', 9, 64)));
  assert.equal(ids.size, 20000);
  assert.ok(!sticky.supports(100) && sticky.supports(64) && sticky.supports(12));
});

// Due at fixed instants (a delay would be read against the clock job by job, and a 10 ms window
// may turn while the requests are prepared).
const at = Math.floor(Date.now() / 10) * 10 + 60_000;
const reqs = (n: number, apartMs: number) =>
  Array.from({ length: n }, (_, i) => ({ type: 't', payload: i, runAt: at + i * apartMs }));

test('jobs due together go in runs of stickyJobs; ids, keys and stickyJobs=1 one by one', () => {
  sticky.RUNS.clear();
  const layout = new Layout('q', 64);
  const s = producerSettings();
  const together = prepareMany(layout, reqs(320, 0), s);
  const counts = new Map<number, number>();
  for (const p of together) {
    assert.equal(partitionFor(p.jobId, 64), p.partition);
    counts.set(p.partition, (counts.get(p.partition) ?? 0) + 1);
  }
  assert.ok([...counts.values()].every((n) => n % 16 === 0), JSON.stringify([...counts]));
  assert.ok(counts.size >= 10);
  const apart = prepareMany(layout, reqs(200, 20), s);
  assert.ok(new Set(apart.map((p) => p.partition)).size > 50);
  const single = prepareMany(layout, reqs(200, 0), producerSettings({ stickyJobs: 1 }));
  assert.ok(new Set(single.map((p) => p.partition)).size > 50);
  const keyed = prepareMany(layout, reqs(50, 0).map((r, i) => ({ ...r, idempotencyKey: `k${i}` })), s);
  for (const p of keyed) assert.equal(p.partition, partitionFor(p.request.idempotencyKey as string, 64));
  assert.throws(() => producerSettings({ stickyJobs: 0 }), /stickyJobs/);
});
