// The leasehold probe adapter for graphile-worker (docs/ADAPTERS.md): one process is one client
// of the queue (WorkerUtils) and at most one worker pool (run()), on the schema named by the
// run's namespace, speaking newline-delimited JSON on stdin and stdout.
//
// Handlers are graphile-worker tasks that announce themselves with a `started` event and are
// held until the runner's `finish`; graphile-worker then completes or fails the job itself. Time
// moves by rewinding a locked job's locked_at past graphile-worker's fixed 4-hour lock timeout;
// the pool's own periodic sweep (resetLockedAt) then unlocks it (README.md, "Time").

import { Logger, makeWorkerUtils, run, runMigrations } from 'graphile-worker';
import pg from 'pg';
import { AdapterError, emit, log, namespaceName, serve } from '../common/session.mjs';

const VERSION = '0.18.0';
const DOCS = 'https://worker.graphile.org/docs';
const TASK = 'leasehold_probe';

// graphile-worker logs through its Logger; the default writes to the console (stdout), which
// carries the protocol here, so every line goes to stderr instead.
const logger = new Logger(scope => (level, message) => log(`graphile-worker ${level}${scope?.workerId ? ` ${scope.workerId}` : ''}: ${message}`));

const s = {
  pool: null,
  utils: null,
  runner: null,
  schema: '',
  ident: '', // the schema, quoted for SQL
  process: '',
  held: new Map(), // handle -> { release }
  nextHandle: 1,
};

function hello() {
  return {
    protocol: 1,
    system: 'graphile-worker',
    version: VERSION,
    language: 'Node.js',
    needs: 'postgres',
    features: {
      key: { supported: true, doc: `${DOCS}/job-key`, note: "job_key with the default job_key_mode 'replace': a second add_job under the key overwrites the unlocked job's payload; a locked job loses its key and a new job is created" },
      max_attempts: { supported: true, doc: `${DOCS}/library/add-job`, note: 'maxAttempts, default 25' },
      cancel: {
        supported: false,
        doc: `${DOCS}/admin-functions`,
        note: 'no cancellation and no cancelled state: the administrative functions are completeJobs, permanentlyFailJobs and rescheduleJobs (by id, skipping locked jobs) and removeJob (by job_key)',
      },
      tx_enqueue: { supported: true, doc: `${DOCS}/sql-add-job`, note: "graphile_worker.add_job() is a SQL function: it runs in the caller's transaction" },
      tx_complete: {
        supported: false,
        doc: `${DOCS}/admin-functions`,
        note: "a job is completed by the worker after its task function returns (it deletes the row); complete_jobs() 'ignore[s] locked jobs (which includes all currently running jobs)' and is 'not meant to be called on the currently running job from inside the job itself'",
      },
      heartbeat: {
        supported: false,
        doc: `${DOCS}/error-handling`,
        note: 'no lock renewal: a job stays locked until its worker settles it, or for at least 4 hours after a crash, when a sweep unlocks it',
      },
    },
    delivery: {
      semantics: 'at-least-once',
      doc: `${DOCS}/`,
      quote: 'Graphile Worker ensures that your jobs will not get lost ... and that each job will execute at least once. Most jobs will execute exactly once',
    },
    exhausted: { raw_state: 'permanently_failed', doc: `${DOCS}/admin-functions` },
    deletes_completed: true,
    recovery_ms: 5000,
    config: [
      { name: 'concurrentJobs', value: 'start.concurrency', doc: `${DOCS}/config` },
      { name: 'pollInterval', value: '2000 ms (default)', doc: `${DOCS}/config`, why: 'new jobs arrive by LISTEN/NOTIFY; a job unlocked by the sweep is found by the next poll' },
      { name: 'minResetLockedInterval / maxResetLockedInterval', value: '1000 / 2000 ms (defaults 8 / 10 min)', doc: `${DOCS}/config`, why: "how often each pool sweeps for jobs locked longer than 4 hours; the 4-hour lock timeout itself is fixed (src/sql/resetLockedAt.ts) and untouched: expire rewinds locked_at past it" },
      { name: 'completeJobBatchDelay / failJobBatchDelay', value: '-1 (defaults: no batching)', doc: `${DOCS}/config` },
      { name: 'useNodeTime', value: 'false (default: the database clock)', doc: `${DOCS}/config` },
      { name: 'job_key_mode', value: 'replace (default)', doc: `${DOCS}/job-key` },
      { name: 'maxAttempts', value: 'max_attempts per job, else 25 (default)', doc: `${DOCS}/library/add-job` },
      { name: 'workerId', value: 'leasehold_<process>_<pid>', doc: `${DOCS}/config` },
      { name: 'logger', value: 'every line to stderr', doc: `${DOCS}/library/logger`, why: 'stdout carries the protocol' },
    ],
    // No reference for stale-completion: completeJobs deletes the row by its id alone
    // (dist/sql/completeJobs.js, README.md), and no issue or page of graphile-worker's says so, so
    // a violation there is reported as a new finding.
    references: [
      {
        probe: 'double-start',
        url: 'https://github.com/graphile/worker/issues/169',
        title: 'Add configuration setting for retry window (a job running past 4 hours is started again)',
        says: "After a job has been running for 4 hours, graphile is assuming that the job got stuck and kicks off another worker",
      },
      {
        probe: 'kill-worker',
        url: 'https://github.com/graphile/worker/issues/222',
        title: 'Proposal: crashed worker recovery improvements',
        says: 'we expire locks after 4 hours. It is assumed that all jobs should complete in well under 4 hours',
      },
    ],
  };
}

