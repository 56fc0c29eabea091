// The leasehold probe adapter for pg-boss (docs/ADAPTERS.md): one process is one pg-boss
// instance on the run's schema, speaking newline-delimited JSON on stdin and stdout.
//
// Handlers run under pg-boss's own work() loop, as its documentation recommends; each one
// announces itself with a `started` event and is held until the runner's `finish`. What pg-boss
// then writes (its fenced complete or fail) is its own doing: the adapter only waits for that
// statement to return before it replies, so the runner's next read sees its effect. Time moves by
// rewinding a job's started_on in SQL past its expireInSeconds; pg-boss's own supervisor then
// expires the job (README.md, "Time").

import { PgBoss } from 'pg-boss';
import Manager from 'pg-boss/dist/manager.js';
import pg from 'pg';
import { AdapterError, emit, log, namespaceName, serve } from '../common/session.mjs';

const VERSION = '12.38.1';
const DOCS = 'https://github.com/timgit/pg-boss/blob/12.38.1';

// Settle observation. pg-boss settles a handler's jobs through its manager's public complete()
// and fail() (dist/manager.js, #processJobs); wrapping them here lets finish reply after the
// settle statement returned, with what it affected. The wrapper calls the original unchanged.
const settleWaiters = new WeakMap(); // job object -> resolve({ op, affected })
for (const op of ['complete', 'fail']) {
  const original = Manager.prototype[op];
  Manager.prototype[op] = async function (name, id, ...rest) {
    let outcome;
    try {
      const r = await original.call(this, name, id, ...rest);
      outcome = { op, affected: r?.affected ?? 0 };
      return r;
    } catch (err) {
      outcome = { op, error: err?.message ?? String(err) };
      throw err;
    } finally {
      for (const job of Array.isArray(id) ? id : [id]) {
        const resolve = job && typeof job === 'object' ? settleWaiters.get(job) : undefined;
        if (resolve) {
          settleWaiters.delete(job);
          resolve(outcome);
        }
      }
    }
  };
}

const STATES = {
  created: 'waiting',
  retry: 'waiting',
  active: 'running',
  completed: 'completed',
  cancelled: 'cancelled',
  failed: 'failed',
};

const s = {
  boss: null,
  pool: null, // the adapter's own connections: transactions, rewinds, reads
  schema: '',
  plain: '', // queue for jobs without a key (policy standard)
  keyed: '', // queue for jobs with a key (policy exclusive)
  workers: [],
  held: new Map(), // handle -> { job, queue, release, settled }
  nextHandle: 1,
};

