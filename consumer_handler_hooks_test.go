package shardlease_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// buffering is a handler that keeps per-shard state: it buffers records and
// delivers them (to sink) only from the stop hook, where it checkpoints what
// it delivered. It records every hook call and batch in one log, in order.
type buffering struct {
	mu        sync.Mutex
	events    []string // "worker shard what"
	starts    map[string][]shardlease.ShardStart
	buf       map[string][]shardlease.Record // worker/shard → not yet delivered
	delivered map[string]int                 // id → times delivered
	buffered  int
	lastCtx   map[string]context.Context // worker/shard → the handler's last context
	// flushDelay is how long delivering a buffer takes (a slow sink).
	flushDelay time.Duration
	// what the stop hook of a lost lease saw
	lostCtxErr, lostCheckpointErr error
}

func newBuffering() *buffering {
	return &buffering{starts: map[string][]shardlease.ShardStart{}, buf: map[string][]shardlease.Record{},
		delivered: map[string]int{}, lastCtx: map[string]context.Context{}}
}

func (s *buffering) handler(worker string) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		k := worker + "/" + b.ShardID
		s.buf[k] = append(s.buf[k], b.Records...)
		s.buffered += len(b.Records)
		s.lastCtx[k] = ctx
		s.events = append(s.events, fmt.Sprintf("%s %s batch", worker, b.ShardID))
		return nil
	}
}

func (s *buffering) hooks(worker string) shardlease.Option {
	return shardlease.WithShardHooks(shardlease.ShardHooks{
		OnStart: func(ctx context.Context, st shardlease.ShardStart) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.starts[worker+"/"+st.ShardID] = append(s.starts[worker+"/"+st.ShardID], st)
			s.events = append(s.events, fmt.Sprintf("%s %s start", worker, st.ShardID))
		},
		OnStop: func(ctx context.Context, stop *shardlease.ShardStop) {
			if stop.Reason != shardlease.StopLost && s.flushDelay > 0 {
				time.Sleep(s.flushDelay) // a slow sink: the lease stays held meanwhile
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			k := worker + "/" + stop.ShardID
			recs := s.buf[k]
			delete(s.buf, k)
			s.events = append(s.events, fmt.Sprintf("%s %s stop %s", worker, stop.ShardID, stop.Reason))
			if stop.Reason == shardlease.StopLost {
				// Drop the buffer: another worker reads these records again.
				if c := s.lastCtx[k]; c != nil {
					s.lostCtxErr = c.Err()
				}
				if len(recs) > 0 {
					s.lostCheckpointErr = stop.Checkpoint(recs[len(recs)-1])
				}
				return
			}
			for _, r := range recs {
				s.delivered[string(r.Data)]++
			}
			if len(recs) > 0 {
				if err := stop.Checkpoint(recs[len(recs)-1]); err != nil {
					s.events = append(s.events, fmt.Sprintf("%s %s checkpoint failed: %v", worker, stop.ShardID, err))
				}
			}
		},
	})
}

func (s *buffering) bufferedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buffered
}

// of returns the events of worker on shard, without the names, and their
// positions in the whole log.
func (s *buffering) of(worker, shard string) (what []string, at []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prefix := worker + " " + shard + " "
	for i, e := range s.events {
		if rest, ok := strings.CutPrefix(e, prefix); ok {
			what = append(what, rest)
			at = append(at, i)
		}
	}
	return what, at
}

// requireRun checks that events are one start, batches, and a stop for
// reason, in that order.
func requireRun(t *testing.T, events []string, reason shardlease.StopReason) {
	t.Helper()
	require.GreaterOrEqual(t, len(events), 3, "start, batches, stop: %v", events)
	assert.Equal(t, "start", events[0], "%v", events)
	for _, e := range events[1 : len(events)-1] {
		assert.Equal(t, "batch", e, "%v", events)
	}
	assert.Equal(t, "stop "+string(reason), events[len(events)-1], "%v", events)
}

func (s *buffering) requireDeliveredOnce(t *testing.T, p *produced) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range p.ids {
		assert.Equal(t, 1, s.delivered[id], "record %s delivered once", id)
	}
}

