package spec

import (
	"fmt"
	"slices"
)

// Argument validation. Every Store method runs these checks first, in the
// order SPEC.md gives, and writes nothing when one fails. The functions are
// pure so that the model and every store apply the same rules.

func isTenantByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

func isCodeByte(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' }

func isIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':'
}

func isPrintableASCII(c byte) bool { return c > 0x20 && c < 0x7f }

// checkName checks 1..max bytes, each accepted by ok, and a first byte that is
// a letter or digit (so names never start with punctuation).
func checkName(what, s string, max int, ok func(byte) bool) error {
	if s == "" {
		return Errorf(CodeInvalidArgument, "%s is empty", what)
	}
	if len(s) > max {
		return Errorf(CodeInvalidArgument, "%s is %d bytes; the limit is %d", what, len(s), max)
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return Errorf(CodeInvalidArgument, "%s has a byte 0x%02x at offset %d that is not allowed", what, s[i], i)
		}
	}
	if c := s[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
		return Errorf(CodeInvalidArgument, "%s must start with a letter or digit", what)
	}
	return nil
}

// CheckNow rejects a clock reading that is not a valid time.
func CheckNow(now int64) error {
	if now < 0 {
		return Errorf(CodeInvalidArgument, "clock returned %d ms: times must be >= 0 (check the store's clock)", now)
	}
	return nil
}

// CheckTenant checks the tenant name and, when Config.Tenants is set, that the
// tenant is known.
func (c Config) CheckTenant(tenant string) error {
	if err := checkName("tenant", tenant, MaxTenantBytes, isTenantByte); err != nil {
		return err
	}
	if len(c.Tenants) > 0 && !slices.Contains(c.Tenants, tenant) {
		return Errorf(CodeInvalidArgument, "tenant %q is not configured", tenant)
	}
	return nil
}

// CheckRunID checks a run id (1..64 bytes of [A-Za-z0-9_.:-]).
func CheckRunID(what, id string) error { return checkName(what, id, MaxRunIDBytes, isIDByte) }

// CheckWorker checks a worker (lease owner) name.
func CheckWorker(w string) error { return checkName("worker", w, MaxWorkerBytes, isPrintableASCII) }

// CheckErrorCode checks an error code or cancel reason: [a-z0-9_], 1..64 bytes.
func CheckErrorCode(what, code string) error { return checkName(what, code, MaxCodeBytes, isCodeByte) }

// CheckLimit checks a batch limit.
func CheckLimit(limit int) error {
	if limit < 1 || limit > MaxBatch {
		return Errorf(CodeInvalidArgument, "limit %d is out of range [1, %d]", limit, MaxBatch)
	}
	return nil
}

// CheckLeaseMs checks a lease duration against Config.MaxLeaseMs.
func (c Config) CheckLeaseMs(ms int64) error {
	if ms < 1 || ms > c.MaxLeaseMs {
		return Errorf(CodeInvalidArgument, "lease of %d ms is out of range [1, %d]", ms, c.MaxLeaseMs)
	}
	return nil
}

// CheckLeaseRef checks the identity presented by a guarded write.
func (c Config) CheckLeaseRef(l LeaseRef) error {
	if err := c.CheckTenant(l.Tenant); err != nil {
		return err
	}
	if err := CheckRunID("run id", l.RunID); err != nil {
		return err
	}
	if err := CheckWorker(l.Owner); err != nil {
		return err
	}
	if l.Generation < 1 {
		return Errorf(CodeInvalidArgument, "lease generation %d: generations start at 1", l.Generation)
	}
	return nil
}

// CheckRunRef checks a (tenant, run id) pair used by reads and Cancel.
func (c Config) CheckRunRef(tenant, runID string) error {
	if err := c.CheckTenant(tenant); err != nil {
		return err
	}
	return CheckRunID("run id", runID)
}

// NormalizedCreate is a validated CreateRunRequest with defaults applied and
// every derived time computed.
type NormalizedCreate struct {
	Tenant, Operation, Key, RunID string
	Payload                       string // canonical
	Fingerprint                   string
	MaxAttempts                   int
	TimeoutMs                     int64
	DeadlineAt                    int64
	ExpiresAt                     int64 // idempotency record expiry
	// AvailableAt is when the job becomes claimable: the request's
	// AvailableAt (a time in the past means now), now + its DelayMs, or now.
	AvailableAt int64
	// Outbox is the request's messages, validated (NormalizeOutbox).
	Outbox []OutgoingMessage
}

