package shardlease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// callSizes records the size of each handler call.
type callSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (c *callSizes) wrap(h shardlease.Handler) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		c.mu.Lock()
		c.sizes = append(c.sizes, len(b.Records))
		c.mu.Unlock()
		return h(ctx, b)
	}
}

func (c *callSizes) get() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.sizes...)
}

// Records trickling in one at a time are handed in calls of at least the
// window's size, except for the last ones, handed once the oldest waited.
func TestBatchWindowGathersATrickle(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		var cs callSizes
		a := startWorker(t, w, w.kin, w.store, cs.wrap(h.handler("a")), w.opts("a", shardlease.WithBatchWindow(10, 30*w.idle))...)
		waitFor(t, 10*w.lease, "a holds the shard", func() bool { return len(a.c.Held()) == 1 })
		for range 25 {
			w.put(t, p, 1, 5)
			time.Sleep(w.idle * 2) // a trickle: a record every two idle polls
		}
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 25 })
		require.NoError(t, a.stop(t))
		sizes := cs.get()
		require.NotEmpty(t, sizes)
		for _, n := range sizes[:len(sizes)-1] {
			assert.GreaterOrEqual(t, n, 10, "calls before the last hold at least the window's records: %v", sizes)
		}
		assert.LessOrEqual(t, len(sizes), 3, "25 records in at most 3 calls: %v", sizes)
		requireKeyOrder(t, p, h)
		assert.Zero(t, h.duplicates())
	})
}

// A lone record waits at most the window's wait, and no checkpoint covers it
// while it is held back.
func TestBatchWindowHandsTheOldestAfterItsWait(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		wait := w.lease / 2
		kin := &recordsRead{KinesisAPI: w.kin}
		a := startWorker(t, w, kin, w.store, h.handler("a"), w.opts("a", shardlease.WithBatchWindow(1000, wait), shardlease.WithCheckpointInterval(w.renew/4))...)
		waitFor(t, 10*w.lease, "a holds the shard", func() bool { return len(a.c.Held()) == 1 })
		w.put(t, p, 1, 1)
		shard := onlyShard(t, p)
		put := time.Now()
		waitFor(t, wait, "the record read", func() bool { return kin.records.Load() == 1 })
		assert.Zero(t, h.distinct(), "held back")
		assert.Empty(t, w.checkpointOf(t, shard), "no checkpoint covers a record held back")
		waitFor(t, 10*w.lease, "the record handled", func() bool { return h.distinct() == 1 })
		took := time.Since(put)
		assert.GreaterOrEqual(t, took, wait, "handed once it waited the window's wait")
		assert.Less(t, took, wait+w.lease/2, "handed within the wait and a poll")
		waitFor(t, 10*w.lease, "its checkpoint", func() bool { return w.checkpointOf(t, shard) == p.seq[p.ids[0]] })
		require.NoError(t, a.stop(t))
	})
}

// A shutdown does not wait for the window: records held back are dropped,
// never checkpointed, and the next worker hands them.
func TestBatchWindowNeverDelaysAShutdown(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		kin := &recordsRead{KinesisAPI: w.kin}
		a := startWorker(t, w, kin, w.store, h.handler("a"), w.opts("a", shardlease.WithBatchWindow(1000, 100*w.lease))...)
		waitFor(t, 10*w.lease, "a holds the shard", func() bool { return len(a.c.Held()) == 1 })
		w.put(t, p, 5, 1)
		shard := onlyShard(t, p)
		waitFor(t, 10*w.lease, "the records read, to be held back", func() bool { return kin.records.Load() == 5 })
		stopped := time.Now()
		require.NoError(t, a.stop(t))
		assert.Less(t, time.Since(stopped), w.lease, "the shutdown did not wait for the window")
		assert.Zero(t, h.distinct())
		assert.Empty(t, w.checkpointOf(t, shard), "nothing held back was checkpointed")
		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b")...)
		waitFor(t, 30*w.lease, "b hands the records", func() bool { return h.distinct() == 5 })
		require.NoError(t, b.stop(t))
		assert.Zero(t, h.duplicates())
	})
}

// Renewals go on while records are held back: the lease is kept for the
// whole of a wait longer than the lease.
func TestBatchWindowNeverDelaysARenewal(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		// Pinned to per-lease renewals: it counts the lease row's renewals.
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a", shardlease.WithBatchWindow(1000, 2*w.lease), shardlease.WithSessions(false))...)
		waitFor(t, 10*w.lease, "a holds the shard", func() bool { return len(a.c.Held()) == 1 })
		before := w.leases(t)[0].Counter
		w.put(t, p, 3, 1)
		waitFor(t, 10*w.lease, "the records handed after the wait", func() bool { return h.distinct() == 3 })
		assert.Equal(t, []string{w.leases(t)[0].Key.Shard}, a.c.Held(), "the lease was kept")
		assert.GreaterOrEqual(t, w.leases(t)[0].Counter-before, int64(4), "renewed while the records waited")
		require.NoError(t, a.stop(t))
		assert.Zero(t, a.c.Stats().LeasesLost)
	})
}

func TestBatchWindowOptionsValidated(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *shardlease.Batch) error { return nil }
	for _, c := range []struct {
		n    int
		d    time.Duration
		want string
	}{{0, time.Second, "at least 1 record"}, {-3, time.Second, "at least 1 record"}, {10, 0, "the wait must be positive"}} {
		_, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), "orders", h, shardlease.WithBatchWindow(c.n, c.d))
		require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
		assert.Contains(t, err.Error(), c.want)
	}
}
