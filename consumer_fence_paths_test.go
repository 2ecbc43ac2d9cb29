package shardlease_test

// Tests of the fencing token on the paths a real fleet takes: workers that
// know the stream's creation time beside workers that cannot learn it, a
// lease row deleted by hand and made again, a Group's stream removed with
// its rows and added back, and a shard passing between a Consumer and a
// Group. Each runs holdings of one shard in turn with a fenced sink and
// checks the promise of docs/handlers.md: every later holding's token is
// above every earlier one's, a paused earlier holder's late write is
// refused, the live holder is never refused, and every effect is applied
// exactly once.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/crash"
)

// knowledge is what a worker may learn of its stream.
type knowledge int

const (
	// describes: the client has DescribeStreamSummary and may call it.
	describes knowledge = iota
	// noDescribe: the client has no DescribeStreamSummary (a wrapper
	// without it).
	noDescribe
	// deniedDescribe: DescribeStreamSummary fails with
	// AccessDeniedException (an IAM policy without it).
	deniedDescribe
)

func (k knowledge) String() string {
	return [...]string{"describes", "no DescribeStreamSummary", "DescribeStreamSummary denied"}[k]
}

// crashDescriber is a crashable Kinesis client (crash.Kinesis) that can
// still describe its stream until the switch is flipped.
type crashDescriber struct {
	shardlease.KinesisAPI
	d  shardlease.StreamDescriber
	sw *crash.Switch
}

func (k crashDescriber) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	if k.sw.Down() {
		return nil, crash.ErrCrashed
	}
	return k.d.DescribeStreamSummary(ctx, in, o...)
}

// deniedDescriber is a Kinesis client whose DescribeStreamSummary is
// refused as IAM refuses a call the policy does not allow.
type deniedDescriber struct{ shardlease.KinesisAPI }

func (k deniedDescriber) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	return nil, fmt.Errorf("operation error Kinesis: DescribeStreamSummary, https response error StatusCode: 400: %w",
		&types.AccessDeniedException{Message: aws.String("User: arn:aws:iam::123456789012:role/reader is not authorized to perform: kinesis:DescribeStreamSummary")})
}

// fenceClient returns w's Kinesis client as a worker of knowledge know sees
// it, failing every call once sw is flipped (nil: never).
func fenceClient(w *world, know knowledge, sw *crash.Switch) shardlease.KinesisAPI {
	if sw == nil {
		sw = &crash.Switch{}
	}
	base := crash.Kinesis(w.kin, sw) // has no DescribeStreamSummary
	switch know {
	case describes:
		return crashDescriber{KinesisAPI: base, d: w.kin.(shardlease.StreamDescriber), sw: sw}
	case deniedDescribe:
		return deniedDescriber{base}
	default:
		return base
	}
}

// fenceCheck runs holdings of shards against one fenced sink and records,
// per holding (a label the test gives each worker or phase), the tokens its
// batches carried and the writes the sink refused it.
type fenceCheck struct {
	sink *fencedSink

	mu      sync.Mutex
	order   []string                           // labels in the order their first batch came
	tokens  map[string][]shardlease.FenceToken // label → tokens of its batches, in call order
	refused map[string][]string                // label → refusals of its live writes

	// The paused holder: its first batch after pauseAt effects froze it.
	pauseAt int
	paused  atomic.Bool   // set when the paused holder froze
	wake    chan struct{} // closed to let it write
	wakeOne sync.Once
	late    atomic.Value // the error (string) its frozen batch's write got, "<nil>" if accepted
	// Its writes from the frozen one on: it may hand a refused batch again
	// until its own cut-off passes, and the sink must refuse each.
	lateRefused, lateAccepted atomic.Int64
}

func newFenceCheck() *fenceCheck {
	return &fenceCheck{sink: newFencedSink(), tokens: map[string][]shardlease.FenceToken{}, refused: map[string][]string{}, wake: make(chan struct{})}
}

func (f *fenceCheck) note(label string, tok shardlease.FenceToken) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tokens[label]; !ok {
		f.order = append(f.order, label)
	}
	f.tokens[label] = append(f.tokens[label], tok)
}

// live returns the handler of a holder that is never paused: every write
// of it the sink refuses counts against the promise.
func (f *fenceCheck) live(label func() string) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		if len(b.Records) == 0 {
			return nil
		}
		l := label()
		f.note(l, b.Fence())
		err := f.sink.write(b)
		if err != nil {
			f.mu.Lock()
			f.refused[l] = append(f.refused[l], err.Error())
			f.mu.Unlock()
		}
		return err
	}
}

