// Runs calls against Redis with ioredis: each call is sent on a plain connection of the
// primary serving its keys (per the cluster client's slot map), alone or pipelined per node,
// optionally with WAIT after a node's batch on the same connection.  A node that lacks the
// library ("Function not found") gets it with FUNCTION LOAD and the calls are sent again
// (shardq/store/transport.py).  Calls that meet a redirect, a failover or a broken connection
// are resent after a fresh look at the slot map until `retryTimeoutMs` (shardq/store/retry.py);
// a call not safe to repeat (cancel) only when the fault proves nothing was written.
import Redis, { Cluster } from 'ioredis';
import { PRODUCER_SETTINGS } from './constants.generated';
import { FunctionsNotLoadedError, RedisUnavailableError } from './errors';
import { slotOf } from './keys';
import { FUNCTIONS, LIBRARY_CODE, LIBRARY_NAME, functionName, isCodeMissing } from './library';
import { Call, routeKey, sent } from './producer';
import { Runner } from './plans';

export type SentCall = ReturnType<typeof sent>;

export interface TransportOptions {
  /** How long a call keeps being resent through failovers and slot moves (default: Python's
   *  ProducerSettings.retry_timeout, 15 s). */
  retryTimeoutMs?: number;
  /** Called with every call as it is sent (tests compare them with the wire vectors). */
  onSend?: (call: SentCall) => void;
}

const REDIRECT = /^(MOVED|ASK) /;
const NOT_WRITTEN = /^(MOVED|ASK|CLUSTERDOWN|TRYAGAIN|LOADING|READONLY|MASTERDOWN) /;

function isReplyError(err: Error): boolean {
  return err.name === 'ReplyError';
}

/** The fault proves the call did not run (a redirect, a node not serving, not connected). */
function surelyNotWritten(err: Error): boolean {
  if (isReplyError(err)) return NOT_WRITTEN.test(err.message);
  return /ECONNREFUSED|Stream isn't writeable|enableOfflineQueue/.test(err.message);
}

/** A fault a resend may cure (redirects, failovers, broken connections). */
function isTransient(err: Error): boolean {
  if (isReplyError(err)) return NOT_WRITTEN.test(err.message);
  return /ECONN|ETIMEDOUT|EPIPE|EHOSTUNREACH|closed|Connection|timeout|MaxRetriesPerRequest|offline|writeable/i.test(err.message);
}

function commandOf(call: Call<unknown>): [string, (string | number)[]] {
  if (call.kind === 'fcall') {
    const verb = FUNCTIONS[call.function]?.readOnly ? 'FCALL_RO' : 'FCALL';
    return [verb, [functionName(call.function), call.keys.length, ...call.keys, ...call.argv]];
  }
  return [call.command[0], call.command.slice(1)];
}

function parsed<T>(call: Call<T>, reply: unknown): T | Error {
  if (reply instanceof Error) return reply;
  try {
    return call.parse(reply);
  } catch (exc) {
    return exc instanceof Error ? exc : new Error(String(exc));
  }
}

export class Transport implements Runner {
  readonly retryTimeoutMs: number;
  private onSend?: (call: SentCall) => void;

  constructor(
    readonly client: Redis | Cluster,
    opts: TransportOptions = {},
  ) {
    this.retryTimeoutMs = opts.retryTimeoutMs ?? PRODUCER_SETTINGS.retryTimeoutMs.default;
    this.onSend = opts.onSend;
  }

  get cluster(): boolean {
    return this.client instanceof Cluster;
  }

  /** The plain client of the primary serving `key` (the client itself when standalone). */
  nodeOf(key: string): Redis {
    if (!(this.client instanceof Cluster)) return this.client;
    const slot = slotOf(key);
    const owner = this.client.slots[slot]?.[0];
    const nodes = this.client.nodes('master');
    const node = owner === undefined ? undefined : nodes.find((n) => `${n.options.host}:${n.options.port}` === owner);
    if (node === undefined) {
      const err = new Error(`CLUSTERDOWN no known primary serves slot ${slot}`);
      err.name = 'ReplyError';
      throw err;
    }
    return node;
  }

  private nodeName(node: Redis): string {
    return `${node.options.host}:${node.options.port}`;
  }

  async refresh(): Promise<void> {
    const c = this.client;
    if (!(c instanceof Cluster)) return;
    await new Promise<void>((resolve) => c.refreshSlotsCache(() => resolve()));
  }

  async loadLibrary(node: Redis): Promise<void> {
    try {
      await node.call('FUNCTION', ['LOAD', LIBRARY_CODE]);
    } catch (exc) {
      const err = exc as Error;
      if (err.message.includes('already exists')) return;
      if (/NOPERM/.test(err.message)) {
        throw new FunctionsNotLoadedError(
          `shardq's functions (${LIBRARY_NAME}) are not loaded on ${this.nodeName(node)} and this Redis user may not load them (${err.message}): run \`shardq functions load\` as an admin user (see docs/deploy.md, ACLs)`,
        );
      }
      throw err;
    }
  }

  private trace(call: Call<unknown>): void {
    if (this.onSend) this.onSend(sent(call));
  }

