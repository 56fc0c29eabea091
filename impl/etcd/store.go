package etcd

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/spec"
)

// Clock is a source of "now" in milliseconds since the Unix epoch. The
// porting kit's manual clock satisfies it; so does ClusterClock.
type Clock interface {
	Now() int64
}

// Options configures a Store.
type Options struct {
	Config spec.Config
	// Clock is read once per attempt of a writing operation, after the
	// operation's in-process locks are held. Nil: the store reads the
	// cluster clock (see ClusterClock in the package doc), which Open
	// starts on the client.
	Clock Clock
	// Random draws retry jitter. Default: a PCG seeded from the time.
	Random spec.Random
	// Hook, when set, runs at both spec.HookPoints of every writing
	// operation (tests and fault injection).
	Hook spec.Hook
	// Logger receives one debug line per refused guarded write and per
	// retried conflict. Default: none.
	Logger *slog.Logger
	// SharedLocks: stores of one process on the same prefix queue their
	// writers to one run behind each other (see the package doc). Off,
	// each store is on its own, as if it ran in a process of its own, and
	// only the transactions' compares order the writers.
	SharedLocks bool
	// MaxConflicts is how many times one operation is tried again after its
	// transaction's compares failed before it reports CodeUnavailable.
	// Default 64.
	MaxConflicts int
}

// Store is the etcd implementation of spec.Store, spec.BatchCompleter and
// spec.BatchCreator, on one key prefix of a cluster. It is safe for concurrent use.
type Store struct {
	cli    *clientv3.Client
	owned  bool // Close closes cli
	prefix string
	cfg    spec.Config
	clock  Clock
	random spec.Random
	rmu    sync.Mutex // guards random: spec.Random need not be safe for concurrent use
	hook   spec.Hook
	log    *slog.Logger
	locks  *lockTable
	tries  int

	waiting atomic.Int64 // this Store's calls waiting in locks (LockWaits)

	applied, fenced, unresolved atomic.Int64 // resolve's answers

	mmu      sync.Mutex // guards the commit markers' lease
	mlease   clientv3.LeaseID
	mgranted time.Time
}

var (
	_ spec.Store          = (*Store)(nil)
	_ spec.BatchCompleter = (*Store)(nil)
	_ spec.BatchCreator   = (*Store)(nil)
)

// Open returns a store on prefix of the cluster cli is connected to. The
// prefix is the database: stores on the same prefix share every record,
// stores on different prefixes share nothing. Close does not close cli.
func Open(cli *clientv3.Client, prefix string, opts Options) (*Store, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if prefix == "" || strings.ContainsRune(prefix, sep) {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "etcd: the key prefix must be non-empty and must not contain NUL")
	}
	if opts.Clock == nil {
		opts.Clock = NewClusterClock(cli, prefix)
	}
	if opts.Random == nil {
		opts.Random = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6c65617365))
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxConflicts <= 0 {
		opts.MaxConflicts = 64
	}
	lt := newLockTable()
	if opts.SharedLocks {
		lt = sharedLockTable(prefix)
	}
	return &Store{cli: cli, prefix: prefix, cfg: opts.Config, clock: opts.Clock, random: opts.Random,
		hook: opts.Hook, log: opts.Logger, locks: lt, tries: opts.MaxConflicts}, nil
}

