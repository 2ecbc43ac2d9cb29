package shardlease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// drainSlack is how long after a drain the other workers may take to hold
// every lease: the coordinator's next take round (a take interval), and in
// real time the acquires of that round, one round trip each.
func drainSlack(w *world) time.Duration {
	if w.name == "fake" {
		return w.take + w.take/2
	}
	return 2 * w.take
}

// requireNoRowOf fails unless no row names c: a drained worker released
// every lease it held.
func requireNoRowOf(t *testing.T, w *world, c *shardlease.Consumer) {
	t.Helper()
	for _, l := range w.leases(t) {
		require.NotEqual(t, c.OwnerID(), l.Owner, "%s still names the drained worker", l.Key.Shard)
		require.NotEqual(t, c.OwnerID(), l.HandoffTo, "%s is still handed to the drained worker", l.Key.Shard)
	}
}

// A drained worker hands every lease to the others while it keeps running:
// when Drain returns no row names it, the others hold every lease within a
// take interval, no record is handled twice and none is lost, and it takes
// nothing afterwards; Run then returns at once when its context ends.
func TestDrainHandsEveryLeaseToTheOthers(t *testing.T) {
	t.Parallel()
	worlds(t, 16, drainHandsEveryLease)
}

// drainHandsEveryLease is TestDrainHandsEveryLeaseToTheOthers' course in w.
func drainHandsEveryLease(t *testing.T, w *world) {
	p := &produced{}
	h := newHandled()
	workers, prod := w.balancedFleet(t, p, h)
	leaving := workers[0]

	require.NoError(t, leaving.c.Drain(t.Context()))
	requireNoRowOf(t, w, leaving.c)
	assert.Empty(t, leaving.c.Held())
	took := waitHeldBy(t, w, drainSlack(w), workers[1:]...)
	waitSettled(t, w, w.renew+5*w.take+drainSlack(w), []int{8, 8}, workers[1:]...)
	// Drained, it takes nothing, however long it keeps running.
	waitFor(t, 30*w.lease, "records flowing after the drain", func() bool { return h.distinct() > p.count()/2+40 })
	assert.Empty(t, leaving.c.Held(), "a drained worker takes nothing")
	requireNoRowOf(t, w, leaving.c)

	stopping := time.Now()
	require.NoError(t, leaving.stop(t))
	assert.Less(t, time.Since(stopping), w.renew, "Run returns at once after a drain")
	prod.stop()
	waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
	assert.Empty(t, h.lost(p))
	assert.Zero(t, h.duplicates(), "a drain hands no record twice")
	requireKeyOrder(t, p, h)
	t.Logf("%s: the drained leases were held again %v after Drain returned (take interval %v)", w.name, took, w.take)
}

// Draining the coordinator passes coordination on: another worker takes
// the first lease, coordinates, and the fleet holds every lease within a
// take interval.
func TestDrainOfTheCoordinator(t *testing.T) {
	t.Parallel()
	worlds(t, 16, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		workers, prod := w.balancedFleet(t, p, h)
		var coord *worker
		waitFor(t, 10*w.take, "a coordinator", func() bool {
			for _, wk := range workers {
				if wk.c.Stats().Coordinating {
					coord = wk
					return true
				}
			}
			return false
		})
		var rest []*worker
		for _, wk := range workers {
			if wk != coord {
				rest = append(rest, wk)
			}
		}
		require.NoError(t, coord.c.Drain(t.Context()))
		assert.False(t, coord.c.Stats().Coordinating, "a drained worker does not coordinate")
		waitHeldBy(t, w, drainSlack(w), rest...)
		waitFor(t, 5*w.take, "another worker coordinating", func() bool {
			return rest[0].c.Stats().Coordinating || rest[1].c.Stats().Coordinating
		})
		prod.stop()
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		assert.Empty(t, h.lost(p))
		assert.Zero(t, h.duplicates())
	})
}

// A drain while handoffs are pending: a holder asked to hand leases to a
// joining worker drains instead; every lease ends with the joiner, none
// twice, and the joiner's requests name a worker that holds nothing.
func TestDrainDuringAHandoff(t *testing.T) {
	t.Parallel()
	worlds(t, 8, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.manyOpts("a")...)
		waitFor(t, 20*w.take, "a holding every lease", func() bool { return len(a.c.Held()) == 8 })
		prod := w.produce(t, p, w.take/3, 2, 32)
		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.manyOpts("b")...)
		waitFor(t, 20*w.take, "a handoff asked of a", func() bool {
			for _, l := range w.leases(t) {
				if l.HandoffTo == b.c.OwnerID() {
					return true
				}
			}
			return b.c.Stats().HandoffsRequested > 0
		})
		require.NoError(t, a.c.Drain(t.Context()))
		requireNoRowOf(t, w, a.c)
		waitHeldBy(t, w, w.lease+drainSlack(w), b)
		prod.stop()
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		assert.Empty(t, h.lost(p))
		assert.Zero(t, h.duplicates(), "a drain during a handoff hands no record twice")
		requireKeyOrder(t, p, h)
	})
}