// pausing returns the handler of the holder that pauses: its first batch
// once the sink holds pauseAt effects freezes it, deaf to ctx as a paused
// process is, until wakeUp; then it writes that batch. Every write of it
// from then on is a late one.
func (f *fenceCheck) pausing(label string, pauseAt int) shardlease.Handler {
	f.pauseAt = pauseAt
	return func(ctx context.Context, b *shardlease.Batch) error {
		if len(b.Records) == 0 {
			return nil
		}
		f.note(label, b.Fence())
		if f.sink.count() < f.pauseAt && !f.paused.Load() {
			return f.sink.write(b)
		}
		frozen := f.paused.CompareAndSwap(false, true)
		if frozen {
			<-f.wake
		}
		err := f.sink.write(b)
		if frozen {
			f.late.Store(fmt.Sprint(err))
		}
		if errors.Is(err, errStaleFence) {
			f.lateRefused.Add(1)
		} else {
			f.lateAccepted.Add(1)
		}
		return err
	}
}

// wakeUp lets the paused holder write its batch; calling it again does
// nothing.
func (f *fenceCheck) wakeUp() { f.wakeOne.Do(func() { close(f.wake) }) }

// liveRefusals returns how many writes of live holders the sink refused.
func (f *fenceCheck) liveRefusals() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.refused {
		n += len(r)
	}
	return n
}

// appliedOrRefused waits until the sink holds want effects, failing at
// once when a live holder was refused.
func (f *fenceCheck) appliedOrRefused(t *testing.T, within time.Duration, want int, what string) {
	t.Helper()
	waitFor(t, within, what, func() bool { return f.sink.count() >= want || f.liveRefusals() > 0 })
	f.requireLiveNeverRefused(t)
}

func (f *fenceCheck) requireLiveNeverRefused(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.order {
		require.Empty(t, f.refused[l], "the sink refused the live holding %q (tokens %v)", l, f.tokensText())
	}
}

// lateWriteRefused wakes the paused holder and requires its write to be
// refused by the sink.
func (f *fenceCheck) lateWriteRefused(t *testing.T, within time.Duration) {
	t.Helper()
	require.True(t, f.paused.Load(), "the earlier holder never paused")
	f.wakeUp()
	waitFor(t, within, "the paused holder's late write", func() bool { return f.late.Load() != nil })
	f.mu.Lock()
	toks := f.tokensText()
	f.mu.Unlock()
	require.Contains(t, f.late.Load(), errStaleFence.Error(), "the paused earlier holder's late write was accepted (tokens %v)", toks)
}

// tokensText lists each holding's tokens in order; f.mu is held.
func (f *fenceCheck) tokensText() string {
	s := ""
	for _, l := range f.order {
		s += fmt.Sprintf("[%s: %v] ", l, f.tokens[l])
	}
	return s
}

// check asserts the promise over the whole run: holdings began in order
// want, each one's tokens are above every token of each earlier holding of
// the same shard, the live holders were never refused, and every produced
// effect was applied exactly once.
func (f *fenceCheck) check(t *testing.T, p *produced, want ...string) {
	t.Helper()
	f.mu.Lock()
	order := append([]string(nil), f.order...)
	toks := f.tokensText()
	tokens := map[string][]shardlease.FenceToken{}
	for l, ts := range f.tokens {
		tokens[l] = append([]shardlease.FenceToken(nil), ts...)
	}
	f.mu.Unlock()
	t.Logf("holdings and their tokens: %s", toks)
	require.Equal(t, want, order, "the holdings, in the order their batches came")
	for i, earlier := range order {
		for _, later := range order[i+1:] {
			for _, e := range tokens[earlier] {
				for _, l := range tokens[later] {
					if e.Scope() != l.Scope() {
						continue
					}
					c, err := l.Compare(e)
					require.NoError(t, err)
					assert.Equal(t, 1, c, "holding %q's token %s is not above earlier holding %q's %s (%s)", later, l.Value(), earlier, e.Value(), toks)
				}
			}
		}
	}
	f.requireLiveNeverRefused(t)
	assert.Zero(t, f.lateAccepted.Load(), "late writes of the paused holder accepted")
	assert.Positive(t, f.lateRefused.Load(), "late writes of the paused holder refused")
	assert.Equal(t, int(f.lateRefused.Load()), f.sink.staleRefused(), "the sink refused the paused holder's late writes, and nothing else")
	assert.Zero(t, f.sink.appliedTwice(), "effects applied twice")
	assert.Empty(t, f.sink.missing(p), "effects never applied")
}

