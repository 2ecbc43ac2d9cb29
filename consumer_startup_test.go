package shardlease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// flakyList fails the first n List calls, as a throttled or failing Scan
// would.
type flakyList struct {
	shardlease.LeaseStore
	n atomic.Int64
}

var errUnavailable = errors.New("test: service unavailable (500)")

func (s *flakyList) List(ctx context.Context, stream string) ([]shardlease.Lease, error) {
	if s.n.Add(-1) >= 0 {
		return nil, errUnavailable
	}
	return s.LeaseStore.List(ctx, stream)
}

// A transient failure of the first shard sync is retried: Run goes on to
// read the stream instead of returning the error.
func TestConsumerStartupRetriesTransientFailure(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 20, 4)
		store := &flakyList{LeaseStore: w.store}
		store.n.Store(3)
		h := newHandled()
		a := startWorker(t, w, w.kin, store, h.handler("a"), w.opts("a")...)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 20 })
		require.NoError(t, a.stop(t))
		assert.Empty(t, h.lost(p))
	})
}
