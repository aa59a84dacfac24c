// Every Redis key name shardq uses, and the hash-tag rule that places partitions on slots
// (port of shardq/store/keys.py; see its docstring for the reasoning).  The names, kinds and
// numbers are generated (constants.generated.ts); the tag search and solve, CRCs and routing
// are here, checked by wire/vectors/keys.json and routing.json.
import {
  IDEM_KIND,
  MAX_PARTITIONS,
  PARTITION_KEYS,
  PROGRESS_KIND,
  PartitionKeyField,
  RESULT_KIND,
  SCHEDULE_JOB_PREFIX,
  SCHEDULE_NAME_RE,
  SEARCHED_PARTITIONS,
  SLOTS,
  generationPrefix,
  partitionKeyBase,
  partitionLabel,
} from './constants.generated';

// -- CRCs -----------------------------------------------------------------------------------

const CRC16_TABLE = (() => {
  const t = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 8;
    for (let j = 0; j < 8; j++) c = c & 0x8000 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
    t[i] = c;
  }
  return t;
})();

/** CRC16/XMODEM (binascii.crc_hqx(data, crc)), continuing from `crc`. */
export function crc16(data: Uint8Array, crc = 0): number {
  for (let i = 0; i < data.length; i++) crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ data[i]) & 0xff];
  return crc;
}

const CRC32_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let j = 0; j < 8; j++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[i] = c >>> 0;
  }
  return t;
})();

