package shardlease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

var errPoison = errors.New("cannot parse the record")

// poisonHandler fails every batch that holds a record it is told to fail on,
// and remembers the records of the batches it returned nil for.
type poisonHandler struct {
	mu      sync.Mutex
	poison  map[string]bool // ids it fails on
	fixed   bool            // fail on nothing any more
	handled map[string]int  // id → times in a batch it returned nil for
	calls   int
	sizes   []int // records per call
	// dead-letter callback
	dead       []string // ids dead-lettered, in order
	deadErrs   []error
	deadCalls  int
	deadAccept bool
}

func newPoisonHandler(poison ...string) *poisonHandler {
	h := &poisonHandler{poison: map[string]bool{}, handled: map[string]int{}, deadAccept: true}
	for _, id := range poison {
		h.poison[id] = true
	}
	return h
}

func (h *poisonHandler) handle(_ context.Context, b *shardlease.Batch) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	h.sizes = append(h.sizes, len(b.Records))
	for _, r := range b.Records {
		if !h.fixed && h.poison[string(r.Data)] {
			return fmt.Errorf("record %s: %w", r.Data, errPoison)
		}
	}
	for _, r := range b.Records {
		h.handled[string(r.Data)]++
	}
	return nil
}

func (h *poisonHandler) deadLetter(_ context.Context, _ string, recs []shardlease.Record, err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deadCalls++
	if !h.deadAccept {
		return errors.New("dead-letter queue unavailable")
	}
	for _, r := range recs {
		h.dead = append(h.dead, string(r.Data))
	}
	h.deadErrs = append(h.deadErrs, err)
	return nil
}

func (h *poisonHandler) snapshot() (handled map[string]int, dead []string, calls, deadCalls int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	handled = make(map[string]int, len(h.handled))
	for k, v := range h.handled {
		handled[k] = v
	}
	return handled, append([]string(nil), h.dead...), h.calls, h.deadCalls
}

// checkpointOf returns the checkpoint of shard's row ("" before it has one).
func (w *world) checkpointOf(t *testing.T, shard string) string {
	t.Helper()
	for _, l := range w.leases(t) {
		if l.Key.Shard == shard {
			return l.Checkpoint
		}
	}
	return ""
}

func onlyShard(t *testing.T, p *produced) string {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Len(t, p.byShard, 1)
	for s := range p.byShard {
		return s
	}
	return ""
}

// One poison record in a batch of 1,000: after the attempts, exactly that
// record goes to the dead-letter callback, the other 999 are handled once,
// and the checkpoint moves past the batch.
func TestPoisonOneRecordInBatchOfThousand(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 1000, 50)
		poison := p.ids[617]
		h := newPoisonHandler(poison)
		const attempts = 3
		wk := startWorker(t, w, w.kin, w.store, h.handle, w.opts("a", shardlease.WithMaxAttempts(attempts), shardlease.WithDeadLetter(h.deadLetter))...)
		waitFor(t, 30*w.lease, "999 handled and one dead-lettered", func() bool {
			handled, dead, _, _ := h.snapshot()
			return len(handled) == 999 && len(dead) == 1
		})
		require.NoError(t, wk.stop(t))

		handled, dead, calls, deadCalls := h.snapshot()
		assert.Equal(t, []string{poison}, dead, "exactly the poison record is dead-lettered")
		assert.Equal(t, 1, deadCalls)
		for _, id := range p.ids {
			if id != poison {
				assert.Equal(t, 1, handled[id], "record %s handled once", id)
			}
		}
		assert.Zero(t, handled[poison])
		h.mu.Lock()
		assert.Equal(t, 1000, h.sizes[0], "the records came in one batch")
		require.Len(t, h.deadErrs, 1)
		assert.ErrorIs(t, h.deadErrs[0], errPoison, "the callback gets the handler's error")
		h.mu.Unlock()
		// attempts on the whole batch, two halves per level, and the poison
		// record alone until it has failed attempts times.
		levels := int(math.Ceil(math.Log2(1000)))
		assert.LessOrEqual(t, calls, attempts+2*levels+attempts, "handler calls")

		st := wk.c.Stats()
		assert.Equal(t, int64(1), st.RecordsDeadLettered)
		assert.Equal(t, int64(999), st.RecordsHandled)
		shard := onlyShard(t, p)
		assert.Equal(t, p.seq[p.ids[999]], w.checkpointOf(t, shard), "the checkpoint is past the batch")

		// A new worker starts after the batch: nothing is handed again.
		h2 := newPoisonHandler()
		w.put(t, p, 1, 1)
		b := startWorker(t, w, w.kin, w.store, h2.handle, w.opts("b")...)
		waitFor(t, 30*w.lease, "the new record handled", func() bool { got, _, _, _ := h2.snapshot(); return len(got) > 0 })
		require.NoError(t, b.stop(t))
		got, _, _, _ := h2.snapshot()
		assert.Equal(t, map[string]int{p.ids[1000]: 1}, got)
	})
}

