"""The leasehold contract's pure functions (spec/ in the Go tree), in Python.

Validation (Config.Check*, NormalizeCreate), the canonical payload and the
fp1: fingerprint, event payloads, backoff, checked time arithmetic and the
lease rule (LeaseError), with the same checks in the same order and the
same error codes as spec/validate.go, spec/canonical.go, spec/events.go and
spec/config.go. Names are checked as bytes (their UTF-8), as Go does.
"""

import hashlib

import jcs

MAX_TENANT_BYTES = 64
MAX_RUN_ID_BYTES = 64
MAX_KEY_BYTES = 255
MAX_WORKER_BYTES = 128
MAX_CODE_BYTES = 64
MAX_STEP_BYTES = 64
MAX_PAYLOAD_BYTES = 64 << 10
MAX_PROVIDER_BYTES = 512
MAX_BATCH = 1000
MAX_OUTBOX_MESSAGES = 16
MAX_SUBJECT_BYTES = 255
MAX_INT64 = (1 << 63) - 1

REAP_ERROR_CODE = "lease_expired"
DEFAULT_CANCEL_REASON = "cancelled"
FINGERPRINT_VERSION = "fp1"

CODES = ("invalid_argument", "not_found", "already_exists", "idempotency_conflict", "lost_lease", "cancelled",
         "already_terminal", "deadline_exceeded", "failed_precondition", "replay_limit", "effect_conflict",
         "unavailable", "unknown_outcome")


class ContractError(Exception):
    """An outcome of the contract: a stable code, the run state that decided
    it (already_terminal and cancelled), and a message for people."""

    def __init__(self, code, message, state=""):
        super().__init__(message)
        assert code in CODES, code
        self.code, self.message, self.state = code, message, state

    def to_json(self):
        out = {"code": self.code, "message": self.message}
        if self.state:
            out["state"] = self.state
        return out


def invalid(message):
    return ContractError("invalid_argument", message)


def short_hash(s):
    """What messages show in place of a key or a fingerprint."""
    return hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _tenant_byte(c):
    return 0x61 <= c <= 0x7A or 0x30 <= c <= 0x39 or c in b"_-"


def _code_byte(c):
    return 0x61 <= c <= 0x7A or 0x30 <= c <= 0x39 or c == 0x5F


def _id_byte(c):
    return 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A or 0x30 <= c <= 0x39 or c in b"_-.:"


def _printable(c):
    return 0x20 < c < 0x7F


def check_name(what, s, limit, ok):
    """1..limit bytes, each accepted by ok, starting with a letter or digit."""
    b = s.encode("utf-8", "surrogatepass")
    if not b:
        raise invalid("%s is empty" % what)
    if len(b) > limit:
        raise invalid("%s is %d bytes; the limit is %d" % (what, len(b), limit))
    for i, c in enumerate(b):
        if not ok(c):
            raise invalid("%s has a byte 0x%02x at offset %d that is not allowed" % (what, c, i))
    c = b[0]
    if not (0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A or 0x30 <= c <= 0x39):
        raise invalid("%s must start with a letter or digit" % what)


def check_now(now):
    if now < 0:
        raise invalid("clock returned %d ms: times must be >= 0 (check the store's clock)" % now)


def deadline(now, d, what):
    """now + d, or invalid_argument naming what overflowed."""
    if now < 0 or d < 0 or now > MAX_INT64 - d:
        raise invalid("%s: now %d + %d ms is not a valid time" % (what, now, d))
    return now + d


def schedule(req, now, deadline_at):
    """When a created run's job becomes claimable: now, the request's
    available_at (not before now) or now + delay_ms, before the deadline."""
    at_, delay = req["available_at"], req["delay_ms"]
    if at_ != 0 and delay != 0:
        raise invalid("available_at %d and delay_ms %d are both set; send at most one" % (at_, delay))
    if at_ < 0:
        raise invalid("available_at %d is negative: times are ms since the epoch, >= 0" % at_)
    if delay < 0:
        raise invalid("delay_ms %d is negative" % delay)
    at = max(deadline(now, delay, "available time"), at_)
    if at >= deadline_at:
        raise invalid("the run would become available at %d, not before its deadline %d (admission + timeout_ms): "
                      "schedule it sooner or raise timeout_ms" % (at, deadline_at))
    return at


