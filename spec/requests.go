package spec

// Op names an operation of the contract: a Store method (or an optional
// capability's). Stores pass it to Hooks; the operation table, the model,
// the harness, scenario files and reports use the same names.
type Op string

const (
	OpCreateRun       Op = "create_run"
	OpClaim           Op = "claim"
	OpRenew           Op = "renew"
	OpComplete        Op = "complete"
	OpRetry           Op = "retry"
	OpFail            Op = "fail"
	OpCancel          Op = "cancel"
	OpRelease         Op = "release"
	OpReap            Op = "reap"
	OpPurge           Op = "purge_idempotency"
	OpPurgeRuns       Op = "purge_runs"
	OpReplay          Op = "replay"
	OpReserveEffect   Op = "reserve_effect"
	OpRecordEffect    Op = "record_effect"
	OpReconcileEffect Op = "reconcile_effect"
	OpClaimOutbox     Op = "claim_outbox"
	OpMarkDelivered   Op = "mark_delivered"

	// The reads: they read no clock, write nothing and call no hook.
	OpGetRun   Op = "get_run"
	OpGetJob   Op = "get_job"
	OpEvents   Op = "events"
	OpAttempts Op = "attempts"
	OpEffects  Op = "effects"
	OpSnapshot Op = "snapshot"
)

// Request is the request of one operation of the contract. Each request type
// names its operation, so that the type alone says which Store method it is
// for; the operation table (Operations) is keyed by that name. The JSON
// field names of the request types are the contract's wire names: history
// files, scenario files and the store protocol all use them.
type Request interface {
	// Op names the operation the request is for.
	Op() Op
	// TenantScope returns the one tenant whose rows the operation may read
	// or write, and false when it may touch several (PurgeIdempotency, a
	// Snapshot of every tenant).
	TenantScope() (tenant string, scoped bool)
	// Leases returns the leases a guarded write presents (one per lease
	// guard it checks), or nil for an operation that is not guarded by a
	// lease.
	Leases() []LeaseRef
}

// CreateRunRequest asks for a run to be admitted.
type CreateRunRequest struct {
	Tenant         string `json:"tenant"`
	Operation      string `json:"operation,omitempty"`
	IdempotencyKey string `json:"idempotency_key"`
	// RunID is proposed by the caller (for example a UUID). A replayed request
	// returns the original run whatever id it proposes.
	RunID   string `json:"run_id"`
	Payload []byte `json:"payload,omitempty"` // JSON; canonicalized with RFC 8785 before storing and hashing
	// MaxAttempts and TimeoutMs default to the operation's policy when zero.
	// TimeoutMs counts from admission: the run's deadline is now+TimeoutMs.
	MaxAttempts int   `json:"max_attempts,omitempty"`
	TimeoutMs   int64 `json:"timeout_ms,omitempty"`
	// AvailableAt and DelayMs schedule the run: no claim takes its job before
	// AvailableAt (an absolute time, ms; a time in the past means now) or
	// before DelayMs after admission. Zero means not set (available now); at
	// most one may be set, and the job must become available before the
	// run's deadline. The schedule is part of the fingerprint as given, so a
	// retry must send the same field with the same value to be a replay.
	AvailableAt int64 `json:"available_at,omitempty"`
	DelayMs     int64 `json:"delay_ms,omitempty"`
	// Outbox are messages written with the run, in the same transaction,
	// only when this request creates it (never on an idempotent replay);
	// they are part of the fingerprint when set.
	Outbox []Message `json:"outbox,omitempty"`
}

// CreateRunResult is the admitted run; Replayed is true when an earlier
// request with the same key and fingerprint created it.
type CreateRunResult struct {
	Run      Run  `json:"run"`
	Replayed bool `json:"replayed"`
}

// ClaimRequest asks for up to Limit jobs of one tenant.
type ClaimRequest struct {
	Tenant  string `json:"tenant"`
	Worker  string `json:"worker"`
	LeaseMs int64  `json:"lease_ms"`
	Limit   int    `json:"limit,omitempty"` // 1 for a single claim
}

// RenewRequest extends a lease.
type RenewRequest struct {
	Lease   LeaseRef `json:"lease"`
	LeaseMs int64    `json:"lease_ms"`
}

// CompleteRequest completes a run with an optional JSON result.
type CompleteRequest struct {
	Lease  LeaseRef `json:"lease"`
	Result []byte   `json:"result,omitempty"` // JSON or empty
	// Outbox are messages written with the completion, in its transaction
	// and under its lease guard: a completion refused writes none.
	Outbox []Message `json:"outbox,omitempty"`
}

// RetryRequest reports a retryable failure.
type RetryRequest struct {
	Lease     LeaseRef `json:"lease"`
	ErrorCode string   `json:"error_code"`
	// RetryAfterMs is a delay the failing dependency asked for (0: none). It is
	// honoured up to Backoff.RetryAfterCapMs.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
}

