package shardlease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// The session tests: one keep a renew interval keeps every lease a worker
// holds (WithSessions), and every failover, handoff and fencing path still
// gives one reader per shard.

// sessionsOn is the option every worker of these tests runs with.
var sessionsOn = shardlease.WithSessions(true)

// overlapGuard counts handler calls of one shard that ran at the same time
// on two workers: a second reader.
type overlapGuard struct {
	mu       sync.Mutex
	inside   map[string]string // shard -> worker inside its handler
	overlaps atomic.Int64
}

func newOverlapGuard() *overlapGuard { return &overlapGuard{inside: map[string]string{}} }

// wrap returns h guarded for worker.
func (g *overlapGuard) wrap(worker string, h shardlease.Handler) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		g.mu.Lock()
		if other, ok := g.inside[b.ShardID]; ok && other != worker {
			g.overlaps.Add(1)
		}
		g.inside[b.ShardID] = worker
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			if g.inside[b.ShardID] == worker {
				delete(g.inside, b.ShardID)
			}
			g.mu.Unlock()
		}()
		return h(ctx, b)
	}
}

// writeCounter counts a worker's writes to lease rows and its keeps.
type writeCounter struct {
	coordStore
	renews, checkpoints, acquires, keeps atomic.Int64
}

func (s *writeCounter) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	s.renews.Add(1)
	return s.coordStore.Renew(ctx, l, e)
}

func (s *writeCounter) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	s.checkpoints.Add(1)
	return s.coordStore.Checkpoint(ctx, l, cp, sub, e)
}

func (s *writeCounter) AcquireInSession(ctx context.Context, k shardlease.LeaseKey, w shardlease.Worker, observed int64) (shardlease.Lease, error) {
	s.acquires.Add(1)
	return s.coordStore.AcquireInSession(ctx, k, w, observed)
}

func (s *writeCounter) KeepSession(ctx context.Context, w shardlease.Worker) (shardlease.Worker, []string, error) {
	s.keeps.Add(1)
	return s.coordStore.KeepSession(ctx, w)
}

// TestSessionOneKeepKeepsEveryLease: a worker with sessions holding eight
// idle leases writes one keep a renew interval and no lease row at all.
func TestSessionOneKeepKeepsEveryLease(t *testing.T) {
	worlds(t, 8, func(t *testing.T, w *world) {
		w.timed(t)
		cs, ok := w.store.(coordStore)
		require.True(t, ok)
		wc := &writeCounter{coordStore: cs}
		h := newHandled()
		wk := startWorker(t, w, w.kin, wc, h.handler("a"), w.opts("a", sessionsOn)...)
		waitFor(t, 10*w.lease, "all eight leases held", func() bool { return len(wk.c.Held()) == 8 })
		renews, checkpoints, keeps := wc.renews.Load(), wc.checkpoints.Load(), wc.keeps.Load()
		time.Sleep(10 * w.lease)
		keptPerLease := float64(wc.keeps.Load()-keeps) / 10
		assert.Equal(t, renews, wc.renews.Load(), "no lease row renewed")
		assert.Equal(t, checkpoints, wc.checkpoints.Load(), "no checkpoint written for idle leases")
		// One keep a renew interval (L/3, less up to a tenth): 3 to 3.4 a
		// lease duration, whatever the number of leases.
		assert.InDelta(t, 3.2, keptPerLease, 0.5, "keeps a lease duration")
		for _, l := range w.leases(t) {
			assert.NotEmpty(t, l.Session, "lease %s names the session", l.Key)
		}
		assert.Zero(t, wk.c.Stats().LeasesLost)
	})
}

// TestSessionCrashFailover: a worker of three crashes (no release, no final
// checkpoint); another fences its session and takes each of its leases
// within 1.4 lease durations, and no record is lost or read by two workers
// at once.
func TestSessionCrashFailover(t *testing.T) {
	worlds(t, 6, func(t *testing.T, w *world) {
		w.timed(t)
		w = liveWorld(w)
		h := newHandled()
		fleet := startLiveFleet(t, w, 3, 6, h, sessionsOn)
		coord := liveCoordinator(fleet)
		var victim *liveWorker
		for _, lw := range fleet {
			if lw != coord {
				victim = lw
				break
			}
		}
		lost := victim.c.Held()
		require.NotEmpty(t, lost)
		p := &produced{}
		w.put(t, p, 60, 12)
		victim.sw.Crash()
		start := time.Now()
		waitFor(t, bound(w, 3*w.lease), "the crashed worker's leases held again", func() bool { return heldAgain(coords(fleet), lost) })
		took := time.Since(start)
		t.Logf("held again after %.2f L", took.Seconds()/w.lease.Seconds())
		assert.LessOrEqual(t, took, bound(w, 14*w.lease/10), "failover within 1.4 L")
		waitFor(t, 10*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		var fenced int64
		for _, lw := range fleet {
			if lw != victim {
				fenced += lw.c.Stats().SessionsFenced
			}
		}
		assert.Positive(t, fenced, "the crashed worker's session was fenced")
	})
}
