// Keys and routing against the Python reference.  The literals were produced with
//   /work/main/.venv/bin/python -c "from shardq.store import keys; print(keys.slot_of(K),
//   keys.partition_tag(Q, p, P, g), keys.partition_for(K, P))"
// for the inputs below (shardq at the commit this client was written against).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  Layout, PartitionKeys, QUEUES_KEY, crc16, crc32, fleetId, generationPrefix, partitionFor, partitionKeys,
  partitionTag, queueMetaKey, slotOf, slotRange, syndromes, SLOTS,
} from '../src/index';

test('slotOf follows the hash-tag rule (binascii.crc_hqx % 16384)', () => {
  const want: Record<string, number> = {
    foo: 12182, '{user1000}.following': 3443, 'foo{}{bar}': 8363, 'foo{{bar}}zap': 4015,
    'foo{bar}{zap}': 5061, 'ünï{cöde}': 10436, '{sq:orders}:meta': 7146, '': 0,
  };
  for (const [key, slot] of Object.entries(want)) assert.equal(slotOf(key), slot, key);
  assert.equal(crc16(Buffer.from('123456789')), 0x31c3); // CRC16/XMODEM check value
  assert.equal(crc32(Buffer.from('123456789')), 0xcbf43926); // CRC-32 check value
});

test('slotRange and generationPrefix', () => {
  assert.deepEqual(slotRange(0, 3), [0, 5461]);
  assert.deepEqual(slotRange(2, 3), [10922, 16384]);
  assert.equal(generationPrefix('q'), 'sq:q:');
  assert.equal(generationPrefix('q', 3), 'sq:q:g3.');
});

test('partitionTag: searched up to 1024 partitions, solved above', () => {
  const cases: [string, number, number, number, string][] = [
    ['orders', 0, 1, 0, 'sq:orders:0.2'],
    ['orders', 5, 8, 0, 'sq:orders:5.51'],
    ['orders', 1023, 1024, 0, 'sq:orders:1023.1197'],
    ['orders', 0, 1025, 0, 'sq:orders:0:EHFH'],
    ['big', 4095, 4096, 0, 'sq:big:4095:KBFI'],
    ['big', 100, 16384, 0, 'sq:big:100:MKLH'],
    ['big', 7, 16, 2, 'sq:big:g2.7.269'],
    ['big', 3000, 4096, 5, 'sq:big:g5.3000:GEJ@'],
  ];
  for (const [q, p, P, g, tag] of cases) assert.equal(partitionTag(q, p, P, g), tag, `${q} ${p}/${P} g${g}`);
});

test('every slot is reachable by a solved suffix, on the middle of its range', () => {
  const table = syndromes();
  for (let s = 0; s < SLOTS; s++) assert.ok(table[s] >= 0, `slot ${s}`);
  for (const p of [0, 1, 77, 16383]) {
    const pk = partitionKeys('every', p, 16384);
    assert.equal(slotOf(pk.due), p);
  }
});

test('PartitionKeys names every key of a partition', () => {
  const pk = new PartitionKeys('q', 3, 'sq:q:3.7');
  assert.equal(pk.due, '{sq:q:3.7}:due');
  assert.equal(pk.jobs, '{sq:q:3.7}:jobs');
  assert.equal(pk.ready, '{sq:q:3.7}:ready');
  assert.equal(pk.lane, '{sq:q:3.7}:lane');
  assert.equal(pk.vtime, '{sq:q:3.7}:vtime');
  assert.equal(pk.dead, '{sq:q:3.7}:dead');
  assert.equal(pk.lease, '{sq:q:3.7}:lease');
  assert.equal(pk.fence, '{sq:q:3.7}:fence');
  assert.equal(pk.stats, '{sq:q:3.7}:stats');
  assert.equal(pk.ctl, '{sq:q:3.7}:ctl');
  assert.equal(pk.errors, '{sq:q:3.7}:errors');
  assert.equal(pk.schedules, '{sq:q:3.7}:sched');
  assert.equal(pk.moving, '{sq:q:3.7}:moving');
  assert.equal(pk.inbound, '{sq:q:3.7}:inbound');
  assert.equal(pk.cancels, '{sq:q:3.7}:cancels');
  assert.equal(pk.dueHint, '{sq:q:3.7}:hint:due');
  assert.equal(pk.readyHint, '{sq:q:3.7}:hint:ready');
  assert.equal(pk.idem('k'), '{sq:q:3.7}:idem:k');
  assert.equal(pk.idemPlaceholder, '{sq:q:3.7}:idem:');
  assert.equal(pk.result('j'), '{sq:q:3.7}:result:j');
  assert.equal(pk.progress('j'), '{sq:q:3.7}:progress:j');
  assert.equal(queueMetaKey('q'), '{sq:q}:meta');
  assert.equal(QUEUES_KEY, 'sq:queues');
  assert.equal(fleetId(2, 5), 2 * 16384 + 5);
});

test('partitionFor: CRC32 of the UTF-8 bytes, a tick id by its schedule', () => {
  const cases: [string, number, number][] = [
    ['a', 64, 3], ['ünïcode', 7, 5], ['sq-sched:nightly@1764547200000', 64, 26], ['nightly', 64, 26],
    ['sq-sched:nightly@', 64, 37], ['sq-sched:bad name@1', 64, 55], ['sq-sched:a@b@12', 16, 9],
  ];
  for (const [key, P, p] of cases) assert.equal(partitionFor(key, P), p, key);
});

test('Layout routes to the active generation and asks the draining one first', () => {
  const plain = new Layout('q', 8);
  assert.deepEqual(plain.homes('job-1').map((pk) => pk.tag), [plain.route('job-1').tag]);
  const resizing = new Layout('q', 16, 1, [0, 8]);
  const homes = resizing.homes('job-1');
  assert.equal(homes.length, 2);
  assert.equal(homes[0].tag, partitionTag('q', partitionFor('job-1', 8), 8, 0));
  assert.equal(homes[1].tag, partitionTag('q', partitionFor('job-1', 16), 16, 1));
  assert.equal(resizing.every().length, 24);
});