// fenceHolder is one holding's worker: a Consumer of the world's stream or
// a Group that reads it.
type fenceHolder struct {
	name  string
	group bool
	know  knowledge
	// drains: the holder leaves by Drain while the next holder already
	// runs, rather than by stopping before the next one starts.
	drains bool
}

// fenceRun is a running fenceHolder.
type fenceRun struct {
	stop  func() error
	drain func(ctx context.Context) error
}

// start runs the holder on w with handler h, its clients failing once sw
// is flipped (nil: never).
func (fh fenceHolder) start(t *testing.T, w *world, sw *crash.Switch, h shardlease.Handler) fenceRun {
	t.Helper()
	kin := fenceClient(w, fh.know, sw)
	store := w.store
	if sw != nil {
		store = crash.Store(w.store, sw)
	}
	if fh.group {
		g, err := shardlease.NewGroup(kin, store, shardlease.GroupConfig{Name: "readers", Streams: specsOf(w.stream)}, h, w.opts(fh.name)...)
		require.NoError(t, err)
		gw := runGroup(t, g)
		return fenceRun{stop: func() error { return gw.stop(t) }, drain: g.Drain}
	}
	wk := startWorker(t, w, kin, store, h, w.opts(fh.name)...)
	return fenceRun{stop: func() error { return wk.stop(t) }, drain: wk.c.Drain}
}

// fencePath runs three holdings of the world's one shard in turn and checks
// the fencing promise over them:
//  1. first takes the shard and applies 10 effects, then pauses inside its
//     next batch; its process stops answering, so its lease expires;
//  2. before(2) runs, then second takes the shard and applies all 20;
//     first wakes and writes its batch late: the sink refuses it; second
//     stops, releasing the lease (or, if it drains, third starts and
//     second drains);
//  3. before(3) runs (unless second drains), then third takes the shard
//     and applies 10 more.
//
// before may be nil.
func fencePath(t *testing.T, w *world, first, second, third fenceHolder, before func(holding int)) {
	t.Helper()
	p := &produced{}
	f := newFenceCheck()
	sw := &crash.Switch{}
	label := func(s string) func() string { return func() string { return s } }

	a := first.start(t, w, sw, f.pausing("1:"+first.name, 10))
	t.Cleanup(f.wakeUp) // before a stops, should the test end early
	w.put(t, p, 10, 4)
	f.appliedOrRefused(t, 30*w.lease, 10, "the first holder applies 10 effects")
	w.put(t, p, 10, 4)
	waitFor(t, 30*w.lease, "the first holder pauses", f.paused.Load)
	sw.Crash()
	if before != nil {
		before(2)
	}

	b := second.start(t, w, nil, f.live(label("2:"+second.name)))
	f.appliedOrRefused(t, 30*w.lease, 20, "the second holder applies every effect")
	f.lateWriteRefused(t, 10*w.lease)
	var c fenceRun
	if second.drains {
		c = third.start(t, w, nil, f.live(label("3:"+third.name)))
		require.NoError(t, b.drain(t.Context()))
	}
	require.NoError(t, b.stop())
	if before != nil && !second.drains {
		before(3)
	}
	if !second.drains {
		c = third.start(t, w, nil, f.live(label("3:"+third.name)))
	}
	w.put(t, p, 10, 4)
	f.appliedOrRefused(t, 30*w.lease, 30, "the third holder applies the new effects")
	require.NoError(t, c.stop())
	_ = a.stop()
	f.check(t, p, "1:"+first.name, "2:"+second.name, "3:"+third.name)
}

// TestFenceMixedKnowledgeNoDescribeEarlier: the paused earlier holder's
// client has no DescribeStreamSummary, the next holder's has, and then a
// worker without it holds the shard again: tokens order across both
// changes of knowledge.
func TestFenceMixedKnowledgeNoDescribeEarlier(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		fencePath(t, w, fenceHolder{name: "a", know: noDescribe}, fenceHolder{name: "b", know: describes}, fenceHolder{name: "c", know: noDescribe}, nil)
	})
}

// TestFenceMixedKnowledgeNoDescribeLater: the paused earlier holder can
// describe the stream, the next holder's client has no
// DescribeStreamSummary, then a describing worker holds again.
func TestFenceMixedKnowledgeNoDescribeLater(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		fencePath(t, w, fenceHolder{name: "a", know: describes}, fenceHolder{name: "b", know: noDescribe}, fenceHolder{name: "c", know: describes}, nil)
	})
}

