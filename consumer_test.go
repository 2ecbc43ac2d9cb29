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
	"github.com/shardlease/shardlease/internal/crash"
)

func TestConsumerReadsEveryRecordInOrder(t *testing.T) {
	t.Parallel()
	worlds(t, 4, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 200, 32)
		h := newHandled()
		wk := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a")...)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 200 })
		w.put(t, p, 100, 32)
		waitFor(t, 30*w.lease, "records written while running handled", func() bool { return h.distinct() == 300 })
		require.NoError(t, wk.stop(t))

		assert.Empty(t, h.lost(p))
		assert.Zero(t, h.duplicates())
		h.mu.Lock()
		for shard, want := range p.byShard {
			assert.Equal(t, want, h.byShard[shard], "shard %s read in order", shard)
		}
		h.mu.Unlock()
		requireKeyOrder(t, p, h)

		// Shutdown wrote the final checkpoints and released every lease.
		ls := w.leases(t)
		require.Len(t, ls, 4)
		for _, l := range ls {
			assert.Empty(t, l.Owner, "shard %s released", l.Key.Shard)
			ids := p.byShard[l.Key.Shard]
			require.NotEmpty(t, ids)
			assert.Equal(t, p.seq[ids[len(ids)-1]], l.Checkpoint, "shard %s checkpointed at its last record", l.Key.Shard)
		}
	})
}

func TestConsumerResumesAfterCheckpoint(t *testing.T) {
	t.Parallel()
	worlds(t, 4, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 80, 16)
		first := newHandled()
		a := startWorker(t, w, w.kin, w.store, first.handler("a"), w.opts("a")...)
		waitFor(t, 30*w.lease, "first run handles everything", func() bool { return first.distinct() == 80 })
		require.NoError(t, a.stop(t))

		w.put(t, p, 60, 16)
		second := newHandled()
		b := startWorker(t, w, w.kin, w.store, second.handler("b"), w.opts("b")...)
		waitFor(t, 30*w.lease, "second run handles the new records", func() bool { return second.distinct() == 60 })
		require.NoError(t, b.stop(t))

		second.mu.Lock()
		defer second.mu.Unlock()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, id := range p.ids[:80] {
			assert.Zero(t, second.times[id], "record %s before the checkpoint was handed again", id)
		}
		for _, id := range p.ids[80:] {
			assert.Equal(t, 1, second.times[id], "record %s after the checkpoint", id)
		}
	})
}

func TestConsumerTwoWorkersSplitShards(t *testing.T) {
	t.Parallel()
	worlds(t, 4, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a")...)
		waitFor(t, 10*w.lease, "a holds every shard", func() bool { return len(a.c.Held()) == 4 })
		w.put(t, p, 100, 32)
		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b")...)
		waitFor(t, 10*w.lease, "two shards each", func() bool {
			return len(a.c.Held()) == 2 && len(b.c.Held()) == 2
		})
		w.put(t, p, 100, 32)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 200 })
		require.NoError(t, a.stop(t))
		require.NoError(t, b.stop(t))
		assert.Empty(t, h.lost(p))
		assert.Zero(t, h.duplicates(), "a handoff hands no record to two workers")
		requireKeyOrder(t, p, h)
		h.mu.Lock()
		defer h.mu.Unlock()
		workers := map[string]bool{}
		for _, ws := range h.worker {
			for _, wkr := range ws {
				workers[wkr] = true
			}
		}
		assert.True(t, workers["a"] && workers["b"], "both workers handled records")
	})
}

func TestConsumerCrashedWorkerIsTakenOver(t *testing.T) {
	t.Parallel()
	worlds(t, 4, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		sw := &crash.Switch{}
		a := startWorker(t, w, crash.Kinesis(w.kin, sw), crash.Store(w.store, sw), h.handler("a"), w.opts("a")...)
		waitFor(t, 10*w.lease, "a holds every shard", func() bool { return len(a.c.Held()) == 4 })
		w.put(t, p, 100, 16)
		waitFor(t, 30*w.lease, "a handles the first records", func() bool { return h.distinct() == 100 })

		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b")...)
		waitFor(t, 10*w.lease, "b has seen a's leases", func() bool { return h.distinct() == 100 && len(w.leases(t)) == 4 })
		sw.Crash() // a dies: no release, no final checkpoint
		crashed := time.Now()
		w.put(t, p, 100, 16)

		waitFor(t, 10*w.lease, "b holds every shard", func() bool { return len(b.c.Held()) == 4 })
		took := time.Since(crashed)
		assert.GreaterOrEqual(t, took, w.lease, "b waited a whole lease duration on its own clock")
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == 200 })
		assert.Empty(t, h.lost(p))
		require.NoError(t, a.stop(t))
		require.NoError(t, b.stop(t))
		for _, l := range w.leases(t) {
			assert.Empty(t, l.Owner, "b released %s on shutdown", l.Key.Shard)
		}
	})
}