def check_subject(s):
    """A message subject: 1..255 bytes of dot-separated [A-Za-z0-9_-] tokens."""
    b = s.encode("utf-8", "surrogatepass")
    if not b:
        raise invalid("subject is empty")
    if len(b) > MAX_SUBJECT_BYTES:
        raise invalid("subject is %d bytes; the limit is %d" % (len(b), MAX_SUBJECT_BYTES))
    for i, tok in enumerate(b.split(b".")):
        if not tok:
            raise invalid("subject %r has an empty token %d (tokens are separated by single dots)" % (s, i))
        for c in tok:
            if not (0x61 <= c <= 0x7a or 0x41 <= c <= 0x5a or 0x30 <= c <= 0x39 or c in (0x5f, 0x2d)):
                raise invalid("subject %r has a byte 0x%02x that is not allowed (tokens are [A-Za-z0-9_-])" % (s, c))


def normalize_outbox(msgs):
    """The messages of one request, validated: [(subject, canonical payload)]."""
    if len(msgs) > MAX_OUTBOX_MESSAGES:
        raise invalid("%d outbox messages; the limit is %d per request" % (len(msgs), MAX_OUTBOX_MESSAGES))
    out = []
    for i, m in enumerate(msgs):
        try:
            check_subject(m["subject"])
            out.append((m["subject"], canonicalize(m["payload"])))
        except ContractError as e:
            raise ContractError(e.code, "outbox message %d: %s" % (i, e.message))
    return out


def outbox_fingerprint(msgs):
    """The canonical JSON array of normalized messages, for the fingerprint."""
    if not msgs:
        return ""
    return "[" + ",".join('{"payload":%s,"subject":%s}' % (p, go_json_string(s)) for s, p in msgs) + "]"


def check_run_id(what, s):
    check_name(what, s, MAX_RUN_ID_BYTES, _id_byte)


def check_worker(s):
    check_name("worker", s, MAX_WORKER_BYTES, _printable)


def check_error_code(what, s):
    check_name(what, s, MAX_CODE_BYTES, _code_byte)


def check_limit(limit):
    if limit < 1 or limit > MAX_BATCH:
        raise invalid("limit %d is out of range [1, %d]" % (limit, MAX_BATCH))


def check_effect_key(step, key):
    check_name("effect step", step, MAX_STEP_BYTES, _id_byte)
    check_name("effect key", key, MAX_KEY_BYTES, _printable)


def canonicalize(text):
    """spec.Canonicalize: the canonical JSON text (str) of text (bytes)."""
    if len(text) == 0:
        raise invalid("JSON payload is empty (send null or {} for no payload)")
    if len(text) > MAX_PAYLOAD_BYTES:
        raise invalid("JSON payload is %d bytes; the limit is %d" % (len(text), MAX_PAYLOAD_BYTES))
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid("JSON payload is not valid UTF-8")
    try:
        out = jcs.canonicalize(text)
    except jcs.JCSError as e:
        raise invalid("JSON payload is not canonicalizable JSON (RFC 8785): %s" % e)
    if len(out) > MAX_PAYLOAD_BYTES:
        raise invalid("canonical JSON payload is %d bytes; the limit is %d" % (len(out), MAX_PAYLOAD_BYTES))
    return out.decode("utf-8")


def go_json_string(s):
    """s as Go's encoding/json writes a string (HTML-safe escapes)."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif o < 0x20 or ch in "<>&" or o in (0x2028, 0x2029):
            out.append("\\u%04x" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def fingerprint(tenant, operation, schema_version, max_attempts, timeout_ms, payload, available_at=0, delay_ms=0, outbox=""):
    """fp1: + hex SHA-256 of the canonical object of the normalized command,
    with the schedule as the request gave it and the outbox messages
    (outbox_fingerprint), each member only when set."""
    schedule = ""
    if available_at:
        schedule += '"available_at":%d,' % available_at
    if delay_ms:
        schedule += '"delay_ms":%d,' % delay_ms
    messages = ',"outbox":' + outbox if outbox else ""
    text = ('{' + schedule + '"max_attempts":%d,"operation":%s' + messages +
            ',"payload":%s,"schema_version":%d,"tenant":%s,"timeout_ms":%d}') % (
        max_attempts, go_json_string(operation), payload, schema_version, go_json_string(tenant), timeout_ms)
    return FINGERPRINT_VERSION + ":" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _object(pairs):
    """A small event payload: keys sorted, as Go's json.Marshal of a map."""
    parts = []
    for k in sorted(pairs):
        v = pairs[k]
        parts.append(go_json_string(k) + ":" + (str(v) if isinstance(v, int) else go_json_string(v)))
    return "{" + ",".join(parts) + "}"


