// Job ids against the Python reference; literals from
//   /work/main/.venv/bin/python -c "from shardq import jobs; print(jobs.timed_head(D), jobs.compact_pays(N))"
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compactPays, newJobId, newTimedJobId, timedHead, timedIdDue } from '../src/index';

test('newJobId: 12 URL-safe characters, no dash', () => {
  const seen = new Set<string>();
  for (let i = 0; i < 2000; i++) {
    const id = newJobId();
    assert.match(id, /^[A-Za-z0-9._]{12}$/);
    seen.add(id);
  }
  assert.equal(seen.size, 2000);
});

test('timedHead: due ms as 6 bytes big-endian, base64url with . for -', () => {
  const want: Record<string, string> = {
    0: 'AAAAAAAA', 1: 'AAAAAAAB', 2: 'AAAAAAAC', 63: 'AAAAAAA_', 64: 'AAAAAABA', 4095: 'AAAAAA__',
    1700000000000: 'AYvP5WgA', 1700000000001: 'AYvP5WgB', 1764547200123: 'AZrXNYR7',
    253402300799999: '5nfSH9v_', 281474976710655: '________',
  };
  for (const [due, head] of Object.entries(want)) assert.equal(timedHead(Number(due)), head, due);
  const id = newTimedJobId(1764547200123);
  assert.equal(id.length, 20);
  assert.equal(id.slice(0, 8), 'AZrXNYR7');
  assert.equal(timedIdDue(id), 1764547200123);
  assert.equal(timedIdDue('short'), null);
});

test('compactPays follows the allocator model', () => {
  const want: Record<string, boolean> = {
    0: true, 1: true, 100: true, 107: true, 108: true, 200: true, 235: true, 236: true, 240: true,
    1000: false, 1003: false, 1500: true, 4000: true, 5000: true, 10000: true, 65536: true,
  };
  for (const [n, pays] of Object.entries(want)) assert.equal(compactPays(Number(n)), pays, n);
});
