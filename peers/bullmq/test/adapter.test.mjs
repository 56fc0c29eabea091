// The BullMQ adapter driven through the protocol (docs/ADAPTERS.md) on a real Redis, each probe's
// script once, asserting what BullMQ 6.7.6 does exactly. LEASEHOLD_REDIS_URL names the server
// (default redis://127.0.0.1:6379); the keys of a test all start with its own namespace and are
// deleted after it. Without a server the tests skip loudly, and under CI=true they fail.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { skipUnless } from '../../common/driver.mjs';
import * as t from '../../common/transcripts.mjs';

const script = fileURLToPath(new URL('../adapter.mjs', import.meta.url));
const url = process.env.LEASEHOLD_REDIS_URL || 'redis://127.0.0.1:6379';

function client() {
  const u = new URL(url);
  return new Redis({ host: u.hostname, port: Number(u.port || 6379), lazyConnect: true, connectTimeout: 3000, maxRetriesPerRequest: 1, retryStrategy: () => null });
}

async function reachable() {
  const r = client();
  r.on('error', () => {});
  try {
    await r.connect();
    await r.ping();
    return true;
  } catch {
    return false;
  } finally {
    r.disconnect();
  }
}
const skip = skipUnless(await reachable(), `Redis at ${url}`);

// probe runs fn on a fresh namespace and deletes its keys afterwards (never FLUSHALL: the server
// is shared).
async function probe(fn) {
  const run = new t.Run(script, { redis: url }, 'bmq');
  try {
    return await fn(run);
  } finally {
    await run.close();
    const r = client();
    await r.connect();
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${run.namespace}:*`, 'COUNT', 1000);
      if (keys.length) await r.del(...keys);
      cursor = next;
    } while (cursor !== '0');
    r.disconnect();
  }
}

test('hello declares every feature and cites a doc for each', { skip }, async () => {
  await probe(async run => {
    await run.open('C', true);
    const h = run.hello;
    assert.equal(h.system, 'bullmq');
    assert.equal(h.version, '6.7.6');
    for (const f of ['key', 'max_attempts', 'cancel', 'tx_enqueue', 'tx_complete', 'heartbeat']) {
      assert.equal(typeof h.features[f].supported, 'boolean', f);
      assert.ok(h.features[f].doc, `${f} cites a doc`);
    }
    assert.deepEqual(h.server_args, ['--appendonly', 'yes', '--appendfsync', 'everysec', '--maxmemory-policy', 'noeviction']);
  });
});

test('a job runs to completion', { skip }, async () => {
  const r = await probe(t.completes);
  assert.equal(r.started.attempt, 1);
  assert.deepEqual(r.started.payload, { n: 1 });
  assert.equal(r.final.state, 'completed');
  assert.equal(r.final.attempt, 1);
  assert.equal(r.rows.length, 1);
  assert.deepEqual(r.rows[0].in, { completed: true });
  assert.equal(r.rows[0].lock, null);
});

test('a stale completion after the lock ran out and another worker took the job is refused (the lock token)', { skip }, async () => {
  const r = await probe(t.staleCompletion);
  assert.equal(r.s1.attempt, 1);
  assert.equal(r.s2.attempt, 2);
  assert.deepEqual(r.heartbeat, { accepted: false });
  assert.equal(r.afterStale.state, 'running');
  assert.equal(r.afterStale.attempt, 2);
  assert.equal(r.final.state, 'completed');
});

test('a killed worker\'s job is moved back to wait by the stalled-job check and runs again', { skip }, async () => {
  const r = await probe(t.killWorker);
  assert.equal(r.s2.attempt, 2);
  assert.equal(r.final.state, 'completed');
});

test('the retry budget is exact: 3 starts, then failed', { skip }, async () => {
  const r = await probe(run => t.retryBudget(run, 3));
  assert.deepEqual(r.starts, [1, 2, 3]);
  assert.equal(r.extra, 0);
  assert.equal(r.final.state, 'failed');
  assert.equal(r.final.raw_state, 'failed');
  assert.equal(r.final.attempt, 3);
});

test('a key admitted twice gives one job; another payload under it is silently dropped', { skip }, async () => {
  const r = await probe(t.keyDedupe);
  assert.equal(r.first.job, 'key_k1');
  assert.equal(r.second.job, 'key_k1');
  assert.equal(r.other.result.job, 'key_k1');
  assert.equal(r.jobs.length, 1);
  assert.deepEqual(r.jobs[0].payload, { v: 'P' });
});

test('cancel, tx enqueue and complete_in_tx answer unsupported', { skip }, async () => {
  await probe(async run => {
    const c = await run.open('C', true);
    const { job } = await c.ok('enqueue', { payload: { n: 1 } });
    assert.equal((await c.call('cancel', { job })).error.code, 'unsupported');
    assert.equal((await c.call('enqueue', { payload: { n: 2 }, tx: 'rollback' })).error.code, 'unsupported');
    assert.equal((await c.call('complete_in_tx', { handle: 'h1', commit: false })).error.code, 'unsupported');
  });
});