def queued_payload(replay_of, actor, depth):
    if replay_of == "":
        return "{}"
    return _object({"actor": actor, "replay_depth": depth, "replay_of": replay_of})


def completed_payload(generation):
    return _object({"generation": generation})


def failed_payload(code, generation):
    return _object({"error_code": code, "generation": generation})


def cancelled_payload(reason, generation):
    return _object({"generation": generation, "reason": reason})


TERMINAL_JOB_STATES = ("completed", "dead", "cancelled")
RUN_STATE_FOR = {"completed": "completed", "dead": "failed", "cancelled": "cancelled"}


def terminal_error(state, run_id):
    """The error of a write that lost to a terminal run state."""
    if state == "cancelled":
        return ContractError("cancelled", "run %s was cancelled" % run_id, state)
    return ContractError("already_terminal", "run %s is already %s" % (run_id, state), state)


def lease_str(ref):
    return "%s/%s@%d by %r" % (ref["tenant"], ref["run_id"], ref["generation"], ref["owner"])


def lease_error(job, ref, now):
    """spec.LeaseError: why a guarded write's predicate does not match the
    job row as it is, in the contract's order; None when it does."""
    def lost(why):
        return ContractError("lost_lease", "lease %s is not current: %s; stop publishing for this generation"
                             % (lease_str(ref), why))
    if job["generation"] != ref["generation"]:
        return lost("the job is at generation %d" % job["generation"])
    if job["state"] in TERMINAL_JOB_STATES:
        return terminal_error(RUN_STATE_FOR[job["state"]], job["run_id"])
    if job["state"] != "leased":
        return lost("the job was requeued")
    if job["lease_owner"] != ref["owner"]:
        return lost("the lease is owned by %r" % job["lease_owner"])
    if job["lease_expires_at"] <= now:
        return lost("the lease expired at %d (now %d)" % (job["lease_expires_at"], now))
    return None