  /** Each node's calls in one pipeline (plus WAIT when asked); raw replies or errors in call
   *  order, and per call the replicas that acknowledged its node's batch. */
  private async sendAndRead(calls: Call<unknown>[], wait: [number, number] | null): Promise<[unknown[], (number | null)[]]> {
    const replies: unknown[] = calls.map(() => null);
    const acked: (number | null)[] = calls.map(() => null);
    const groups = new Map<Redis, number[]>();
    for (const call of calls) this.trace(call); // in call order; a resend after loading the library is not traced
    calls.forEach((call, i) => {
      let node: Redis;
      try {
        node = this.nodeOf(routeKey(call));
      } catch (exc) {
        replies[i] = exc;
        return;
      }
      let list = groups.get(node);
      if (list === undefined) groups.set(node, (list = []));
      list.push(i);
    });
    const runGroup = async (node: Redis, indexes: number[]): Promise<boolean> => {
      const pipeline = node.pipeline();
      for (const i of indexes) {
        const [verb, args] = commandOf(calls[i]);
        pipeline.call(verb, args);
      }
      if (wait !== null) pipeline.call('WAIT', [wait[0], wait[1]]);
      let results: [Error | null, unknown][] | null;
      try {
        results = await pipeline.exec();
      } catch (exc) {
        for (const i of indexes) replies[i] = exc;
        return false;
      }
      if (results === null) {
        for (const i of indexes) replies[i] = new Error('pipeline was not run: connection closed');
        return false;
      }
      indexes.forEach((i, n) => {
        const [err, value] = results![n];
        replies[i] = err ?? value;
      });
      if (wait !== null) {
        const [err, value] = results[indexes.length];
        if (err === null) for (const i of indexes) if (!(replies[i] instanceof Error)) acked[i] = Number(value);
      }
      return indexes.some((i) => isCodeMissing(replies[i]));
    };
    const missing: [Redis, number[]][] = [];
    await Promise.all(
      [...groups.entries()].map(async ([node, indexes]) => {
        if (await runGroup(node, indexes)) missing.push([node, indexes]);
      }),
    );
    // A node that lacked the library: load it and send its batch again (with the WAIT after it;
    // a resent enqueue is recognised).
    await Promise.all(
      missing.map(async ([node, indexes]) => {
        try {
          await this.loadLibrary(node);
        } catch (exc) {
          for (const i of indexes) replies[i] = exc;
          return;
        }
        const again = wait !== null ? indexes : indexes.filter((i) => isCodeMissing(replies[i]));
        await runGroup(node, again);
      }),
    );
    return [replies, acked];
  }

  private pending(calls: Call<unknown>[], replies: unknown[]): number[] {
    const out: number[] = [];
    replies.forEach((r, i) => {
      if (r instanceof Error && !(r.name in SHARDQ_NAMES) && isTransient(r) && (calls[i].safeToRepeat || surelyNotWritten(r))) out.push(i);
    });
    return out;
  }

  private translated(replies: unknown[]): unknown[] {
    return replies.map((r) => {
      if (r instanceof Error && !isReplyError(r) && !(r.name in SHARDQ_NAMES) && isTransient(r)) {
        return new RedisUnavailableError(`Redis did not answer: ${r.message}`, surelyNotWritten(r) ? false : null);
      }
      return r;
    });
  }

  private async withRetries(calls: Call<unknown>[], wait: [number, number] | null): Promise<[unknown[], (number | null)[]]> {
    const deadline = performance.now() + this.retryTimeoutMs;
    const [replies, acked] = await this.sendAndRead(calls, wait);
    let attempt = 0;
    for (;;) {
      const again = this.pending(calls, replies);
      if (again.length === 0 || performance.now() >= deadline) break;
      attempt += 1;
      if (again.some((i) => REDIRECT.test((replies[i] as Error).message)) || attempt > 1 || this.cluster) await this.refresh();
      await this.sleep(Math.min(25 * 2 ** attempt, 1000, Math.max(0, deadline - performance.now())));
      const [r2, a2] = await this.sendAndRead(again.map((i) => calls[i]), wait);
      again.forEach((i, n) => {
        replies[i] = r2[n];
        acked[i] = a2[n];
      });
    }
    return [this.translated(replies), acked];
  }

  async run<T>(call: Call<T>): Promise<T> {
    const [[reply]] = await this.withRetries([call as Call<unknown>], null);
    const result = parsed(call, reply);
    if (result instanceof Error) throw result;
    return result;
  }

  async runMany<T>(calls: Call<T>[]): Promise<(T | Error)[]> {
    if (calls.length === 0) return [];
    const [replies] = await this.withRetries(calls as Call<unknown>[], null);
    return replies.map((r, i) => parsed(calls[i], r));
  }

  async runWaiting<T>(calls: Call<T>[], replicas: number, timeoutMs: number): Promise<[(T | Error)[], (number | null)[]]> {
    if (calls.length === 0) return [[], []];
    const [replies, acked] = await this.withRetries(calls as Call<unknown>[], [replicas, timeoutMs]);
    return [replies.map((r, i) => parsed(calls[i], r)), acked];
  }

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }
}

// Errors shardq itself raised (parsers): never resent.
const SHARDQ_NAMES: Record<string, true> = Object.fromEntries(
  [
    'ShardqError', 'InvalidJobError', 'InvalidScheduleError', 'PayloadTooLargeError', 'PayloadNotSerializableError',
    'DuplicateJobError', 'JobNotFoundError', 'JobRunningError', 'JobNotScheduledError', 'QueueConfigConflictError',
    'UnknownQueueError', 'LanesOffError', 'LayoutMovedError', 'JobMovingError', 'CorruptKeyError', 'ScriptArgumentError',
    'NotPermittedError', 'MalformedRecordError', 'BadNumber', 'ScriptError', 'FencedError', 'FunctionsNotLoadedError',
  ].map((n) => [n, true]),
);
