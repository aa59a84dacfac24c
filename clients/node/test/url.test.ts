// Redis URLs: no message shows a password.  Literals from the Python reference:
//   .venv/bin/python -c "from shardq.config import redact_url; print(redact_url(U))"
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, ConfigError, redactUrl } from '../src/index';

test('redactUrl hides the password as shardq.config.redact_url does', () => {
  const want: Record<string, string> = {
    'redis://user:s3cr%23t@host:6379': 'redis://user:***@host:6379',
    'redis://user:pa#ss/w?rd@host:6379': 'redis://user:***@host:6379',
    'redis://:p@ss:w0rd@[::1]:6379': 'redis://:***@[::1]:6379',
    'redis://onlypassword@host': 'redis://***@host',
    'redis://host:6379/0?cluster=true': 'redis://host:6379/0?cluster=true',
    'redis://host:6379/?password=hunter2&cluster=1': 'redis://host:6379/?password=***&cluster=1',
    'rediss://u:p[x@h:1': 'rediss://u:***@h:1',
    'user:p@ss@host:6379': 'user:***@host:6379',
    'redis://u:pw@host:notaport': 'redis://u:***@host:notaport',
    'http://u:pw@host': 'http://u:***@host',
  };
  for (const [url, shown] of Object.entries(want)) assert.equal(redactUrl(url), shown, url);
  assert.equal(redactUrl(7), '<not a string>');
});

test('a URL the client cannot use is refused without its password in the message', async () => {
  const secret = 'Xy9-s3cret';
  const bad = [
    `redis://user:${secret}@host:notaport`, // a bad port
    `redis://user:${secret}@host:99999`,
    `http://user:${secret}@host:6379`, // another scheme
    `user:${secret}@host:6379`, // no scheme
    `redis://user:${secret}@`, // no host
    `redis://user:${secret}#x@[::1:6379`, // an IPv6 host not closed
    `redis://host:6379/?password=${secret}`, // the password as a query argument
  ];
  for (const url of bad) {
    await assert.rejects(Client.fromUrl(url), (err: Error) => {
      assert.ok(err instanceof ConfigError, `${err.name}: ${err.message}`);
      assert.ok(!err.message.includes(secret), err.message);
      assert.ok(!(err.stack ?? '').includes(secret), err.stack);
      assert.match(err.message, /\*\*\*/);
      return true;
    });
  }
});
