// A small runner-side driver for the adapters' own tests: it starts an adapter process, sends
// requests one at a time and collects `started` events, as leasehold's runner does
// (docs/ADAPTERS.md). Tests wait for events or replies, never for wall time; every wait has a
// hang guard that names what it waited for and prints the adapter's stderr tail.

import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

export class Adapter {
  constructor(script, { env = {} } = {}) {
    this.proc = spawn(process.execPath, [script], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    this.nextId = 1;
    this.pending = new Map();
    this.events = [];
    this.eventWaiters = [];
    this.stderr = [];
    this.exited = new Promise(resolve => this.proc.on('exit', (code, signal) => resolve({ code, signal })));
    createInterface({ input: this.proc.stderr }).on('line', l => {
      this.stderr.push(l);
      if (this.stderr.length > 40) this.stderr.shift();
    });
    createInterface({ input: this.proc.stdout }).on('line', line => {
      const msg = JSON.parse(line);
      if (msg.event) {
        this.events.push(msg);
        this.eventWaiters = this.eventWaiters.filter(w => !w(msg));
        return;
      }
      const p = this.pending.get(msg.in_reply_to);
      if (!p) throw new Error(`reply to nothing: ${line}`);
      this.pending.delete(msg.in_reply_to);
      p(msg);
    });
  }

  tail() {
    return this.stderr.join('\n');
  }

  /** call sends a request and resolves with its whole reply message. */
  call(op, params = {}, guardMs = 60000) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no reply to ${op} in ${guardMs} ms (hang guard)\n${this.tail()}`)), guardMs);
      this.pending.set(id, msg => { clearTimeout(t); resolve(msg); });
      this.proc.stdin.write(JSON.stringify({ id, op, params }) + '\n');
    });
  }

  /** ok sends a request and resolves with its result, failing on an error reply. */
  async ok(op, params = {}, guardMs) {
    const msg = await this.call(op, params, guardMs);
    if (msg.error) throw new Error(`${op} answered ${msg.error.code}: ${msg.error.message}\n${this.tail()}`);
    return msg.result;
  }

  /** started resolves with the first started event matching pred, past or future. */
  started(pred = () => true, guardMs = 60000, what = 'a started event') {
    const seen = this.events.find(e => e.event === 'started' && pred(e) && !e.taken);
    if (seen) { seen.taken = true; return Promise.resolve(seen); }
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no ${what} in ${guardMs} ms (hang guard)\n${this.tail()}`)), guardMs);
      this.eventWaiters.push(msg => {
        if (msg.event !== 'started' || !pred(msg)) return false;
        clearTimeout(t);
        msg.taken = true;
        resolve(msg);
        return true;
      });
    });
  }

  /** until polls the adapter's state of job until pred(info) holds. */
  async until(job, pred, what, guardMs = 60000) {
    const end = Date.now() + guardMs;
    for (;;) {
      const info = await this.ok('state', { job });
      if (pred(info)) return info;
      if (Date.now() > end) throw new Error(`job ${job} never reached ${what} in ${guardMs} ms (hang guard); last ${JSON.stringify(info)}\n${this.tail()}`);
      await new Promise(r => setTimeout(r, 50));
    }
  }

  async close() {
    this.proc.stdin.end();
    return this.exited;
  }

  kill() {
    this.proc.kill('SIGKILL');
    return this.exited;
  }
}

/** uniqueNamespace names one test's queue, schema or key prefix. */
export function uniqueNamespace(prefix) {
  return `${prefix}_${process.pid}_${Date.now().toString(36)}_${Math.floor(Math.random() * 1e6).toString(36)}`;
}

/**
 * serverOrSkip returns a reason to skip when the server is missing, or throws under CI=true or
 * LEASEHOLD_REQUIRE_SERVERS, where a missing server is a failure (docs/GUIDE: tests skip loudly).
 */
export function skipUnless(available, what) {
  if (available) return false;
  if (process.env.CI === 'true' || process.env.LEASEHOLD_REQUIRE_SERVERS) throw new Error(`${what} is required here (CI=true) and is missing`);
  process.stderr.write(`SKIP: ${what} is not available\n`);
  return `${what} is not available`;
}