// Dial connects to the endpoints and opens a store that closes its client
// on Close.
func Dial(endpoints []string, prefix string, opts Options) (*Store, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second})
	if err != nil {
		return nil, &spec.Error{Code: spec.CodeUnavailable, Message: "etcd: cannot connect", Err: err}
	}
	s, err := Open(cli, prefix, opts)
	if err != nil {
		cli.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// Close closes the client if the store opened it.
func (s *Store) Close() error {
	if s.owned {
		return s.cli.Close()
	}
	return nil
}

// Client is the store's etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }

func (s *Store) jitter() int64 {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.random.Int64N(s.cfg.Backoff.JitterBound())
}

// errConflict says the transaction's compares failed: another writer
// changed what the attempt read. The attempt is made again.
var errConflict = errors.New("etcd: a compared key changed before the commit")

// write runs one writing operation: it takes the in-process locks, then per
// attempt reads the clock once, lets fn read (at one revision) and stage its
// writes, calls the hooks around the one Txn and commits. fn must only
// assign its results, never append: it may run again after a conflict.
func (s *Store) write(ctx context.Context, op spec.Op, locks []string, fn func(w *wtx, now int64) error) error {
	release, err := s.locks.lock(ctx, locks, &s.waiting)
	if err != nil {
		return typed(ctx, err, false)
	}
	if err := s.commitWrite(ctx, op, fn); err != nil {
		release()
		return err
	}
	// Committed: a caller held at after_commit (a test's barrier) blocks
	// no other writer, as once a row lock is released.
	release()
	if err := s.runHook(ctx, op, spec.AfterCommit); err != nil {
		return &spec.Error{Code: spec.CodeUnknownOutcome, Message: fmt.Sprintf("%s committed but its result was lost; read back before acting", op), Err: err}
	}
	return nil
}

// commitWrite makes the attempts of one write until one commits or fails.
func (s *Store) commitWrite(ctx context.Context, op spec.Op, fn func(w *wtx, now int64) error) error {
	for attempt := 0; ; attempt++ {
		w := &wtx{s: s, ctx: ctx, staged: map[string]*staged{}, compared: map[string]bool{}, attempt: attempt}
		err := s.attempt(ctx, op, w, fn)
		if errors.Is(err, errConflict) {
			if attempt+1 >= s.tries {
				return spec.Errorf(spec.CodeUnavailable, "%s conflicted with other writers %d times in a row; nothing was written, retry", op, s.tries)
			}
			s.log.DebugContext(ctx, "write conflict, trying again", "op", op, "attempt", attempt+1)
			continue
		}
		var ns notSent
		if errors.As(err, &ns) {
			return typed(ctx, ns.err, false)
		}
		return typed(ctx, err, true)
	}
}

// attempt runs fn, the BeforeCommit hook and the commit, holding the
// attempt's tryLock locks until the commit has returned.
func (s *Store) attempt(ctx context.Context, op spec.Op, w *wtx, fn func(w *wtx, now int64) error) error {
	defer w.releaseTry()
	if err := fn(w, s.clock.Now()); err != nil {
		return notSent{err}
	}
	if err := s.runHook(ctx, op, spec.BeforeCommit); err != nil {
		return notSent{err}
	}
	return w.commit()
}

// notSent marks an error of an attempt whose commit was never sent.
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() }
func (e notSent) Unwrap() error { return e.err }

func (s *Store) runHook(ctx context.Context, op spec.Op, p spec.HookPoint) error {
	if s.hook == nil {
		return nil
	}
	return s.hook(ctx, op, p)
}

// typed turns an error into a *spec.Error. sent says whether the commit
// had been sent: then a failure may have applied (unknown_outcome), unless
// etcd refused the request before proposing it.
func typed(ctx context.Context, err error, sent bool) error {
	if err == nil {
		return nil
	}
	var e *spec.Error
	if errors.As(err, &e) {
		return err
	}
	if sent && !refusedBeforeProposal(err) {
		return &spec.Error{Code: spec.CodeUnknownOutcome, Message: "the commit was sent but its answer was lost; it may have applied: read back before acting", Err: err}
	}
	if ctx.Err() != nil {
		return &spec.Error{Code: spec.CodeUnavailable, Message: "the caller's context ended before the operation committed; nothing was written", Err: err}
	}
	return &spec.Error{Code: spec.CodeUnavailable, Message: "etcd failed the operation before its commit; nothing was written", Err: err}
}

// refusedBeforeProposal reports the errors etcd returns only for a request
// it refused before proposing it to raft: nothing of it can apply.
func refusedBeforeProposal(err error) bool {
	for _, e := range []error{rpctypes.ErrGRPCRequestTooLarge, rpctypes.ErrGRPCTooManyOps, rpctypes.ErrGRPCDuplicateKey,
		rpctypes.ErrGRPCNoSpace, rpctypes.ErrRequestTooLarge, rpctypes.ErrTooManyOps, rpctypes.ErrDuplicateKey, rpctypes.ErrNoSpace} {
		if errors.Is(err, e) || rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(e) {
			return true
		}
	}
	return false
}

// overLimit reports etcd's refusal of a Txn past --max-txn-ops or
// --max-request-bytes: the same Txn is refused again on every attempt.
func overLimit(err error) bool {
	for _, e := range []error{rpctypes.ErrGRPCRequestTooLarge, rpctypes.ErrGRPCTooManyOps, rpctypes.ErrRequestTooLarge, rpctypes.ErrTooManyOps} {
		if errors.Is(err, e) || rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(e) {
			return true
		}
	}
	return false
}

