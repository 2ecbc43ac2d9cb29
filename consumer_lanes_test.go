package shardlease_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/crash"
	"github.com/shardlease/shardlease/internal/seqnum"
	"github.com/shardlease/shardlease/shardleasetest"
)

// laneWatch wraps a handler and records how many calls of one shard run at
// once, and whether two calls ever held records of one key at once.
type laneWatch struct {
	mu        sync.Mutex
	active    map[string]int             // shard → calls running
	keys      map[string]map[string]bool // shard → keys of the calls running
	most      int                        // most calls of one shard at once
	keyShared []string                   // keys seen in two calls at once
}

func newLaneWatch() *laneWatch {
	return &laneWatch{active: map[string]int{}, keys: map[string]map[string]bool{}}
}

func (l *laneWatch) wrap(h shardlease.Handler) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		mine := map[string]bool{}
		for _, r := range b.Records {
			mine[r.PartitionKey] = true
		}
		l.mu.Lock()
		l.active[b.ShardID]++
		l.most = max(l.most, l.active[b.ShardID])
		if l.keys[b.ShardID] == nil {
			l.keys[b.ShardID] = map[string]bool{}
		}
		for k := range mine {
			if l.keys[b.ShardID][k] {
				l.keyShared = append(l.keyShared, k)
			}
			l.keys[b.ShardID][k] = true
		}
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			l.active[b.ShardID]--
			for k := range mine {
				delete(l.keys[b.ShardID], k)
			}
			l.mu.Unlock()
		}()
		return h(ctx, b)
	}
}

func (l *laneWatch) report() (most int, shared []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.most, append([]string(nil), l.keyShared...)
}

// slowly returns a handler that records into h and spends d per call.
func slowly(h *handled, worker string, d time.Duration) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		h.add(worker, b)
		return nil
	}
}

// Records of one key reach the handler in write order, and every record
// once, while several lanes of one shard run at once.
func TestKeyConcurrencyKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		lw := newLaneWatch()
		w.put(t, p, 200, 20)
		a := startWorker(t, w, w.kin, w.store, lw.wrap(slowly(h, "a", 5*time.Millisecond)), w.opts("a", shardlease.WithKeyConcurrency(4))...)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 200 })
		require.NoError(t, a.stop(t))
		requireKeyOrder(t, p, h)
		assert.Zero(t, h.duplicates())
		most, shared := lw.report()
		assert.Greater(t, most, 1, "lanes of one shard ran at once")
		assert.LessOrEqual(t, most, 4, "no more calls at once than lanes")
		assert.Empty(t, shared, "no key in two calls at once")
		shard := onlyShard(t, p)
		assert.Equal(t, p.seq[p.ids[199]], w.checkpointOf(t, shard), "the watermark reached the last record")
	})
}

// n lanes run n calls at once on one shard.
func TestKeyConcurrencyRunsLanesAtOnce(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		var running, most atomic.Int64
		release := make(chan struct{})
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			n := running.Add(1)
			defer running.Add(-1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			h.add("a", b)
			return nil
		}
		w.put(t, p, 64, 64)
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a", shardlease.WithKeyConcurrency(8))...)
		waitFor(t, 30*w.lease, "eight calls at once", func() bool { return most.Load() == 8 })
		close(release)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 64 })
		require.NoError(t, a.stop(t))
		assert.Equal(t, int64(8), most.Load())
	})
}

// While one lane is held up on a record, the other lanes go on, and the
// checkpoint stays before that record: it is the watermark.
func TestKeyConcurrencyCheckpointIsTheWatermark(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		release := make(chan struct{})
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			for _, r := range b.Records {
				if r.PartitionKey == "key-003" {
					select {
					case <-release:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
			}
			h.add("a", b)
			return nil
		}
		w.put(t, p, 40, 8)
		shard := onlyShard(t, p)
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a", shardlease.WithKeyConcurrency(4), shardlease.WithCheckpointInterval(w.renew/4))...)
		// Every key but key-003 is handled, in lanes that do not hold it.
		waitFor(t, 30*w.lease, "the other lanes go on", func() bool { return h.distinct() >= 20 })
		time.Sleep(w.renew) // a checkpoint would be written meanwhile
		cp := w.checkpointOf(t, shard)
		assert.Less(t, seqnum.Compare(cp, p.seq["rec-000003"]), 0, "checkpoint %s stays before the held record", cp)
		close(release)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 40 })
		waitFor(t, 10*w.lease, "the checkpoint reaches the end", func() bool { return w.checkpointOf(t, shard) == p.seq["rec-000039"] })
		require.NoError(t, a.stop(t))
		assert.Zero(t, h.duplicates())
	})
}

