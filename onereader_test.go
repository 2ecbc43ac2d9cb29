package shardlease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// overlaps watches handler calls from entry to exit, per shard, and counts
// the times a handler was entered while another one of the same shard was
// still running: two readers of one shard at once.
type overlaps struct {
	mu      sync.Mutex
	running map[string]int
	n       int
	entered int
}

func newOverlaps() *overlaps { return &overlaps{running: map[string]int{}} }

// wrap returns h with its calls watched.
func (o *overlaps) wrap(h shardlease.Handler) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		o.mu.Lock()
		o.running[b.ShardID]++
		o.entered++
		if o.running[b.ShardID] > 1 {
			o.n++
		}
		o.mu.Unlock()
		defer func() {
			o.mu.Lock()
			o.running[b.ShardID]--
			o.mu.Unlock()
		}()
		return h(ctx, b)
	}
}

func (o *overlaps) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

func (o *overlaps) calls() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.entered
}

// slowHandler records the batch and then works for d, or until its context
// is cancelled.
func slowHandler(h *handled, worker string, d time.Duration) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		h.add(worker, b)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return nil
	}
}

// produceFor writes a record every interval until stop is closed.
func produceFor(t *testing.T, w *world, p *produced, every time.Duration, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				w.put(t, p, 1, 4)
			}
		}
	})
	return &wg
}

// Defect: two processes started with one owner id (a reused pod name while
// the old pod still runs) both ran a shard: the second adopted the rows
// naming the id at once. Each run now writes an identity of its own.
func TestOneReaderSharedOwnerID(t *testing.T) {
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		o := newOverlaps()
		a := startWorker(t, w, w.kin, w.store, o.wrap(slowHandler(h, "a", w.renew)), w.opts("pod-0")...)
		waitFor(t, 10*w.lease, "a holds both shards", func() bool { return len(a.c.Held()) == 2 })
		stop := make(chan struct{})
		prod := produceFor(t, w, p, w.take/4, stop)
		waitFor(t, 10*w.lease, "a handling", func() bool { return o.calls() > 2 })
		b := startWorker(t, w, w.kin, w.store, o.wrap(slowHandler(h, "b", w.renew)), w.opts("pod-0")...)
		started := time.Now()
		waitFor(t, 10*w.lease, "three lease durations", func() bool { return time.Since(started) > 3*w.lease })
		close(stop)
		prod.Wait()

		assert.NotEqual(t, a.c.OwnerID(), b.c.OwnerID(), "two runs write two identities")
		assert.Equal(t, "pod-0", shardlease.OwnerName(a.c.OwnerID()))
		assert.Equal(t, "pod-0", shardlease.OwnerName(b.c.OwnerID()))
		for _, l := range w.leases(t) {
			assert.Contains(t, []string{a.c.OwnerID(), b.c.OwnerID()}, l.Owner)
		}
		assert.Zero(t, o.count(), "handlers of one shard ran at once")
		assert.Zero(t, a.c.Stats().LeasesLost+b.c.Stats().LeasesLost, "no lease was taken from a live holder")
		waitFor(t, 10*w.lease, "every record handled", func() bool { return len(h.lost(p)) == 0 })
		require.NoError(t, a.stop(t))
		require.NoError(t, b.stop(t))
	})
}

// Defect: a taker whose handoff request was not answered within a lease
// duration took the lease on the counter it had listed, from a holder that
// was still renewing and finishing a long batch. A live holder now keeps
// its lease until it answers.
func TestOneReaderUnansweredHandoff(t *testing.T) {
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		o := newOverlaps()
		// Batches take two lease durations; the holder may finish them
		// before it hands over.
		batch := 2 * w.lease
		a := startWorker(t, w, w.kin, w.store, o.wrap(slowHandler(h, "a", batch)), w.opts("a", shardlease.WithShutdownTimeout(3*batch))...)
		waitFor(t, 10*w.lease, "a holds both shards", func() bool { return len(a.c.Held()) == 2 })
		w.put(t, p, 40, 8)
		waitFor(t, 10*w.lease, "a handling both shards", func() bool { return o.calls() >= 2 })
		b := startWorker(t, w, w.kin, w.store, o.wrap(slowHandler(h, "b", w.take)), w.opts("b")...)
		waitFor(t, 10*w.lease, "b asks for a lease", func() bool { return b.c.Stats().HandoffsRequested > 0 })
		waitFor(t, 4*batch, "b holds one lease", func() bool { return len(b.c.Held()) == 1 })

		assert.Zero(t, o.count(), "handlers of one shard ran at once")
		assert.Zero(t, a.c.Stats().LeasesLost, "a lost a lease while it was renewing it")
		assert.Equal(t, int64(1), b.c.Stats().LeasesHandedIn, "b got the lease by handoff")
		assert.Zero(t, b.c.Stats().LeasesTaken, "b took nothing from a live holder")
		require.NoError(t, b.stop(t))
		require.NoError(t, a.stop(t))
	})
}

// Defect: a worker configured with a shorter lease duration judged the
// leases of a live holder with a longer one expired and took them. The
// holder's duration is on the row now, and takers wait the longer one.
func TestOneReaderMixedLeaseDurations(t *testing.T) {
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		o := newOverlaps()
		long := 3 * w.lease
		// a renews every 1.5 lease durations of b's: within its own lease,
		// but slower than b's lease duration.
		a := startWorker(t, w, w.kin, w.store, o.wrap(slowHandler(h, "a", w.take)),
			w.opts("a", shardlease.WithLeaseDuration(long), shardlease.WithRenewInterval(long/2), shardlease.WithShutdownTimeout(long))...)
		waitFor(t, 10*w.lease, "a holds the shard", func() bool { return len(a.c.Held()) == 1 })
		require.Equal(t, long, w.leases(t)[0].Duration, "the holder's lease duration is on the row")
		stop := make(chan struct{})
		prod := produceFor(t, w, p, w.take/2, stop)
		b := startWorker(t, w, w.kin, w.store, o.wrap(slowHandler(h, "b", w.take)), w.opts("b")...)
		started := time.Now()
		waitFor(t, 10*w.lease, "four of b's lease durations", func() bool { return time.Since(started) > 4*w.lease })
		close(stop)
		prod.Wait()

		assert.Equal(t, []string{"shardId-000000000000"}, a.c.Held(), "a keeps its lease")
		assert.Zero(t, a.c.Stats().LeasesLost, "a lost its lease while renewing it")
		assert.Zero(t, b.c.Stats().LeasesTaken, "b took a live holder's lease")
		assert.Zero(t, o.count(), "handlers of one shard ran at once")
		require.NoError(t, b.stop(t))
		require.NoError(t, a.stop(t))
	})
}