func TestConsumerStaleWorkerCheckpointRefused(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		entered := make(chan struct{}, 1)
		release := make(chan struct{})
		var calls atomic.Int64
		h := newHandled()
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			if calls.Add(1) == 1 {
				entered <- struct{}{}
				<-release
			}
			h.add("a", b)
			return nil
		}
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a")...)
		w.put(t, p, 10, 4)
		<-entered

		// While a is inside its handler, a thief takes the lease with the
		// counter it observes, as a worker that believed a dead would.
		cur := w.leases(t)[0]
		require.Equal(t, "a", shardlease.OwnerName(cur.Owner))
		stolen, err := w.store.Acquire(context.Background(), cur.Key, "thief", cur.Counter)
		require.NoError(t, err)
		close(release)

		waitFor(t, w.lease/2, "a notices the loss", func() bool { return len(a.c.Held()) == 0 })
		noticed := calls.Load()
		w.put(t, p, 10, 4)
		// Give a the chance to (wrongly) go on for a renew interval, well
		// within the thief's lease duration.
		time.Sleep(w.renew)
		require.NoError(t, a.stop(t))

		got := w.leases(t)[0]
		assert.Equal(t, "thief", got.Owner)
		assert.Equal(t, stolen.Counter, got.Counter, "no write by a after the theft succeeded")
		assert.Empty(t, got.Checkpoint, "a's checkpoint for the batch in hand was refused")
		assert.Equal(t, noticed, calls.Load(), "no batch handed to a once its write was refused")
	})
}

func TestConsumerHandlerErrorsRetry(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		var calls atomic.Int64
		var checkpointWhileFailing atomic.Value
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			n := calls.Add(1)
			if n <= 3 {
				if l := w.leases(t); len(l) == 1 {
					checkpointWhileFailing.Store(l[0].Checkpoint)
				}
				return fmt.Errorf("downstream unavailable (attempt %d)", n)
			}
			h.add("a", b)
			return nil
		}
		w.put(t, p, 20, 4)
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a")...)
		waitFor(t, 30*w.lease, "records handled after the retries", func() bool { return h.distinct() == 20 })
		require.NoError(t, a.stop(t))
		assert.GreaterOrEqual(t, calls.Load(), int64(4))
		assert.Equal(t, "", checkpointWhileFailing.Load(), "no checkpoint past a failing batch")
		assert.Zero(t, h.duplicates())
		assert.Equal(t, p.seq[p.ids[19]], w.leases(t)[0].Checkpoint)
	})
}

func TestConsumerHandlerPanicIsRecovered(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		var panics atomic.Int64
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			if panics.Load() == 0 && panics.Add(1) == 1 {
				panic("handler bug")
			}
			h.add("a", b)
			return nil
		}
		w.put(t, p, 30, 8)
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a")...)
		waitFor(t, 30*w.lease, "records handled after the panic", func() bool { return h.distinct() == 30 })
		require.NoError(t, a.stop(t))
		assert.Equal(t, int64(1), panics.Load())
		assert.Empty(t, h.lost(p))
	})
}

func TestConsumerSteadyStateWrites(t *testing.T) {
	t.Parallel()
	worlds(t, 4, func(t *testing.T, w *world) {
		p := &produced{}
		counting := newCountingStore(w.store)
		h := newHandled()
		a := startWorker(t, w, w.kin, counting, h.handler("a"), w.opts("a")...)
		waitFor(t, 10*w.lease, "a holds every shard", func() bool { return len(a.c.Held()) == 4 })

		// Steady state: records keep arriving on every shard, and every
		// batch is checkpointed (the handler returns nil).
		stopProducing := make(chan struct{})
		var producer sync.WaitGroup
		producer.Go(func() {
			tick := time.NewTicker(w.renew / 4)
			defer tick.Stop()
			for {
				select {
				case <-stopProducing:
					return
				case <-tick.C:
					w.put(t, p, 8, 64)
				}
			}
		})
		waitFor(t, 10*w.lease, "records flowing", func() bool { return h.distinct() > 50 })
		intervals := 60 // a minute at the default renew interval... scaled to the world
		before, dynBefore := counting.total(), int64(0)
		if w.dynamo != nil {
			dynBefore = w.dynamo.Writes()
		}
		batchesBefore := h.batches.Load()
		time.Sleep(time.Duration(intervals) * w.renew)
		writes := counting.total() - before
		batches := h.batches.Load() - batchesBefore
		var dynWrites int64
		if w.dynamo != nil {
			dynWrites = w.dynamo.Writes() - dynBefore
		}
		close(stopProducing)
		producer.Wait()
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		require.NoError(t, a.stop(t))

		limit := 4 * (intervals + 1)
		t.Logf("%s: %d store writes and %d DynamoDB writes for %d batches over %d renew intervals of 4 leases (limit %d)",
			w.name, writes, dynWrites, batches, intervals, limit)
		assert.Greater(t, batches, int64(4*intervals/2), "the handler checkpointed many batches")
		assert.LessOrEqual(t, writes, limit, "at most one write per lease per renew interval")
		if w.dynamo != nil {
			assert.LessOrEqual(t, dynWrites, int64(limit), "one DynamoDB call per store write")
		}
		assert.Empty(t, h.lost(p))
	})
}

func TestConsumerStreamNotFound(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		w.stream = "no-such-stream"
		c, err := shardlease.NewConsumer(w.kin, w.store, w.stream, newHandled().handler("a"), w.opts("a")...)
		require.NoError(t, err)
		err = c.Run(context.Background())
		var snf *shardlease.StreamNotFoundError
		require.True(t, errors.As(err, &snf), "got %v", err)
		assert.Contains(t, err.Error(), "stream no-such-stream not found")
		assert.Contains(t, err.Error(), "create it")
	})
}
