// What the stale-completion probe tells apart, shown on pg-boss's own API without the adapter:
// after an attempt expired and the job was fetched again, a complete() that carries the fetched
// job ({id, retryCount}, what work() passes) is refused, and one that carries the plain id (also
// documented: complete(name, id)) completes the newer attempt. The adapter's handlers settle the
// first way; this test keeps the README's claim about the second honest.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { PgBoss } from 'pg-boss';
import { skipUnless, uniqueNamespace } from '../../common/driver.mjs';

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

test('complete() is fenced with the fetched job and not with a plain id', { skip }, async () => {
  const schema = uniqueNamespace('pgbfence');
  const boss = new PgBoss({ connectionString: dsn, schema, supervise: false, schedule: false });
  boss.on('error', () => {});
  const sql = new pg.Client({ connectionString: dsn });
  await sql.connect();
  try {
    await boss.start();
    await boss.createQueue('q');
    const id = await boss.send('q', { n: 1 });
    const [first] = await boss.fetch('q');
    assert.equal(first.retryCount, 0);
    // The first attempt's lease runs out (the adapter's expire) and the supervisor, run here by
    // hand, puts the job back to retry; the next fetch is attempt 2.
    await sql.query(`UPDATE ${schema}.job SET started_on = started_on - (expire_seconds + 1) * interval '1 second' WHERE id = $1`, [id]);
    await boss.supervise('q');
    const [second] = await boss.fetch('q');
    assert.equal(second.id, id);
    assert.equal(second.retryCount, 1);

    const fenced = await boss.complete('q', { id, retryCount: first.retryCount });
    assert.equal(fenced.affected, 0);
    const { rows: [afterFenced] } = await sql.query(`SELECT state, retry_count FROM ${schema}.job WHERE id = $1`, [id]);
    assert.deepEqual(afterFenced, { state: 'active', retry_count: 1 });

    const plain = await boss.complete('q', id);
    assert.equal(plain.affected, 1); // the stale caller finished attempt 2
    const { rows: [afterPlain] } = await sql.query(`SELECT state FROM ${schema}.job WHERE id = $1`, [id]);
    assert.equal(afterPlain.state, 'completed');
  } finally {
    await boss.stop({ graceful: false }).catch(() => {});
    await sql.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await sql.end();
  }
});
