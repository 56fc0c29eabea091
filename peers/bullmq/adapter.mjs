// The leasehold probe adapter for BullMQ on Redis (docs/ADAPTERS.md): one process is one Queue
// client and at most one Worker, on keys under the run's namespace (BullMQ's prefix), speaking
// newline-delimited JSON on stdin and stdout.
//
// Handlers are the Worker's processor: each announces itself with a `started` event and is held
// until the runner's `finish`; BullMQ then moves the job to completed or failed with the lock
// token it holds (moveToFinished checks it). Time moves by expiring the job's lock key, the TTL
// BullMQ's lock is; the workers' own stalled-job checker then moves the job back to wait
// (README.md, "Time").

import { Job, Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { AdapterError, emit, log, namespaceName, serve } from '../common/session.mjs';

const VERSION = '6.7.6';
const DOCS = 'https://docs.bullmq.io';
const QUEUE = 'jobs';
const NAME = 'leasehold_probe';

const s = {
  connection: null, // ioredis options
  redis: null, // the adapter's own client: reads and lock-key TTLs
  queue: null,
  worker: null,
  prefix: '',
  process: '',
  held: new Map(), // handle -> { job, token, release }
  nextHandle: 1,
};

const LOCK_DURATION = 30000; // BullMQ's default lockDuration

function hello() {
  return {
    protocol: 1,
    system: 'bullmq',
    version: VERSION,
    language: 'Node.js',
    needs: 'redis',
    features: {
      key: { supported: true, doc: `${DOCS}/guide/jobs/job-ids`, note: "a custom jobId: adding a job whose id exists adds nothing; the key k becomes jobId 'key_' + encodeURIComponent(k)" },
      max_attempts: { supported: true, doc: `${DOCS}/guide/retrying-failing-jobs`, note: 'the attempts job option: the total number of attempts, the first included' },
      cancel: {
        supported: false,
        doc: `${DOCS}/guide/workers/cancelling-jobs`,
        note: 'no cancelled state: worker.cancelJob(id) only aborts the AbortSignal of a processor running in that same worker process, which must throw to fail the job; for jobs that are not running it is a no-op. Job.remove() deletes a job that is not locked',
      },
      tx_enqueue: { supported: false, doc: `${DOCS}/what-is-bullmq`, note: 'Redis, no SQL transaction to enqueue in (BullMQ 6 also has a PostgreSQL backend, not probed here)' },
      tx_complete: { supported: false, doc: `${DOCS}/what-is-bullmq`, note: 'Redis, no SQL transaction to complete in' },
      heartbeat: { supported: true, doc: `${DOCS}/guide/workers/stalled-jobs`, note: 'Job.extendLock(token, duration) (the worker also renews every lockDuration / 2); extendLock.lua extends only when the lock key holds the token' },
    },
    delivery: {
      semantics: 'at-least-once',
      doc: `${DOCS}/bull/important-notes`,
      quote: 'The queue aims for an "at least once" working strategy. This means that in some situations, a job could be processed more than once.',
    },
    exhausted: { raw_state: 'failed', doc: `${DOCS}/guide/retrying-failing-jobs` },
    deletes_completed: false,
    server_args: ['--appendonly', 'yes', '--appendfsync', 'everysec', '--maxmemory-policy', 'noeviction'],
    recovery_ms: 4000,
    config: [
      { name: 'Redis server', value: 'appendonly yes, appendfsync everysec, maxmemory-policy noeviction (server_args)', doc: `${DOCS}/guide/going-to-production`, why: "'Persistence' and 'Max memory policy' of Going to production (the shared server is as it is; a private server gets these)" },
      { name: 'prefix', value: '<namespace>', doc: `${DOCS}/guide/queues`, why: 'every key of the run starts with the namespace' },
      { name: 'Worker connection maxRetriesPerRequest', value: 'null', doc: `${DOCS}/guide/going-to-production`, why: 'required for workers (blocking commands); BullMQ forces it' },
      { name: 'lockDuration', value: '30000 ms (default)', doc: `${DOCS}/guide/workers/stalled-jobs`, why: 'the lease; expire lets the lock key run out instead of shortening it' },
      { name: 'stalledInterval', value: '1000 ms (default 30000)', doc: `${DOCS}/guide/workers/stalled-jobs`, why: 'how often each worker checks for stalled jobs; shortened so recovery follows an expired lock within seconds' },
      { name: 'maxStalledCount', value: '1 (default)', doc: `${DOCS}/guide/jobs/stalled` },
      { name: 'concurrency', value: 'start.concurrency', doc: `${DOCS}/guide/workers/concurrency` },
      { name: 'attempts / backoff', value: 'max_attempts per job, else 1 (default) / none (default: a failed attempt is retried at once)', doc: `${DOCS}/guide/retrying-failing-jobs` },
      { name: 'removeOnComplete / removeOnFail', value: 'false (defaults: finished jobs kept)', doc: `${DOCS}/guide/queues/auto-removal-of-jobs` },
    ],
    references: [
      {
        probe: 'double-start',
        url: `${DOCS}/guide/jobs/stalled`,
        title: 'Stalled jobs: a job whose lock was not renewed is moved back to wait and processed again',
      },
    ],
  };
}

function redisOptions(url) {
  const u = new URL(url || process.env.LEASEHOLD_REDIS_URL || 'redis://127.0.0.1:6379');
  return { host: u.hostname, port: Number(u.port || 6379), db: u.pathname.length > 1 ? Number(u.pathname.slice(1)) : 0 };
}

async function open(p) {
  s.prefix = namespaceName(p.namespace);
  s.process = p.process || 'adapter';
  s.connection = redisOptions(p.redis);
  s.redis = new Redis({ ...s.connection, lazyConnect: true });
  s.redis.on('error', err => log('redis error:', err.message));
  await s.redis.connect();
  s.queue = new Queue(QUEUE, { connection: s.connection, prefix: s.prefix });
  s.queue.on('error', err => log('queue error:', err.message));
  await s.queue.waitUntilReady();
  return {};
}

const key = (...parts) => [s.prefix, QUEUE, ...parts].join(':');
// BullMQ job ids are strings without ':' (its key separator); the key is URI-encoded into one.
const jobIdOf = k => `key_${encodeURIComponent(k)}`;

const STATES = {
  waiting: 'waiting', delayed: 'waiting', prioritized: 'waiting', 'waiting-children': 'waiting', paused: 'waiting',
  active: 'running', completed: 'completed', failed: 'failed',
};

async function jobInfo(id) {
  const job = await Job.fromId(s.queue, id);
  if (!job) return { job: String(id), state: 'missing', attempt: 0 };
  const raw = await job.getState();
  return {
    job: String(job.id),
    key: String(job.id).startsWith('key_') ? decodeURIComponent(String(job.id).slice(4)) : undefined,
    state: STATES[raw] ?? 'missing',
    raw_state: raw,
    attempt: job.attemptsStarted ?? 0,
    max_attempts: job.opts?.attempts ?? 1,
    payload: job.data,
  };
}

async function enqueue(p) {
  if (p.tx) throw new AdapterError('unsupported', 'BullMQ has no transaction to enqueue in (hello.features.tx_enqueue)');
  const opts = {};
  if (p.key) opts.jobId = jobIdOf(p.key);
  if (p.max_attempts) opts.attempts = p.max_attempts;
  // Queue.add answers the job under its id whether it created it or found it (addStandardJob.lua
  // returns the existing id and emits 'duplicated'), so duplicate is left out.
  const job = await s.queue.add(NAME, p.payload ?? {}, opts);
  return { job: String(job.id) };
}

async function state(p) {
  if (!p.job) throw new AdapterError('bad_request', 'state needs a job');
  return jobInfo(p.job);
}

async function jobs() {
  const all = await s.queue.getJobs(['waiting', 'active', 'delayed', 'prioritized', 'paused', 'waiting-children', 'completed', 'failed']);
  const ids = [...new Set(all.filter(Boolean).map(j => String(j.id)))].sort();
  return { jobs: await Promise.all(ids.map(jobInfo)) };
}

// rows: the job's hash, its lock key with its TTL, and every list, set and sorted set of the
// queue that holds it.
async function rows(p) {
  const id = p.job;
  const hash = await s.redis.hgetall(key(id));
  const lock = await s.redis.get(key(id, 'lock'));
  const ttl = await s.redis.pttl(key(id, 'lock'));
  const holders = {};
  for (const list of ['wait', 'active', 'paused']) {
    if ((await s.redis.lpos(key(list), id)) !== null) holders[list] = true;
  }
  for (const zset of ['delayed', 'prioritized', 'completed', 'failed']) {
    if ((await s.redis.zscore(key(zset), id)) !== null) holders[zset] = true;
  }
  if (await s.redis.sismember(key('stalled'), id)) holders.stalled = true;
  return { rows: [{ key: key(id), hash, lock: lock === null ? null : { token: lock, pttl_ms: ttl }, in: holders }] };
}

async function cancel() {
  throw new AdapterError('unsupported', 'BullMQ has no cancellation by id across processes (hello.features.cancel)');
}

// expire lets the job's lock key run out now (PEXPIRE 1 ms): BullMQ's lock is that key with a
// TTL of lockDuration. The next stalled-job check of a worker (moveStalledJobsToWait.lua) finds
// the job active without a lock and moves it back to wait.
async function expire(p) {
  await s.redis.pexpire(key(p.job, 'lock'), 1);
  return {};
}

// make_due promotes a delayed job (a retry with backoff, a delayed add) to wait: Job.promote().
async function makeDue(p) {
  const job = await Job.fromId(s.queue, p.job);
  if (job && (await job.getState()) === 'delayed') await job.promote();
  return {};
}

async function processor(job, token) {
  const handle = `h${s.nextHandle++}`;
  let release;
  const decision = new Promise(r => { release = r; });
  s.held.set(handle, { job, token, release });
  emit('started', { handle, job: String(job.id), attempt: job.attemptsStarted, payload: job.data });
  const d = await decision;
  if (d === 'retry') throw new Error('leasehold probe: retry');
  return { done: true };
}

async function start(p) {
  if (s.worker) throw new AdapterError('bad_request', 'a worker already runs in this process');
  s.worker = new Worker(QUEUE, processor, {
    connection: { ...s.connection, maxRetriesPerRequest: null },
    prefix: s.prefix,
    concurrency: p.concurrency || 1,
    lockDuration: LOCK_DURATION,
    stalledInterval: 1000,
    name: `leasehold_${s.process}`,
  });
  // A stale holder's moveToFinished answers 'Lock mismatch' or 'Missing lock': BullMQ reports it
  // as an error event, logged here.
  s.worker.on('error', err => log('worker error:', err?.message ?? String(err)));
  s.worker.on('failed', (job, err) => log(`job ${job?.id} failed: ${err?.message}`));
  await s.worker.waitUntilReady();
  return {};
}

// stop is BullMQ's graceful worker.close(): no new jobs; running ones finish and are moved.
async function stop() {
  if (s.worker) await s.worker.close();
  s.worker = null;
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
  return {};
}

async function heartbeat(p) {
  const h = heldOf(p.handle);
  const r = await h.job.extendLock(h.token, LOCK_DURATION);
  return { accepted: r === 1 };
}

async function completeInTx() {
  throw new AdapterError('unsupported', 'BullMQ has no transaction to complete in (hello.features.tx_complete)');
}

// close abandons held handlers (their locks run out as a crashed worker's would) and exits.
async function close() {}

serve({
  hello, open, enqueue, state, jobs, rows, cancel, expire, make_due: makeDue,
  start, stop, finish, heartbeat, complete_in_tx: completeInTx,
}, { close });