// FailRequest reports a terminal failure.
type FailRequest struct {
	Lease     LeaseRef `json:"lease"`
	ErrorCode string   `json:"error_code"`
}

// CancelRequest cancels a run.
type CancelRequest struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
	Reason string `json:"reason,omitempty"` // an error-code-shaped reason; "" means "cancelled"
}

// ReleaseRequest gives a lease back.
type ReleaseRequest struct {
	Lease LeaseRef `json:"lease"`
}

// ReapRequest asks for expired, out-of-budget jobs of one tenant to be made dead.
type ReapRequest struct {
	Tenant string `json:"tenant"`
	Limit  int    `json:"limit,omitempty"`
}

// PurgeRequest asks for expired idempotency records to be deleted.
type PurgeRequest struct {
	Limit int `json:"limit,omitempty"`
}

// PurgeRunsRequest asks for up to Limit retired replay lineages of one
// tenant to be deleted with every row that belongs to them (SPEC.md,
// PurgeRuns): a run is retired once it has been terminal for
// Config.RunRetentionMs and no live idempotency record names it.
type PurgeRunsRequest struct {
	Tenant string `json:"tenant"`
	Limit  int    `json:"limit,omitempty"`
}

// ReplayRequest asks for a dead run to be run again under a new identity.
type ReplayRequest struct {
	Tenant   string `json:"tenant"`
	RunID    string `json:"run_id"` // the failed run
	NewRunID string `json:"new_run_id"`
	Actor    string `json:"actor"` // who asked, for the audit event
}

// ReserveEffectRequest reserves an effect key for the caller's lease.
type ReserveEffectRequest struct {
	Lease LeaseRef `json:"lease"`
	Step  string   `json:"step"`
	Key   string   `json:"key"`
}

// EffectReservation is the ledger row after ReserveEffect and what to do next.
type EffectReservation struct {
	Effect   Effect         `json:"effect"`
	Decision EffectDecision `json:"decision"`
}

// RecordEffectRequest records the outcome of a call the caller's generation
// reserved.
type RecordEffectRequest struct {
	Lease       LeaseRef    `json:"lease"`
	Step        string      `json:"step"`
	Key         string      `json:"key"`
	State       EffectState `json:"state"`
	ProviderRef string      `json:"provider_ref,omitempty"`
}

// ReconcileEffectRequest resolves an unknown or reserved effect to the
// outcome the external system reports. It has RecordEffectRequest's fields.
type ReconcileEffectRequest RecordEffectRequest

// ClaimOutboxRequest asks for up to Limit claimable outbox messages (SPEC.md,
// ClaimOutbox), of one tenant or, with Tenant "", of every tenant, claimed
// for Relay until now+LeaseMs.
type ClaimOutboxRequest struct {
	Tenant  string `json:"tenant,omitempty"`
	Relay   string `json:"relay"`
	LeaseMs int64  `json:"lease_ms"`
	Limit   int    `json:"limit,omitempty"`
}

// MarkDeliveredRequest marks outbox messages delivered: each pending one
// named becomes delivered, whoever claimed it; one already delivered or gone
// is left as it is.
type MarkDeliveredRequest struct {
	Messages []OutboxKey `json:"messages"`
}

// GetRunRequest reads one run (Store.GetRun).
type GetRunRequest struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
}

// GetJobRequest reads one run's job (Store.GetJob).
type GetJobRequest struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
}

// EventsRequest reads one run's events (Store.Events).
type EventsRequest struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
}

// AttemptsRequest reads one run's attempts (Store.Attempts).
type AttemptsRequest struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
}

// EffectsRequest reads one run's effect ledger rows (Store.Effects).
type EffectsRequest struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
}

// SnapshotRequest reads every row (Store.Snapshot), restricted to one
// tenant's rows when Tenant is set.
type SnapshotRequest struct {
	Tenant string `json:"tenant,omitempty"`
}

func (CreateRunRequest) Op() Op       { return OpCreateRun }
func (ClaimRequest) Op() Op           { return OpClaim }
func (RenewRequest) Op() Op           { return OpRenew }
func (CompleteRequest) Op() Op        { return OpComplete }
func (RetryRequest) Op() Op           { return OpRetry }
func (FailRequest) Op() Op            { return OpFail }
func (CancelRequest) Op() Op          { return OpCancel }
func (ReleaseRequest) Op() Op         { return OpRelease }
func (ReapRequest) Op() Op            { return OpReap }
func (PurgeRequest) Op() Op           { return OpPurge }
func (PurgeRunsRequest) Op() Op       { return OpPurgeRuns }
func (ReplayRequest) Op() Op          { return OpReplay }
func (ReserveEffectRequest) Op() Op   { return OpReserveEffect }
func (RecordEffectRequest) Op() Op    { return OpRecordEffect }
func (ReconcileEffectRequest) Op() Op { return OpReconcileEffect }
func (ClaimOutboxRequest) Op() Op     { return OpClaimOutbox }
func (MarkDeliveredRequest) Op() Op   { return OpMarkDelivered }
func (GetRunRequest) Op() Op          { return OpGetRun }
func (GetJobRequest) Op() Op          { return OpGetJob }
func (EventsRequest) Op() Op          { return OpEvents }
func (AttemptsRequest) Op() Op        { return OpAttempts }
func (EffectsRequest) Op() Op         { return OpEffects }
func (SnapshotRequest) Op() Op        { return OpSnapshot }

