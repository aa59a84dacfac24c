// Bodies and schedules against the Python reference; literals from
//   /work/main/.venv/bin/python -c "from shardq import jobs; from shardq.config import ProducerSettings;
//   print(jobs.encode_body('t', PAYLOAD, max_attempts=None, backoff=None, idempotency_key=None,
//   headers=None, settings=ProducerSettings(), ...).decode())"
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DEFAULT_SETTINGS, InvalidJobError, InvalidScheduleError, JobRequest, PayloadNotSerializableError, PayloadTooLargeError,
  dumps, encodeBody, formatFloat, makeSchedule, prepareEnqueue, pyRound,
} from '../src/index';

const body = (req: Partial<JobRequest>): string => encodeBody({ type: 't', ...req } as JobRequest, DEFAULT_SETTINGS);

test('payloads encode as orjson does', () => {
  const cases: [unknown, string][] = [
    [0.1, '["t",0.1]'],
    [1e16, '["t",1e+16]'], // a JS number beyond 2**53 is written as a float
    [1e-6, '["t",1e-6]'],
    [1.5e-7, '["t",1.5e-7]'],
    [123456789.25, '["t",123456789.25]'],
    [1e21, '["t",1e+21]'],
    [2n ** 63n, '["t",9223372036854775808]'],
    [-(2n ** 63n), '["t",-9223372036854775808]'],
    [2n ** 64n - 1n, '["t",18446744073709551615]'],
    ['tab\there "q" \\ \x00\x1f\x7f\u2028 é ✓ 😀', '["t","tab\\there \\"q\\" \\\\ \\u0000\\u001f\x7f\u2028 é ✓ 😀"]'],
    [{ nested: { list: [1, [2, [3]]], empty: {} } }, '["t",{"nested":{"list":[1,[2,[3]]],"empty":{}}}]'],
    [[], '["t",[]]'],
    [{}, '["t",{}]'],
    [true, '["t",true]'],
    [null, '["t",null]'],
    [undefined, '["t",null]'],
    [1e300, '["t",1e+300]'],
    [5e-324, '["t",5e-324]'],
  ];
  for (const [payload, want] of cases) assert.equal(body({ payload }), want, String(payload));
});

test('floats: orjson notation', () => {
  const want: [number, string][] = [
    [1.5, '1.5'], [1e15 + 0.5, '1000000000000000.5'], [1e-5, '0.00001'], [1.234e-5, '0.00001234'],
    [3.14159e-5, '0.0000314159'], [-3.5e-9, '-3.5e-9'], [1.23e22, '1.23e+22'], [2 ** 64, '1.8446744073709552e+19'],
    [1.7976931348623157e308, '1.7976931348623157e+308'], [123456789.0, '123456789'],
  ];
  for (const [n, text] of want) assert.equal(n === Math.trunc(n) && Number.isSafeInteger(n) ? dumps(n) : formatFloat(n), text, String(n));
});

test('what orjson refuses is refused', () => {
  for (const payload of [NaN, Infinity, -Infinity, [1, { x: NaN }], '\ud800', 2n ** 64n, -(2n ** 63n) - 1n, new Date(0), new Map(), () => 1, Symbol('s')]) {
    assert.throws(() => body({ payload }), PayloadNotSerializableError, String(payload));
  }
  let deep: unknown = 1;
  for (let i = 0; i < 253; i++) deep = [deep];
  assert.equal(body({ payload: deep }).length > 0, true); // 254 levels in all: accepted
  assert.throws(() => body({ payload: [deep] }), PayloadNotSerializableError); // 255: refused
});