// QueuedRun is the run that admitting n at time now creates: queued, at
// version 1 with its run_queued event (seq 1), no replay link. A store
// returns it for a created run without reading its rows back.
func (n NormalizedCreate) QueuedRun(now int64) Run {
	return Run{Tenant: n.Tenant, ID: n.RunID, Operation: n.Operation, State: RunQueued, Version: 1, LastSeq: 1,
		Payload: n.Payload, Fingerprint: n.Fingerprint, MaxAttempts: n.MaxAttempts, CreatedAt: now, DeadlineAt: n.DeadlineAt}
}

// NormalizeCreate validates req at time now and fills in defaults.
func (c Config) NormalizeCreate(req CreateRunRequest, now int64) (NormalizedCreate, error) {
	if err := CheckNow(now); err != nil {
		return NormalizedCreate{}, err
	}
	if err := c.CheckTenant(req.Tenant); err != nil {
		return NormalizedCreate{}, err
	}
	policy, ok := c.Operations[req.Operation]
	if !ok {
		return NormalizedCreate{}, Errorf(CodeInvalidArgument, "operation %q is not configured", req.Operation)
	}
	if err := checkName("idempotency key", req.IdempotencyKey, MaxKeyBytes, isPrintableASCII); err != nil {
		return NormalizedCreate{}, err
	}
	if err := CheckRunID("run id", req.RunID); err != nil {
		return NormalizedCreate{}, err
	}
	n := NormalizedCreate{Tenant: req.Tenant, Operation: req.Operation, Key: req.IdempotencyKey, RunID: req.RunID,
		MaxAttempts: req.MaxAttempts, TimeoutMs: req.TimeoutMs}
	if n.MaxAttempts == 0 {
		n.MaxAttempts = policy.DefaultMaxAttempts
	}
	if n.MaxAttempts < 1 || n.MaxAttempts > policy.MaxMaxAttempts {
		return NormalizedCreate{}, Errorf(CodeInvalidArgument, "max attempts %d is out of range [1, %d]", req.MaxAttempts, policy.MaxMaxAttempts)
	}
	if n.TimeoutMs == 0 {
		n.TimeoutMs = policy.DefaultTimeoutMs
	}
	if n.TimeoutMs < 1 || n.TimeoutMs > policy.MaxTimeoutMs {
		return NormalizedCreate{}, Errorf(CodeInvalidArgument, "timeout %d ms is out of range [1, %d]", req.TimeoutMs, policy.MaxTimeoutMs)
	}
	payload, err := Canonicalize(req.Payload)
	if err != nil {
		return NormalizedCreate{}, err
	}
	n.Payload = payload
	if n.DeadlineAt, err = Deadline(now, n.TimeoutMs, "run deadline"); err != nil {
		return NormalizedCreate{}, err
	}
	if n.ExpiresAt, err = Deadline(now, c.IdempotencyRetentionMs, "idempotency expiry"); err != nil {
		return NormalizedCreate{}, err
	}
	if n.AvailableAt, err = schedule(req, now, n.DeadlineAt); err != nil {
		return NormalizedCreate{}, err
	}
	if n.Outbox, err = NormalizeOutbox(req.Outbox); err != nil {
		return NormalizedCreate{}, err
	}
	n.Fingerprint = Fingerprint(FingerprintInput{
		Tenant: n.Tenant, Operation: n.Operation, SchemaVersion: policy.SchemaVersion,
		MaxAttempts: n.MaxAttempts, TimeoutMs: n.TimeoutMs, Payload: n.Payload,
		AvailableAt: req.AvailableAt, DelayMs: req.DelayMs, Outbox: outboxFingerprint(n.Outbox),
	})
	return n, nil
}

