package queueproto

import "encoding/json"

// Version is the protocol version this package speaks (docs/ADAPTERS.md).
const Version = 1

// The runner's requests, by name. Every process's first request is OpHello,
// its second OpOpen.
const (
	OpHello        = "hello"
	OpOpen         = "open"
	OpEnqueue      = "enqueue"
	OpState        = "state"
	OpJobs         = "jobs"
	OpRows         = "rows"
	OpCancel       = "cancel"
	OpExpire       = "expire"
	OpMakeDue      = "make_due"
	OpStart        = "start"
	OpStop         = "stop"
	OpFinish       = "finish"
	OpHeartbeat    = "heartbeat"
	OpCompleteInTx = "complete_in_tx"
)

// Ops lists every request in the order docs/ADAPTERS.md documents them.
var Ops = []string{OpHello, OpOpen, OpEnqueue, OpState, OpJobs, OpRows, OpCancel, OpExpire,
	OpMakeDue, OpStart, OpStop, OpFinish, OpHeartbeat, OpCompleteInTx}

// EventStarted is the adapter's one event: a handler started an attempt.
const EventStarted = "started"

// The error codes an adapter may answer with.
const (
	// ErrRejected: the queue refused the request (a key taken by another
	// payload, a cancel of a finished job when the queue answers with an
	// error). A probe reads it as the queue's answer, not as a failure.
	ErrRejected = "rejected"
	// ErrUnsupported: the request needs a feature the adapter declared
	// absent in its hello.
	ErrUnsupported = "unsupported"
	// ErrFailed: the queue or its database failed (connection lost, a
	// query refused): the request's outcome is unknown.
	ErrFailed = "failed"
	// ErrBadRequest: the request is malformed or names an unknown op or
	// handle: a bug in the runner or the adapter.
	ErrBadRequest = "bad_request"
)

// ErrorCodes lists the codes above.
var ErrorCodes = []string{ErrRejected, ErrUnsupported, ErrFailed, ErrBadRequest}

// The features an adapter declares in its hello. A probe that needs a
// feature the queue does not offer is reported not applicable, with the
// feature's citation.
const (
	// FeatureKey: enqueue deduplicates by a caller's key.
	FeatureKey = "key"
	// FeatureMaxAttempts: enqueue takes a per-job attempt budget.
	FeatureMaxAttempts = "max_attempts"
	// FeatureCancel: a job can be cancelled by its id.
	FeatureCancel = "cancel"
	// FeatureTxEnqueue: enqueue can run inside the caller's own database
	// transaction (enqueue with tx).
	FeatureTxEnqueue = "tx_enqueue"
	// FeatureTxComplete: a handler can complete its job inside its own
	// database transaction (complete_in_tx).
	FeatureTxComplete = "tx_complete"
	// FeatureHeartbeat: a handler can extend its lease or lock on demand
	// (heartbeat).
	FeatureHeartbeat = "heartbeat"
)

// Features lists every feature name; a hello must declare each of them.
var Features = []string{FeatureKey, FeatureMaxAttempts, FeatureCancel, FeatureTxEnqueue, FeatureTxComplete, FeatureHeartbeat}

// The databases an adapter may need (Hello.Needs).
const (
	NeedPostgres = "postgres"
	NeedRedis    = "redis"
	NeedDir      = "dir" // an embedded database in a directory of its own (SQLite)
)

// The delivery semantics a queue's documentation may state (Delivery).
const (
	AtLeastOnce = "at-least-once"
	ExactlyOnce = "exactly-once"
	AtMostOnce  = "at-most-once"
)

// The normalized job states (JobInfo.State).
const (
	StateWaiting   = "waiting"   // will run once due: available, scheduled, retryable, delayed
	StateRunning   = "running"   // a worker holds it: running, active, locked, leased
	StateCompleted = "completed" // finished successfully
	StateFailed    = "failed"    // finished unsuccessfully for good: discarded, dead, failed with no retry left
	StateCancelled = "cancelled" // cancelled
	StateMissing   = "missing"   // the queue has no record of the job
)

