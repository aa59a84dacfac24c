// The wire vectors' shapes (docs/wire.md, wire/vectors/*.json): a request R (snake_case, times
// in ms) as this client's JobRequest, and S as ProducerSettings.
import { JobRequest } from './body';
import { settingsFromVector } from './settings';

export { settingsFromVector };

const FIELDS = new Set([
  'type', 'payload', 'job_id', 'idempotency_key', 'delay_ms', 'run_at_ms', 'max_attempts', 'backoff', 'headers',
  'priority', 'tenant', 'limit_key', 'keep_result_ms', 'timeout_ms', 'deadline_ms', 'start_within_ms',
  'unique_until', 'debounce_ms',
]);

/** A vector's request as a JobRequest (as wire.spec.request_from_vector builds the
 *  Python one); an Error for a field wire/1 does not define. */
export function requestFromVector(r: Record<string, any>): JobRequest {
  const unknown = Object.keys(r).filter((k) => !FIELDS.has(k));
  if (unknown.length > 0) throw new Error(`request fields ${unknown.sort().join(', ')} are not part of wire/1`);
  const req: JobRequest = { type: r.type, payload: r.payload ?? null };
  const map: [string, keyof JobRequest][] = [
    ['job_id', 'jobId'], ['idempotency_key', 'idempotencyKey'], ['delay_ms', 'delayMs'], ['run_at_ms', 'runAt'],
    ['max_attempts', 'maxAttempts'], ['headers', 'headers'], ['priority', 'priority'], ['tenant', 'tenant'],
    ['limit_key', 'limitKey'], ['keep_result_ms', 'keepResultMs'], ['timeout_ms', 'timeoutMs'],
    ['deadline_ms', 'deadline'], ['unique_until', 'uniqueUntil'], ['debounce_ms', 'debounceMs'],
  ];
  for (const [from, to] of map) if (r[from] !== undefined && r[from] !== null) (req as any)[to] = r[from];
  if (r.backoff !== undefined && r.backoff !== null) {
    req.backoff = { kind: r.backoff.kind, baseMs: r.backoff.base_ms, capMs: r.backoff.cap_ms };
  }
  // A relative deadline replaces an absolute one (Python's deadline= takes one or the other).
  if (r.start_within_ms !== undefined && r.start_within_ms !== null) {
    delete req.deadline;
    req.startWithinMs = r.start_within_ms;
  }
  return req;
}