class Config:
    """spec.Config, from its JSON form, and the checks that use it."""

    def __init__(self, j):
        self.operations = j.get("operations") or {}
        self.tenants = j.get("tenants") or []
        self.retention_ms = j.get("idempotency_retention_ms", 0)
        self.run_retention_ms = j.get("run_retention_ms", 0)
        self.max_lease_ms = j.get("max_lease_ms", 0)
        self.max_replays = j.get("max_replays", 0)
        b = j.get("backoff") or {}
        self.base_ms = b.get("base_ms", 0)
        self.cap_ms = b.get("cap_ms", 0)
        self.jitter_ms = b.get("jitter_ms", 0)
        self.retry_after_cap_ms = b.get("retry_after_cap_ms", 0)

    def validate(self):
        if not self.operations:
            raise invalid("config: no operations configured")
        for name, p in self.operations.items():
            check_name("operation", name, MAX_CODE_BYTES, _code_byte)
            if (p.get("schema_version", 0) < 1 or p.get("default_max_attempts", 0) < 1
                    or p.get("max_max_attempts", 0) < p.get("default_max_attempts", 0)
                    or p.get("default_timeout_ms", 0) < 1 or p.get("max_timeout_ms", 0) < p.get("default_timeout_ms", 0)):
                raise invalid("config: operation %r: bad policy" % name)
        for t in self.tenants:
            check_name("tenant", t, MAX_TENANT_BYTES, _tenant_byte)
        if (self.retention_ms < 1 or self.max_lease_ms < 1 or self.max_replays < 0 or self.run_retention_ms < 0
                or self.base_ms < 0
                or self.cap_ms < self.base_ms or self.jitter_ms < 0 or self.retry_after_cap_ms < 0):
            raise invalid("config: bad retention, lease, replay or backoff limits")
        if self.cap_ms > MAX_INT64 - self.jitter_ms:
            raise invalid("config: Backoff.CapMs + JitterMs overflows")

    # Backoff.

    def jitter_bound(self):
        return self.jitter_ms + 1

    def delay(self, attempt, retry_after_ms, jitter):
        """min(cap, base * 2^(attempt-1)) + jitter, at least min(Retry-After, its cap)."""
        if attempt < 1 or retry_after_ms < 0 or jitter < 0 or jitter > self.jitter_ms:
            raise invalid("backoff: attempt %d, retry-after %d ms, jitter %d ms out of range"
                          % (attempt, retry_after_ms, jitter))
        d = self.cap_ms
        if attempt - 1 < 62 and self.base_ms <= self.cap_ms >> (attempt - 1):
            d = self.base_ms << (attempt - 1)
        d += jitter
        floor = min(retry_after_ms, self.retry_after_cap_ms)
        return max(d, floor)

    # Checks, in spec/validate.go's order.

    def check_tenant(self, tenant):
        check_name("tenant", tenant, MAX_TENANT_BYTES, _tenant_byte)
        if self.tenants and tenant not in self.tenants:
            raise invalid("tenant %r is not configured" % tenant)

    def check_lease_ms(self, ms):
        if ms < 1 or ms > self.max_lease_ms:
            raise invalid("lease of %d ms is out of range [1, %d]" % (ms, self.max_lease_ms))

    def check_lease_ref(self, ref):
        self.check_tenant(ref["tenant"])
        check_run_id("run id", ref["run_id"])
        check_worker(ref["owner"])
        if ref["generation"] < 1:
            raise invalid("lease generation %d: generations start at 1" % ref["generation"])

    def check_run_ref(self, tenant, run_id):
        self.check_tenant(tenant)
        check_run_id("run id", run_id)

    def normalize_create(self, req, now):
        check_now(now)
        self.check_tenant(req["tenant"])
        policy = self.operations.get(req["operation"])
        if policy is None:
            raise invalid("operation %r is not configured" % req["operation"])
        check_name("idempotency key", req["idempotency_key"], MAX_KEY_BYTES, _printable)
        check_run_id("run id", req["run_id"])
        max_attempts = req["max_attempts"] or policy["default_max_attempts"]
        if max_attempts < 1 or max_attempts > policy["max_max_attempts"]:
            raise invalid("max attempts %d is out of range [1, %d]" % (req["max_attempts"], policy["max_max_attempts"]))
        timeout_ms = req["timeout_ms"] or policy["default_timeout_ms"]
        if timeout_ms < 1 or timeout_ms > policy["max_timeout_ms"]:
            raise invalid("timeout %d ms is out of range [1, %d]" % (req["timeout_ms"], policy["max_timeout_ms"]))
        payload = canonicalize(req["payload"])
        n = {"tenant": req["tenant"], "operation": req["operation"], "key": req["idempotency_key"],
             "run_id": req["run_id"], "payload": payload, "max_attempts": max_attempts, "timeout_ms": timeout_ms,
             "deadline_at": deadline(now, timeout_ms, "run deadline"),
             "expires_at": deadline(now, self.retention_ms, "idempotency expiry"),
             "schema_version": policy["schema_version"]}
        n["available_at"] = schedule(req, now, n["deadline_at"])
        n["outbox"] = normalize_outbox(req["outbox"])
        n["fingerprint"] = fingerprint(n["tenant"], n["operation"], policy["schema_version"], max_attempts,
                                       timeout_ms, payload, req["available_at"], req["delay_ms"],
                                       outbox_fingerprint(n["outbox"]))
        return n

    def check_claim(self, req, now):
        check_now(now)
        self.check_tenant(req["tenant"])
        check_worker(req["worker"])
        self.check_lease_ms(req["lease_ms"])
        check_limit(req["limit"])
        return deadline(now, req["lease_ms"], "lease expiry")

    def check_renew(self, req, now):
        check_now(now)
        self.check_lease_ref(req["lease"])
        self.check_lease_ms(req["lease_ms"])
        return deadline(now, req["lease_ms"], "lease expiry")

    def check_complete(self, req, now):
        """The canonical result ("" for none); the outbox messages are
        checked last (normalize_outbox, called again for their form)."""
        check_now(now)
        self.check_lease_ref(req["lease"])
        result = canonicalize(req["result"]) if len(req["result"]) else ""
        normalize_outbox(req["outbox"])
        return result

    def check_claim_outbox(self, req, now):
        """Returns the claim's expiry."""
        check_now(now)
        if req["tenant"] != "":
            self.check_tenant(req["tenant"])
        check_name("relay", req["relay"], MAX_WORKER_BYTES, _printable)
        self.check_lease_ms(req["lease_ms"])
        check_limit(req["limit"])
        return deadline(now, req["lease_ms"], "outbox claim expiry")

    def check_mark_delivered(self, req, now):
        check_now(now)
        if len(req["messages"]) < 1 or len(req["messages"]) > MAX_BATCH:
            raise invalid("%d messages to mark; want 1 to %d" % (len(req["messages"]), MAX_BATCH))
        for k in req["messages"]:
            self.check_run_ref(k["tenant"], k["run_id"])
            if k["seq"] < 1:
                raise invalid("outbox message seq %d: seqs start at 1" % k["seq"])

    def check_retry(self, req, now):
        check_now(now)
        self.check_lease_ref(req["lease"])
        check_error_code("error code", req["error_code"])
        if req["retry_after_ms"] < 0:
            raise invalid("retry-after %d ms is negative" % req["retry_after_ms"])

    def check_fail(self, req, now):
        check_now(now)
        self.check_lease_ref(req["lease"])
        check_error_code("error code", req["error_code"])

    def check_cancel(self, req, now):
        check_now(now)
        self.check_run_ref(req["tenant"], req["run_id"])
        if req["reason"] == "":
            return DEFAULT_CANCEL_REASON
        check_error_code("cancel reason", req["reason"])
        return req["reason"]

    def check_release(self, req, now):
        check_now(now)
        self.check_lease_ref(req["lease"])

    def check_reap(self, req, now):
        check_now(now)
        self.check_tenant(req["tenant"])
        check_limit(req["limit"])

    def check_purge_runs(self, req, now):
        check_now(now)
        self.check_tenant(req["tenant"])
        check_limit(req["limit"])

    def retired_by(self, now):
        """The latest finishing time of a run retired at now, or None when
        run retention is off."""
        if self.run_retention_ms == 0:
            return None
        return now - self.run_retention_ms

    @staticmethod
    def check_purge(req, now):
        check_now(now)
        check_limit(req["limit"])

    def check_replay(self, req, now):
        check_now(now)
        self.check_run_ref(req["tenant"], req["run_id"])
        check_run_id("new run id", req["new_run_id"])
        check_name("actor", req["actor"], MAX_WORKER_BYTES, _printable)

    def check_reserve_effect(self, req, now):
        check_now(now)
        self.check_lease_ref(req["lease"])
        check_effect_key(req["step"], req["key"])

    def check_record_effect(self, req, now, reconcile):
        check_now(now)
        self.check_lease_ref(req["lease"])
        check_effect_key(req["step"], req["key"])
        state = req["state"]
        if state in ("succeeded", "failed"):
            pass
        elif state == "unknown":
            if reconcile:
                raise invalid("reconcile must resolve the effect to succeeded or failed, not unknown")
        else:
            raise invalid("effect outcome %r: want succeeded, failed or unknown" % state)
        ref = req["provider_ref"].encode("utf-8", "surrogatepass")
        if len(ref) > MAX_PROVIDER_BYTES:
            raise invalid("provider reference is %d bytes; the limit is %d" % (len(ref), MAX_PROVIDER_BYTES))
        for i, c in enumerate(ref):
            if not _printable(c):
                raise invalid("provider reference has a byte 0x%02x at offset %d that is not allowed" % (c, i))


def _main(argv):
    """python3 contract.py canonicalize: read base64 JSON texts, one a line,
    and write "ok <base64 canonical>" or "invalid_argument" for each (the Go
    differential test of this canonicalizer)."""
    import base64
    import sys
    if argv[1:] != ["canonicalize"]:
        sys.exit("usage: python3 contract.py canonicalize < base64-lines")
    for line in sys.stdin:
        text = base64.b64decode(line.strip())
        try:
            out = "ok " + base64.b64encode(canonicalize(text).encode("utf-8")).decode("ascii")
        except ContractError as e:
            out = e.code
        sys.stdout.write(out + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    import sys
    _main(sys.argv)
