// Script codes become the errors and messages shardq.store.codes.error_for makes: the
// templates are generated (constants.generated.ts), their filling and the shapes are codes.ts's.
// Literals from shardq.store.codes.error_for(code, detail) of the Python package.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LayoutMovedError, errorFor } from '../src/index';

const CASES: [number, string[], string, string][] = [
  [-1, ["7", ""], "FencedError", "fencing token 7 is stale (lease now free): another dispatcher owns this partition; stop draining it"],
  [-1, ["7", "9"], "FencedError", "fencing token 7 is stale (lease now 9): another dispatcher owns this partition; stop draining it"],
  [-14, ["operator", "{sq:q:0.1}:ctl", "?"], "NotPermittedError", "only the operator or admin Redis user may do this (this user may not write {sq:q:0.1}:ctl). Nothing was written. Run it as the shardq-operator user (docs/deploy.md, `shardq acl print`)"],
  [-14, ["admin", "k", "a hash"], "NotPermittedError", "k is a hash: a bug, or a version mismatch between shardq and its Redis functions. Nothing was written"],
  [-16, ["3:8"], "LayoutMovedError", "a resize moves this partition's jobs to generation 3 (8 partitions): ask there (the clients follow this themselves; a tool pointed at one partition should read the queue's meta again)"],
  [-16, ["x"], "LayoutMovedError", "a resize moves this partition's jobs to generation 0 (0 partitions): ask there (the clients follow this themselves; a tool pointed at one partition should read the queue's meta again)"],
  [-4, ["it's"], "DuplicateJobError", "job \"it's\" already exists: pick another job_id, or pass idempotency_key to get the existing job back instead of an error"],
  [-11, ["ARGV[2]", "a\nb", "0", "10"], "ScriptArgumentError", "argument ARGV[2] = 'a\\nb' is outside 0..10: a bug or a version mismatch between shardq and its Redis functions (run `shardq functions load` after upgrading)"],
  [-20, ["j1"], "IdempotencyKeyInUseError", "the idempotency key belongs to job 'j1', which no debounce of this job type and tenant enqueued: nothing was written. Idempotency keys are queue-global; give this burst a key of its own (e.g. '<job type>:<tenant>:<your key>')"],
  [-12, [], "ScheduleNotFoundError", "no periodic schedule '?' on this queue: see `shardq schedule list`"],
];

test('codes become the errors and messages Python makes', () => {
  for (const [code, detail, name, message] of CASES) {
    const err = errorFor(code, detail);
    assert.equal(err.name, name, `${code} ${JSON.stringify(detail)}`);
    assert.equal(err.message, message);
  }
  const moved = errorFor(-16, ['3:8']);
  assert.ok(moved instanceof LayoutMovedError);
  assert.deepEqual([moved.generation, moved.partitions], [3, 8]);
});