// schedule returns when a created run's job becomes claimable: now, or the
// request's AvailableAt (not before now), or now + DelayMs (checked). The
// time must be before the run's deadline, which counts from admission: a job
// that became available after it could never renew its lease.
func schedule(req CreateRunRequest, now, deadline int64) (int64, error) {
	switch {
	case req.AvailableAt != 0 && req.DelayMs != 0:
		return 0, Errorf(CodeInvalidArgument, "available_at %d and delay_ms %d are both set; send at most one", req.AvailableAt, req.DelayMs)
	case req.AvailableAt < 0:
		return 0, Errorf(CodeInvalidArgument, "available_at %d is negative: times are ms since the epoch, >= 0", req.AvailableAt)
	case req.DelayMs < 0:
		return 0, Errorf(CodeInvalidArgument, "delay_ms %d is negative", req.DelayMs)
	}
	at, err := Deadline(now, req.DelayMs, "available time")
	if err != nil {
		return 0, err
	}
	at = max(at, req.AvailableAt)
	if at >= deadline {
		return 0, Errorf(CodeInvalidArgument, "the run would become available at %d, not before its deadline %d (admission + timeout_ms): schedule it sooner or raise timeout_ms", at, deadline)
	}
	return at, nil
}

// CheckClaim validates a claim at time now and returns the lease expiry.
func (c Config) CheckClaim(req ClaimRequest, now int64) (expiresAt int64, err error) {
	if err := CheckNow(now); err != nil {
		return 0, err
	}
	if err := c.CheckTenant(req.Tenant); err != nil {
		return 0, err
	}
	if err := CheckWorker(req.Worker); err != nil {
		return 0, err
	}
	if err := c.CheckLeaseMs(req.LeaseMs); err != nil {
		return 0, err
	}
	if err := CheckLimit(req.Limit); err != nil {
		return 0, err
	}
	return Deadline(now, req.LeaseMs, "lease expiry")
}

// CheckRenew validates a renewal at time now and returns the new expiry.
func (c Config) CheckRenew(req RenewRequest, now int64) (expiresAt int64, err error) {
	if err := CheckNow(now); err != nil {
		return 0, err
	}
	if err := c.CheckLeaseRef(req.Lease); err != nil {
		return 0, err
	}
	if err := c.CheckLeaseMs(req.LeaseMs); err != nil {
		return 0, err
	}
	return Deadline(now, req.LeaseMs, "lease expiry")
}

// CheckComplete validates a completion and returns the canonical result
// ("" when req.Result is empty). Its outbox messages are checked last
// (NormalizeOutbox, which a store calls again for their canonical form).
func (c Config) CheckComplete(req CompleteRequest, now int64) (result string, err error) {
	if err := CheckNow(now); err != nil {
		return "", err
	}
	if err := c.CheckLeaseRef(req.Lease); err != nil {
		return "", err
	}
	if len(req.Result) > 0 {
		if result, err = Canonicalize(req.Result); err != nil {
			return "", err
		}
	}
	if _, err := NormalizeOutbox(req.Outbox); err != nil {
		return "", err
	}
	return result, nil
}

// CheckRetry validates a retry request.
func (c Config) CheckRetry(req RetryRequest, now int64) error {
	if err := CheckNow(now); err != nil {
		return err
	}
	if err := c.CheckLeaseRef(req.Lease); err != nil {
		return err
	}
	if err := CheckErrorCode("error code", req.ErrorCode); err != nil {
		return err
	}
	if req.RetryAfterMs < 0 {
		return Errorf(CodeInvalidArgument, "retry-after %d ms is negative", req.RetryAfterMs)
	}
	return nil
}

// CheckFail validates a terminal failure.
func (c Config) CheckFail(req FailRequest, now int64) error {
	if err := CheckNow(now); err != nil {
		return err
	}
	if err := c.CheckLeaseRef(req.Lease); err != nil {
		return err
	}
	return CheckErrorCode("error code", req.ErrorCode)
}

// CheckCancel validates a cancel and returns the reason to record.
func (c Config) CheckCancel(req CancelRequest, now int64) (reason string, err error) {
	if err := CheckNow(now); err != nil {
		return "", err
	}
	if err := c.CheckRunRef(req.Tenant, req.RunID); err != nil {
		return "", err
	}
	if req.Reason == "" {
		return DefaultCancelReason, nil
	}
	return req.Reason, CheckErrorCode("cancel reason", req.Reason)
}

// CheckRelease validates a release.
func (c Config) CheckRelease(req ReleaseRequest, now int64) error {
	if err := CheckNow(now); err != nil {
		return err
	}
	return c.CheckLeaseRef(req.Lease)
}

