package shardlease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	"github.com/shardlease/shardlease/internal/crash"
)

// errStaleFence is what fencedSink refuses a write with.
var errStaleFence = errors.New("sink: a newer holder of the shard wrote already")

// fencedSink is the sink of docs/handlers.md: per shard the highest token
// it applied, and the last position applied. A write below the token is
// refused; a record at or below the position is in already.
type fencedSink struct {
	mu      sync.Mutex
	token   map[string]shardlease.FenceToken // scope → highest token applied
	last    map[string]string                // scope → last position applied
	applied map[string]int                   // id → times its effect was applied
	stale   int                              // writes refused for their token
}

func newFencedSink() *fencedSink {
	return &fencedSink{token: map[string]shardlease.FenceToken{}, last: map[string]string{}, applied: map[string]int{}}
}

// write applies b's records as one transaction would.
func (s *fencedSink) write(b *shardlease.Batch) error {
	tok := b.Fence()
	s.mu.Lock()
	defer s.mu.Unlock()
	scope := tok.Scope()
	if have, ok := s.token[scope]; ok {
		c, err := tok.Compare(have)
		if err != nil {
			return err
		}
		if c < 0 {
			s.stale++
			return fmt.Errorf("%s below %s: %w", tok, have, errStaleFence)
		}
	}
	s.token[scope] = tok
	for _, r := range b.Records {
		pos := r.FencePosition()
		if pos <= s.last[scope] {
			continue
		}
		s.last[scope] = pos
		s.applied[string(r.Data)]++
	}
	return nil
}

// appliedTwice returns how many effects were applied more than once.
func (s *fencedSink) appliedTwice() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.applied {
		n += v - 1
	}
	return n
}

func (s *fencedSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.applied)
}

func (s *fencedSink) staleRefused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stale
}

// missing returns the produced ids whose effect is not in the sink.
func (s *fencedSink) missing(p *produced) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, id := range p.ids {
		if s.applied[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// tokenLog records the tokens each worker's batches carried.
type tokenLog struct {
	mu sync.Mutex
	by map[string][]shardlease.FenceToken
}

func (l *tokenLog) add(worker string, t shardlease.FenceToken) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[string][]shardlease.FenceToken{}
	}
	l.by[worker] = append(l.by[worker], t)
}

func (l *tokenLog) of(worker string) []shardlease.FenceToken {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.by[worker])
}

// A later holder's token is greater than the token of every earlier
// holding, and greater than every counter the earlier holder ever wrote.
func TestFenceTokenGrowsWithEachHolder(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		var log tokenLog
		handler := func(name string) shardlease.Handler {
			return func(ctx context.Context, b *shardlease.Batch) error {
				log.add(name, b.Fence())
				h.add(name, b)
				return nil
			}
		}
		a := startWorker(t, w, w.kin, w.store, handler("a"), w.opts("a")...)
		w.put(t, p, 10, 4)
		waitFor(t, 30*w.lease, "a handles the first records", func() bool { return h.distinct() == 10 })
		w.put(t, p, 10, 4)
		waitFor(t, 30*w.lease, "a handles the next records", func() bool { return h.distinct() == 20 })
		// a renews meanwhile: the counter moves past its token during its holding.
		waitFor(t, 10*w.lease, "a's renewals move the counter", func() bool {
			return w.leases(t)[0].Counter > log.of("a")[0].Counter()
		})
		require.NoError(t, a.stop(t))
		released := w.leases(t)[0].Counter

		b := startWorker(t, w, w.kin, w.store, handler("b"), w.opts("b")...)
		w.put(t, p, 10, 4)
		waitFor(t, 30*w.lease, "b handles the last records", func() bool { return h.distinct() == 30 })
		require.NoError(t, b.stop(t))

		at, bt := log.of("a"), log.of("b")
		require.NotEmpty(t, at)
		require.NotEmpty(t, bt)
		for _, tok := range at[1:] {
			assert.Equal(t, at[0], tok, "every batch of one holding carries one token")
		}
		c, err := bt[0].Compare(at[0])
		require.NoError(t, err)
		assert.Equal(t, 1, c, "b's token %s is above a's %s", bt[0], at[0])
		assert.Greater(t, bt[0].Counter(), released, "b's token is above every counter a wrote, its release included")
		assert.Less(t, at[0].Counter(), released, "a's renewals moved the counter past its token")
	})
}

