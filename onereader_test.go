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