test('options in the order m, b, k, h, l, r, o, d|w; the flow prefix', () => {
  assert.equal(body({ payload: 1, backoff: { kind: 'jitter', baseMs: 0.5, capMs: 1.5 } }), '["t",1,{"b":["j",0,2]}]');
  assert.equal(body({ payload: 1, backoff: { kind: 'fixed', baseMs: 2.5, capMs: 1000 } }), '["t",1,{"b":["f",2,1000]}]');
  assert.equal(body({ payload: 1, keepResultMs: 1000.5 }), '["t",1,{"r":1000}]');
  assert.throws(() => body({ payload: 1, timeoutMs: 0.4 }), InvalidJobError);
  assert.equal(body({ payload: 1, timeoutMs: 1.5 }), '["t",1,{"o":2}]');
  assert.equal(body({ payload: 1, priority: 'low' }), '@l@["t",1]');
  assert.equal(body({ payload: 1, tenant: 'acme', priority: 'default' }), '@nacme@["t",1]');
  assert.equal(body({ payload: 1, headers: {} }), '["t",1]');
  assert.equal(
    body({
      payload: { x: 1 }, tenant: 't', priority: 'high', deadline: 1, timeoutMs: 1, keepResultMs: 1000, limitKey: 'l',
      headers: { a: 'b' }, idempotencyKey: 'k', backoff: { kind: 'exponential', baseMs: 1000, capMs: 600000 }, maxAttempts: 3,
    }),
    '@ht@["t",{"x":1},{"m":3,"b":["e",1000,600000],"k":"k","h":{"a":"b"},"l":"l","r":1000,"o":1,"d":1}]',
  );
  assert.equal(body({ payload: 1, startWithinMs: 60000 }), '["t",1,{"w":60000}]');
  assert.equal(body({ payload: 1, deadline: new Date(1893456000000) }), '["t",1,{"d":1893456000000}]');
});

test('the size limit is on the JSON, not the prefix', () => {
  const s = { ...DEFAULT_SETTINGS, maxPayloadBytes: 14 };
  assert.equal(encodeBody({ type: 't', payload: 'abcdef', priority: 'high' }, s), '@h@["t","abcdef"]');
  assert.throws(() => encodeBody({ type: 't', payload: 'abcdefg' }, s), PayloadTooLargeError);
  assert.throws(() => encodeBody({ type: 't', payload: 'ééééé' }, s), PayloadTooLargeError); // bytes, not characters
});

test('schedules as make_schedule makes them', () => {
  assert.deepEqual(makeSchedule(null, null, DEFAULT_SETTINGS), { mode: 'in', ms: 0 });
  assert.deepEqual(makeSchedule(null, 0.5, DEFAULT_SETTINGS), { mode: 'in', ms: 0 }); // round half even
  assert.deepEqual(makeSchedule(null, 1.5, DEFAULT_SETTINGS), { mode: 'in', ms: 2 });
  assert.deepEqual(makeSchedule(null, -1000, DEFAULT_SETTINGS), { mode: 'in', ms: 0 });
  assert.deepEqual(makeSchedule(1893456000000.6, null, DEFAULT_SETTINGS), { mode: 'at', ms: 1893456000001 });
  assert.deepEqual(makeSchedule(new Date(1893456000000), null, DEFAULT_SETTINGS), { mode: 'at', ms: 1893456000000 });
  assert.throws(() => makeSchedule(null, -300001, DEFAULT_SETTINGS), InvalidScheduleError);
  assert.throws(() => makeSchedule(null, NaN, DEFAULT_SETTINGS), InvalidScheduleError);
  assert.throws(() => makeSchedule(0, null, DEFAULT_SETTINGS), InvalidScheduleError);
  assert.throws(() => makeSchedule(1, 1, DEFAULT_SETTINGS), InvalidScheduleError);
  assert.throws(() => makeSchedule(new Date(NaN), null, DEFAULT_SETTINGS), InvalidScheduleError);
  assert.equal(pyRound(2.5), 2);
  assert.equal(pyRound(-2.5), -2);
  assert.equal(pyRound(3.5), 4);
});

test('prepareEnqueue: the enqueue FCALL as Python builds it', () => {
  const p = prepareEnqueue({ queue: 'q', partitions: 4 }, { type: 't', payload: 1, jobId: 'job-1', delayMs: 1500 }, DEFAULT_SETTINGS);
  const pk = p.pk;
  assert.equal(p.function, 'enqueue');
  assert.deepEqual(p.keys, [pk.jobs, pk.due, pk.ready, pk.idemPlaceholder, pk.stats, pk.lane, pk.vtime, pk.ctl]);
  assert.deepEqual(p.argv, ['job-1', '["t",1]', 'in', '1500', '300000', '31622400000', '86400000', '0', pk.dueHint, pk.readyHint, '']);
  // A generated id in a compact queue (layout >= 3) is timed and sent as 'tin'.
  const timed = prepareEnqueue({ queue: 'q', partitions: 4, layout: 4 }, { type: 't', delayMs: 60000 }, DEFAULT_SETTINGS);
  assert.equal(timed.jobId.length, 20);
  assert.equal(timed.argv[2], 'tin');
  const plain = prepareEnqueue({ queue: 'q', partitions: 4, layout: 4 }, { type: 't' }, DEFAULT_SETTINGS);
  assert.equal(plain.jobId.length, 12);
  assert.equal(plain.argv[2], 'in');
});
