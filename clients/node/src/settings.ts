// Limits the producer enforces before anything is written (shardq.config.ProducerSettings),
// with the same defaults and bounds (constants.generated.ts).  Times are in ms here (the
// Python settings are seconds; the wire vectors' settings are ms, as here).
import { PRODUCER_SETTINGS, SettingSpec } from './constants.generated';
import { ConfigError } from './errors';

export interface ProducerSettings {
  maxPayloadBytes: number;
  /** A run time this many ms before the Redis clock runs now; older is an error. */
  pastToleranceMs: number;
  /** A run time more than this many ms after the Redis clock is an error. */
  maxHorizonMs: number;
  /** How long after a job's due time its idempotency key keeps returning the same job. */
  idempotencyRetentionMs: number;
  /** The longest a uniqueUntil='done' key holds after its job's due time. */
  uniqueRetentionMs: number;
  /** durable enqueues wait until this many replicas confirm the write. */
  durableReplicas: number;
  /** How long a durable enqueue waits for them before NotDurableError. */
  durableTimeoutMs: number;
  /** The most jobs one sticky run holds (jobs without an id or key due within one
   *  stickyWindowMs go to one partition; src/sticky.ts); 1: each job on its own. */
  stickyJobs: number;
  /** Jobs due within one window of this many ms may share a run (about the lateness budget). */
  stickyWindowMs: number;
}

// Every Python setting is one here but retry_timeout, the client's option (retryTimeoutMs): a
// setting added to or dropped from the Python ones fails to compile here until it is ported.
const SPECS: Record<keyof ProducerSettings, SettingSpec> = PRODUCER_SETTINGS;
type Ported = Exclude<keyof typeof PRODUCER_SETTINGS, 'retryTimeoutMs'>;
const allPorted: [Ported] extends [keyof ProducerSettings] ? true : never = true;
/** In the order ProducerSettings checks them. */
const NAMES = Object.keys(PRODUCER_SETTINGS).filter((k): k is Ported => k !== 'retryTimeoutMs');

export const DEFAULT_SETTINGS: Readonly<ProducerSettings> = Object.freeze(
  Object.fromEntries(NAMES.map((name) => [name, SPECS[name].default])) as unknown as ProducerSettings,
);

function range(name: string, value: unknown, spec: SettingSpec): void {
  const { min: lo, max: hi, integer: int } = spec;
  if (typeof value !== 'number' || !(lo <= value && value <= hi) || (int && !Number.isInteger(value))) {
    throw new ConfigError(`${name} must be ${int ? 'an integer ' : ''}${lo}..${hi}, got ${String(value)}`);
  }
}

/** Settings with defaults filled in, checked as ProducerSettings.__post_init__ checks them. */
export function producerSettings(given: Partial<ProducerSettings> = {}): ProducerSettings {
  const s: ProducerSettings = { ...DEFAULT_SETTINGS };
  for (const [k, v] of Object.entries(given)) if (v !== undefined) (s as unknown as Record<string, unknown>)[k] = v;
  for (const name of NAMES) range(name, s[name], SPECS[name]);
  return s;
}

/** Settings from a wire vector's S (snake_case ms). */
export function settingsFromVector(v: Record<string, number> | undefined | null): ProducerSettings {
  if (!v) return { ...DEFAULT_SETTINGS };
  return producerSettings({
    maxPayloadBytes: v.max_payload_bytes,
    pastToleranceMs: v.past_tolerance_ms,
    maxHorizonMs: v.max_horizon_ms,
    idempotencyRetentionMs: v.idempotency_retention_ms,
    uniqueRetentionMs: v.unique_retention_ms,
  });
}

/** Python's round(): half to even (times go seconds -> ms as round(seconds * 1000)). */
export function pyRound(x: number): number {
  let r = Math.round(x);
  if (r - x === 0.5 && r % 2 !== 0) r -= 1;
  return r === 0 ? 0 : r; // never -0
}

/** round(seconds * 1000) of Python for a value given in ms (ms / 1000 is what the Python
 *  caller passes; the same IEEE arithmetic gives the same result). */
export function msRound(ms: number): number {
  return pyRound((ms / 1000) * 1000);
}