// A handler deaf to its context does not stop a drain: Drain returns once
// the grace period is up, the stuck handler is abandoned and its lease,
// no longer renewed, expires for the others; no other lease is held up.
func TestDrainWithAStuckHandler(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		block := make(chan struct{})
		defer close(block) // lets the abandoned handler return before the test ends
		stuckShard := make(chan string, 1)
		var first sync.Once
		deaf := func(ctx context.Context, b *shardlease.Batch) error {
			stuck := false
			first.Do(func() { stuck = true })
			if stuck {
				stuckShard <- b.ShardID
				<-block // ignores ctx
				return nil
			}
			h.add("a", b)
			return nil
		}
		a := startWorker(t, w, w.kin, w.store, deaf, w.opts("a")...)
		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b")...)
		waitSettled(t, w, 20*w.take, []int{1, 1}, a, b)
		// Settled for a few rounds: the coordinator has named its deputy.
		waitFor(t, 20*w.take, "a deputy named", func() bool { return hasDeputy(t, w) })
		w.put(t, p, 20, 8)
		stuck := <-stuckShard

		start := time.Now()
		require.NoError(t, a.c.Drain(t.Context()))
		grace := w.lease // the worlds' shutdown timeout
		assert.Less(t, time.Since(start), grace+w.take, "Drain returns within the shutdown timeout")
		assert.Empty(t, a.c.Held())
		// The stuck lease is renewed until the handler is abandoned, then
		// expires: a lease duration and the deputy's look at it later.
		waitHeldBy(t, w, 2*w.lease+drainSlack(w), b)
		t.Logf("%s: shard %s was stuck; drain took %v", w.name, stuck, time.Since(start))
	})
}

// A drain asked through the table: a drain note on the worker's rows, and a
// mail to the session that keeps them (what `shardlease drain` writes),
// reaches it with its next keep, and it drains as Drain would.
func TestDrainThroughTheTable(t *testing.T) {
	t.Parallel()
	worlds(t, 8, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.manyOpts("a")...)
		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.manyOpts("b")...)
		waitSettled(t, w, 20*w.take, []int{4, 4}, a, b)
		prod := w.produce(t, p, w.take/3, 2, 32)
		ns, ok := w.store.(shardlease.NoteStore)
		require.True(t, ok, "the store carries notes")
		ss, _ := w.store.(shardlease.SessionStore)
		for _, l := range w.leases(t) {
			if l.Owner == a.c.OwnerID() {
				_, err := ns.Note(t.Context(), l, "drain test")
				require.NoError(t, err)
				if s, kept := l.KeptBy(); kept {
					_, err := ss.MailSession(t.Context(), s, l.Key)
					require.NoError(t, err)
				}
			}
		}
		waitFor(t, w.renew+drainSlack(w), "a drained", func() bool { return len(a.c.Held()) == 0 })
		waitHeldBy(t, w, w.renew+2*drainSlack(w), b)
		requireNoRowOf(t, w, a.c)
		require.NoError(t, a.c.Drain(t.Context()), "a second drain returns at once")
		prod.stop()
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		assert.Empty(t, h.lost(p))
		assert.Zero(t, h.duplicates())
	})
}

// Drain needs a running consumer: before Run and after Run returned it is
// an ErrInvalidConfig that names the stream; a second Drain returns nil at
// once; a context that ends first is Drain's error.
func TestDrainOutsideRun(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		h := newHandled()
		c, err := shardlease.NewConsumer(w.kin, w.store, w.stream, h.handler("a"), w.opts("a")...)
		require.NoError(t, err)
		err = c.Drain(t.Context())
		require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
		assert.Contains(t, err.Error(), w.stream)

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		waitFor(t, 20*w.take, "the shards held", func() bool { return len(c.Held()) == 2 })
		ended, stop := context.WithCancel(t.Context())
		stop()
		assert.ErrorIs(t, c.Drain(ended), context.Canceled)
		require.NoError(t, c.Drain(t.Context()))
		require.NoError(t, c.Drain(t.Context()), "drained already")
		cancel()
		require.NoError(t, <-done)
		err = c.Drain(t.Context())
		require.ErrorIs(t, err, shardlease.ErrInvalidConfig, "after Run returned")
		assert.False(t, errors.Is(err, context.Canceled), fmt.Sprint(err))
	})
}

// listCountingStore counts the listings of the stream's rows.
type listCountingStore struct {
	shardlease.LeaseStore
	lists atomic.Int64
}

func (s *listCountingStore) List(ctx context.Context, stream string) ([]shardlease.Lease, error) {
	s.lists.Add(1)
	return s.LeaseStore.List(ctx, stream)
}

// Once drained, Run's end has nothing left to hand back: it returns
// without listing the table again.
func TestDrainThenRunEndsWithoutListing(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		store := &listCountingStore{LeaseStore: w.store}
		wk := startWorker(t, w, w.kin, store, func(context.Context, *shardlease.Batch) error { return nil }, w.opts("a")...)
		waitFor(t, 10*w.lease, "both leases held", func() bool { return len(wk.c.Held()) == 2 })
		require.NoError(t, wk.c.Drain(t.Context()))
		lists := store.lists.Load()
		require.NoError(t, wk.stop(t))
		assert.Equal(t, lists, store.lists.Load(), "listings after the drain, when Run ended")
	})
}
