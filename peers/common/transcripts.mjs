// Transcripts: the probes' scripts of docs/ADAPTERS.md, driven by hand through the protocol, each
// returning what it observed. Each adapter's test asserts the observations it expects of its
// queue, exactly; leasehold's runner (`leasehold probe`) runs the same scripts with its vacuity
// guards and three runs.

import { Adapter, uniqueNamespace } from './driver.mjs';

/** Run opens processes on one fresh namespace and closes them all at the end. */
export class Run {
  constructor(script, target, prefix) {
    this.script = script;
    this.target = target; // { postgres } or { redis }
    this.namespace = uniqueNamespace(prefix);
    this.procs = [];
    this.hello = null;
  }

  async open(name, create = false) {
    const a = new Adapter(this.script);
    this.procs.push(a);
    this.hello = await a.ok('hello', { protocol: 1 });
    await a.ok('open', { namespace: this.namespace, create, process: name, ...this.target });
    return a;
  }

  async close() {
    await Promise.all(this.procs.map(a => (a.proc.exitCode === null && a.proc.signalCode === null ? a.close() : null)));
  }
}

/** completes: C enqueues, W1 runs the job to completion and stops. */
export async function completes(run) {
  const c = await run.open('C', true);
  const { job } = await c.ok('enqueue', { payload: { n: 1 } });
  const w1 = await run.open('W1');
  await w1.ok('start', { concurrency: 1 });
  const st = await w1.started(e => e.job === job);
  await w1.ok('finish', { handle: st.handle, do: 'complete' });
  await w1.ok('stop');
  return { started: st, final: await c.ok('state', { job }), rows: (await c.ok('rows', { job })).rows };
}

/**
 * staleCompletion: W1 holds J, is paused (SIGSTOP), J expires, W2 starts J; W1 resumes,
 * heartbeats and finishes complete, stops; C reads J; W2 then finishes it (`w2Do`: complete or retry).
 */
export async function staleCompletion(run, { w2Do = 'complete' } = {}) {
  const c = await run.open('C', true);
  const { job } = await c.ok('enqueue', { payload: { n: 1 }, max_attempts: 3 });
  const w1 = await run.open('W1');
  const w2 = await run.open('W2');
  await w1.ok('start', { concurrency: 1 });
  const s1 = await w1.started(e => e.job === job);
  w1.proc.kill('SIGSTOP');
  await c.ok('expire', { job });
  await w2.ok('start', { concurrency: 1 });
  const s2 = await w2.started(e => e.job === job, 60000, `W2's start of ${job} after expire`);
  w1.proc.kill('SIGCONT');
  const hb = run.hello.features.heartbeat.supported ? await w1.ok('heartbeat', { handle: s1.handle }) : null;
  await w1.ok('finish', { handle: s1.handle, do: 'complete' });
  await w1.ok('stop');
  const afterStale = await c.ok('state', { job });
  await w2.ok('finish', { handle: s2.handle, do: w2Do });
  await w2.ok('stop');
  return { s1, s2, heartbeat: hb, afterStale, final: await c.ok('state', { job }) };
}

/** killWorker: W1 starts J and is SIGKILLed; J expires; W2 runs it to completion. */
export async function killWorker(run) {
  const c = await run.open('C', true);
  const { job } = await c.ok('enqueue', { payload: { n: 1 }, max_attempts: 3 });
  const w1 = await run.open('W1');
  await w1.ok('start', { concurrency: 1 });
  const s1 = await w1.started(e => e.job === job);
  await w1.kill();
  await c.ok('expire', { job });
  const w2 = await run.open('W2');
  await w2.ok('start', { concurrency: 1 });
  const s2 = await w2.started(e => e.job === job, 60000, `W2's start of ${job} after the kill`);
  await w2.ok('finish', { handle: s2.handle, do: 'complete' });
  await w2.ok('stop');
  return { s1, s2, final: await c.ok('state', { job }) };
}

