// The producer client: enqueue, get, cancel, reschedule, create queues (shardq.Client's
// producer side), over ioredis (standalone or Redis Cluster).
import Redis, { Cluster, RedisOptions } from 'ioredis';
import { Backoff, JobRequest } from './body';
import { ConfigError, InvalidJobError } from './errors';
import { QueueCache, QueueMeta } from './meta';
import { Priority } from './constants.generated';
import * as plans from './plans';
import { CreateQueueOptions, EnqueueResult, JobInfo, REDIS_CLOCK, RedisClock } from './producer';
import { ProducerSettings, producerSettings } from './settings';
import { Transport, TransportOptions } from './transport';
import { hasQuerySecret, redactUrl, splitCredentials, unquote } from './url';

export interface ClientOptions extends TransportOptions {
  /** Producer limits (defaults: shardq.config.ProducerSettings'). */
  settings?: Partial<ProducerSettings>;
  /** Force cluster (true) or standalone (false) mode; default: asked with INFO cluster (or
   *  the URL's ?cluster=true/false). */
  cluster?: boolean;
  /** Passed to every ioredis connection. */
  redisOptions?: RedisOptions;
}

export interface EnqueueOptions {
  jobId?: string;
  idempotencyKey?: string;
  delayMs?: number;
  runAt?: Date | number;
  maxAttempts?: number;
  backoff?: Backoff;
  headers?: Record<string, string>;
  priority?: Priority;
  tenant?: string;
  limitKey?: string;
  keepResultMs?: number;
  timeoutMs?: number;
  /** An absolute time (Date or epoch ms) after which the job is dead-lettered, not started. */
  deadline?: Date | number;
  /** How late after its due time the job may still start (ms). */
  startWithinMs?: number;
  uniqueUntil?: 'done';
  debounceMs?: number;
  durable?: boolean;
}

export interface RescheduleOptions {
  runAt?: Date | number;
  delayMs?: number;
  priority?: Priority;
}

interface ParsedUrl {
  options: RedisOptions;
  cluster: boolean | undefined;
}