// The start hook says where the shard starts; at shutdown the stop hook runs
// before the final checkpoint, so what it flushes and checkpoints is not read
// again.
func TestHooksStartAndShutdown(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 20, 5)
		shard := onlyShard(t, p)
		s := newBuffering()
		s.flushDelay = w.lease / 2
		a := startWorker(t, w, w.kin, w.store, s.handler("a"), w.opts("a", shardlease.WithManualCheckpoints(), s.hooks("a"))...)
		waitFor(t, 30*w.lease, "a buffers every record", func() bool { return s.bufferedCount() == 20 })
		require.NoError(t, a.stop(t))
		events, _ := s.of("a", shard)
		requireRun(t, events, shardlease.StopShuttingDown)
		assert.Equal(t, []shardlease.ShardStart{{Stream: w.stream, ShardID: shard, SubSequence: -1, Position: shardlease.TrimHorizon}}, s.starts["a/"+shard])
		assert.Equal(t, p.seq[p.ids[19]], w.checkpointOf(t, shard), "the stop hook's checkpoint was written by the final checkpoint")
		for _, l := range w.leases(t) {
			assert.Empty(t, l.Owner, "released after the stop hook")
		}

		w.put(t, p, 5, 5)
		b := startWorker(t, w, w.kin, w.store, s.handler("b"), w.opts("b", shardlease.WithManualCheckpoints(), s.hooks("b"))...)
		waitFor(t, 30*w.lease, "b buffers the new records", func() bool { return s.bufferedCount() == 25 })
		require.NoError(t, b.stop(t))
		assert.Equal(t, []shardlease.ShardStart{{Stream: w.stream, ShardID: shard, Checkpoint: p.seq[p.ids[19]], SubSequence: -1}}, s.starts["b/"+shard],
			"b starts after a's checkpoint")
		events, _ = s.of("b", shard)
		requireRun(t, events, shardlease.StopShuttingDown)
		s.requireDeliveredOnce(t, p)
	})
}

// A handoff runs the stop hook before the lease is released to the taker:
// what the handler flushed there is checkpointed, so the taker starts after
// it and no record is delivered twice.
func TestHooksHandoff(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		s := newBuffering()
		s.flushDelay = w.lease / 2
		a := startWorker(t, w, w.kin, w.store, s.handler("a"), w.opts("a", shardlease.WithManualCheckpoints(), s.hooks("a"))...)
		waitFor(t, 10*w.lease, "a holds both shards", func() bool { return len(a.c.Held()) == 2 })
		w.put(t, p, 40, 16)
		waitFor(t, 30*w.lease, "a buffers every record", func() bool { return s.bufferedCount() == 40 })
		b := startWorker(t, w, w.kin, w.store, s.handler("b"), w.opts("b", shardlease.WithManualCheckpoints(), s.hooks("b"))...)
		waitFor(t, 20*w.lease, "one shard each", func() bool { return len(a.c.Held()) == 1 && len(b.c.Held()) == 1 })
		moved := b.c.Held()[0]
		kept := a.c.Held()[0]
		w.put(t, p, 40, 16)
		waitFor(t, 30*w.lease, "every record buffered", func() bool { return s.bufferedCount() == 80 })
		require.NoError(t, a.stop(t))
		require.NoError(t, b.stop(t))

		events, at := s.of("a", moved)
		requireRun(t, events, shardlease.StopHandedOff)
		bEvents, bAt := s.of("b", moved)
		require.NotEmpty(t, bEvents)
		assert.Greater(t, bAt[0], at[len(at)-1], "b starts the shard after a's stop hook")
		requireRun(t, bEvents, shardlease.StopShuttingDown)
		events, _ = s.of("a", kept)
		requireRun(t, events, shardlease.StopShuttingDown)

		p.mu.Lock()
		before := p.byShard[moved]
		p.mu.Unlock()
		require.NotEmpty(t, before)
		starts := s.starts["b/"+moved]
		require.Len(t, starts, 1)
		assert.NotEmpty(t, starts[0].Checkpoint, "b starts after what a flushed")
		s.requireDeliveredOnce(t, p)
	})
}

// A lost lease cancels the handler's context first; then the stop hook
// runs, and it can no longer checkpoint.
func TestHooksLostLease(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 10, 5)
		shard := onlyShard(t, p)
		s := newBuffering()
		a := startWorker(t, w, w.kin, w.store, s.handler("a"), w.opts("a", shardlease.WithManualCheckpoints(), s.hooks("a"))...)
		waitFor(t, 30*w.lease, "a buffers every record", func() bool { return s.bufferedCount() == 10 })

		// Another worker takes the lease over, as if a's renewals had stopped.
		waitFor(t, 10*w.lease, "the lease taken from a", func() bool {
			for _, l := range w.leases(t) {
				if shardlease.OwnerName(l.Owner) == "a" {
					_, err := w.store.Acquire(context.Background(), l.Key, "thief", l.Counter)
					return err == nil
				}
			}
			return false
		})
		waitFor(t, 10*w.lease, "a's stop hook", func() bool {
			events, _ := s.of("a", shard)
			return slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "stop") })
		})
		require.NoError(t, a.stop(t))
		events, _ := s.of("a", shard)
		for i, e := range events {
			if strings.HasPrefix(e, "stop") {
				events = events[:i+1] // a may take the lease back later
				break
			}
		}
		requireRun(t, events, shardlease.StopLost)
		s.mu.Lock()
		defer s.mu.Unlock()
		assert.ErrorIs(t, s.lostCtxErr, context.Canceled, "the handler's context was cancelled before the stop hook")
		assert.ErrorIs(t, s.lostCheckpointErr, shardlease.ErrLeaseLost)
		assert.Empty(t, s.delivered)
		assert.GreaterOrEqual(t, a.c.Stats().LeasesLost, int64(1))
	})
}