/** retryBudget: J with 3 attempts; every start finishes retry, then make_due. */
export async function retryBudget(run, attempts = 3) {
  const c = await run.open('C', true);
  const { job } = await c.ok('enqueue', { payload: { n: 1 }, max_attempts: attempts });
  const w1 = await run.open('W1');
  await w1.ok('start', { concurrency: 1 });
  const starts = [];
  for (let i = 0; i < attempts; i++) {
    const st = await w1.started(e => e.job === job, 60000, `start ${i + 1} of ${job}`);
    starts.push(st.attempt);
    await w1.ok('finish', { handle: st.handle, do: 'retry' });
    // The attempt has ended once the job is not running or a later attempt already started
    // (BullMQ moves a failed job with no backoff straight back to wait, and it is claimed again).
    await c.until(job, info => info.state !== 'running' || info.attempt > st.attempt, 'the end of the attempt');
    await c.ok('make_due', { job });
  }
  // A sentinel: once it started, W1 has polled past the point where a fourth start of J was due.
  const { job: sentinel } = await c.ok('enqueue', { payload: { sentinel: 1 } });
  const ss = await w1.started(e => e.job === sentinel, 60000, 'the sentinel');
  await w1.ok('finish', { handle: ss.handle, do: 'complete' });
  await w1.ok('stop');
  const extra = w1.events.filter(e => e.job === job).length - attempts;
  return { starts, extra, final: await c.ok('state', { job }) };
}

/** keyDedupe: (k, P) twice, then (k, Q). */
export async function keyDedupe(run) {
  const c = await run.open('C', true);
  const first = await c.ok('enqueue', { key: 'k1', payload: { v: 'P' } });
  const second = await c.ok('enqueue', { key: 'k1', payload: { v: 'P' } });
  const other = await c.call('enqueue', { key: 'k1', payload: { v: 'Q' } });
  const { jobs } = await c.ok('jobs');
  return { first, second, other, jobs };
}

/** txEnqueue: enqueue in a committed and in a rolled-back transaction. */
export async function txEnqueue(run) {
  const c = await run.open('C', true);
  const committed = await c.ok('enqueue', { payload: { tx: 'commit' }, tx: 'commit' });
  const rolledBack = await c.ok('enqueue', { payload: { tx: 'rollback' }, tx: 'rollback' });
  const { jobs } = await c.ok('jobs');
  return { committed, rolledBack, jobs };
}

/** txComplete: W1 holds J; complete_in_tx rollback; state; finish complete; stop. */
export async function txComplete(run) {
  const c = await run.open('C', true);
  const { job } = await c.ok('enqueue', { payload: { n: 1 } });
  const w1 = await run.open('W1');
  await w1.ok('start', { concurrency: 1 });
  const st = await w1.started(e => e.job === job);
  const tx = await w1.ok('complete_in_tx', { handle: st.handle, commit: false });
  const afterRollback = await c.ok('state', { job });
  await w1.ok('finish', { handle: st.handle, do: 'complete' });
  await w1.ok('stop');
  return { tx, afterRollback, final: await c.ok('state', { job }) };
}

/** cancelWaiting: cancel a job no worker has started. */
export async function cancelWaiting(run) {
  const c = await run.open('C', true);
  const { job } = await c.ok('enqueue', { payload: { n: 1 } });
  const r = await c.ok('cancel', { job });
  return { cancel: r, final: await c.ok('state', { job }) };
}

/** cancelRunning: cancel a job while its handler is held, then the handler completes. */
export async function cancelRunning(run) {
  const c = await run.open('C', true);
  const { job } = await c.ok('enqueue', { payload: { n: 1 } });
  const w1 = await run.open('W1');
  await w1.ok('start', { concurrency: 1 });
  const st = await w1.started(e => e.job === job);
  const r = await c.call('cancel', { job });
  await w1.ok('finish', { handle: st.handle, do: 'complete' });
  await w1.ok('stop');
  return { cancel: r, final: await c.ok('state', { job }) };
}