// TestFenceMixedKnowledgeAccessDeniedEarlier: as NoDescribeEarlier, with a
// client whose DescribeStreamSummary is refused (AccessDeniedException).
func TestFenceMixedKnowledgeAccessDeniedEarlier(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		fencePath(t, w, fenceHolder{name: "a", know: deniedDescribe}, fenceHolder{name: "b", know: describes}, fenceHolder{name: "c", know: deniedDescribe}, nil)
	})
}

// TestFenceMixedKnowledgeAccessDeniedLater: as NoDescribeLater, with a
// client whose DescribeStreamSummary is refused (AccessDeniedException).
func TestFenceMixedKnowledgeAccessDeniedLater(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		fencePath(t, w, fenceHolder{name: "a", know: describes}, fenceHolder{name: "b", know: deniedDescribe}, fenceHolder{name: "c", know: describes}, nil)
	})
}

// TestFenceRowDeletedAndRemade: the shard's lease row is deleted by hand
// while its holder is paused, and again after the next holder stopped; each
// time the next worker makes it again and takes it: its token is above
// every earlier one, the paused holder's late write is refused, and the
// sink takes the new holder's writes.
func TestFenceRowDeletedAndRemade(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		fencePath(t, w, fenceHolder{name: "a"}, fenceHolder{name: "b"}, fenceHolder{name: "c"}, func(int) {
			rows := w.leases(t)
			require.Len(t, rows, 1)
			w.deleteRow(t, rows[0].Key)
			require.Empty(t, w.leases(t), "the row is deleted")
		})
	})
}

// TestFenceConsumerThenGroup: a Consumer holds the shard and pauses, a
// Group worker reading the stream takes it once the lease expired, then a
// Consumer again once the Group worker drained.
func TestFenceConsumerThenGroup(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		fencePath(t, w, fenceHolder{name: "a"}, fenceHolder{name: "b", group: true, drains: true}, fenceHolder{name: "c"}, nil)
	})
}

// TestFenceGroupThenConsumer: a Group worker holds the shard and pauses, a
// Consumer takes it once the lease expired, then a Group worker again once
// the Consumer drained.
func TestFenceGroupThenConsumer(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		fencePath(t, w, fenceHolder{name: "a", group: true}, fenceHolder{name: "b", drains: true}, fenceHolder{name: "c", group: true}, nil)
	})
}

// TestFenceStreamReAddedToGroup: a Group with DeleteRemovedAfter reads two
// streams; on the second, a paused holder's late write is refused; then the
// source drops the second stream, its rows are deleted, and the source
// returns it again: the tokens of the new holding are above every token the
// sink kept, and the sink takes its writes.
func TestFenceStreamReAddedToGroup(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 1, 1)
		s := names[1]
		p := &produced{}
		f := newFenceCheck()
		sw := &crash.Switch{}
		var phase atomic.Value
		phase.Store("2:b")
		cfg := func(src *source) shardlease.GroupConfig {
			return shardlease.GroupConfig{Name: "readers", Source: src.get, SourceInterval: w.take, DeleteRemovedAfter: 2 * w.take}
		}

		ga, err := shardlease.NewGroup(fenceClient(w, describes, sw), crash.Store(w.store, sw), cfg(newSource(names...)), f.pausing("1:a", 10), w.opts("a")...)
		require.NoError(t, err)
		a := runGroup(t, ga)
		t.Cleanup(f.wakeUp)
		putTo(t, w, p, s, 10)
		f.appliedOrRefused(t, 30*w.lease, 10, "a applies 10 effects")
		putTo(t, w, p, s, 10)
		waitFor(t, 30*w.lease, "a pauses", f.paused.Load)
		sw.Crash()

		src := newSource(names...)
		b := startGroup(t, w, fenceClient(w, describes, nil), cfg(src), f.live(func() string { return phase.Load().(string) }), w.opts("b")...)
		f.appliedOrRefused(t, 30*w.lease, 20, "b applies every effect")
		f.lateWriteRefused(t, 10*w.lease)

		src.set(names[0])
		is := w.store.(shardlease.IdentityStore)
		waitFor(t, 2*time.Minute, "the removed stream's rows and identity deleted", func() bool {
			_, err := is.StreamIdentity(context.Background(), s)
			return len(streamRows(t, w, s)) == 0 && errors.Is(err, shardlease.ErrLeaseNotFound)
		})
		phase.Store("3:b, stream added back")
		src.set(names...)
		putTo(t, w, p, s, 10)
		f.appliedOrRefused(t, 30*w.lease, 30, "b applies the added-back stream's effects")
		require.NoError(t, b.stop(t))
		_ = a.stop(t)
		f.check(t, p, "1:a", "2:b", "3:b, stream added back")
	})
}