// A poison record that is the last of its batch: the checkpoint moves onto it
// once the callback returns nil.
func TestPoisonLastRecordCheckpointed(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 20, 5)
		poison := p.ids[19]
		h := newPoisonHandler(poison)
		wk := startWorker(t, w, w.kin, w.store, h.handle, w.opts("a", shardlease.WithMaxAttempts(1), shardlease.WithDeadLetter(h.deadLetter))...)
		shard := onlyShard(t, p)
		waitFor(t, 30*w.lease, "the checkpoint written onto the poison record", func() bool {
			return w.checkpointOf(t, shard) == p.seq[poison]
		})
		require.NoError(t, wk.stop(t))
		handled, dead, _, _ := h.snapshot()
		assert.Equal(t, []string{poison}, dead)
		assert.Len(t, handled, 19)
	})
}

// While the dead-letter callback fails, it is called again and nothing is
// checkpointed past the poison record, and no later batch is handled; once
// it succeeds the shard moves on.
func TestPoisonDeadLetterFails(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 10, 5)
		poison := p.ids[4]
		h := newPoisonHandler(poison)
		h.deadAccept = false
		rec := newRecorder()
		wk := startWorker(t, w, w.kin, w.store, h.handle, w.opts("a", shardlease.WithMaxAttempts(2), shardlease.WithDeadLetter(h.deadLetter),
			shardlease.WithMeterProvider(rec))...)
		waitFor(t, 30*w.lease, "the callback failed twice", func() bool { _, _, _, n := h.snapshot(); return n >= 2 })
		w.put(t, p, 5, 5)
		waitFor(t, 60*w.lease, "the callback failed three more times", func() bool { _, _, _, n := h.snapshot(); return n >= 5 })

		shard := onlyShard(t, p)
		cp := w.checkpointOf(t, shard)
		assert.True(t, cp == "" || cp == p.seq[p.ids[3]], "checkpoint %q is past the records before the poison record at most", cp)
		handled, dead, _, _ := h.snapshot()
		assert.Empty(t, dead)
		for _, id := range p.ids[10:] {
			assert.Zero(t, handled[id], "record %s after the stuck batch was handled", id)
		}
		assert.Zero(t, wk.c.Stats().RecordsDeadLettered)
		assert.Contains(t, rec.collect(t)["shardlease.retry.stuck"], shard, "a shard whose callback fails is reported stuck")

		h.mu.Lock()
		h.deadAccept = true
		h.mu.Unlock()
		waitFor(t, 30*w.lease, "the later records handled", func() bool { got, _, _, _ := h.snapshot(); return len(got) == 14 })
		require.NoError(t, wk.stop(t))
		handled, dead, _, _ = h.snapshot()
		assert.Equal(t, []string{poison}, dead)
		for _, id := range p.ids {
			if id != poison {
				assert.Equal(t, 1, handled[id], "record %s handled once", id)
			}
		}
		assert.Equal(t, int64(1), wk.c.Stats().RecordsDeadLettered)
		assert.Equal(t, p.seq[p.ids[14]], w.checkpointOf(t, shard))
	})
}

// syncBuffer is a log sink the consumer's goroutines write to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Without a limit, a failing batch is retried until the handler succeeds:
// nothing is skipped or dead-lettered, and an Error log line says which
// sequence number the shard is stuck on, for how long, and how long until
// the record ages out of the stream.
func TestPoisonUnlimitedRetries(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 30, 5)
		h := newPoisonHandler(p.ids[12])
		logs := &syncBuffer{}
		log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError}))
		wk := startWorker(t, w, w.kin, w.store, h.handle, w.opts("a", shardlease.WithLogger(log))...)
		waitFor(t, 60*w.lease, "ten failed attempts", func() bool { _, _, calls, _ := h.snapshot(); return calls >= 10 })

		handled, _, _, _ := h.snapshot()
		assert.Empty(t, handled, "no part of the failing batch is handled")
		shard := onlyShard(t, p)
		assert.Empty(t, w.checkpointOf(t, shard))
		st := wk.c.Stats()
		assert.Zero(t, st.RecordsDeadLettered)
		assert.GreaterOrEqual(t, st.HandlerErrors, int64(10))

		text := logs.String()
		assert.Contains(t, text, "shard stuck")
		assert.Contains(t, text, "sequence="+p.seq[p.ids[0]], "the log names the sequence number the shard is stuck on")
		assert.Contains(t, text, "stuck_for=")
		assert.Contains(t, text, "ages_out_in=2", "the record ages out about 24h after it arrived")
		assert.Equal(t, 1, strings.Count(text, "shard stuck"), "logged at most once a minute")

		h.mu.Lock()
		h.fixed = true
		h.mu.Unlock()
		waitFor(t, 30*w.lease, "every record handled", func() bool { got, _, _, _ := h.snapshot(); return len(got) == 30 })
		require.NoError(t, wk.stop(t))
		handled, dead, _, _ := h.snapshot()
		assert.Empty(t, dead)
		for _, id := range p.ids {
			assert.Equal(t, 1, handled[id], "record %s handled once", id)
		}
		assert.Equal(t, p.seq[p.ids[29]], w.checkpointOf(t, shard))
	})
}