/** CRC-32 as zlib/binascii.crc32 computes it (unsigned). */
export function crc32(data: Uint8Array): number {
  let c = 0xffffffff;
  for (let i = 0; i < data.length; i++) c = CRC32_TABLE[(c ^ data[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

const utf8 = (s: string): Buffer => Buffer.from(s, 'utf8');

/** Redis Cluster slot of a key (CRC16/XMODEM of the hash tag, as the server computes it). */
export function slotOf(key: string | Uint8Array): number {
  let data: Uint8Array = typeof key === 'string' ? utf8(key) : key;
  const start = data.indexOf(0x7b); // '{'
  if (start !== -1) {
    const end = data.indexOf(0x7d, start + 1); // '}'
    if (end > start + 1) data = data.subarray(start + 1, end);
  }
  return crc16(data) % SLOTS;
}

/** The half-open slot range [lo, hi) that partition `partition` of `partitions` lives in. */
export function slotRange(partition: number, partitions: number): [number, number] {
  return [Math.floor((partition * SLOTS) / partitions), Math.floor(((partition + 1) * SLOTS) / partitions)];
}

const tagCache = new Map<string, string>();

/** The hash tag of one partition: its slot lies near the middle of its own slot range. */
export function partitionTag(queue: string, partition: number, partitions: number, generation = 0): string {
  const cacheKey = `${queue}\0${partition}\0${partitions}\0${generation}`;
  const cached = tagCache.get(cacheKey);
  if (cached !== undefined) return cached;
  const [lo, hi] = slotRange(partition, partitions);
  const head = generationPrefix(queue, generation) + String(partition);
  let tag: string;
  if (partitions > SEARCHED_PARTITIONS) {
    const solved = head + ':';
    tag = solved + exactSuffix(utf8(solved), Math.floor((lo + hi) / 2));
  } else {
    // Compare doubled values so the centre (lo + hi) / 2 stays an integer.
    const centre2 = lo + hi;
    const reach2 = 2 * Math.max(Math.floor((hi - lo) / 8), 8);
    const base = crc16(utf8(head + '.'));
    let suffix = 0;
    for (;;) {
      const slot = crc16(utf8(String(suffix)), base) % SLOTS;
      if (lo <= slot && slot < hi && Math.abs(2 * slot + 1 - centre2) <= reach2) break;
      suffix += 1;
    }
    tag = `${head}.${suffix}`;
  }
  if (tagCache.size > 65536) tagCache.clear();
  tagCache.set(cacheKey, tag);
  return tag;
}

const LETTER_BASE = utf8('@@@@');
let syndromeTable: Int32Array | null = null;

/** 14 low bits of crc(nibble bytes) -> the smallest 16-bit nibble word giving them
 *  (shardq.store.keys._syndromes). */
export function syndromes(): Int32Array {
  if (syndromeTable !== null) return syndromeTable;
  const table = new Int32Array(SLOTS).fill(-1);
  const nibbles = new Uint8Array(4);
  for (let n = 0; n < 1 << 16; n++) {
    for (let i = 0; i < 4; i++) nibbles[i] = (n >> (4 * i)) & 0xf;
    const s = crc16(nibbles) % SLOTS;
    if (table[s] === -1) table[s] = n;
  }
  syndromeTable = table;
  return table;
}

/** Four letters of '@'..'O' that put `prefix` + them on `slot` exactly. */
export function exactSuffix(prefix: Uint8Array, slot: number): string {
  const base = crc16(Buffer.concat([prefix, LETTER_BASE])) % SLOTS;
  const n = syndromes()[base ^ slot];
  let out = '';
  for (let i = 0; i < 4; i++) out += String.fromCharCode(0x40 | ((n >> (4 * i)) & 0xf));
  return out;
}

/** The number of a partition among every generation's. */
export function fleetId(generation: number, partition: number): number {
  return generation * MAX_PARTITIONS + partition;
}

type PartitionKeyNames = { readonly [F in PartitionKeyField]: string };

// Its fields are PARTITION_KEYS' (shardq.store.keys.PartitionKeys' attributes, camelCase).
export interface PartitionKeys extends PartitionKeyNames {}

/** The keys of one partition of one queue; all share one hash tag, hence one slot. */
export class PartitionKeys {
  constructor(
    readonly queue: string,
    readonly partition: number,
    readonly tag: string,
    readonly generation = 0,
  ) {
    const base = partitionKeyBase(tag);
    const self = this as unknown as Record<PartitionKeyField, string>;
    for (const [field, [, kind]] of Object.entries(PARTITION_KEYS)) self[field as PartitionKeyField] = base + kind;
  }

  /** String: idempotency key -> job id. */
  idem(idempotencyKey: string): string {
    return partitionKeyBase(this.tag) + IDEM_KIND + ':' + idempotencyKey;
  }

  /** Passed in KEYS when an enqueue has no idempotency key (the script does not touch it). */
  get idemPlaceholder(): string {
    return partitionKeyBase(this.tag) + IDEM_KIND + ':';
  }

  result(jobId: string): string {
    return partitionKeyBase(this.tag) + RESULT_KIND + ':' + jobId;
  }

  progress(jobId: string): string {
    return partitionKeyBase(this.tag) + PROGRESS_KIND + ':' + jobId;
  }

  get fleetId(): number {
    return fleetId(this.generation, this.partition);
  }

  get label(): string {
    return partitionLabel(this.generation, this.partition);
  }

  /** A key by its Python attribute name, as the conformance vectors name the keys
   *  ('schedule_next', 'idem_placeholder', 'idem:<key>', ...). */
  byKind(kind: string): string | undefined {
    if (kind === 'idem_placeholder') return this.idemPlaceholder;
    for (const [field, [attribute]] of Object.entries(PARTITION_KEYS)) {
      if (attribute === kind) return this[field as PartitionKeyField];
    }
    const colon = kind.indexOf(':');
    if (colon > 0) {
      const what = kind.slice(0, colon);
      const arg = kind.slice(colon + 1);
      if (what === IDEM_KIND) return this.idem(arg);
      if (what === RESULT_KIND) return this.result(arg);
      if (what === PROGRESS_KIND) return this.progress(arg);
    }
    return undefined;
  }
}

const pkCache = new Map<string, PartitionKeys>();

export function partitionKeys(queue: string, partition: number, partitions: number, generation = 0): PartitionKeys {
  const cacheKey = `${queue}\0${partition}\0${partitions}\0${generation}`;
  let pk = pkCache.get(cacheKey);
  if (pk === undefined) {
    pk = new PartitionKeys(queue, partition, partitionTag(queue, partition, partitions, generation), generation);
    if (pkCache.size > 65536) pkCache.clear();
    pkCache.set(cacheKey, pk);
  }
  return pk;
}

export function allPartitionKeys(queue: string, partitions: number, generation = 0): PartitionKeys[] {
  const out: PartitionKeys[] = [];
  for (let p = 0; p < partitions; p++) out.push(partitionKeys(queue, p, partitions, generation));
  return out;
}

/** The partition a job id or idempotency key belongs to (CRC32 of its UTF-8 bytes mod P); a
 *  tick job's id (`sq-sched:<name>@<tick ms>`) routes by the schedule's name. */
export function partitionFor(routingKey: string, partitions: number): number {
  if (routingKey.startsWith(SCHEDULE_JOB_PREFIX)) {
    const rest = routingKey.slice(SCHEDULE_JOB_PREFIX.length);
    const at = rest.lastIndexOf('@');
    if (at >= 0) {
      const name = rest.slice(0, at);
      const tick = rest.slice(at + 1);
      if (/^[0-9]+$/.test(tick) && SCHEDULE_NAME_RE.test(name)) routingKey = name;
    }
  }
  return crc32(utf8(routingKey)) % partitions;
}

/** Where a queue's partitions live (shardq.store.keys.Layout). */
export class Layout {
  constructor(
    readonly queue: string,
    readonly partitions: number,
    readonly generation = 0,
    readonly draining: [number, number] | null = null,
    readonly coming: [number, number] | null = null,
  ) {}

  /** Partition `partition` of the active generation. */
  pk(partition: number): PartitionKeys {
    return partitionKeys(this.queue, partition, this.partitions, this.generation);
  }

  active(): PartitionKeys[] {
    return allPartitionKeys(this.queue, this.partitions, this.generation);
  }

  old(): PartitionKeys[] {
    if (this.draining === null) return [];
    const [generation, partitions] = this.draining;
    return allPartitionKeys(this.queue, partitions, generation);
  }

  /** Every live partition: the draining generation's, then the active one's. */
  every(): PartitionKeys[] {
    return [...this.old(), ...this.active()];
  }

  /** Where a new job with this id (or idempotency key) goes. */
  route(routingKey: string): PartitionKeys {
    return this.pk(partitionFor(routingKey, this.partitions));
  }

  /** Where a stored job with this id may be, in the order to ask (draining generation first). */
  homes(routingKey: string): PartitionKeys[] {
    const here = this.route(routingKey);
    if (this.draining === null) return [here];
    const [generation, partitions] = this.draining;
    const p = partitionFor(routingKey, partitions);
    return [partitionKeys(this.queue, p, partitions, generation), here];
  }

  get resizing(): boolean {
    return this.draining !== null;
  }
}
