'use strict';
// Shared by producer.js and consumer.js: argv parsing and the Redis connection BullMQ gets.

const { Redis, Cluster } = require('ioredis');

function parseArgs(argv, defaults) {
  const out = { ...defaults };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) throw new Error(`unexpected argument ${a}`);
    const name = a.slice(2).replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (!(name in defaults)) throw new Error(`unknown option ${a}`);
    if (typeof defaults[name] === 'boolean') {
      out[name] = true;
    } else {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      out[name] = typeof defaults[name] === 'number' ? Number(v) : v;
    }
  }
  return out;
}

// BullMQ's workers need maxRetriesPerRequest: null (blocking commands must not be retried
// into an error).  A cluster URL gets an ioredis Cluster seeded with that one node; the
// queue's keys then all live in the slot of the {hash tag} prefix.
function connection(url, cluster) {
  const u = new URL(url);
  const opts = {
    host: u.hostname,
    port: Number(u.port || 6379),
    username: u.username ? decodeURIComponent(u.username) : undefined,
    password: u.password ? decodeURIComponent(u.password) : undefined,
    db: !cluster && u.pathname.length > 1 ? Number(u.pathname.slice(1)) : undefined,
    maxRetriesPerRequest: null,
  };
  if (!cluster) return new Redis(opts);
  const { host, port, db, ...redisOptions } = opts;
  return new Cluster([{ host, port }], { redisOptions, maxRetriesPerRequest: null });
}

module.exports = { parseArgs, connection };