async function open(p) {
  s.schema = namespaceName(p.namespace);
  s.ident = `"${s.schema}"`;
  s.process = p.process || 'adapter';
  const dsn = p.postgres || process.env.LEASEHOLD_PG_DSN;
  if (!dsn) throw new AdapterError('bad_request', 'open needs postgres (a DSN) or LEASEHOLD_PG_DSN');
  s.pool = new pg.Pool({ connectionString: dsn, max: 8 });
  s.pool.on('error', err => log('pool error:', err.message));
  if (p.create) await runMigrations({ pgPool: s.pool, schema: s.schema, logger });
  s.utils = await makeWorkerUtils({ pgPool: s.pool, schema: s.schema, logger });
  return {};
}

const JOB_COLUMNS = 'id, key, locked_at, attempts, max_attempts, run_at, payload, last_error, run_at <= now() AS due';

function jobInfo(id, row) {
  if (!row) return { job: String(id), state: 'missing', attempt: 0 };
  let state, raw;
  if (row.locked_at) [state, raw] = ['running', 'locked'];
  else if (row.attempts >= row.max_attempts) [state, raw] = ['failed', 'permanently_failed'];
  else if (row.due) [state, raw] = ['waiting', row.attempts > 0 ? 'retry_due' : 'ready'];
  else [state, raw] = ['waiting', row.attempts > 0 ? 'retry_scheduled' : 'scheduled'];
  return {
    job: String(row.id),
    key: row.key ?? undefined,
    state,
    raw_state: raw,
    attempt: row.attempts,
    max_attempts: row.max_attempts,
    payload: row.payload,
  };
}

async function readJob(id, q = s.pool) {
  const { rows } = await q.query(`SELECT ${JOB_COLUMNS} FROM ${s.ident}._private_jobs WHERE id = $1`, [id]);
  return rows[0];
}