// States lists the normalized states.
var States = []string{StateWaiting, StateRunning, StateCompleted, StateFailed, StateCancelled, StateMissing}

// The instructions finish carries (FinishParams.Do).
const (
	DoComplete = "complete" // the handler returns success
	DoRetry    = "retry"    // the handler returns an ordinary error: the queue's retry policy applies
)

// The outcomes of cancel (CancelResult.Outcome).
const (
	CancelCancelled = "cancelled" // the queue says the job is cancelled now
	CancelRequested = "requested" // the queue accepted a cancel it will act on later (a running job)
	CancelRefused   = "refused"   // the queue says the job cannot be cancelled (it finished)
)

// The transaction endings enqueue may ask for (EnqueueParams.Tx).
const (
	TxCommit   = "commit"
	TxRollback = "rollback"
)

// MaxLine bounds one message.
const MaxLine = 16 << 20

// Request is a line from the runner.
type Request struct {
	ID     int64           `json:"id"`
	Op     string          `json:"op"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Message is a line from the adapter: a reply (InReplyTo and exactly one of
// Result or Error) or an event (Event and its fields).
type Message struct {
	InReplyTo *int64          `json:"in_reply_to,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *Error          `json:"error,omitempty"`
	Event     string          `json:"event,omitempty"`
	*Started
}

// Error is an error reply.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Started is the started event's fields: a handler began an attempt of a
// job and waits, held, for a finish naming Handle.
type Started struct {
	// Handle names the held handler, unique within the process.
	Handle string `json:"handle"`
	// Job is the job's id.
	Job string `json:"job"`
	// Attempt is the queue's attempt number as the handler sees it (1 on
	// the first start).
	Attempt int `json:"attempt"`
	// Payload is the job's payload as the handler received it.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// HelloParams are hello's params.
type HelloParams struct {
	Protocol int `json:"protocol"`
}

// Hello is hello's result: what the queue is, offers and promises, and how
// the adapter configured it.
type Hello struct {
	Protocol int    `json:"protocol"`
	System   string `json:"system"`
	// Version is the queue's version, as pinned by the adapter.
	Version  string `json:"version"`
	Language string `json:"language"`
	// Needs names the database the adapter needs (Need*).
	Needs string `json:"needs"`
	// Features declares every name of Features.
	Features map[string]Feature `json:"features"`
	// Delivery is what the queue's documentation promises about how often
	// a handler runs.
	Delivery Delivery `json:"delivery"`
	// Exhausted is the documented state of a job whose every attempt
	// failed.
	Exhausted Exhausted `json:"exhausted"`
	// DeletesCompleted is set when the queue deletes a job that completed,
	// so that state answers missing for it.
	DeletesCompleted bool `json:"deletes_completed"`
	// ServerArgs are arguments for a private database server the runner
	// starts for this queue (the db-restart probe), as the queue's
	// documentation recommends for production (Redis: --appendonly yes).
	ServerArgs []string `json:"server_args,omitempty"`
	// RecoveryMs bounds how long the queue's own machinery may take, after
	// expire or make_due, to act on the job (rescue it, retry it, run it):
	// its longest maintenance interval plus its polling interval.
	RecoveryMs int64 `json:"recovery_ms"`
	// Config is how the adapter configured the queue, setting by setting.
	Config []Setting `json:"config"`
	// References are the queue's documentation and issues that bear on a
	// probe's outcome.
	References []Reference `json:"references"`
}

// Feature declares one feature; Doc cites the queue's documentation,
// required when the feature is absent.
type Feature struct {
	Supported bool   `json:"supported"`
	Doc       string `json:"doc,omitempty"`
	Note      string `json:"note,omitempty"`
}

// Delivery is the queue's documented delivery promise.
type Delivery struct {
	Semantics string `json:"semantics"`
	Doc       string `json:"doc"`
	Quote     string `json:"quote,omitempty"`
}

// Exhausted is the documented end of a job out of attempts.
type Exhausted struct {
	// RawState is the queue's own state name for it ("discarded").
	RawState string `json:"raw_state"`
	Doc      string `json:"doc"`
}

// Setting is one configuration setting of the queue and why it has its
// value.
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Doc   string `json:"doc,omitempty"`
	Why   string `json:"why,omitempty"`
}