// read runs a read-only operation: fn reads at one revision; no clock, no
// hooks, no locks.
func (s *Store) read(ctx context.Context, fn func(w *wtx) error) error {
	w := &wtx{s: s, ctx: ctx, staged: map[string]*staged{}, compared: map[string]bool{}}
	return typed(ctx, fn(w), false)
}

// wtx is one attempt of an operation: reads at one revision (the first
// read's), each read key compared at commit, and an overlay of staged
// writes that later reads of the attempt see.
type wtx struct {
	s        *Store
	ctx      context.Context
	rev      int64
	staged   map[string]*staged
	order    []string
	compared map[string]bool
	cmps     []clientv3.Cmp
	tried    []string                    // locks taken by tryLock during this attempt
	ranges   []string                    // prefixes staged for deletion
	cache    map[string]*mvccpb.KeyValue // prefetched at rev (nil: absent)
	attempt  int                         // the operation's attempt, from 0
}

type staged struct {
	value   []byte
	deleted bool
}

func (w *wtx) releaseTry() {
	for _, k := range w.tried {
		w.s.locks.unlock(k)
	}
	w.tried = nil
}

// tryLock takes the in-process lock of key if it is free, for the rest of
// this attempt: the counterpart of SKIP LOCKED among this process's writers.
func (w *wtx) tryLock(key string) bool {
	if w.s.locks.tryLock(key) {
		w.tried = append(w.tried, key)
		return true
	}
	return false
}

func (w *wtx) opts(o ...clientv3.OpOption) []clientv3.OpOption {
	if w.rev != 0 {
		o = append(o, clientv3.WithRev(w.rev))
	}
	return o
}

// raw reads key: the staged value if the attempt wrote it, else the stored
// one at the attempt's revision, compared at commit (unchanged, or still
// absent).
func (w *wtx) raw(key string) ([]byte, bool, error) {
	if st, ok := w.staged[key]; ok {
		if st.deleted {
			return nil, false, nil
		}
		return st.value, true, nil
	}
	kv, cached := w.cache[key]
	if !cached {
		resp, err := w.s.cli.Get(w.ctx, key, w.opts()...)
		if err != nil {
			return nil, false, err
		}
		if w.rev == 0 {
			w.rev = resp.Header.Revision
		}
		if len(resp.Kvs) > 0 {
			kv = resp.Kvs[0]
		}
	}
	w.compare(key, kv)
	if kv == nil {
		return nil, false, nil
	}
	return kv.Value, true, nil
}

// prefetch reads keys in one round trip (a read-only Txn at the attempt's
// revision) for the raw reads that follow; a key is compared only once it
// is read.
func (w *wtx) prefetch(keys ...string) error {
	var want []string
	for _, k := range keys {
		if _, staged := w.staged[k]; staged {
			continue
		}
		if _, cached := w.cache[k]; !cached {
			want = append(want, k)
		}
	}
	if len(want) == 0 {
		return nil
	}
	ops := make([]clientv3.Op, len(want))
	for i, k := range want {
		ops[i] = clientv3.OpGet(k, w.opts()...)
	}
	resp, err := w.s.cli.Txn(w.ctx).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if w.rev == 0 {
		w.rev = resp.Header.Revision
	}
	if w.cache == nil {
		w.cache = map[string]*mvccpb.KeyValue{}
	}
	for i, k := range want {
		var kv *mvccpb.KeyValue
		if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
			kv = kvs[0]
		}
		w.cache[k] = kv
	}
	return nil
}

// compare adds the compare that holds while key is as read.
func (w *wtx) compare(key string, kv *mvccpb.KeyValue) {
	if w.compared[key] {
		return
	}
	w.compared[key] = true
	if kv == nil {
		w.cmps = append(w.cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
	} else {
		w.cmps = append(w.cmps, clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision))
	}
}

// getJSON reads key into v and reports whether it exists.
func (w *wtx) getJSON(key string, v any) (bool, error) {
	b, ok, err := w.raw(key)
	if err != nil || !ok {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("etcd: decode %q: %w", key, err)
	}
	return true, nil
}

// scan reads up to limit keys (0: all) of [from, end) at the attempt's
// revision, in key order, without comparing them. Staged writes are not
// seen: callers scan before they stage.
func (w *wtx) scan(from, end string, limit int64) ([]*mvccpb.KeyValue, error) {
	o := []clientv3.OpOption{clientv3.WithRange(end)}
	if limit > 0 {
		o = append(o, clientv3.WithLimit(limit))
	}
	resp, err := w.s.cli.Get(w.ctx, from, w.opts(o...)...)
	if err != nil {
		return nil, err
	}
	if w.rev == 0 {
		w.rev = resp.Header.Revision
	}
	return resp.Kvs, nil
}