// A lane stuck on a record holds the shard's reading once WithMaxInFlight
// records wait beyond the watermark.
func TestKeyConcurrencyMaxInFlightBoundsAStuckLane(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		release := make(chan struct{})
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			if b.Records[0].PartitionKey == "key-000" && string(b.Records[0].Data) == "rec-000000" {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			h.add("a", b)
			return nil
		}
		w.put(t, p, 100, 10)
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a", shardlease.WithKeyConcurrency(4), shardlease.WithMaxInFlight(20))...)
		waitFor(t, 30*w.lease, "the other lanes fill the window", func() bool { return h.distinct() >= 10 })
		time.Sleep(w.lease / 2)
		assert.LessOrEqual(t, h.distinct(), 19, "at most 20 records in flight, one of them held")
		close(release)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 100 })
		require.NoError(t, a.stop(t))
		requireKeyOrder(t, p, h)
	})
}

// A poison record is narrowed down and dead-lettered within its lane while
// the other lanes go on; the watermark passes it once it is dead-lettered.
func TestKeyConcurrencyDeadLettersWithinALane(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 60, 6)
		ph := newPoisonHandler("rec-000007")
		var otherDuringRetries atomic.Int64
		var failing atomic.Bool
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			err := ph.handle(ctx, b)
			if err != nil {
				failing.Store(true)
			} else if failing.Load() {
				otherDuringRetries.Add(int64(len(b.Records)))
			}
			return err
		}
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a", shardlease.WithKeyConcurrency(3),
			shardlease.WithMaxAttempts(3), shardlease.WithDeadLetter(ph.deadLetter))...)
		shard := onlyShard(t, p)
		waitFor(t, 30*w.lease, "everything handled or dead-lettered", func() bool {
			handled, dead, _, _ := ph.snapshot()
			return len(handled) == 59 && len(dead) == 1
		})
		waitFor(t, 10*w.lease, "the checkpoint reaches the end", func() bool { return w.checkpointOf(t, shard) == p.seq["rec-000059"] })
		require.NoError(t, a.stop(t))
		handled, dead, _, _ := ph.snapshot()
		assert.Equal(t, []string{"rec-000007"}, dead)
		for id, n := range handled {
			assert.Equal(t, 1, n, "%s handled once", id)
		}
		assert.Positive(t, otherDuringRetries.Load(), "other lanes handled records while the poison's lane retried")
	})
}

// Without a limit on attempts a failing lane retries alone; the others go
// on, and nothing after the failing record is checkpointed.
func TestKeyConcurrencyRetriesHoldOnlyTheirLane(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		var fails atomic.Int64
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			for _, r := range b.Records {
				if string(r.Data) == "rec-000002" && fails.Add(1) <= 4 {
					return errors.New("downstream unavailable")
				}
			}
			h.add("a", b)
			return nil
		}
		w.put(t, p, 40, 4)
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a", shardlease.WithKeyConcurrency(4))...)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 40 })
		require.NoError(t, a.stop(t))
		assert.GreaterOrEqual(t, fails.Load(), int64(5))
		assert.Zero(t, h.duplicates())
		requireKeyOrder(t, p, h)
	})
}

// A shutdown finishes the records the lanes hold: the next worker hands
// none of them again.
func TestKeyConcurrencyShutdownFinishesLanes(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		w.put(t, p, 300, 30)
		a := startWorker(t, w, w.kin, w.store, slowly(h, "a", 20*time.Millisecond), w.opts("a", shardlease.WithKeyConcurrency(4), shardlease.WithMaxInFlight(40))...)
		waitFor(t, 30*w.lease, "a is under way", func() bool { return h.distinct() >= 20 })
		require.NoError(t, a.stop(t))
		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b", shardlease.WithKeyConcurrency(4))...)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 300 })
		require.NoError(t, b.stop(t))
		assert.Zero(t, h.duplicates(), "nothing a handled is handed again")
		requireKeyOrder(t, p, h)
	})
}

