// Job ids (port of shardq/jobs/ids.py).
import { randomBytes } from 'node:crypto';

const POOL: string[] = [];
const BATCH = 512;

function b64url(data: Buffer): string {
  // '-' becomes '.' so an id never looks like a command-line option.
  return data.toString('base64url').replace(/-/g, '.');
}

/** A random job id: 72 bits from the OS CSPRNG, 12 URL-safe characters. */
export function newJobId(): string {
  const next = POOL.pop();
  if (next !== undefined) return next;
  const text = b64url(randomBytes(9 * BATCH));
  for (let i = 12; i < text.length; i += 12) POOL.push(text.slice(i, i + 12));
  return text.slice(0, 12);
}

let lastHead: [number, string] = [-1, ''];

/** The first 8 characters of a timed job id: `dueMs` as 6 bytes big-endian, base64url ('.' for
 *  '-'). */
export function timedHead(dueMs: number): string {
  if (dueMs === lastHead[0]) return lastHead[1];
  if (!Number.isSafeInteger(dueMs) || dueMs < 0 || dueMs >= 2 ** 48) {
    throw new RangeError(`due ms ${dueMs} does not fit 6 bytes`);
  }
  const buf = Buffer.alloc(6);
  buf.writeUIntBE(dueMs, 0, 6);
  const head = b64url(buf);
  lastHead = [dueMs, head];
  return head;
}

/** A random job id that carries its due time: 8 characters of due ms, then 12 random ones. */
export function newTimedJobId(dueMs: number): string {
  return timedHead(Math.max(0, Math.trunc(dueMs))) + newJobId();
}

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._';

/** The due ms a timed job id encodes (as lua/includes/compact.lua reads it), or null. */
export function timedIdDue(jobId: string): number | null {
  if (jobId.length < 20) return null;
  let value = 0;
  for (const c of jobId.slice(0, 8)) {
    const digit = B64.indexOf(c);
    if (digit < 0) return null;
    value = value * 64 + digit;
  }
  return value;
}
