package scenarios

import (
	"context"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/spec"
)

// FromFactory returns an Opener on one fresh database of a conformance
// factory: the first call opens the database (f), each later call another
// store on it (Handle.OpenWith). The stores are closed when t ends, if the
// runner has not closed them already. Any store that passes storetest can
// play the scenarios this way.
func FromFactory(t testing.TB, f storetest.Factory) Opener {
	var (
		mu sync.Mutex
		h  *storetest.Handle
	)
	return func(ctx context.Context, o Options) (spec.Store, error) {
		mu.Lock()
		defer mu.Unlock()
		opts := storetest.Options{Config: o.Config, Clock: o.Clock, Random: o.Random, Hook: o.Hook}
		if h == nil {
			first := f(t, opts)
			h = &first
			return h.Store, nil
		}
		return h.OpenWith(t, opts), nil
	}
}