function parseUrl(url: string): ParsedUrl {
  if (typeof url !== 'string') throw new ConfigError(`Redis URL must be a string, got ${typeof url}`);
  // Every message shows the URL redacted; the credentials are cut out before anything parses
  // the rest (src/url.ts), so nothing said about the rest can hold them.
  const shown = JSON.stringify(redactUrl(url));
  const [head, userinfo, rest] = splitCredentials(url);
  const scheme = head.slice(0, -3).toLowerCase();
  if (scheme !== 'redis' && scheme !== 'rediss') throw new ConfigError(`Redis URL must start with redis:// or rediss://, got ${shown}`);
  let u: URL;
  try {
    u = new URL(`${scheme}://${rest}`);
  } catch {
    throw new ConfigError(`Redis URL ${shown} cannot be parsed: write redis://host:port, an IPv6 host in brackets (redis://[::1]:6379)`);
  }
  if (!u.hostname) throw new ConfigError(`Redis URL ${shown} has no host: use redis://host:port`);
  if (hasQuerySecret(url)) {
    throw new ConfigError(`Redis URL ${shown} has a password as a query argument, which shardq does not read: write redis://user:password@host:port`);
  }
  const options: RedisOptions = { host: u.hostname, port: u.port ? Number(u.port) : 6379 };
  if (userinfo !== null) {
    const colon = userinfo.indexOf(':');
    const user = unquote(colon >= 0 ? userinfo.slice(0, colon) : userinfo);
    const secret = colon >= 0 ? userinfo.slice(colon + 1) : '';
    if (user) options.username = user;
    if (secret) options.password = unquote(secret);
  }
  if (scheme === 'rediss') options.tls = {};
  const db = u.pathname.replace(/^\//, '');
  if (db) options.db = Number(db);
  const flag = u.searchParams.get('cluster');
  let cluster: boolean | undefined;
  if (flag !== null) {
    if (!['true', 'false', '1', '0', 'yes', 'no'].includes(flag.toLowerCase())) throw new ConfigError(`?cluster= must be true or false, got ${flag}`);
    cluster = ['true', '1', 'yes'].includes(flag.toLowerCase());
  }
  return { options, cluster };
}

function toRequest(type: string, payload: unknown, opts: EnqueueOptions): JobRequest {
  if (opts.deadline !== undefined && opts.startWithinMs !== undefined) {
    throw new InvalidJobError('pass deadline (a time) or startWithinMs (a window after the due time), not both');
  }
  const { durable: _durable, ...rest } = opts;
  return { type, payload, ...rest };
}

export class Client {
  readonly settings: ProducerSettings;
  readonly transport: Transport;
  readonly cache = new QueueCache();
  readonly clock: RedisClock;
  private ctx: plans.Context;

  constructor(
    readonly redis: Redis | Cluster,
    opts: ClientOptions = {},
  ) {
    this.settings = producerSettings(opts.settings);
    this.transport = new Transport(redis, opts);
    this.clock = REDIS_CLOCK;
    this.ctx = { runner: this.transport, cache: this.cache, settings: this.settings, clock: this.clock };
  }

  /** A client for redis://host:port (rediss:// for TLS; ?cluster=true/false to skip the probe). */
  static async fromUrl(url: string, opts: ClientOptions = {}): Promise<Client> {
    const parsed = parseUrl(url);
    // No CLIENT SETINFO on connect (as shardq.connection): servers since Redis 7.2 and Valkey
    // have it, and the shipped ACL roles cannot grant it while Redis 7.0 refuses a rule naming
    // it, so each connection's refusal would fill the server's ACL log.
    const base: RedisOptions = { disableClientInfo: true, ...opts.redisOptions, ...parsed.options };
    let cluster = opts.cluster ?? parsed.cluster;
    let probe: Redis | null = null;
    if (cluster === undefined) {
      probe = new Redis({ ...base, lazyConnect: true, maxRetriesPerRequest: 1 });
      try {
        await probe.connect();
        const info = String(await probe.call('INFO', ['cluster']));
        cluster = /cluster_enabled:1/.test(info);
      } catch (exc) {
        probe.disconnect();
        throw exc;
      }
    }
    if (!cluster) {
      const client = probe ?? new Redis(base);
      return new Client(client, opts);
    }
    probe?.disconnect();
    const { host, port, ...redisOptions } = base;
    // No ready check: ioredis asks CLUSTER INFO for it, which the producer's ACL user may not run
    // (shardq.admin.acl), and then reconnected forever; a slot map from CLUSTER SLOTS is enough.
    const c = new Cluster([{ host, port }], { redisOptions, enableReadyCheck: false });
    await new Promise<void>((resolve, reject) => {
      const fail = (err: Error) => {
        c.disconnect();
        reject(err);
      };
      c.once('ready', () => {
        c.off('error', fail);
        resolve();
      });
      c.once('error', fail);
    });
    return new Client(c, opts);
  }

  /** Create a queue (true when new); running it again finishes an interrupted creation.
   *  QueueConfigConflictError when it exists with another partition count. */
  createQueue(queue: string, opts: CreateQueueOptions): Promise<boolean> {
    return plans.createQueue(this.ctx, queue, opts);
  }

  /** Turn the queue's lanes (priorities and tenants) on or off; how many partitions changed. */
  setLanes(queue: string, on: boolean): Promise<number> {
    return plans.setLanes(this.ctx, queue, on);
  }

  /** The queue's meta (cached; read when not). */
  queueMeta(queue: string): Promise<QueueMeta> {
    return plans.meta(this.ctx, queue);
  }

  /** Enqueue one job to run now, at `runAt`, or after `delayMs`. */
  enqueue(queue: string, type: string, payload: unknown = null, opts: EnqueueOptions = {}): Promise<EnqueueResult> {
    return plans.enqueue(this.ctx, queue, toRequest(type, payload, opts), opts.durable ?? false);
  }

  /** Enqueue a job given as a request (what enqueueMany takes). */
  enqueueRequest(queue: string, request: JobRequest, opts: { durable?: boolean } = {}): Promise<EnqueueResult> {
    return plans.enqueue(this.ctx, queue, request, opts.durable ?? false);
  }

  /** Enqueue many jobs pipelined per node; results in request order.  Every job is checked
   *  before any is sent; BulkEnqueueError says which were stored when some were not. */
  enqueueMany(queue: string, jobs: Iterable<JobRequest>, opts: { durable?: boolean; chunk?: number } = {}): Promise<EnqueueResult[]> {
    const chunk = opts.chunk ?? 5000;
    if (!Number.isInteger(chunk) || chunk < 1) throw new InvalidJobError(`chunk must be a positive integer, got ${chunk}`);
    return plans.enqueueMany(this.ctx, queue, jobs, chunk, opts.durable ?? false);
  }

  /** A snapshot of one job, or null once it completed, was cancelled, or never existed. */
  get(queue: string, jobId: string): Promise<JobInfo | null> {
    return plans.get(this.ctx, queue, jobId);
  }

  /** Cancel a job that has not started (with running, one that runs too): true if cancelled,
   *  false if there is no such job.  JobRunningError when a worker holds it. */
  cancel(queue: string, jobId: string, opts: { running?: boolean } = {}): Promise<boolean> {
    return plans.cancel(this.ctx, queue, jobId, opts.running ?? false);
  }

  /** Move a waiting job to a new due time (or give it a new priority); its due ms. */
  reschedule(queue: string, jobId: string, opts: RescheduleOptions): Promise<number> {
    return plans.reschedule(this.ctx, queue, jobId, opts);
  }

  async close(): Promise<void> {
    try {
      await this.redis.quit();
    } catch {
      this.redis.disconnect();
    }
  }
}