// compareRange adds the compare that no key of [from, end) was written
// since the attempt's revision (a phantom guard: a key added to the range
// fails it; a key deleted from it must be compared on its own).
func (w *wtx) compareRange(from, end string) {
	w.cmps = append(w.cmps, clientv3.Compare(clientv3.ModRevision(from), "<", w.rev+1).WithRange(end))
}

// guard adds compares to the commit (the lease guard).
func (w *wtx) guard(cmps ...clientv3.Cmp) { w.cmps = append(w.cmps, cmps...) }

func (w *wtx) stage(key string, st *staged) {
	if _, ok := w.staged[key]; !ok {
		w.order = append(w.order, key)
	}
	w.staged[key] = st
}

// put stages key = v (JSON, or the bytes of a string).
func (w *wtx) put(key string, v any) {
	var b []byte
	switch x := v.(type) {
	case string:
		b = []byte(x)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			panic(fmt.Sprintf("etcd: encode %q: %v", key, err))
		}
	}
	w.stage(key, &staged{value: b})
}

// del stages the deletion of key.
func (w *wtx) del(key string) { w.stage(key, &staged{deleted: true}) }

// delRange stages the deletion of every key under prefix p. Callers never
// stage another write of a key under p.
func (w *wtx) delRange(p string) { w.ranges = append(w.ranges, p) }

// commit sends the attempt's one Txn: its compares, then its staged
// writes. With nothing staged there is nothing to send: the attempt's
// reads, at one revision, are its answer.
func (w *wtx) commit() error {
	if len(w.order) == 0 && len(w.ranges) == 0 {
		return nil
	}
	ops := make([]clientv3.Op, 0, len(w.order)+len(w.ranges))
	for _, p := range w.ranges {
		ops = append(ops, clientv3.OpDelete(p, clientv3.WithRange(end(p))))
	}
	for _, k := range w.order {
		st := w.staged[k]
		if st.deleted {
			ops = append(ops, clientv3.OpDelete(k))
		} else {
			ops = append(ops, clientv3.OpPut(k, string(st.value)))
		}
	}
	lease, err := w.s.markerLease(w.ctx)
	if err != nil {
		return notSent{err}
	}
	marker := w.s.key(famMarker, randomID())
	cmps := append(w.cmps, clientv3.Compare(clientv3.CreateRevision(marker), "=", 0))
	if mutant(mutantNoCompares) {
		cmps = cmps[len(cmps)-1:]
	}
	ops = append(ops, clientv3.OpPut(marker, "committed", clientv3.WithLease(lease)))
	resp, err := w.s.cli.Txn(w.ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		if overLimit(err) {
			return notSent{&spec.Error{Code: spec.CodeUnavailable, Message: fmt.Sprintf(
				"etcd refused the commit (%d compares, %d writes) as past its --max-txn-ops or --max-request-bytes; nothing was written: a batch must be smaller", len(cmps), len(ops)), Err: err}}
		}
		if refusedBeforeProposal(err) {
			return notSent{err}
		}
		return w.s.resolve(marker, lease, err)
	}
	if !resp.Succeeded {
		return errConflict
	}
	return nil
}

// resolve finds out whether a Txn whose answer was lost applied, by racing
// a fence against it on its marker key: the fence creates the marker if it
// is still absent, and the original Txn holds only while it is absent, so
// raft applies exactly one of them. The fence created it: the Txn never
// applies (unavailable, nothing written). The marker says committed: it
// applied (nil). No answer within the window: unknown_outcome.
func (s *Store) resolve(marker string, lease clientv3.LeaseID, cause error) error {
	if mutant(mutantLostAnswerApplied) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveWindow)
	defer cancel()
	for ctx.Err() == nil {
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(marker), "=", 0)).
			Then(clientv3.OpPut(marker, "fenced", clientv3.WithLease(lease))).Else(clientv3.OpGet(marker)).Commit()
		if err == nil {
			if resp.Succeeded {
				s.fenced.Add(1)
				return notSent{&spec.Error{Code: spec.CodeUnavailable, Message: "the commit's answer was lost, and a fence proved it did not apply; nothing was written", Err: cause}}
			}
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 && string(kvs[0].Value) == "committed" {
				s.applied.Add(1)
				return nil
			}
			break
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.unresolved.Add(1)
	return cause
}