// Bad combinations of the retry options are refused with what to do.
func TestPoisonOptionsValidated(t *testing.T) {
	t.Parallel()
	dl := func(context.Context, string, []shardlease.Record, error) error { return nil }
	h := func(context.Context, *shardlease.Batch) error { return nil }
	cases := []struct {
		opts []shardlease.Option
		want string
	}{
		{[]shardlease.Option{shardlease.WithMaxAttempts(-1)}, "WithMaxAttempts(-1)"},
		{[]shardlease.Option{shardlease.WithMaxAttempts(3)}, "needs WithDeadLetter"},
		{[]shardlease.Option{shardlease.WithDeadLetter(dl)}, "needs WithMaxAttempts"},
		{[]shardlease.Option{shardlease.WithMaxAttempts(3), shardlease.WithDeadLetter(dl), shardlease.WithManualCheckpoints()}, "WithManualCheckpoints"},
	}
	for _, c := range cases {
		_, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), "orders", h, c.opts...)
		require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
		assert.Contains(t, err.Error(), c.want)
		assert.Contains(t, err.Error(), "orders")
	}
	_, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), "orders", h,
		shardlease.WithMaxAttempts(3), shardlease.WithDeadLetter(dl))
	assert.NoError(t, err)
}

// A dead-letter callback that panics is retried like one that fails.
func TestPoisonDeadLetterPanics(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 4, 2)
		h := newPoisonHandler(p.ids[1])
		var panics atomic.Int32
		dl := func(ctx context.Context, shard string, recs []shardlease.Record, err error) error {
			if panics.Add(1) <= 2 {
				panic("dead-letter queue client not configured")
			}
			return h.deadLetter(ctx, shard, recs, err)
		}
		wk := startWorker(t, w, w.kin, w.store, h.handle, w.opts("a", shardlease.WithMaxAttempts(1), shardlease.WithDeadLetter(dl))...)
		// Stopped only once the records after the poison one were handled
		// too: a worker stopped in between hands no further part of the
		// batch, and its checkpoint rightly stays at the poison record.
		waitFor(t, 30*w.lease, "the poison record dead-lettered and the rest handled", func() bool {
			handled, dead, _, _ := h.snapshot()
			return len(dead) == 1 && handled[p.ids[3]] > 0
		})
		require.NoError(t, wk.stop(t))
		assert.Equal(t, int32(3), panics.Load())
		assert.Equal(t, p.seq[p.ids[3]], w.checkpointOf(t, onlyShard(t, p)))
	})
}

// A worker stopped while its dead-letter callback fails has checkpointed
// every record before the poison one, and handled none after it: the next
// worker hands no record to the handler twice.
func TestPoisonShutdownWhileNarrowing(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		w.put(t, p, 100, 10)
		poison := p.ids[60]
		h := newPoisonHandler(poison)
		h.deadAccept = false
		a := startWorker(t, w, w.kin, w.store, h.handle, w.opts("a", shardlease.WithMaxAttempts(2), shardlease.WithDeadLetter(h.deadLetter))...)
		waitFor(t, 30*w.lease, "a's callback failed", func() bool { _, _, _, n := h.snapshot(); return n >= 1 })
		require.NoError(t, a.stop(t))
		shard := onlyShard(t, p)
		assert.Equal(t, p.seq[p.ids[59]], w.checkpointOf(t, shard), "a checkpointed the records before the poison one")
		handled, _, _, _ := h.snapshot()
		assert.Len(t, handled, 60, "a handled the records before the poison one, none after")

		h.mu.Lock()
		h.deadAccept = true
		h.mu.Unlock()
		b := startWorker(t, w, w.kin, w.store, h.handle, w.opts("b", shardlease.WithMaxAttempts(2), shardlease.WithDeadLetter(h.deadLetter))...)
		waitFor(t, 30*w.lease, "b handled the rest", func() bool { got, _, _, _ := h.snapshot(); return len(got) == 99 })
		require.NoError(t, b.stop(t))
		handled, dead, _, _ := h.snapshot()
		assert.Equal(t, []string{poison}, dead)
		for _, id := range p.ids {
			if id != poison {
				assert.Equal(t, 1, handled[id], "record %s handled once", id)
			}
		}
		assert.Equal(t, p.seq[p.ids[99]], w.checkpointOf(t, shard))
	})
}