// enqueue calls graphile_worker.add_job, through WorkerUtils or, with tx, as SQL inside the
// adapter's own transaction (docs: sql-add-job). add_job returns the job it created or
// replaced and does not say which, so duplicate is left out.
async function enqueue(p) {
  const payload = p.payload ?? {};
  if (!p.tx) {
    const job = await s.utils.addJob(TASK, payload, { jobKey: p.key || undefined, maxAttempts: p.max_attempts || undefined });
    return { job: String(job.id) };
  }
  if (p.tx !== 'commit' && p.tx !== 'rollback') throw new AdapterError('bad_request', `tx must be commit or rollback, not ${p.tx}`);
  const client = await s.pool.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query(
      `SELECT id FROM ${s.ident}.add_job($1, $2::json, job_key => $3, max_attempts => $4)`,
      [TASK, JSON.stringify(payload), p.key || null, p.max_attempts || null],
    );
    const id = rows[0].id;
    const seen = !!(await readJob(id, client));
    await client.query(p.tx === 'commit' ? 'COMMIT' : 'ROLLBACK');
    return { job: String(id), seen_in_tx: seen };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

async function state(p) {
  if (!p.job) throw new AdapterError('bad_request', 'state needs a job');
  return jobInfo(p.job, await readJob(p.job));
}

async function jobs() {
  const { rows } = await s.pool.query(`SELECT ${JOB_COLUMNS} FROM ${s.ident}._private_jobs ORDER BY id`);
  return { jobs: rows.map(r => jobInfo(r.id, r)) };
}

async function rows(p) {
  const { rows } = await s.pool.query(`SELECT row_to_json(j) AS row FROM ${s.ident}._private_jobs j WHERE id = $1`, [p.job]);
  return { rows: rows.map(r => r.row) };
}

async function cancel() {
  throw new AdapterError('unsupported', 'graphile-worker has no cancellation (hello.features.cancel)');
}

// expire moves locked_at back past the 4-hour lock timeout and changes nothing else; a pool's
// resetLockedAt sweep (where locked_at < now() - interval '4 hours') then unlocks the job.
async function expire(p) {
  await s.pool.query(
    `UPDATE ${s.ident}._private_jobs SET locked_at = locked_at - interval '4 hours 1 minute'
      WHERE id = $1 AND locked_at IS NOT NULL`,
    [p.job],
  );
  return {};
}

// make_due brings an unlocked job's run_at (its retry backoff) to now.
async function makeDue(p) {
  await s.pool.query(`UPDATE ${s.ident}._private_jobs SET run_at = now() WHERE id = $1 AND locked_at IS NULL`, [p.job]);
  return {};
}

async function task(payload, helpers) {
  const handle = `h${s.nextHandle++}`;
  let release;
  const decision = new Promise(r => { release = r; });
  s.held.set(handle, { release });
  emit('started', { handle, job: String(helpers.job.id), attempt: helpers.job.attempts, payload });
  const d = await decision;
  if (d === 'retry') throw new Error('leasehold probe: retry');
}

async function start(p) {
  if (s.runner) throw new AdapterError('bad_request', 'a worker already runs in this process');
  s.runner = await run({
    pgPool: s.pool,
    schema: s.schema,
    concurrency: p.concurrency || 1,
    taskList: { [TASK]: task },
    minResetLockedInterval: 1000,
    maxResetLockedInterval: 2000,
    workerId: `leasehold_${s.process}_${process.pid}`,
    logger,
  });
  return {};
}

// stop is graphile-worker's graceful runner.stop(): no new jobs, running ones finish, their
// completions and failures written.
async function stop() {
  if (s.runner) await s.runner.stop();
  s.runner = null;
  return {};
}

async function finish(p) {
  const h = s.held.get(p.handle);
  if (!h) throw new AdapterError('bad_request', `no held handler ${p.handle}`);
  if (p.do !== 'complete' && p.do !== 'retry') throw new AdapterError('bad_request', `do must be complete or retry, not ${p.do}`);
  s.held.delete(p.handle);
  h.release(p.do);
  return {};
}

async function heartbeat() {
  throw new AdapterError('unsupported', 'graphile-worker has no lock renewal (hello.features.heartbeat)');
}

async function completeInTx() {
  throw new AdapterError('unsupported', 'graphile-worker completes a job only after its task returns (hello.features.tx_complete)');
}

// close abandons held handlers (their jobs stay locked, as a crashed worker leaves them) and
// exits, which closes the connections.
async function close() {}

serve({
  hello, open, enqueue, state, jobs, rows, cancel, expire, make_due: makeDue,
  start, stop, finish, heartbeat, complete_in_tx: completeInTx,
}, { close });