// A holder paused past its lease writes to the sink after the next holder
// did: the sink refuses it by its token, and every effect is applied once.
// It holds whichever of the two can describe the stream (the stale one, the
// live one, or both), so that it does not rest on the stale holder's
// token leading with the zero epoch.
func TestFenceStaleHolderRefusedBySink(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ stale, live knowledge }{
		{describes, describes},
		{noDescribe, describes},
		{describes, noDescribe},
	} {
		t.Run(fmt.Sprintf("stale %s, live %s", c.stale, c.live), func(t *testing.T) {
			t.Parallel()
			staleHolderRefusedBySink(t, c.stale, c.live)
		})
	}
}

// staleHolderRefusedBySink is TestFenceStaleHolderRefusedBySink with the
// stale holder's and the live holder's knowledge of the stream.
func staleHolderRefusedBySink(t *testing.T, stale, live knowledge) {
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		sink := newFencedSink()
		entered, wake := make(chan struct{}), make(chan struct{})
		var woke atomic.Value
		var first atomic.Bool
		var wakeOnce sync.Once
		sw := &crash.Switch{}
		aHandler := func(ctx context.Context, b *shardlease.Batch) error {
			if first.CompareAndSwap(false, true) {
				close(entered)
				<-wake // frozen, deaf to ctx: a paused process
				err := sink.write(b)
				woke.Store(fmt.Sprint(err))
				return err
			}
			return sink.write(b)
		}
		w.put(t, p, 20, 4)
		a := startWorker(t, w, fenceClient(w, stale, sw), crash.Store(w.store, sw), aHandler, w.opts("a")...)
		t.Cleanup(func() { wakeOnce.Do(func() { close(wake) }) }) // before a stops, should the test end early
		<-entered
		sw.Crash() // a's writes stop landing: its lease expires for b

		b := startWorker(t, w, fenceClient(w, live, nil), w.store, func(ctx context.Context, bt *shardlease.Batch) error { return sink.write(bt) }, w.opts("b")...)
		waitFor(t, 30*w.lease, "b applies every record", func() bool { return sink.count() == 20 || sink.staleRefused() > 0 })
		require.Zero(t, sink.staleRefused(), "the sink refused the live holder b")
		wakeOnce.Do(func() { close(wake) })
		waitFor(t, 10*w.lease, "a's late write", func() bool { return woke.Load() != nil })
		require.NoError(t, b.stop(t))
		_ = a.stop(t)

		assert.Contains(t, woke.Load(), errStaleFence.Error(), "a's write after b's was refused")
		assert.Equal(t, 1, sink.staleRefused())
		assert.Zero(t, sink.appliedTwice(), "effects applied twice")
		assert.Empty(t, sink.missing(p))
	})
}

// After a crash the next holder hands the records after the checkpoint
// again; the sink passes over those it applied by their position.
func TestFenceCrashDuplicatesNotApplied(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		sink := newFencedSink()
		sw := &crash.Switch{}
		aHandler := func(ctx context.Context, b *shardlease.Batch) error {
			if sw.Down() {
				return errors.New("crashed")
			}
			h.add("a", b)
			err := sink.write(b)
			if sink.count() >= 30 {
				sw.Crash() // after the sink write, before any checkpoint of it
			}
			return err
		}
		a := startWorker(t, w, crash.Kinesis(w.kin, sw), crash.Store(w.store, sw), aHandler, w.opts("a", shardlease.WithCheckpointInterval(w.renew))...)
		waitFor(t, 10*w.lease, "a holds both shards", func() bool { return len(a.c.Held()) == 2 })
		w.put(t, p, 40, 8)
		waitFor(t, 30*w.lease, "a crashes", sw.Down)
		b := startWorker(t, w, w.kin, w.store, func(ctx context.Context, bt *shardlease.Batch) error {
			h.add("b", bt)
			return sink.write(bt)
		}, w.opts("b")...)
		w.put(t, p, 10, 8)
		waitFor(t, 30*w.lease, "every effect applied", func() bool { return sink.count() == 50 })
		require.NoError(t, b.stop(t))
		_ = a.stop(t)

		assert.Positive(t, h.duplicates(), "b handled again records a handled before it crashed")
		assert.Zero(t, sink.appliedTwice(), "effects applied twice")
		assert.Empty(t, sink.missing(p))
	})
}