// CheckReap validates a reap.
func (c Config) CheckReap(req ReapRequest, now int64) error {
	if err := CheckNow(now); err != nil {
		return err
	}
	if err := c.CheckTenant(req.Tenant); err != nil {
		return err
	}
	return CheckLimit(req.Limit)
}

// CheckPurge validates a purge.
func CheckPurge(req PurgeRequest, now int64) error {
	if err := CheckNow(now); err != nil {
		return err
	}
	return CheckLimit(req.Limit)
}

// CheckPurgeRuns validates a run purge.
func (c Config) CheckPurgeRuns(req PurgeRunsRequest, now int64) error {
	if err := CheckNow(now); err != nil {
		return err
	}
	if err := c.CheckTenant(req.Tenant); err != nil {
		return err
	}
	return CheckLimit(req.Limit)
}

// RetiredBy returns the latest finishing time of a run that is retired at
// now (a run whose terminal event is at or before it has been terminal for
// RunRetentionMs), and false when retention is off. The result may be
// negative: then no run is retired yet.
func (c Config) RetiredBy(now int64) (int64, bool) {
	if c.RunRetentionMs == 0 {
		return 0, false
	}
	return now - c.RunRetentionMs, true // both are >= 0: no overflow
}

// CheckReplay validates a replay.
func (c Config) CheckReplay(req ReplayRequest, now int64) error {
	if err := CheckNow(now); err != nil {
		return err
	}
	if err := c.CheckRunRef(req.Tenant, req.RunID); err != nil {
		return err
	}
	if err := CheckRunID("new run id", req.NewRunID); err != nil {
		return err
	}
	return checkName("actor", req.Actor, MaxWorkerBytes, isPrintableASCII)
}

// CheckReserveEffect validates an effect reservation.
func (c Config) CheckReserveEffect(req ReserveEffectRequest, now int64) error {
	if err := CheckNow(now); err != nil {
		return err
	}
	if err := c.CheckLeaseRef(req.Lease); err != nil {
		return err
	}
	return checkEffectKey(req.Step, req.Key)
}

// CheckRecordEffect validates RecordEffect (reconcile false) or
// ReconcileEffect (reconcile true). Record accepts succeeded, failed and
// unknown; reconcile accepts only succeeded and failed.
func (c Config) CheckRecordEffect(req RecordEffectRequest, now int64, reconcile bool) error {
	if err := CheckNow(now); err != nil {
		return err
	}
	if err := c.CheckLeaseRef(req.Lease); err != nil {
		return err
	}
	if err := checkEffectKey(req.Step, req.Key); err != nil {
		return err
	}
	switch req.State {
	case EffectSucceeded, EffectFailed:
	case EffectUnknown:
		if reconcile {
			return Errorf(CodeInvalidArgument, "reconcile must resolve the effect to succeeded or failed, not unknown")
		}
	default:
		return Errorf(CodeInvalidArgument, "effect outcome %q: want succeeded, failed or unknown", req.State)
	}
	if len(req.ProviderRef) > MaxProviderBytes {
		return Errorf(CodeInvalidArgument, "provider reference is %d bytes; the limit is %d", len(req.ProviderRef), MaxProviderBytes)
	}
	for i := 0; i < len(req.ProviderRef); i++ {
		if !isPrintableASCII(req.ProviderRef[i]) {
			return Errorf(CodeInvalidArgument, "provider reference has a byte 0x%02x at offset %d that is not allowed", req.ProviderRef[i], i)
		}
	}
	return nil
}

// CheckReconcileEffect validates ReconcileEffect: RecordEffect's checks, and
// the outcome must be succeeded or failed.
func (c Config) CheckReconcileEffect(req ReconcileEffectRequest, now int64) error {
	return c.CheckRecordEffect(RecordEffectRequest(req), now, true)
}

func checkEffectKey(step, key string) error {
	if err := checkName("effect step", step, MaxStepBytes, isIDByte); err != nil {
		return err
	}
	return checkName("effect key", key, MaxKeyBytes, isPrintableASCII)
}

// String renders a lease ref for messages.
func (l LeaseRef) String() string {
	return fmt.Sprintf("%s/%s@%d by %q", l.Tenant, l.RunID, l.Generation, l.Owner)
}