// A handoff waits for every lane, so the taker hands nothing twice.
func TestKeyConcurrencyHandoffHandsNoRecordTwice(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		opts := func(name string) []shardlease.Option {
			return w.opts(name, shardlease.WithKeyConcurrency(4), shardlease.WithMaxInFlight(30))
		}
		a := startWorker(t, w, w.kin, w.store, slowly(h, "a", 10*time.Millisecond), opts("a")...)
		waitFor(t, 10*w.lease, "a holds both shards", func() bool { return len(a.c.Held()) == 2 })
		w.put(t, p, 200, 40)
		waitFor(t, 30*w.lease, "a is under way", func() bool { return h.distinct() >= 20 })
		b := startWorker(t, w, w.kin, w.store, slowly(h, "b", 10*time.Millisecond), opts("b")...)
		waitFor(t, 30*w.lease, "one shard each", func() bool { return len(a.c.Held()) == 1 && len(b.c.Held()) == 1 })
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 200 })
		require.NoError(t, a.stop(t))
		require.NoError(t, b.stop(t))
		assert.Zero(t, h.duplicates(), "a finished its lanes before the handoff")
		assert.GreaterOrEqual(t, b.c.Stats().LeasesHandedIn, int64(1))
		requireKeyOrder(t, p, h)
	})
}

// Hooks see one start and one stop per shard, however many lanes.
func TestKeyConcurrencyHooksOneStartOneStop(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		var mu sync.Mutex
		events := map[string][]string{}
		hooks := shardlease.WithShardHooks(shardlease.ShardHooks{
			OnStart: func(ctx context.Context, s shardlease.ShardStart) {
				mu.Lock()
				events[s.ShardID] = append(events[s.ShardID], "start")
				mu.Unlock()
			},
			OnStop: func(ctx context.Context, s *shardlease.ShardStop) {
				mu.Lock()
				events[s.ShardID] = append(events[s.ShardID], "stop "+string(s.Reason))
				mu.Unlock()
			},
		})
		a := startWorker(t, w, w.kin, w.store, slowly(h, "a", 5*time.Millisecond), w.opts("a", shardlease.WithKeyConcurrency(6), hooks)...)
		w.put(t, p, 100, 25)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 100 })
		require.NoError(t, a.stop(t))
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, events, 2)
		for shard, ev := range events {
			assert.Equal(t, []string{"start", "stop " + string(shardlease.StopShuttingDown)}, ev, "shard %s", shard)
		}
	})
}

// A lost lease stops every lane: no call starts after the loss, and the
// stop hook runs once, with StopLost.
func TestKeyConcurrencyLostLeaseStopsEveryLane(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		var calls atomic.Int64
		var stops atomic.Int64
		var lateCalls atomic.Int64
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			calls.Add(1)
			if stops.Load() > 0 {
				lateCalls.Add(1)
			}
			t := time.NewTimer(w.lease / 10)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}
		hooks := shardlease.WithShardHooks(shardlease.ShardHooks{OnStop: func(ctx context.Context, s *shardlease.ShardStop) {
			if s.Reason == shardlease.StopLost {
				stops.Add(1)
			}
		}})
		w.put(t, p, 400, 40)
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a", shardlease.WithKeyConcurrency(4), shardlease.WithMaxInFlight(50), hooks)...)
		waitFor(t, 30*w.lease, "a is under way", func() bool { return calls.Load() >= 8 })
		waitFor(t, 10*w.lease, "the lease taken from a", func() bool {
			for _, l := range w.leases(t) {
				if shardlease.OwnerName(l.Owner) == "a" {
					if _, err := w.store.Acquire(context.Background(), l.Key, "thief", l.Counter); err == nil {
						return true
					}
				}
			}
			return false
		})
		waitFor(t, 10*w.lease, "a's stop hook", func() bool { return stops.Load() > 0 })
		require.NoError(t, a.stop(t))
		assert.Equal(t, int64(1), stops.Load(), "one stop hook for the shard")
		assert.Zero(t, lateCalls.Load(), "no call after the stop hook: every lane had stopped")
	})
}