// The token leads with the stream's creation time, and its counter comes
// from the stream's fence floor, which adopt-stream keeps: the rows of a
// re-created stream carry greater tokens on both counts.
func TestFenceEpochSurvivesRecreatedStream(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		var log tokenLog
		h := newHandled()
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			log.add("a", b.Fence())
			h.add("a", b)
			return nil
		}
		p := &produced{}
		w.put(t, p, 5, 1)
		a := startWorker(t, w, w.kin, w.store, handler, w.opts("a")...)
		waitFor(t, 30*w.lease, "the first stream's records", func() bool { return h.distinct() == 5 })
		// Many holdings of the old stream's row push its counter up.
		require.NoError(t, a.stop(t))
		old := log.of("a")[0]
		describer := w.kin.(shardlease.StreamDescriber)
		before, err := shardlease.DescribeIdentity(t.Context(), describer, w.stream)
		require.NoError(t, err)
		assert.Equal(t, before.Created.UnixMilli(), old.Epoch().UnixMilli(), "the token leads with the stream's creation time")

		recreate(t, w, before.Created)
		now, err := shardlease.DescribeIdentity(t.Context(), describer, w.stream)
		require.NoError(t, err)
		_, err = w.store.(shardlease.IdentityStore).ResetStream(t.Context(), now)
		require.NoError(t, err)
		w.put(t, p, 5, 1)
		a2 := startWorker(t, w, w.kin, w.store, handler, w.opts("a")...)
		waitFor(t, 30*w.lease, "the new stream's records", func() bool { return h.distinct() == 10 })
		require.NoError(t, a2.stop(t))
		toks := log.of("a")
		last := toks[len(toks)-1]
		c, err := last.Compare(old)
		require.NoError(t, err)
		assert.Equal(t, 1, c, "the new stream's token %s is above the old stream's %s", last, old)
		assert.True(t, last.Epoch().After(old.Epoch()), "the new stream's token leads with its later creation time: %s, %s", last, old)
		assert.Greater(t, last.Counter(), old.Counter(), "the counter kept growing: the fence floor outlives adopt-stream")
	})
}

// recreate deletes the world's stream and creates it again, later than
// created.
func recreate(t *testing.T, w *world, created time.Time) {
	t.Helper()
	type admin interface {
		DeleteStream(ctx context.Context, params *kinesis.DeleteStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.DeleteStreamOutput, error)
		CreateStream(ctx context.Context, params *kinesis.CreateStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error)
	}
	k := w.kin.(admin)
	for time.Since(created) < 3100*time.Millisecond { // kinesalite: whole seconds, two seconds early
		time.Sleep(100 * time.Millisecond)
	}
	_, err := k.DeleteStream(t.Context(), &kinesis.DeleteStreamInput{StreamName: aws.String(w.stream)})
	require.NoError(t, err)
	waitFor(t, time.Minute, "the stream deleted and created again", func() bool {
		_, err := k.CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String(w.stream), ShardCount: aws.Int32(1)})
		return err == nil
	})
	waitFor(t, time.Minute, "the new stream active", func() bool {
		_, err := w.kin.ListShards(t.Context(), &kinesis.ListShardsInput{StreamName: aws.String(w.stream)})
		return err == nil
	})
}

// The stop hook gets the token of the holding it ends, for a handler that
// flushes what it buffered.
func TestFenceShardStopCarriesTheHoldingsToken(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		p := &produced{}
		var log tokenLog
		h := newHandled()
		hooks := shardlease.WithShardHooks(shardlease.ShardHooks{OnStop: func(ctx context.Context, st *shardlease.ShardStop) {
			log.add("stop", st.Fence())
		}})
		a := startWorker(t, w, w.kin, w.store, func(ctx context.Context, b *shardlease.Batch) error {
			log.add("batch", b.Fence())
			h.add("a", b)
			return nil
		}, w.opts("a", hooks)...)
		w.put(t, p, 5, 1)
		waitFor(t, 30*w.lease, "records handled", func() bool { return h.distinct() == 5 })
		require.NoError(t, a.stop(t))
		stops := log.of("stop")
		require.Len(t, stops, 1)
		assert.Equal(t, log.of("batch")[0], stops[0])
	})
}