// A shard read to its end runs the stop hook before SHARD_END is written;
// its children start after it, from their start.
func TestHooksShardEnd(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 20, 8)
		parent := onlyShard(t, p)
		s := newBuffering()
		a := startWorker(t, w, w.kin, w.store, s.handler("a"), w.opts("a", shardlease.WithManualCheckpoints(), s.hooks("a"))...)
		waitFor(t, 30*w.lease, "a buffers every record", func() bool { return s.bufferedCount() == 20 })

		sh := w.shardsOf(t)[parent]
		lo, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
		hi, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.EndingHashKey), 10)
		mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
		retryBusy(t, w, "split", func() error {
			_, err := w.kin.SplitShard(context.Background(), &kinesis.SplitShardInput{
				StreamName: aws.String(w.stream), ShardToSplit: aws.String(parent), NewStartingHashKey: aws.String(mid.String()),
			})
			return err
		})
		w.put(t, p, 20, 8)
		waitFor(t, 60*w.lease, "the children's records buffered", func() bool { return s.bufferedCount() == 40 })
		waitFor(t, 30*w.lease, "the parent finished", func() bool { return w.checkpointOf(t, parent) == shardlease.ShardEnd })
		require.NoError(t, a.stop(t))

		events, at := s.of("a", parent)
		requireRun(t, events, shardlease.StopShardEnded)
		children := 0
		for id := range w.shardsOf(t) {
			if id == parent {
				continue
			}
			children++
			cev, cat := s.of("a", id)
			require.NotEmpty(t, cev, "child %s read", id)
			assert.Greater(t, cat[0], at[len(at)-1], "child %s starts after the parent's stop hook", id)
			requireRun(t, cev, shardlease.StopShuttingDown)
			st := s.starts["a/"+id]
			require.Len(t, st, 1)
			assert.Equal(t, shardlease.TrimHorizon, st[0].Position, "a child of a shard read is read from its start")
			assert.Empty(t, st[0].Checkpoint)
		}
		assert.Equal(t, 2, children)
		s.requireDeliveredOnce(t, p)
	})
}

// failingWrites fails the holder's writes, without refusing them, while
// fail is set: the lease runs out on the holder's clock.
type failingWrites struct {
	shardlease.LeaseStore
	fail atomic.Bool
}

var errUnreachable = errors.New("connection reset")

func (s *failingWrites) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	if s.fail.Load() {
		return shardlease.Lease{}, errUnreachable
	}
	return s.LeaseStore.Renew(ctx, l, e)
}

func (s *failingWrites) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	if s.fail.Load() {
		return shardlease.Lease{}, errUnreachable
	}
	return s.LeaseStore.Checkpoint(ctx, l, cp, sub, e)
}

// A lease that runs out because no write succeeded for a lease duration
// stops as lost: the handler's context is cancelled before the stop hook.
func TestHooksLeaseRunsOut(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 10, 5)
		shard := onlyShard(t, p)
		s := newBuffering()
		store := &failingWrites{LeaseStore: w.store}
		a := startWorker(t, w, w.kin, store, s.handler("a"), w.opts("a", shardlease.WithManualCheckpoints(), s.hooks("a"))...)
		waitFor(t, 30*w.lease, "a buffers every record", func() bool { return s.bufferedCount() == 10 })
		store.fail.Store(true)
		waitFor(t, 10*w.lease, "a's stop hook", func() bool {
			events, _ := s.of("a", shard)
			return slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "stop") })
		})
		store.fail.Store(false)
		require.NoError(t, a.stop(t))
		events, _ := s.of("a", shard)
		for i, e := range events {
			if strings.HasPrefix(e, "stop") {
				events = events[:i+1]
				break
			}
		}
		requireRun(t, events, shardlease.StopLost)
		s.mu.Lock()
		defer s.mu.Unlock()
		assert.ErrorIs(t, s.lostCtxErr, context.Canceled, "the handler's context was cancelled before the stop hook")
		for id, n := range s.delivered {
			assert.Equal(t, 1, n, "record %s delivered once: the lost run dropped its buffer", id)
		}
	})
}