// Reference is a document or issue that bears on a probe: a violation of
// Probe is reported as known, with it.
type Reference struct {
	Probe string `json:"probe"`
	URL   string `json:"url"`
	Title string `json:"title"`
	Says  string `json:"says,omitempty"`
}

// OpenParams are open's params: where the process's queue lives.
type OpenParams struct {
	// Namespace is unique to one probe run: a PostgreSQL schema name, a
	// Redis key prefix, a queue name ([a-z][a-z0-9_]*, at most 40 bytes).
	Namespace string `json:"namespace"`
	// Postgres is a DSN, when the adapter needs postgres.
	Postgres string `json:"postgres,omitempty"`
	// Redis is a URL, when the adapter needs redis.
	Redis string `json:"redis,omitempty"`
	// Dir is a directory that belongs to the run, when the adapter needs dir.
	Dir string `json:"dir,omitempty"`
	// Create is set for the run's first process: it creates the schema,
	// runs the migrations, creates the queue.
	Create bool `json:"create"`
	// Process names the process in logs and as its worker id.
	Process string `json:"process"`
}

// EnqueueParams are enqueue's params.
type EnqueueParams struct {
	Key         string          `json:"key,omitempty"`
	Payload     json.RawMessage `json:"payload"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	// Tx, when set, enqueues inside a transaction of the adapter's own on
	// the queue's database, which then commits or rolls back (Tx*).
	Tx string `json:"tx,omitempty"`
}

// EnqueueResult is enqueue's result.
type EnqueueResult struct {
	// Job is the id of the job the enqueue created or was deduplicated
	// onto; "" when the queue did not say.
	Job string `json:"job"`
	// Duplicate says whether the queue reported a deduplication; absent
	// when it does not say.
	Duplicate *bool `json:"duplicate,omitempty"`
	// SeenInTx: with Tx set, the job was read back inside the transaction
	// before it ended.
	SeenInTx bool `json:"seen_in_tx,omitempty"`
}

// JobParams name one job.
type JobParams struct {
	Job string `json:"job"`
}

// JobInfo is one job as the queue has it (state's result, jobs' elements).
type JobInfo struct {
	Job      string `json:"job"`
	Key      string `json:"key,omitempty"`
	State    string `json:"state"`
	RawState string `json:"raw_state,omitempty"`
	// Attempt is the queue's count of attempts started (0 before the
	// first).
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
}

// JobsResult is jobs' result: every job of the namespace.
type JobsResult struct {
	Jobs []JobInfo `json:"jobs"`
}

// RowsResult is rows' result: the queue's own records of a job, raw.
type RowsResult struct {
	Rows []json.RawMessage `json:"rows"`
}

// CancelResult is cancel's result.
type CancelResult struct {
	Outcome  string `json:"outcome"`
	RawState string `json:"raw_state,omitempty"`
}

// StartParams are start's params.
type StartParams struct {
	Concurrency int `json:"concurrency"`
}

// FinishParams are finish's params.
type FinishParams struct {
	Handle string `json:"handle"`
	Do     string `json:"do"`
}

// HandleParams name one held handler.
type HandleParams struct {
	Handle string `json:"handle"`
}

// HeartbeatResult is heartbeat's result.
type HeartbeatResult struct {
	Accepted bool `json:"accepted"`
}

// CompleteInTxParams are complete_in_tx's params.
type CompleteInTxParams struct {
	Handle string `json:"handle"`
	Commit bool   `json:"commit"`
}

// CompleteInTxResult is complete_in_tx's result.
type CompleteInTxResult struct {
	// SeenInTx: the job read back as completed inside the transaction
	// before it ended.
	SeenInTx bool `json:"seen_in_tx"`
}

// Empty is the result of a request that returns nothing ({}).
type Empty struct{}
