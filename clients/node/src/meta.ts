// A queue's settings as stored at creation ({sq:<queue>}:meta): port of shardq/store/meta.py,
// and the producer's cache of them (QueueCache, in the same module).
import {
  COMING_FIELD,
  COMPACT_LAYOUT,
  DEFAULT_DEAD_CAP,
  DRAINING_FIELD,
  GENERATION_FIELD,
  GENERATION_PARTITIONS_FIELD,
  LANES_RECHECK_MS,
  MAX_ACK_RETENTION_MS,
  MAX_DEAD_CAP,
  MAX_PARTITIONS,
  queueMetaKey,
} from './constants.generated';
import { BadNumber, MalformedRecordError, UnknownQueueError, repr, shown } from './errors';
import { Layout } from './keys';

export interface QueueMeta {
  queue: string;
  /** The active generation's count. */
  partitions: number;
  ackRetentionMs: number;
  deadCap: number;
  /** keys.LAYOUT_VERSION at creation (or `shardq queue upgrade`); 0: unknown. */
  layout: number;
  generation: number;
  draining: [number, number] | null;
  coming: [number, number] | null;
  /** The meta's lanes flag ('1': on in every partition), as read with the meta. */
  lanes: boolean;
}

/** Waiting jobs with a timed id are stored compactly (layout >= 3). */
export function isCompact(meta: QueueMeta): boolean {
  return meta.layout >= COMPACT_LAYOUT;
}

export function keyLayout(meta: QueueMeta): Layout {
  return new Layout(meta.queue, meta.partitions, meta.generation, meta.draining, meta.coming);
}

export function unknownQueue(queue: string): UnknownQueueError {
  return new UnknownQueueError(
    `queue ${repr(queue)} does not exist: create it first with \`shardq queue create --queue ${queue} --partitions 64\` or client.create_queue(${repr(queue)})`,
  );
}

const INTEGER = /^-?[0-9]{1,19}$/;

/** numbers.integer: decimal digits with an optional '-', within lo..hi; else BadNumber. */
export function integer(raw: unknown, lo: number, hi: number, what: string): number {
  let value: number | null = null;
  if (typeof raw === 'number' && Number.isInteger(raw)) value = raw;
  else if (typeof raw === 'string' || Buffer.isBuffer(raw)) {
    const text = Buffer.isBuffer(raw) ? raw.toString('latin1') : raw;
    if (INTEGER.test(text)) value = Number(text);
  }
  if (value === null || !(lo <= value && value <= hi)) throw new BadNumber(what, raw, `an integer ${lo}..${hi}`);
  return value;
}

function parseDraining(raw: unknown, generation: number, name = DRAINING_FIELD): [number, number] | null {
  if (raw === undefined || raw === null || String(raw) === '') return null;
  const text = String(raw);
  const sep = text.indexOf(':');
  if (sep < 0) throw new BadNumber(name, raw, "'<generation>:<partitions>'");
  const old = text.slice(0, sep);
  const count = text.slice(sep + 1);
  const oldGeneration = integer(old, 0, 10 ** 9, `${name} generation`);
  if (oldGeneration === generation) throw new BadNumber(`${name} generation`, old, `another than ${generation}`);
  return [oldGeneration, integer(count, 1, MAX_PARTITIONS, 'partitions')];
}

/** The queue's meta from HGETALL of it; UnknownQueueError when never created,
 *  MalformedRecordError when damaged. */
export function parseMeta(queue: string, raw: Record<string, string> | null | undefined): QueueMeta {
  const fields = raw ?? {};
  if (!Object.hasOwn(fields, 'partitions')) throw unknownQueue(queue);
  try {
    let generation = 0;
    let draining: [number, number] | null = null;
    let count: unknown = fields.partitions;
    if (Object.hasOwn(fields, GENERATION_FIELD)) {
      generation = integer(fields[GENERATION_FIELD], 0, 10 ** 9, 'generation');
      count = fields[GENERATION_PARTITIONS_FIELD];
      draining = parseDraining(fields[DRAINING_FIELD], generation);
    }
    const partitions = integer(count, 1, MAX_PARTITIONS, 'partitions');
    const coming = parseDraining(fields[COMING_FIELD], generation, COMING_FIELD);
    return {
      queue,
      partitions,
      ackRetentionMs: integer(fields.ack_retention_ms ?? 0, 0, MAX_ACK_RETENTION_MS, 'ack_retention_ms'),
      deadCap: integer(fields.dead_cap ?? DEFAULT_DEAD_CAP, 1, MAX_DEAD_CAP, 'dead_cap'),
      layout: integer(fields.layout ?? 0, 0, 1000, 'layout'),
      generation,
      draining,
      coming,
      lanes: fields.lanes === '1',
    };
  } catch (exc) {
    if (exc instanceof BadNumber) {
      throw new MalformedRecordError(
        `queue ${repr(queue)} has a damaged meta (${queueMetaKey(queue)}): ${exc.message}; set the field back with HSET as \`shardq queue create\` wrote it`,
      );
    }
    throw exc;
  }
}

interface QueueFacts {
  meta: QueueMeta;
  lanesSeen: number; // performance.now() when lanes were last read as on; -Infinity: not
}

/** The client's cache of each queue's meta (forgotten on a resize's redirect). */
export class QueueCache {
  private facts = new Map<string, QueueFacts>();

  get(queue: string): QueueMeta | undefined {
    return this.facts.get(queue)?.meta;
  }

  keep(meta: QueueMeta): QueueMeta {
    this.facts.set(meta.queue, { meta, lanesSeen: -Infinity });
    return meta;
  }

  forget(queue: string): void {
    this.facts.delete(queue);
  }

  lanesTrusted(queue: string): boolean {
    const f = this.facts.get(queue);
    return f !== undefined && performance.now() - f.lanesSeen < LANES_RECHECK_MS;
  }

  sawLanes(queue: string, on: boolean): void {
    const f = this.facts.get(queue);
    if (f !== undefined) f.lanesSeen = on ? performance.now() : -Infinity;
  }
}

export { shown };
