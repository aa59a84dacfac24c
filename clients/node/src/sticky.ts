// Sticky routing (port of shardq/store/sticky.py; docs/architecture.md, "Sticky routing"): the
// jobs a process enqueues without an id or a key, due within one stickyWindowMs of each other, go
// to one partition, stickyJobs at most, then a run starts on another partition chosen at random.
// A job's promote, read and ack cost about as much for one job as for a dozen, so jobs due
// together then share their calls.  Routing stays crc32(id) % P: the generated id is steered to
// hash to the run's partition by picking its last two characters (CRC-32 is affine, so for a
// power-of-two P one table lookup finds them; other counts up to MAX_SEARCHED are searched, and
// larger ones are routed one by one).  The two random characters replaced pick among the fits, so
// an id loses only the log2(P) bits that name its partition.
import { STICKY_ALPHABET, STICKY_MAX_OPEN, STICKY_MAX_SEARCHED } from './constants.generated';
import { newJobId } from './ids';
import { crc32 } from './keys';
import type { ProducerSettings } from './settings';

/** The characters of a generated id (base64url, '-' written '.'). */
export const ALPHABET = STICKY_ALPHABET;
const S0 = 'AA';
/** A count that is not a power of two is searched, P tries a job on average: small counts only. */
export const MAX_SEARCHED = STICKY_MAX_SEARCHED;
/** Open runs kept per process (the oldest opened is dropped past it). */
export const MAX_OPEN = STICKY_MAX_OPEN;

const ascii = (s: string): Buffer => Buffer.from(s, 'latin1');
const S0_CRC = crc32(ascii(S0));
const SUFFIXES: [string, number][] = [];
for (const a of ALPHABET) for (const b of ALPHABET) SUFFIXES.push([a + b, (crc32(ascii(a + b)) ^ S0_CRC) >>> 0]);
const TABLES = new Map<number, string[][]>();

/** Whether a generated id can be steered to any of `partitions` partitions cheaply. */
export function supports(partitions: number): boolean {
  return partitions > 1 && ((partitions & (partitions - 1)) === 0 || partitions <= MAX_SEARCHED);
}

function table(partitions: number): string[][] {
  let t = TABLES.get(partitions);
  if (t === undefined) {
    const mask = partitions - 1;
    t = Array.from({ length: partitions }, () => [] as string[]);
    for (const [s, d] of SUFFIXES) t[d & mask].push(s);
    TABLES.set(partitions, t);
  }
  return t;
}

/** A new random job id that starts with `head` (a timed id's due time, or '') and hashes to
 *  `partition` of `partitions` (supports(partitions) must hold). */
export function steer(head: string, partition: number, partitions: number): string {
  const power = (partitions & (partitions - 1)) === 0;
  const t = power ? table(partitions) : null;
  const mask = partitions - 1;
  for (;;) {
    const drawn = newJobId();
    const stem = head + drawn.slice(0, -2);
    const c0 = crc32(ascii(stem + S0));
    const pick = ALPHABET.indexOf(drawn[10]) * 64 + ALPHABET.indexOf(drawn[11]);
    if (t !== null) {
      const fits = t[((c0 ^ partition) & mask) >>> 0];
      if (fits.length) return stem + fits[pick % fits.length];
      continue;
    }
    const n = SUFFIXES.length;
    for (let i = 0; i < n; i++) {
      const [s, d] = SUFFIXES[(pick + i) % n];
      if (((c0 ^ d) >>> 0) % partitions === partition) return stem + s;
    }
  }
}

/** The open runs of this process: per queue and window of due times, the run's partition and
 *  the jobs it still takes. */
export class Runs {
  private runs = new Map<string, [number, number]>();

  /** A generated id (`head` first) for a job of `queue` due about `dueMs`, and its partition. */
  place(queue: string, partitions: number, head: string, dueMs: number, settings: ProducerSettings): [string, number] {
    const window = Math.max(1, Math.round(settings.stickyWindowMs));
    const key = `${queue}\u0000${partitions}\u0000${Math.floor(dueMs / window)}`;
    let state = this.runs.get(key);
    if (state === undefined || state[1] <= 0) {
      if (state === undefined && this.runs.size >= MAX_OPEN) {
        const oldest = this.runs.keys().next();
        if (!oldest.done) this.runs.delete(oldest.value);
      }
      state = [Math.floor(Math.random() * partitions), settings.stickyJobs];
      this.runs.set(key, state);
    }
    state[1] -= 1;
    return [steer(head, state[0], partitions), state[0]];
  }

  clear(): void {
    this.runs.clear();
  }
}

export const RUNS = new Runs();