// After a crash, the next holder hands again at most the records that were
// in flight above the watermark.
func TestKeyConcurrencyCrashDuplicatesAtMostInFlight(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		sw := &crash.Switch{}
		release := make(chan struct{})
		aHandler := func(ctx context.Context, b *shardlease.Batch) error {
			if sw.Down() {
				return errors.New("crashed")
			}
			if slices.ContainsFunc(b.Records, func(r shardlease.Record) bool { return string(r.Data) == "rec-000050" }) {
				select { // held: the watermark stops before it
				case <-release:
				case <-ctx.Done():
				}
				return errors.New("crashed")
			}
			h.add("a", b)
			return nil
		}
		const inFlight = 25
		w.put(t, p, 200, 50)
		a := startWorker(t, w, crash.Kinesis(w.kin, sw), crash.Store(w.store, sw), aHandler,
			w.opts("a", shardlease.WithKeyConcurrency(5), shardlease.WithMaxInFlight(inFlight), shardlease.WithCheckpointInterval(w.renew/4))...)
		waitFor(t, 30*w.lease, "a runs up to the held record", func() bool { return h.distinct() >= 40 })
		waitFor(t, 10*w.lease, "the watermark's checkpoint written", func() bool {
			s, ok := shardStatus(a.c, shard0)
			return ok && s.Checkpoint != "" && w.checkpointOf(t, shard0) == s.Checkpoint
		})
		sw.Crash()
		close(release)
		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b", shardlease.WithKeyConcurrency(5))...)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 200 })
		require.NoError(t, b.stop(t))
		_ = a.stop(t)
		assert.Positive(t, h.duplicates(), "records above the watermark came again")
		assert.LessOrEqual(t, h.duplicates(), inFlight-1, "at most the records in flight, less the held one")
		requireKeyOrder(t, p, h)
	})
}

// Enhanced fan-out feeds the lanes as polling does.
func TestKeyConcurrencyWithFanOut(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 1, func(t *testing.T, w *fanWorld) {
		p := &produced{}
		h := newHandled()
		lw := newLaneWatch()
		a := startWorker(t, w.world, w.kin, w.store, lw.wrap(slowly(h, "a", 5*time.Millisecond)), w.fanOpts("a", shardlease.WithKeyConcurrency(4))...)
		w.put(t, p, 120, 24)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 120 })
		require.NoError(t, a.stop(t))
		assert.Positive(t, a.c.Stats().Subscriptions)
		requireKeyOrder(t, p, h)
		most, shared := lw.report()
		assert.Greater(t, most, 1)
		assert.Empty(t, shared)
	})
}

func TestKeyConcurrencyOptionsValidated(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *shardlease.Batch) error { return nil }
	kin := shardleasetest.NewKinesis()
	store := shardlease.NewMemoryStore()
	for _, tc := range []struct {
		opts []shardlease.Option
		want string
	}{
		{[]shardlease.Option{shardlease.WithKeyConcurrency(4), shardlease.WithManualCheckpoints()}, "WithKeyConcurrency cannot be combined with WithManualCheckpoints"},
		{[]shardlease.Option{shardlease.WithKeyConcurrency(-1)}, "WithKeyConcurrency(-1)"},
		{[]shardlease.Option{shardlease.WithKeyConcurrency(1000)}, "WithKeyConcurrency(1000)"},
		{[]shardlease.Option{shardlease.WithMaxInFlight(10)}, "WithMaxInFlight needs WithKeyConcurrency"},
		{[]shardlease.Option{shardlease.WithKeyConcurrency(2), shardlease.WithMaxInFlight(-5)}, "WithMaxInFlight(-5)"},
	} {
		_, err := shardlease.NewConsumer(kin, store, "orders", h, tc.opts...)
		require.ErrorIs(t, err, shardlease.ErrInvalidConfig, tc.want)
		assert.Contains(t, err.Error(), tc.want)
		assert.Contains(t, err.Error(), "stream orders")
	}
	_, err := shardlease.NewConsumer(kin, store, "orders", h, shardlease.WithKeyConcurrency(8), shardlease.WithMaxInFlight(64), shardlease.WithEnhancedFanOut("orders-app"))
	assert.NoError(t, err, "fan-out works with lanes")
}

// With lanes as without, a checkpoint made once the lease was released
// fails with ErrLeaseLost: the next holder handles those records again.
func TestKeyConcurrencyCheckpointAfterReleaseFails(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		var mu sync.Mutex
		var kept *shardlease.Batch
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			if kept == nil {
				kept = b
			}
			return nil
		}
		w.put(t, p, 10, 5)
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a", shardlease.WithKeyConcurrency(2))...)
		waitFor(t, 30*w.lease, "a batch handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return kept != nil
		})
		require.NoError(t, a.stop(t))
		err := kept.Checkpoint(kept.Records[0])
		require.ErrorIs(t, err, shardlease.ErrLeaseLost, "a checkpoint after the release")
	})
}
