// The session loop every Node.js peer adapter shares: newline-delimited JSON on stdin and
// stdout, one request at a time, logs on stderr (docs/ADAPTERS.md). An adapter supplies a table
// of operations; this file owns the framing, the reply shapes and the exit rules, so the three
// adapters cannot drift apart on them.

import { createInterface } from 'node:readline';

/** AdapterError is a refusal with a stable code, sent as the reply's `error`. */
export class AdapterError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

const write = msg => process.stdout.write(JSON.stringify(msg) + '\n');

// stdout carries the protocol alone: anything a queue library prints with console.log goes to
// stderr, the adapter's log.
for (const level of ['log', 'info', 'debug']) console[level] = (...parts) => log(...parts);

/** emit writes an event line (the `started` event), between or during replies. */
export function emit(event, fields) {
  write({ event, ...fields });
}

/** log writes one line to stderr, the adapter's log (the runner keeps its tail). */
export function log(...parts) {
  process.stderr.write(parts.map(p => (typeof p === 'string' ? p : JSON.stringify(p))).join(' ') + '\n');
}

/**
 * serve runs the session: it reads one request a line, calls ops[request.op](params), and writes
 * one reply a line. A handler's AdapterError becomes an `error` reply with its code; any other
 * exception is the queue or its database failing (code `failed`, outcome unknown). An unknown op
 * or a line that is not JSON is `bad_request`. When stdin closes, `close` (if given) runs and the
 * process exits 0.
 */
export async function serve(ops, { close } = {}) {
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (line.trim() === '') continue;
    let req;
    try {
      req = JSON.parse(line);
    } catch (err) {
      write({ in_reply_to: null, error: { code: 'bad_request', message: `malformed JSON: ${err.message}` } });
      continue;
    }
    const id = req.id ?? null;
    const op = ops[req.op];
    if (typeof op !== 'function') {
      write({ in_reply_to: id, error: { code: 'bad_request', message: `unknown op ${JSON.stringify(req.op)}` } });
      continue;
    }
    try {
      const result = await op(req.params ?? {});
      write({ in_reply_to: id, result: result ?? {} });
    } catch (err) {
      if (err instanceof AdapterError) {
        write({ in_reply_to: id, error: { code: err.code, message: err.message } });
      } else {
        log(`op ${req.op} failed:`, err?.stack ?? String(err));
        write({ in_reply_to: id, error: { code: 'failed', message: `${req.op}: ${err?.message ?? String(err)}` } });
      }
    }
  }
  try {
    if (close) await close();
  } catch (err) {
    log('close failed:', err?.stack ?? String(err));
  }
  process.exit(0);
}

/** namespaceName turns the runner's namespace into a safe identifier part: [a-z0-9_], at most 40. */
export function namespaceName(ns) {
  if (typeof ns !== 'string' || ns === '') throw new AdapterError('bad_request', 'open needs a non-empty namespace');
  const safe = ns.toLowerCase().replace(/[^a-z0-9_]/g, '_').slice(0, 40);
  return safe;
}