function hello() {
  return {
    protocol: 1,
    system: 'pg-boss',
    version: VERSION,
    language: 'Node.js',
    needs: 'postgres',
    features: {
      key: {
        supported: true,
        doc: `${DOCS}/docs/api/queues.md#createqueuename-queue`,
        note: "singletonKey on a queue of policy 'exclusive': 'Only allows 1 job to be queued or active. Can be extended with singletonKey'; send() returns null for the duplicate",
      },
      max_attempts: { supported: true, doc: `${DOCS}/docs/api/queues.md`, note: 'retryLimit = max_attempts - 1 (retryLimit counts retries after the first attempt)' },
      cancel: { supported: true, doc: `${DOCS}/docs/api/jobs.md#cancelname-id-options` },
      tx_enqueue: { supported: true, doc: `${DOCS}/README.md`, note: "'Create jobs in an existing db transaction': send() with the db option (ConnectionOptions) runs in the caller's transaction" },
      tx_complete: { supported: true, doc: `${DOCS}/docs/api/jobs.md#completename-id-data-options`, note: "complete() with the db option (CompleteOptions extends ConnectionOptions) runs in the caller's transaction; the job passed as {id, retryCount} fences it to the fetched attempt" },
      heartbeat: { supported: true, doc: `${DOCS}/docs/api/jobs.md`, note: 'touch() refreshes heartbeat_on, fenced to the attempt; the expiry that ends a lease is expireInSeconds from started_on, which touch() does not move' },
    },
    // What 12.38.1 documents. Up to 12.33.7 the README promised "exactly-once delivery" (and
    // "Exactly-once job delivery" in its summary); 12.35.0 dropped both sentences in the release
    // that added the attempt fence (#925), whose comment says a worker whose claim lapsed "keeps
    // running its handler" while the job runs again. The queue options document the re-run.
    delivery: {
      semantics: 'at-least-once',
      doc: `${DOCS}/docs/api/queues.md`,
      quote: "expireInSeconds: How many seconds a job may be in active state before being retried or failed (the README's 'exactly-once delivery' of 12.33.7 and before is gone since 12.35.0)",
    },
    exhausted: { raw_state: 'failed', doc: `${DOCS}/docs/api/jobs.md` },
    deletes_completed: false,
    recovery_ms: 4000,
    config: [
      { name: 'queue policy', value: "standard (jobs without a key), exclusive (jobs with a key)", doc: `${DOCS}/docs/api/queues.md`, why: 'standard is the default; exclusive is the policy that keeps one live job per singletonKey' },
      { name: 'expireInSeconds', value: '900 (default)', doc: `${DOCS}/docs/api/queues.md`, why: 'the default lease; the adapter rewinds started_on past it rather than shortening it, so a held handler is never expired by wall time' },
      { name: 'retryLimit', value: 'max_attempts - 1 per job (default 2)', doc: `${DOCS}/docs/api/queues.md` },
      { name: 'retryDelay / retryBackoff', value: '0 / false (defaults)', doc: `${DOCS}/docs/api/queues.md` },
      { name: 'heartbeatSeconds', value: 'null (default: heartbeats off)', doc: `${DOCS}/docs/api/queues.md` },
      { name: 'deleteAfterSeconds', value: '604800 (default: completed jobs kept 7 days)', doc: `${DOCS}/docs/api/queues.md` },
      { name: 'supervise', value: 'true (default)', doc: `${DOCS}/docs/api/constructor.md`, why: "pg-boss's own supervisor expires and retries jobs; the adapter never calls it" },
      { name: 'superviseIntervalSeconds / monitorIntervalSeconds', value: '1 / 1 (defaults 60 / 60)', doc: `${DOCS}/docs/api/constructor.md`, why: 'the shortest allowed, so expiry acts within seconds of a rewind' },
      { name: 'work(): batchSize / localConcurrency / pollingIntervalSeconds', value: '1 / start.concurrency / 0.5', doc: `${DOCS}/docs/api/workers.md`, why: 'one job per handler; 0.5 s is the shortest polling interval allowed' },
      { name: 'settles', value: "pg-boss's own: the handler returns (complete) or throws (fail)", doc: `${DOCS}/docs/api/workers.md`, why: "work() settles fenced to the fetched attempt (src/plans.ts attemptFence, #925)" },
    ],
    references: [
      { probe: 'stale-completion', url: 'https://github.com/timgit/pg-boss/issues/925', title: 'pg-boss #925: settles fenced to the fetched attempt (retry_count)', says: "completeJobs ... AND state = 'active' AND (id || ':' || retry_count) = ANY($4) when called with jobs; unfenced when called with plain ids" },
      { probe: 'double-start', url: 'https://github.com/timgit/pg-boss/issues/555', title: 'pg-boss #555: an expired job keeps running while its retry starts' },
    ],
  };
}

async function open(p) {
  const ns = namespaceName(p.namespace);
  const dsn = p.postgres || process.env.LEASEHOLD_PG_DSN;
  if (!dsn) throw new AdapterError('bad_request', 'open needs postgres (a DSN) or LEASEHOLD_PG_DSN');
  s.schema = ns; // ADAPTERS.md: everything the queue creates lives in the schema named namespace
  s.plain = 'jobs';
  s.keyed = 'keyed';
  s.pool = new pg.Pool({ connectionString: dsn, max: 4 });
  s.pool.on('error', err => log('pool error:', err.message));
  s.boss = new PgBoss({
    connectionString: dsn,
    schema: s.schema,
    superviseIntervalSeconds: 1,
    monitorIntervalSeconds: 1,
    schedule: false,
    application_name: `leasehold-${p.process || 'pgboss'}`,
  });
  s.boss.on('error', err => log('pg-boss error:', err?.message ?? String(err)));
  await s.boss.start();
  if (p.create) {
    await s.boss.createQueue(s.plain, { policy: 'standard' });
    await s.boss.createQueue(s.keyed, { policy: 'exclusive' });
  }
  return {};
}