// Resolutions counts the commits whose answer was lost, by what resolve
// found: applied, fenced (never applies), or unresolved (unknown_outcome).
func (s *Store) Resolutions() (applied, fenced, unresolved int64) {
	return s.applied.Load(), s.fenced.Load(), s.unresolved.Load()
}

// The broken variants (mutant): a commit without the compares of what it
// read (lost updates), a lost answer taken for success without a fence, and
// a bulk admission's member replaying a key bound to another request (the
// name of package mutant's BulkIgnoresFingerprint, which the other stores
// honour).
const (
	mutantNoCompares             = "no_compares"
	mutantLostAnswerApplied      = "lost_answer_applied"
	mutantBulkIgnoresFingerprint = "bulk_ignores_fingerprint"
)

// resolveWindow bounds how long resolve tries its fence.
const resolveWindow = 10 * time.Second

// markerLease returns the etcd lease the commit markers are written with,
// granting a new one when the current one is past half its life, so that
// every marker outlives its resolution and then expires by itself.
func (s *Store) markerLease(ctx context.Context) (clientv3.LeaseID, error) {
	s.mmu.Lock()
	defer s.mmu.Unlock()
	if s.mlease != 0 && time.Since(s.mgranted) < markerTTL/2 {
		return s.mlease, nil
	}
	resp, err := s.cli.Grant(ctx, int64(markerTTL/time.Second))
	if err != nil {
		return 0, err
	}
	s.mlease, s.mgranted = resp.ID, time.Now()
	return s.mlease, nil
}

// markerTTL is a commit marker's life.
const markerTTL = 180 * time.Second

func randomID() string {
	var b [16]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// lockTable is the in-process queue of writers per record: an operation
// takes the locks of the runs (idempotency scopes, messages) it will write
// before it reads, so that within one process a writer held inside its
// transaction (a hook's barrier) makes the others wait, as a row lock
// would; claims take theirs with tryLock and skip what is held. Across
// processes only the compares order writers; the locks never decide
// correctness, only who waits.
type lockTable struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

func newLockTable() *lockTable { return &lockTable{held: map[string]chan struct{}{}} }

var shared = struct {
	sync.Mutex
	byPrefix map[string]*lockTable
}{byPrefix: map[string]*lockTable{}}

func sharedLockTable(prefix string) *lockTable {
	shared.Lock()
	defer shared.Unlock()
	lt, ok := shared.byPrefix[prefix]
	if !ok {
		lt = newLockTable()
		shared.byPrefix[prefix] = lt
	}
	return lt
}

// lock takes every key's lock, in key order (so that two operations never
// wait for each other in a cycle), waiting while another holds one; the
// caller is counted in waiting while it waits.
func (l *lockTable) lock(ctx context.Context, keys []string, waiting *atomic.Int64) (func(), error) {
	keys = append([]string(nil), keys...)
	sort.Strings(keys)
	var got []string
	release := func() {
		for _, k := range got {
			l.unlock(k)
		}
	}
	for i, k := range keys {
		if i > 0 && keys[i-1] == k {
			continue
		}
		for {
			l.mu.Lock()
			ch, busy := l.held[k]
			if !busy {
				l.held[k] = make(chan struct{})
				l.mu.Unlock()
				got = append(got, k)
				break
			}
			l.mu.Unlock()
			waiting.Add(1)
			select {
			case <-ch:
				waiting.Add(-1)
			case <-ctx.Done():
				waiting.Add(-1)
				release()
				return nil, ctx.Err()
			}
		}
	}
	return release, nil
}

// size is how many locks are held now.
func (l *lockTable) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

func (l *lockTable) tryLock(k string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, busy := l.held[k]; busy {
		return false
	}
	l.held[k] = make(chan struct{})
	return true
}

func (l *lockTable) unlock(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch, ok := l.held[k]; ok {
		delete(l.held, k)
		close(ch)
	}
}

var _ spec.LockWaitReporter = (*Store)(nil)

// LockWaits implements spec.LockWaitReporter: how many of this Store's
// writing calls wait, right now, in the in-process lock table for a run
// (or scope, or message) another call holds. With Options.SharedLocks the
// table is every store's of the process on the prefix, so a call waits
// for another store's as for a row lock; without it, only for calls of
// this Store. Writers in other processes take no such lock (only the
// Txns' compares order them), so a wait for them is never counted: there
// is none. It touches no connection.
func (s *Store) LockWaits(context.Context) (int, error) { return int(s.waiting.Load()), nil }
