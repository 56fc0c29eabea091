// The pg-boss adapter driven through the protocol (docs/ADAPTERS.md) on a real PostgreSQL, each
// probe's script once, asserting what pg-boss 12.38.1 does exactly. LEASEHOLD_PG_DSN names the
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
  const run = new t.Run(script, { postgres: dsn }, 'pgb');
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
    assert.equal(h.protocol, 1);
    assert.equal(h.system, 'pg-boss');
    assert.equal(h.version, '12.38.1');
    for (const f of ['key', 'max_attempts', 'cancel', 'tx_enqueue', 'tx_complete', 'heartbeat']) {
      assert.equal(typeof h.features[f].supported, 'boolean', f);
      assert.ok(h.features[f].doc, `${f} cites a doc`);
    }
  });
});

test('a job runs to completion', { skip }, async () => {
  const r = await probe(t.completes);
  assert.equal(r.started.attempt, 1);
  assert.deepEqual(r.started.payload, { n: 1 });
  assert.equal(r.final.state, 'completed');
  assert.equal(r.final.attempt, 1);
  assert.equal(r.rows.length, 1);
  assert.equal(r.rows[0].state, 'completed');
});

test('stale completion after expire and re-claim is refused (the fence of #925)', { skip }, async () => {
  const r = await probe(t.staleCompletion);
  assert.equal(r.s1.attempt, 1);
  assert.equal(r.s2.attempt, 2);
  assert.deepEqual(r.heartbeat, { accepted: false });
  assert.equal(r.afterStale.state, 'running');
  assert.equal(r.afterStale.attempt, 2);
  assert.equal(r.final.state, 'completed');
});

test('a killed worker\'s job is expired by the supervisor and runs again', { skip }, async () => {
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

test('a key admitted twice gives one job; another payload under it is dropped (null from send)', { skip }, async () => {
  const r = await probe(t.keyDedupe);
  assert.equal(r.first.duplicate, false);
  assert.deepEqual(r.second, { job: '', duplicate: true });
  assert.deepEqual(r.other.result, { job: '', duplicate: true });
  assert.equal(r.jobs.length, 1);
  assert.deepEqual(r.jobs[0].payload, { v: 'P' });
});

test('an enqueue whose transaction rolls back leaves no job', { skip }, async () => {
  const r = await probe(t.txEnqueue);
  assert.equal(r.committed.seen_in_tx, true);
  assert.equal(r.rolledBack.seen_in_tx, true);
  assert.deepEqual(r.jobs.map(j => j.job), [r.committed.job]);
});

test('a completion whose transaction rolls back leaves the job running', { skip }, async () => {
  const r = await probe(t.txComplete);
  assert.deepEqual(r.tx, { seen_in_tx: true });
  assert.equal(r.afterRollback.state, 'running');
  assert.equal(r.final.state, 'completed');
});

test('cancel of a waiting job cancels it', { skip }, async () => {
  const r = await probe(t.cancelWaiting);
  assert.equal(r.cancel.outcome, 'cancelled');
  assert.equal(r.final.state, 'cancelled');
});

test('cancel of a running job wins over the completion that follows', { skip }, async () => {
  const r = await probe(t.cancelRunning);
  assert.equal(r.cancel.result.outcome, 'cancelled');
  assert.equal(r.final.state, 'cancelled');
});