func TestFenceCompareRefusesOtherShards(t *testing.T) {
	t.Parallel()
	one, err := shardlease.ParseFenceToken("orders:shardId-000000000001", "0000018f3a2b1c00.0000000000000007")
	require.NoError(t, err)
	other, err := shardlease.ParseFenceToken("orders:shardId-000000000002", "0000018f3a2b1c00.0000000000000009")
	require.NoError(t, err)
	elsewhere, err := shardlease.ParseFenceToken("payments:shardId-000000000001", "0000018f3a2b1c00.0000000000000009")
	require.NoError(t, err)
	for _, u := range []shardlease.FenceToken{other, elsewhere, {}} {
		_, err := one.Compare(u)
		assert.ErrorIs(t, err, shardlease.ErrFenceMismatch, "%s against %s", one, u)
	}
	_, err = shardlease.FenceToken{}.Compare(shardlease.FenceToken{})
	assert.ErrorIs(t, err, shardlease.ErrFenceMismatch, "zero tokens")
	c, err := one.Compare(one)
	require.NoError(t, err)
	assert.Zero(t, c)

	for _, bad := range []string{"", "7", "0000018f3a2b1c00-0000000000000007", "0000018f3a2b1c00.000000000000000g", "0000018f3a2b1c00.00000000000000007"} {
		_, err := shardlease.ParseFenceToken("orders:shardId-000000000001", bad)
		assert.ErrorIs(t, err, shardlease.ErrInvalidConfig, "value %q", bad)
	}
	_, err = shardlease.ParseFenceToken("no-colon", "0000018f3a2b1c00.0000000000000007")
	assert.Error(t, err)
}

// Value and Bytes order tokens as Compare does, so a sink compares them with
// <= in SQL or a DynamoDB condition; ParseFenceToken reads Value back.
func TestFenceValueAndBytesOrderAsCompare(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	scope := "orders:shardId-000000000003"
	var toks []shardlease.FenceToken
	for range 200 {
		epoch := int64(1_700_000_000_000 + rng.IntN(3)*1000)
		counter := rng.Int64N(1 << 40)
		if rng.IntN(4) == 0 {
			counter = rng.Int64N(20)
		}
		tok, err := shardlease.ParseFenceToken(scope, fmt.Sprintf("%016x.%016x", epoch, counter))
		require.NoError(t, err)
		toks = append(toks, tok)
	}
	for i := range toks {
		for j := range toks {
			want, err := toks[i].Compare(toks[j])
			require.NoError(t, err)
			assert.Equal(t, want, strings.Compare(toks[i].Value(), toks[j].Value()), "Value of %s and %s", toks[i], toks[j])
			assert.Equal(t, want, bytes.Compare(toks[i].Bytes(), toks[j].Bytes()), "Bytes of %s and %s", toks[i], toks[j])
		}
		back, err := shardlease.ParseFenceToken(toks[i].Scope(), toks[i].Value())
		require.NoError(t, err)
		assert.Equal(t, toks[i], back)
		assert.Len(t, toks[i].Value(), 33)
	}
}

// FencePosition orders records as their shard does: sequence numbers of any
// length as numbers, sub-records in order, a whole record after them.
func TestFencePositionOrdersAsTheShard(t *testing.T) {
	t.Parallel()
	inOrder := []shardlease.Record{
		{SequenceNumber: "9", SubSequenceNumber: -1},
		{SequenceNumber: "10", SubSequenceNumber: 0},
		{SequenceNumber: "10", SubSequenceNumber: 1},
		{SequenceNumber: "10", SubSequenceNumber: 12},
		{SequenceNumber: "10", SubSequenceNumber: -1},
		{SequenceNumber: "49590338271490256608559692538361571095921575989136588898", SubSequenceNumber: -1},
		{SequenceNumber: "49590338271490256608559692538361571095921575989136588899", SubSequenceNumber: 0},
		{SequenceNumber: "149590338271490256608559692538361571095921575989136588899", SubSequenceNumber: -1},
	}
	for i := 1; i < len(inOrder); i++ {
		assert.Less(t, inOrder[i-1].FencePosition(), inOrder[i].FencePosition(), "%v before %v", inOrder[i-1], inOrder[i])
	}
}