// withTx runs fn(db, client) inside a transaction on the adapter's own connection; db is the
// IDatabase pg-boss takes as its `db` option. It commits when commit() says so, else rolls back.
async function withTx(fn, commit) {
  const client = await s.pool.connect();
  try {
    await client.query('BEGIN');
    const db = { executeSql: (text, values) => client.query(text, values) };
    const out = await fn(db, client);
    await client.query(commit ? 'COMMIT' : 'ROLLBACK');
    return out;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

async function readJob(id, q = s.pool) {
  const { rows } = await q.query(
    `SELECT id, name, state, retry_count, retry_limit, started_on, singleton_key, data FROM ${s.schema}.job WHERE id = $1`,
    [id],
  );
  return rows[0];
}

function jobInfo(id, row) {
  if (!row) return { job: id, state: 'missing', attempt: 0 };
  return {
    job: row.id,
    key: row.singleton_key ?? undefined,
    state: STATES[row.state] ?? row.state,
    raw_state: row.state,
    // retry_count rises on every claim after the first (fetchNextJob), so a started job has run
    // retry_count + 1 times and a created one none.
    attempt: row.started_on ? row.retry_count + 1 : row.retry_count,
    max_attempts: row.retry_limit + 1,
    payload: row.data,
  };
}

async function enqueue(p) {
  const queue = p.key ? s.keyed : s.plain;
  const opts = {};
  if (p.key) opts.singletonKey = p.key;
  if (p.max_attempts) opts.retryLimit = p.max_attempts - 1;
  const data = p.payload ?? {};
  const send = async db => {
    const id = await s.boss.send(queue, data, db ? { ...opts, db } : opts);
    // A send the exclusive policy turned away answers null and stores nothing: pg-boss's way of
    // saying it deduplicated (docs/api/jobs.md, send: 'resolves ... null if ... blocked by policy').
    return id ? { job: id, duplicate: false } : { job: '', duplicate: true };
  };
  if (!p.tx) return send(null);
  if (p.tx !== 'commit' && p.tx !== 'rollback') throw new AdapterError('bad_request', `tx must be commit or rollback, not ${p.tx}`);
  return withTx(async (db, client) => {
    const r = await send(db);
    const row = r.job ? await readJob(r.job, client) : undefined;
    return { ...r, seen_in_tx: !!row };
  }, p.tx === 'commit');
}

async function state(p) {
  if (!p.job) throw new AdapterError('bad_request', 'state needs a job');
  return jobInfo(p.job, await readJob(p.job));
}

async function jobs() {
  const { rows } = await s.pool.query(
    `SELECT id, name, state, retry_count, retry_limit, started_on, singleton_key, data FROM ${s.schema}.job ORDER BY created_on, id`,
  );
  return { jobs: rows.map(r => jobInfo(r.id, r)) };
}

async function rows(p) {
  if (!p.job) throw new AdapterError('bad_request', 'rows needs a job');
  const { rows } = await s.pool.query(`SELECT * FROM ${s.schema}.job WHERE id = $1`, [p.job]);
  return { rows };
}

async function cancel(p) {
  const row = await readJob(p.job);
  if (!row) throw new AdapterError('bad_request', `no job ${p.job}`);
  const r = await s.boss.cancel(row.name, p.job);
  const after = await readJob(p.job);
  if (r.affected > 0) return { outcome: 'cancelled', raw_state: after?.state };
  return { outcome: 'refused', raw_state: after?.state };
}

// expire moves the job's lease past its end: started_on goes back by expire_seconds + 1, so
// pg-boss's supervisor (failJobsByTimeout: started_on + expire_seconds < now()) fails it on its
// next pass and, with attempts left, puts it back to retry.
async function expire(p) {
  const r = await s.pool.query(
    `UPDATE ${s.schema}.job SET started_on = started_on - (expire_seconds + 1) * interval '1 second'
      WHERE id = $1 AND state = 'active'`,
    [p.job],
  );
  return {}; // a no-op on a job that is not active (ADAPTERS.md)
}

// make_due moves a waiting job's start_after to now (a retry delay or a deferral skipped).
async function makeDue(p) {
  const r = await s.pool.query(
    `UPDATE ${s.schema}.job SET start_after = now() WHERE id = $1 AND state IN ('created', 'retry')`,
    [p.job],
  );
  return {}; // a no-op on a job that is not waiting
}

async function handler([job]) {
  const handle = `h${s.nextHandle++}`;
  let release;
  const decision = new Promise(r => { release = r; });
  let settledResolve;
  const settled = new Promise(r => { settledResolve = r; });
  settleWaiters.set(job, settledResolve);
  s.held.set(handle, { job, release, settled });
  emit('started', { handle, job: job.id, attempt: job.retryCount + 1, payload: job.data });
  const d = await decision;
  if (d === 'retry') throw new Error('leasehold probe: retry');
}

async function start(p) {
  const concurrency = p.concurrency || 1;
  for (const q of [s.plain, s.keyed]) {
    s.workers.push(await s.boss.work(q, { batchSize: 1, localConcurrency: concurrency, pollingIntervalSeconds: 0.5 }, handler));
  }
  return {};
}

// stop: offWork with wait resolves once the worker's handlers returned and pg-boss's settles of
// their jobs (inside #processJobs) are written.
async function stop() {
  for (const q of [s.plain, s.keyed]) await s.boss.offWork(q, { wait: true });
  s.workers = [];
  return {};
}

function heldOf(handle) {
  const h = s.held.get(handle);
  if (!h) throw new AdapterError('bad_request', `no held handler ${handle}`);
  return h;
}

async function finish(p) {
  const h = heldOf(p.handle);
  if (p.do !== 'complete' && p.do !== 'retry') throw new AdapterError('bad_request', `do must be complete or retry, not ${p.do}`);
  s.held.delete(p.handle);
  h.release(p.do);
  // The settle normally follows within milliseconds; the bound only keeps a settle pg-boss never
  // runs from silencing the adapter (the runner's stop is the barrier that must wait for it).
  let guard;
  const outcome = await Promise.race([h.settled, new Promise(r => { guard = setTimeout(() => r({ op: 'settle', error: 'not seen within 30 s' }), 30000); })]);
  clearTimeout(guard);
  if (outcome.error) log(`finish ${p.handle}: pg-boss's ${outcome.op}: ${outcome.error}`);
  return {};
}

async function heartbeat(p) {
  const h = heldOf(p.handle);
  const r = await s.boss.touch(h.job.name, { id: h.job.id, retryCount: h.job.retryCount });
  return { accepted: r.affected > 0 };
}

// complete_in_tx completes the held handler's job inside a transaction of the adapter's own,
// passed to pg-boss as the db option, reads it back inside, then commits or rolls back. The
// handler stays held; the runner finishes it after.
async function completeInTx(p) {
  const h = heldOf(p.handle);
  return withTx(async (db, client) => {
    await s.boss.complete(h.job.name, { id: h.job.id, retryCount: h.job.retryCount }, null, { db });
    const row = await readJob(h.job.id, client);
    return { seen_in_tx: row?.state === 'completed' };
  }, !!p.commit);
}

// close abandons held handlers: their jobs stay as they are, as a worker that went away leaves
// them (pg-boss's own stop() would fail them through failWip). The process then exits, which
// closes its connections.
async function close() {}

serve({
  hello, open, enqueue, state, jobs, rows, cancel, expire, make_due: makeDue,
  start, stop, finish, heartbeat, complete_in_tx: completeInTx,
}, { close });
