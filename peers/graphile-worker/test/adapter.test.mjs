// The graphile-worker adapter driven through the protocol (docs/ADAPTERS.md) on a real PostgreSQL,
// each probe's script once, asserting what graphile-worker 0.18.0 does exactly. LEASEHOLD_PG_DSN names the
// server; without one the tests skip loudly, and under CI=true they fail.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { skipUnless } from '../../common/driver.mjs';
import * as t from '../../common/transcripts.mjs';

const script = fileURLToPath(new URL('../adapter.mjs', import.meta.url));
const dsn = process.env.LEASEHOLD_PG_DSN || 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable';

async function reachable() {
  const c = new pg.Client({ connectionString: dsn, connectionTimeoutMillis: 3000 });
  try {
    await c.connect();
    await c.end();
    return true;
  } catch {
    return false;
  }
}
const skip = skipUnless(await reachable(), `PostgreSQL at ${dsn}`);

// probe runs fn on a fresh namespace and drops its schema afterwards.
async function probe(fn) {
  const run = new t.Run(script, { postgres: dsn }, 'gw');
  try {
    return await fn(run);
  } finally {
    await run.close();
    const c = new pg.Client({ connectionString: dsn });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS ${run.namespace} CASCADE`);
    await c.end();
  }
}

test('hello declares every feature and cites a doc for each', { skip }, async () => {
  await probe(async run => {
    await run.open('C', true);
    const h = run.hello;
    assert.equal(h.system, 'graphile-worker');
    assert.equal(h.version, '0.18.0');
    for (const f of ['key', 'max_attempts', 'cancel', 'tx_enqueue', 'tx_complete', 'heartbeat']) {
      assert.equal(typeof h.features[f].supported, 'boolean', f);
      assert.ok(h.features[f].doc, `${f} cites a doc`);
    }
    assert.deepEqual(['cancel', 'tx_complete', 'heartbeat'].filter(f => !h.features[f].supported), ['cancel', 'tx_complete', 'heartbeat']);
  });
});

test('a job runs to completion, and completing deletes it', { skip }, async () => {
  const r = await probe(t.completes);
  assert.equal(r.started.attempt, 1);
  assert.deepEqual(r.started.payload, { n: 1 });
  assert.equal(r.final.state, 'missing');
  assert.deepEqual(r.rows, []);
});

test('a stale completion after expire and re-claim deletes the newer attempt\'s job (completeJobs matches the id alone)', { skip }, async () => {
  const r = await probe(t.staleCompletion);
  assert.equal(r.s1.attempt, 1);
  assert.equal(r.s2.attempt, 2);
  assert.equal(r.heartbeat, null); // no heartbeat to ask for
  assert.equal(r.afterStale.state, 'missing'); // W2 still runs attempt 2, but the job is gone
  assert.equal(r.final.state, 'missing');
});

test('after the stale completion, the newer attempt\'s failure finds no job: the retry it was owed is gone', { skip }, async () => {
  const r = await probe(run => t.staleCompletion(run, { w2Do: 'retry' }));
  assert.equal(r.s2.attempt, 2);
  assert.equal(r.afterStale.state, 'missing');
  assert.equal(r.final.state, 'missing'); // failJobs matches locked_by = W2's pool on a deleted row
});

test('a killed worker\'s job is unlocked by the sweep once locked_at is 4 hours old, and runs again', { skip }, async () => {
  const r = await probe(t.killWorker);
  assert.equal(r.s2.attempt, 2);
  assert.equal(r.final.state, 'missing');
});

test('the retry budget is exact: 3 starts, then permanently failed', { skip }, async () => {
  const r = await probe(run => t.retryBudget(run, 3));
  assert.deepEqual(r.starts, [1, 2, 3]);
  assert.equal(r.extra, 0);
  assert.equal(r.final.state, 'failed');
  assert.equal(r.final.raw_state, 'permanently_failed');
  assert.equal(r.final.attempt, 3);
});

test('a key admitted twice gives one job; another payload under it replaces the first', { skip }, async () => {
  const r = await probe(t.keyDedupe);
  assert.equal(r.second.job, r.first.job);
  assert.equal(r.other.result.job, r.first.job);
  assert.equal(r.jobs.length, 1);
  assert.deepEqual(r.jobs[0].payload, { v: 'Q' });
});

test('an enqueue whose transaction rolls back leaves no job', { skip }, async () => {
  const r = await probe(t.txEnqueue);
  assert.equal(r.committed.seen_in_tx, true);
  assert.equal(r.rolledBack.seen_in_tx, true);
  assert.deepEqual(r.jobs.map(j => j.job), [r.committed.job]);
});

test('cancel, heartbeat and complete_in_tx answer unsupported', { skip }, async () => {
  await probe(async run => {
    const c = await run.open('C', true);
    const { job } = await c.ok('enqueue', { payload: { n: 1 } });
    assert.equal((await c.call('cancel', { job })).error.code, 'unsupported');
    assert.equal((await c.call('heartbeat', { handle: 'h1' })).error.code, 'unsupported');
    assert.equal((await c.call('complete_in_tx', { handle: 'h1', commit: false })).error.code, 'unsupported');
  });
});