func (r CreateRunRequest) TenantScope() (string, bool)       { return r.Tenant, true }
func (r ClaimRequest) TenantScope() (string, bool)           { return r.Tenant, true }
func (r RenewRequest) TenantScope() (string, bool)           { return r.Lease.Tenant, true }
func (r CompleteRequest) TenantScope() (string, bool)        { return r.Lease.Tenant, true }
func (r RetryRequest) TenantScope() (string, bool)           { return r.Lease.Tenant, true }
func (r FailRequest) TenantScope() (string, bool)            { return r.Lease.Tenant, true }
func (r CancelRequest) TenantScope() (string, bool)          { return r.Tenant, true }
func (r ReleaseRequest) TenantScope() (string, bool)         { return r.Lease.Tenant, true }
func (r ReapRequest) TenantScope() (string, bool)            { return r.Tenant, true }
func (PurgeRequest) TenantScope() (string, bool)             { return "", false }
func (r PurgeRunsRequest) TenantScope() (string, bool)       { return r.Tenant, true }
func (r ReplayRequest) TenantScope() (string, bool)          { return r.Tenant, true }
func (r ReserveEffectRequest) TenantScope() (string, bool)   { return r.Lease.Tenant, true }
func (r RecordEffectRequest) TenantScope() (string, bool)    { return r.Lease.Tenant, true }
func (r ReconcileEffectRequest) TenantScope() (string, bool) { return r.Lease.Tenant, true }
func (r ClaimOutboxRequest) TenantScope() (string, bool)     { return r.Tenant, r.Tenant != "" }
func (r GetRunRequest) TenantScope() (string, bool)          { return r.Tenant, true }
func (r GetJobRequest) TenantScope() (string, bool)          { return r.Tenant, true }
func (r EventsRequest) TenantScope() (string, bool)          { return r.Tenant, true }
func (r AttemptsRequest) TenantScope() (string, bool)        { return r.Tenant, true }
func (r EffectsRequest) TenantScope() (string, bool)         { return r.Tenant, true }
func (r SnapshotRequest) TenantScope() (string, bool)        { return r.Tenant, r.Tenant != "" }

func (CreateRunRequest) Leases() []LeaseRef         { return nil }
func (ClaimRequest) Leases() []LeaseRef             { return nil }
func (r RenewRequest) Leases() []LeaseRef           { return []LeaseRef{r.Lease} }
func (r CompleteRequest) Leases() []LeaseRef        { return []LeaseRef{r.Lease} }
func (r RetryRequest) Leases() []LeaseRef           { return []LeaseRef{r.Lease} }
func (r FailRequest) Leases() []LeaseRef            { return []LeaseRef{r.Lease} }
func (CancelRequest) Leases() []LeaseRef            { return nil }
func (r ReleaseRequest) Leases() []LeaseRef         { return []LeaseRef{r.Lease} }
func (ReapRequest) Leases() []LeaseRef              { return nil }
func (PurgeRequest) Leases() []LeaseRef             { return nil }
func (PurgeRunsRequest) Leases() []LeaseRef         { return nil }
func (ReplayRequest) Leases() []LeaseRef            { return nil }
func (r ReserveEffectRequest) Leases() []LeaseRef   { return []LeaseRef{r.Lease} }
func (r RecordEffectRequest) Leases() []LeaseRef    { return []LeaseRef{r.Lease} }
func (r ReconcileEffectRequest) Leases() []LeaseRef { return []LeaseRef{r.Lease} }
func (ClaimOutboxRequest) Leases() []LeaseRef       { return nil }
func (MarkDeliveredRequest) Leases() []LeaseRef     { return nil }
func (GetRunRequest) Leases() []LeaseRef            { return nil }
func (GetJobRequest) Leases() []LeaseRef            { return nil }
func (EventsRequest) Leases() []LeaseRef            { return nil }
func (AttemptsRequest) Leases() []LeaseRef          { return nil }
func (EffectsRequest) Leases() []LeaseRef           { return nil }
func (SnapshotRequest) Leases() []LeaseRef          { return nil }

// TenantScope implements Request: the messages' tenant when they share one.
func (r MarkDeliveredRequest) TenantScope() (string, bool) {
	if len(r.Messages) == 0 {
		return "", false
	}
	t := r.Messages[0].Tenant
	for _, m := range r.Messages[1:] {
		if m.Tenant != t {
			return "", false
		}
	}
	return t, true
}
