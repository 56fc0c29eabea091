package model

import (
	"strconv"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/spec"
)

// memo caches spec.Config.NormalizeCreate, a pure function of (request,
// now) under one Config, for the explorer: it tries the same few creates at
// every state, and canonicalizing and fingerprinting them was a quarter of its
// time. Caching a pure function changes no outcome. Safe for concurrent use.
type memo struct {
	creates sync.Map // createKey -> normalized
}

type normalized struct {
	n   spec.NormalizedCreate
	err error
}

// normalizeCreate is m.Config.NormalizeCreate, through the memo when there is one.
func (m Model) normalizeCreate(req spec.CreateRunRequest, now int64) (spec.NormalizedCreate, error) {
	if m.memo == nil {
		return m.Config.NormalizeCreate(req, now)
	}
	var b strings.Builder
	for _, f := range []string{req.Tenant, req.Operation, req.IdempotencyKey, req.RunID, string(req.Payload)} {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
	for _, v := range []int64{int64(req.MaxAttempts), req.TimeoutMs, req.AvailableAt, req.DelayMs, now} {
		b.WriteString(strconv.FormatInt(v, 10) + ";")
	}
	k := b.String()
	if v, found := m.memo.creates.Load(k); found {
		r := v.(normalized)
		return r.n, r.err
	}
	n, err := m.Config.NormalizeCreate(req, now)
	m.memo.creates.Store(k, normalized{n, err})
	return n, err
}
