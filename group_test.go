package shardlease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/crash"
	"github.com/shardlease/shardlease/internal/dyncount"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/shardleasetest"
)

// groupStreams makes n more streams of shards shards in w, named after w's
// stream, and returns their names with w's first.
func groupStreams(t *testing.T, w *world, n int, shards int32) []string {
	t.Helper()
	names := []string{w.stream}
	for i := range n {
		name := fmt.Sprintf("%s-%c", w.stream, 'b'+i)
		if w.name == "fake" {
			_, err := w.kin.(*shardleasetest.Kinesis).CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)})
			require.NoError(t, err)
		} else {
			require.NoError(t, emulator.CreateStream(t.Context(), w.kin.(*kinesis.Client), name, shards))
		}
		names = append(names, name)
	}
	return names
}

// putTo writes n records to stream, with ids that name the stream.
func putTo(t *testing.T, w *world, p *produced, stream string, n int) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byShard == nil {
		p.byShard, p.byKey, p.seq = map[string][]string{}, map[string][]string{}, map[string]string{}
	}
	for range n {
		id := fmt.Sprintf("%s/rec-%06d", stream, p.n)
		key := fmt.Sprintf("key-%03d", p.n%16)
		p.n++
		out, err := w.kin.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String(key), Data: []byte(id)})
		require.NoError(t, err)
		p.ids = append(p.ids, id)
		p.byKey[stream+"/"+key] = append(p.byKey[stream+"/"+key], id)
		p.seq[id] = aws.ToString(out.SequenceNumber)
	}
}

func specsOf(names ...string) []shardlease.StreamSpec {
	out := make([]shardlease.StreamSpec, len(names))
	for i, n := range names {
		out[i] = shardlease.StreamSpec{Name: n}
	}
	return out
}

// source is a stream source a test changes.
type source struct {
	mu    sync.Mutex
	specs []shardlease.StreamSpec
}

func newSource(names ...string) *source { return &source{specs: specsOf(names...)} }

func (s *source) get(context.Context) ([]shardlease.StreamSpec, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.specs), nil
}

// set makes the source return names' streams.
func (s *source) set(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.specs = specsOf(names...)
}

// groupWorker is a running Group.
type groupWorker struct {
	g      *shardlease.Group
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func startGroup(t *testing.T, w *world, kin shardlease.KinesisAPI, cfg shardlease.GroupConfig, h shardlease.Handler, opts ...shardlease.Option) *groupWorker {
	t.Helper()
	g, err := shardlease.NewGroup(kin, w.store, cfg, h, opts...)
	require.NoError(t, err)
	return runGroup(t, g)
}

// runGroup runs g until the test ends (or stop).
func runGroup(t *testing.T, g *shardlease.Group) *groupWorker {
	ctx, cancel := context.WithCancel(context.Background())
	gw := &groupWorker{g: g, cancel: cancel, done: make(chan error, 1)}
	go func() { gw.done <- g.Run(ctx) }()
	t.Cleanup(func() { gw.stop(t) })
	return gw
}

func (gw *groupWorker) stop(t *testing.T) error {
	t.Helper()
	gw.once.Do(func() {
		gw.cancel()
		select {
		case gw.err = <-gw.done:
		case <-time.After(time.Minute):
			t.Fatalf("group worker %s did not stop within a minute", gw.g.OwnerID())
		}
	})
	return gw.err
}

// streamsOf returns the streams of keys, sorted and without repeats.
func streamsOf(keys []shardlease.LeaseKey) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.Stream)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// streamRows lists stream's rows in w's store.
func streamRows(t *testing.T, w *world, stream string) []shardlease.Lease {
	t.Helper()
	ls, err := w.store.List(context.Background(), stream)
	require.NoError(t, err)
	return ls
}

// TestGroupReadsEveryStream: one Group reads three streams, every record of
// each is handled once, and each batch names the stream it came from.
func TestGroupReadsEveryStream(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 2, 2)
		p := &produced{}
		for _, n := range names {
			putTo(t, w, p, n, 20)
		}
		h := newHandled()
		var mu sync.Mutex
		wrong := 0
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			mu.Lock()
			for _, r := range b.Records {
				if !strings.HasPrefix(string(r.Data), b.Stream+"/") {
					wrong++
				}
			}
			mu.Unlock()
			h.add("w1", b)
			return nil
		}
		gw := startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Streams: specsOf(names...)}, handler, w.opts("w1")...)
		waitFor(t, time.Minute, "every record handled", func() bool { return h.distinct() == p.count() })
		require.Empty(t, h.lost(p))
		require.Zero(t, h.duplicates())
		mu.Lock()
		require.Zero(t, wrong, "a batch named another stream than its records'")
		mu.Unlock()
		require.Equal(t, names, streamsOf(gw.g.Held()))
		require.Len(t, gw.g.Held(), 6)
		require.NoError(t, gw.stop(t))
	})
}

// TestGroupKeepsStreamShardKeys: a Group writes the rows a Consumer of each
// stream writes ("stream:shard"), so a Consumer started on one of them
// afterwards resumes at the group's checkpoints and reads nothing again.
func TestGroupKeepsStreamShardKeys(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 1, 2)
		p := &produced{}
		putTo(t, w, p, names[0], 20)
		putTo(t, w, p, names[1], 20)
		h := newHandled()
		gw := startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Streams: specsOf(names...)}, h.handler("g"), w.opts("g")...)
		waitFor(t, time.Minute, "every record handled", func() bool { return h.distinct() == p.count() })
		require.NoError(t, gw.stop(t))
		for _, n := range names {
			rows := streamRows(t, w, n)
			require.Len(t, rows, 2)
			for _, l := range rows {
				require.Equal(t, n, l.Key.Stream)
				require.True(t, strings.HasPrefix(l.Key.Shard, "shardId-"), "row %s", l.Key)
				require.NotEmpty(t, l.Checkpoint, "row %s", l.Key)
				require.Empty(t, l.Owner, "row %s not released", l.Key)
			}
		}
		again := newHandled()
		wk := startWorker(t, w, w.kin, w.store, again.handler("c"), w.opts("c")...)
		waitFor(t, time.Minute, "the consumer holds both shards", func() bool { return len(wk.c.Held()) == 2 })
		putTo(t, w, p, names[0], 1)
		waitFor(t, time.Minute, "the new record handled", func() bool { return again.distinct() == 1 })
		require.Equal(t, 1, again.distinct(), "the consumer read again what the group had checkpointed")
	})
}

// TestGroupFairShareOverTheGroup: 3 streams of 5 shards over 4 workers: the
// share is counted over the group's 15 leases, so no worker holds more than
// ceil(15/4) = 4, whereas a share per stream could leave 2+2+2 on one.
func TestGroupFairShareOverTheGroup(t *testing.T) {
	t.Parallel()
	worlds(t, 5, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 2, 5)
		cfg := shardlease.GroupConfig{Name: "readers", Streams: specsOf(names...)}
		h := newHandled()
		var gws []*groupWorker
		for i := range 4 {
			gws = append(gws, startGroup(t, w, w.kin, cfg, h.handler(fmt.Sprint(i)), w.opts(fmt.Sprintf("w%d", i))...))
		}
		loads := func() []int {
			var out []int
			for _, gw := range gws {
				out = append(out, len(gw.g.Held()))
			}
			return out
		}
		waitFor(t, 3*time.Minute, "15 leases held, none above 4 and none below 3", func() bool {
			l := loads()
			sum := 0
			for _, n := range l {
				sum += n
			}
			return sum == 15 && slices.Max(l) <= 4 && slices.Min(l) >= 3
		})
	})
}

// TestGroupOneListingPerRound: the group's take rounds read the table once
// whatever the number of streams: Scans stay about one per listing.
func TestGroupOneListingPerRound(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 4, 2)
		cfg := shardlease.GroupConfig{Name: "readers", Streams: specsOf(names...)}
		store := w.store
		var lists *listCounter
		if w.dynamo == nil {
			lists = &listCounter{MemoryStore: w.store.(*shardlease.MemoryStore)}
			store = lists
		}
		h := newHandled()
		g, err := shardlease.NewGroup(w.kin, store, cfg, h.handler("w"), w.opts("w")...)
		require.NoError(t, err)
		gw := runGroup(t, g)
		waitFor(t, time.Minute, "10 leases held", func() bool { return len(g.Held()) == 10 })
		waitFor(t, time.Minute, "5 listings", func() bool { return g.Stats().TableListings >= 5 })
		require.NoError(t, gw.stop(t))
		listings := g.Stats().TableListings
		var reads int64
		if w.dynamo != nil {
			reads = w.dynamo.Count(dyncount.OpScan)
		} else {
			reads = lists.reads()
		}
		// Shard syncs and the shutdown list too: allow them, not one per stream.
		require.LessOrEqual(t, reads, listings+6, "listings %d, table reads %d: more than one read per listing", listings, reads)
	})
}

// listCounter counts the MemoryStore's table reads.
type listCounter struct {
	*shardlease.MemoryStore
	mu sync.Mutex
	n  int64
}

func (l *listCounter) count() { l.mu.Lock(); l.n++; l.mu.Unlock() }
func (l *listCounter) reads() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}
func (l *listCounter) List(ctx context.Context, s string) ([]shardlease.Lease, error) {
	l.count()
	return l.MemoryStore.List(ctx, s)
}
func (l *listCounter) ListWithWorkers(ctx context.Context, s string) ([]shardlease.Lease, []shardlease.Worker, error) {
	l.count()
	return l.MemoryStore.ListWithWorkers(ctx, s)
}
func (l *listCounter) ListWithWorkersEventually(ctx context.Context, s string) ([]shardlease.Lease, []shardlease.Worker, error) {
	l.count()
	return l.MemoryStore.ListWithWorkersEventually(ctx, s)
}
func (l *listCounter) ListStreams(ctx context.Context, streams []string, workersOf string, consistent bool) ([]shardlease.Lease, []shardlease.Worker, error) {
	l.count()
	return l.MemoryStore.ListStreams(ctx, streams, workersOf, consistent)
}

// TestGroupRefusesSpecsThatShareRows: the constructor refuses specs that
// would write the same rows, and every other misconfiguration, with an
// error naming the group and the stream.
func TestGroupRefusesSpecsThatShareRows(t *testing.T) {
	t.Parallel()
	kin := shardleasetest.NewKinesis()
	store := shardlease.NewMemoryStore()
	h := func(context.Context, *shardlease.Batch) error { return nil }
	arn := "arn:aws:kinesis:us-east-1:111122223333:stream/orders"
	cases := []struct {
		name string
		cfg  shardlease.GroupConfig
		want string
	}{
		{"same name twice", shardlease.GroupConfig{Name: "g", Streams: specsOf("orders", "orders")}, "both name stream orders"},
		{"name and ARN of one stream", shardlease.GroupConfig{Name: "g", Streams: []shardlease.StreamSpec{{Name: "orders"}, {ARN: arn}}}, "both name stream orders"},
		{"ARNs of two accounts", shardlease.GroupConfig{Name: "g", Streams: []shardlease.StreamSpec{{ARN: arn}, {ARN: strings.Replace(arn, "111122223333", "444455556666", 1)}}}, "a lease table each"},
		{"not an ARN", shardlease.GroupConfig{Name: "g", Streams: []shardlease.StreamSpec{{ARN: "arn:aws:sqs:us-east-1:1:orders"}}}, "not a Kinesis stream ARN"},
		{"an ARN without a name", shardlease.GroupConfig{Name: "g", Streams: []shardlease.StreamSpec{{ARN: "arn:aws:kinesis:us-east-1:1:stream/"}}}, "not a Kinesis stream ARN"},
		{"a consumer's ARN", shardlease.GroupConfig{Name: "g", Streams: []shardlease.StreamSpec{{ARN: "arn:aws:kinesis:us-east-1:1:stream/orders/consumer/app:1"}}}, "not a Kinesis stream ARN"},
		{"name and ARN in one spec", shardlease.GroupConfig{Name: "g", Streams: []shardlease.StreamSpec{{Name: "orders", ARN: arn}}}, "give one"},
		{"group named as a stream", shardlease.GroupConfig{Name: "orders", Streams: specsOf("orders")}, "like the group"},
		{"no streams", shardlease.GroupConfig{Name: "g"}, "no streams"},
		{"streams and source", shardlease.GroupConfig{Name: "g", Streams: specsOf("a"), Source: func(context.Context) ([]shardlease.StreamSpec, error) { return nil, nil }}, "give one"},
		{"bad position", shardlease.GroupConfig{Name: "g", Streams: []shardlease.StreamSpec{{Name: "a", Position: "NOW"}}}, "stream a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := shardlease.NewGroup(kin, store, tc.cfg, h)
			require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "group "+tc.cfg.Name)
		})
	}
	_, err := shardlease.NewGroup(nil, store, shardlease.GroupConfig{Name: "g", Streams: specsOf("a")}, h)
	require.ErrorContains(t, err, "stream a has no Kinesis client")
	_, err = shardlease.NewGroup(kin, store, shardlease.GroupConfig{Name: "g", Streams: specsOf("a")}, nil)
	require.ErrorContains(t, err, "stream a has no handler")
}

// TestGroupStreamAddedBySource: a stream the source starts returning is
// read, from its initial position, without a restart.
func TestGroupStreamAddedBySource(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 1, 1)
		src := newSource(names[0])
		p := &produced{}
		putTo(t, w, p, names[0], 10)
		putTo(t, w, p, names[1], 10)
		h := newHandled()
		gw := startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Source: src.get, SourceInterval: w.take}, h.handler("w"), w.opts("w")...)
		waitFor(t, time.Minute, "the first stream's records", func() bool { return h.distinct() == 10 })
		require.Equal(t, names[:1], gw.g.Streams())
		src.set(names...)
		waitFor(t, time.Minute, "both streams' records", func() bool { return h.distinct() == 20 })
		require.Empty(t, h.lost(p))
		require.Equal(t, names, gw.g.Streams())
	})
}

// TestGroupStreamRemovedStopsAtBatchBoundary: a stream the source no longer
// returns stops being read: its runner's stop hook says so, the final
// checkpoint covers what was handled, the lease is released and its rows
// are kept; the other stream reads on.
func TestGroupStreamRemovedStopsAtBatchBoundary(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 1, 1)
		src := newSource(names...)
		var stops sync.Map // stream → reason
		hooks := shardlease.ShardHooks{OnStop: func(ctx context.Context, s *shardlease.ShardStop) { stops.Store(s.Stream, s.Reason) }}
		p := &produced{}
		putTo(t, w, p, names[0], 10)
		putTo(t, w, p, names[1], 10)
		h := newHandled()
		gw := startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Source: src.get, SourceInterval: w.take}, h.handler("w"), w.opts("w", shardlease.WithShardHooks(hooks))...)
		waitFor(t, time.Minute, "every record", func() bool { return h.distinct() == 20 })
		src.set(names[0])
		waitFor(t, time.Minute, "the removed stream's lease released", func() bool {
			return len(gw.g.Held()) == 1 && gw.g.Held()[0].Stream == names[0]
		})
		reason, _ := stops.Load(names[1])
		require.Equal(t, shardlease.StopStreamRemoved, reason)
		rows := streamRows(t, w, names[1])
		require.Len(t, rows, 1, "the removed stream's rows are kept")
		require.Empty(t, rows[0].Owner)
		p.mu.Lock()
		last := p.seq[fmt.Sprintf("%s/rec-%06d", names[1], 19)]
		p.mu.Unlock()
		require.Equal(t, last, rows[0].Checkpoint, "the final checkpoint is the last record handled")
		putTo(t, w, p, names[1], 5)
		putTo(t, w, p, names[0], 5)
		waitFor(t, time.Minute, "the kept stream's new records", func() bool { return h.distinct() == 25 })
		require.Equal(t, 25, h.distinct(), "a record of the removed stream was read")
		require.Equal(t, names[:1], gw.g.Streams())
	})
}

// TestGroupRemovedRowsDeletedAfterWait: with DeleteRemovedAfter, the rows of
// a removed stream are deleted once it has been out that long, identity row
// included; the other stream's are not touched.
func TestGroupRemovedRowsDeletedAfterWait(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 1, 2)
		src := newSource(names...)
		h := newHandled()
		gw := startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Source: src.get, SourceInterval: w.take, DeleteRemovedAfter: 2 * w.take}, h.handler("w"), w.opts("w")...)
		waitFor(t, time.Minute, "4 leases held", func() bool { return len(gw.g.Held()) == 4 })
		src.set(names[0])
		waitFor(t, time.Minute, "the removed stream's leases released", func() bool { return len(gw.g.Held()) == 2 })
		// A worker that crashed holding one of its rows: deleted once its
		// counter stood still a lease duration.
		ghost := streamRows(t, w, names[1])[0]
		_, err := w.store.Acquire(context.Background(), ghost.Key, "ghost#1", ghost.Counter)
		require.NoError(t, err)
		// DynamoStore deletes the identity row after the lease rows, with a
		// call of its own: wait for both.
		is := w.store.(shardlease.IdentityStore)
		waitFor(t, time.Minute, "the removed stream's rows and identity deleted", func() bool {
			_, err := is.StreamIdentity(context.Background(), names[1])
			return len(streamRows(t, w, names[1])) == 0 && errors.Is(err, shardlease.ErrLeaseNotFound)
		})
		_, err = is.StreamIdentity(context.Background(), names[1])
		require.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
		require.Len(t, streamRows(t, w, names[0]), 2)
		_, err = is.StreamIdentity(context.Background(), names[0])
		require.NoError(t, err)
	})
}

// TestGroupFailoverAcrossStreams: when one of two workers stops, the other
// takes every lease of every stream, and no record is lost.
func TestGroupFailoverAcrossStreams(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 2, 2)
		cfg := shardlease.GroupConfig{Name: "readers", Streams: specsOf(names...)}
		h := newHandled()
		a := startGroup(t, w, w.kin, cfg, h.handler("a"), w.opts("a")...)
		b := startGroup(t, w, w.kin, cfg, h.handler("b"), w.opts("b")...)
		waitFor(t, 2*time.Minute, "3 leases each", func() bool { return len(a.g.Held()) == 3 && len(b.g.Held()) == 3 })
		p := &produced{}
		for _, n := range names {
			putTo(t, w, p, n, 10)
		}
		waitFor(t, time.Minute, "every record", func() bool { return h.distinct() == p.count() })
		require.NoError(t, a.stop(t))
		waitFor(t, 2*time.Minute, "b holds all 6", func() bool { return len(b.g.Held()) == 6 })
		require.Equal(t, names, streamsOf(b.g.Held()))
		for _, n := range names {
			putTo(t, w, p, n, 10)
		}
		waitFor(t, time.Minute, "every record after the failover", func() bool { return h.distinct() == p.count() })
		require.Empty(t, h.lost(p))
	})
}

// TestGroupPerStreamSettings: a stream's spec gives its own handler and
// initial position: a LATEST stream skips what was written before the
// group started, a TRIM_HORIZON one reads it, each with its own handler.
func TestGroupPerStreamSettings(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 1, 1)
		p := &produced{}
		putTo(t, w, p, names[0], 5)
		putTo(t, w, p, names[1], 5)
		hA, hB := newHandled(), newHandled()
		specs := []shardlease.StreamSpec{
			{Name: names[0], Handler: hA.handler("a")},
			{Name: names[1], Handler: hB.handler("b"), Position: shardlease.Latest},
		}
		gw := startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Streams: specs}, func(context.Context, *shardlease.Batch) error {
			return errors.New("the group's handler was called for a stream with its own")
		}, w.opts("w")...)
		waitFor(t, time.Minute, "both leases held", func() bool { return len(gw.g.Held()) == 2 })
		waitFor(t, time.Minute, "the first stream's old records", func() bool { return hA.distinct() == 5 })
		putTo(t, w, p, names[1], 3)
		waitFor(t, time.Minute, "the LATEST stream's new records", func() bool { return hB.distinct() == 3 })
		hB.mu.Lock()
		defer hB.mu.Unlock()
		for id := range hB.times {
			n := 0
			fmt.Sscanf(id[strings.LastIndex(id, "-")+1:], "%d", &n)
			require.GreaterOrEqual(t, n, 10, "record %s was written before the group started", id)
		}
	})
}

// TestGroupNeverReadsRowsOutsideTheSet: rows of another stream in the same
// table (read by a Consumer of it) are neither taken nor counted by the
// group.
func TestGroupNeverReadsRowsOutsideTheSet(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 1, 2)
		other := startWorker(t, w, w.kin, w.store, newHandled().handler("c"), w.opts("c")...)
		waitFor(t, time.Minute, "the consumer of the first stream holds both", func() bool { return len(other.c.Held()) == 2 })
		require.NoError(t, other.stop(t)) // its rows are free now
		gw := startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Streams: specsOf(names[1])}, newHandled().handler("g"), w.opts("g")...)
		waitFor(t, time.Minute, "the group holds its stream's 2", func() bool { return len(gw.g.Held()) == 2 })
		for range 3 {
			l0 := gw.g.Stats().TableListings
			waitFor(t, time.Minute, "another listing", func() bool { return gw.g.Stats().TableListings > l0 })
		}
		require.Equal(t, names[1:], streamsOf(gw.g.Held()))
		for _, l := range streamRows(t, w, names[0]) {
			require.Empty(t, l.Owner, "the group took %s, a row of a stream not in its set", l.Key)
		}
	})
}

// TestGroupByARN: a stream named by ARN is read with StreamARN on every
// call, its rows are keyed by its name, and its identity row records the
// ARN: on the in-process fake, and on kinesis-local (behind the fan-out
// shim), the emulator that accepts StreamARN (kinesalite refuses calls
// without StreamName).
func TestGroupByARN(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, w *world, kin shardlease.KinesisAPI) {
		d, err := kin.(shardlease.StreamDescriber).DescribeStreamSummary(t.Context(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(w.stream)})
		require.NoError(t, err)
		arn := aws.ToString(d.StreamDescriptionSummary.StreamARN)
		require.True(t, strings.HasSuffix(arn, ":stream/"+w.stream), arn)
		calls := &byARN{KinesisAPI: kin}
		p := &produced{}
		putTo(t, w, p, w.stream, 10)
		h := newHandled()
		gw := startGroup(t, w, nil, shardlease.GroupConfig{Name: "readers", Streams: []shardlease.StreamSpec{{ARN: arn, Client: calls}}}, h.handler("w"), w.opts("w")...)
		waitFor(t, time.Minute, "every record", func() bool { return h.distinct() == 10 })
		require.NoError(t, gw.stop(t))
		require.Empty(t, h.lost(p))
		require.Zero(t, calls.byName(), "a call named the stream by name")
		require.Positive(t, calls.total())
		rows := streamRows(t, w, w.stream)
		require.Len(t, rows, 2)
		id, err := w.store.(shardlease.IdentityStore).StreamIdentity(context.Background(), w.stream)
		require.NoError(t, err)
		require.Equal(t, arn, id.ARN)
	}
	t.Run("fake", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake := shardleasetest.NewKinesis()
			w := newFakeWorld(t, fake, 2)
			run(t, w, fake)
		})
	})
	t.Run("emulator", func(t *testing.T) {
		w := newDynamoWorld(t, "emulator", emulator.UniqueName("orders"))
		kc := emulator.FanOut(t).Client()
		w.kin = kc
		require.NoError(t, emulator.CreateStream(t.Context(), kc, w.stream, 2))
		run(t, w, kc)
	})
}

// byARN passes calls to a fake and counts how they name the stream.
type byARN struct {
	shardlease.KinesisAPI
	mu         sync.Mutex
	named, all int
}

func (b *byARN) saw(name, arn *string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all++
	if name != nil || arn == nil {
		b.named++
	}
}

func (b *byARN) byName() int { b.mu.Lock(); defer b.mu.Unlock(); return b.named }
func (b *byARN) total() int  { b.mu.Lock(); defer b.mu.Unlock(); return b.all }

func (b *byARN) ListShards(ctx context.Context, in *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if in.NextToken == nil {
		b.saw(in.StreamName, in.StreamARN)
	}
	return b.KinesisAPI.ListShards(ctx, in, o...)
}

func (b *byARN) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	b.saw(in.StreamName, in.StreamARN)
	return b.KinesisAPI.GetShardIterator(ctx, in, o...)
}

func (b *byARN) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	b.saw(nil, in.StreamARN)
	return b.KinesisAPI.GetRecords(ctx, in, o...)
}

func (b *byARN) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	b.saw(in.StreamName, in.StreamARN)
	return b.KinesisAPI.(shardlease.StreamDescriber).DescribeStreamSummary(ctx, in, o...)
}

// TestGroupReleasesRowsHandedAsTheStreamLeft: a holder that answers this
// worker's handoff request just as the stream leaves the set makes this
// worker the row's owner, and this worker no longer lists the stream to
// take it: the group releases such a row instead of leaving it owned.
func TestGroupReleasesRowsHandedAsTheStreamLeft(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 1, 1)
		src := newSource(names...)
		gw := startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Source: src.get, SourceInterval: w.take}, newHandled().handler("w"), w.opts("w")...)
		waitFor(t, time.Minute, "both leases held", func() bool { return len(gw.g.Held()) == 2 })
		src.set(names[0])
		waitFor(t, time.Minute, "the removed stream's lease released", func() bool { return len(gw.g.Held()) == 1 })
		// The release of a holder answering this worker's request.
		row := streamRows(t, w, names[1])[0]
		handed, err := w.store.Acquire(context.Background(), row.Key, gw.g.OwnerID(), row.Counter)
		require.NoError(t, err)
		waitFor(t, time.Minute, "the handed row released", func() bool {
			l := streamRows(t, w, names[1])[0]
			return l.Owner == "" && l.Counter > handed.Counter
		})
		require.Equal(t, names[:1], streamsOf(gw.g.Held()))
	})
}

// TestGroupReadingModePerStream: a spec's FanOut reads that stream with
// enhanced fan-out, registered on it alone, while the group's other stream
// is polled.
func TestGroupReadingModePerStream(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 2, func(t *testing.T, w *fanWorld) {
		names := groupStreams(t, w.world, 1, 1)
		p := &produced{}
		putTo(t, w.world, p, names[0], 10)
		putTo(t, w.world, p, names[1], 10)
		h := newHandled()
		specs := []shardlease.StreamSpec{{Name: names[0], FanOut: consumerName}, {Name: names[1]}}
		startGroup(t, w.world, w.kin, shardlease.GroupConfig{Name: "readers", Streams: specs}, h.handler("w"), w.opts("w")...)
		waitFor(t, time.Minute, "every record", func() bool { return h.distinct() == 20 })
		require.Empty(t, h.lost(p))
		// Only the fan-out stream has a second shard.
		require.Positive(t, w.subscriptions("shardId-000000000001"))
		consumers := func(stream string) []string {
			d, err := w.kin.(shardlease.StreamDescriber).DescribeStreamSummary(t.Context(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
			require.NoError(t, err)
			out, err := w.fanOutKin.ListStreamConsumers(t.Context(), &kinesis.ListStreamConsumersInput{StreamARN: d.StreamDescriptionSummary.StreamARN})
			require.NoError(t, err)
			var names []string
			for _, c := range out.Consumers {
				names = append(names, aws.ToString(c.ConsumerName))
			}
			return names
		}
		require.Equal(t, []string{consumerName}, consumers(names[0]))
		require.Empty(t, consumers(names[1]), "the polled stream got a fan-out consumer")
	})
}

// TestGroupMetricsCarryTheStream: the runners' metrics name the stream of
// their shard, not the group.
func TestGroupMetricsCarryTheStream(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 1, 1)
		p := &produced{}
		putTo(t, w, p, names[0], 3)
		putTo(t, w, p, names[1], 5)
		h := newHandled()
		rec := newRecorder()
		startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Streams: specsOf(names...)}, h.handler("w"), w.opts("w", shardlease.WithMeterProvider(rec))...)
		waitFor(t, time.Minute, "every record", func() bool { return h.distinct() == 8 })
		waitFor(t, time.Minute, "every record counted", func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return rec.byStream["shardlease.records.handled"][names[0]] == 3 && rec.byStream["shardlease.records.handled"][names[1]] == 5
		})
		rec.mu.Lock()
		defer rec.mu.Unlock()
		require.Zero(t, rec.byStream["shardlease.records.handled"]["readers"], "records counted under the group's name")
		for _, n := range names {
			require.Equal(t, int64(1), rec.byStream["shardlease.leases.taken"][n], "leases taken of %s", n)
		}
		require.Zero(t, rec.byStream["shardlease.leases.taken"]["readers"], "leases taken counted under the group's name")
	})
}

// TestGroupAddsAStreamOnceItCanBeRead: a stream the source returns before
// Kinesis has it is not added (the call counts as a source failure) and is
// added at a later poll once it exists; the other stream reads on.
func TestGroupAddsAStreamOnceItCanBeRead(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		later := w.stream + "-later"
		src := newSource(w.stream)
		h := newHandled()
		gw := startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Source: src.get, SourceInterval: w.take}, h.handler("w"), w.opts("w")...)
		waitFor(t, time.Minute, "the first lease held", func() bool { return len(gw.g.Held()) == 1 })
		src.set(w.stream, later)
		waitFor(t, time.Minute, "a failed poll", func() bool { return gw.g.SourceFailures() >= 2 })
		require.Equal(t, []string{w.stream}, gw.g.Streams())
		p := &produced{}
		putTo(t, w, p, w.stream, 5)
		waitFor(t, time.Minute, "the first stream read on", func() bool { return h.distinct() == 5 })
		if w.name == "fake" {
			_, err := w.kin.(*shardleasetest.Kinesis).CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String(later), ShardCount: aws.Int32(1)})
			require.NoError(t, err)
		} else {
			require.NoError(t, emulator.CreateStream(t.Context(), w.kin.(*kinesis.Client), later, 1))
		}
		putTo(t, w, p, later, 5)
		waitFor(t, time.Minute, "the later stream read", func() bool { return h.distinct() == 10 })
		require.Equal(t, []string{w.stream, later}, gw.g.Streams())
		_, err := w.store.(shardlease.IdentityStore).StreamIdentity(context.Background(), later)
		require.NoError(t, err, "the added stream's identity was not recorded")
	})
}

// TestGroupReadsOnWhenOneStreamCannotBeListed: a stream whose listing keeps
// failing while the group runs (its role lost access) is logged and read
// as last listed; the group's other streams are read on, a split of one
// gets its children's rows from the shard sync, and Run goes on.
func TestGroupReadsOnWhenOneStreamCannotBeListed(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 1, 1)
		denied := &denying{KinesisAPI: w.kin}
		specs := []shardlease.StreamSpec{{Name: names[0]}, {Name: names[1], Client: denied}}
		h := newHandled()
		gw := startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Streams: specs}, h.handler("w"), w.opts("w")...)
		waitFor(t, time.Minute, "both leases held", func() bool { return len(gw.g.Held()) == 2 })
		denied.deny.Store(true)
		waitFor(t, 2*time.Minute, "two refused listings", func() bool { return denied.refused.Load() >= 2 })
		children := w.split(t, "shardId-000000000000")
		p := &produced{}
		putTo(t, w, p, names[0], 5)
		waitFor(t, 2*time.Minute, "the other stream's children read", func() bool { return h.distinct() == 5 })
		held := gw.g.Held()
		for _, c := range children {
			require.Contains(t, held, shardlease.LeaseKey{Stream: names[0], Shard: c})
		}
		select {
		case err := <-gw.done:
			t.Fatalf("Run returned %v", err)
		default:
		}
		require.Contains(t, held, shardlease.LeaseKey{Stream: names[1], Shard: "shardId-000000000000"})
	})
}

// denying fails ListShards and DescribeStreamSummary with AccessDenied
// once deny is set.
type denying struct {
	shardlease.KinesisAPI
	deny    atomic.Bool
	refused atomic.Int64
}

func (d *denying) ListShards(ctx context.Context, in *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if d.deny.Load() {
		d.refused.Add(1)
		return nil, &types.AccessDeniedException{Message: aws.String("not authorized to perform: kinesis:ListShards")}
	}
	return d.KinesisAPI.ListShards(ctx, in, o...)
}

func (d *denying) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	if d.deny.Load() {
		return nil, &types.AccessDeniedException{Message: aws.String("not authorized to perform: kinesis:DescribeStreamSummary")}
	}
	return d.KinesisAPI.(shardlease.StreamDescriber).DescribeStreamSummary(ctx, in, o...)
}

// TestGroupCrashFailover: the failover bounds hold over a group's leases.
// A crashed plain worker's leases, of every stream, are read again within
// 1.4 L, and a crashed coordinator's (of one stream or two) within 2.5 L (fake time; the
// emulators only eventually). The stores here are wrapped, so the group
// lists each stream on its own (the store hides GroupLister).
func TestGroupCrashFailover(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 2, 2)
		cfg := shardlease.GroupConfig{Name: "readers", Streams: specsOf(names...)}
		type crashable struct {
			*groupWorker
			sw *crash.Switch
		}
		var fleet []crashable
		for i := range 3 {
			sw := &crash.Switch{}
			g, err := shardlease.NewGroup(crash.Kinesis(w.kin, sw), crash.Store(w.store, sw), cfg, newHandled().handler("w"), w.opts(fmt.Sprintf("w%d", i))...)
			require.NoError(t, err)
			fleet = append(fleet, crashable{runGroup(t, g), sw})
		}
		held := func() (map[shardlease.LeaseKey]bool, int) {
			all := map[shardlease.LeaseKey]bool{}
			n := 0
			for _, cw := range fleet {
				if cw.sw.Down() {
					continue
				}
				for _, k := range cw.g.Held() {
					all[k] = true
					n++
				}
			}
			return all, n
		}
		balanced := func() bool {
			for _, cw := range fleet {
				if !cw.sw.Down() && len(cw.g.Held()) != 2 {
					return false
				}
			}
			return true
		}
		// Each stream's first lease makes its holder coordinate it; three
		// first leases over three workers with a ceiling of two leave two
		// coordinators once they settle, and one plain worker.
		var coord, plain crashable
		waitFor(t, 20*w.lease, "2 leases each, a coordinator and a plain worker", func() bool {
			coord, plain = crashable{}, crashable{}
			for _, cw := range fleet {
				if cw.g.Status().Coordinating {
					coord = cw
				} else {
					plain = cw
				}
			}
			return balanced() && coord.groupWorker != nil && plain.groupWorker != nil
		})
		for _, step := range []struct {
			victim crashable
			bound  time.Duration
		}{{plain, w.lease * 14 / 10}, {coord, w.lease * 25 / 10}} {
			lost := step.victim.g.Held()
			crashed := time.Now()
			step.victim.sw.Crash()
			waitFor(t, 10*w.lease, "the crashed worker's leases read again", func() bool {
				all, n := held()
				for _, k := range lost {
					if !all[k] {
						return false
					}
				}
				return n == 6
			})
			took := time.Since(crashed)
			t.Logf("%s: leases of a crashed worker read again after %v (lease %v)", w.name, took, w.lease)
			if w.name == "fake" {
				require.LessOrEqual(t, took, step.bound)
			}
		}
	})
}

// TestGroupTakesNothingOfAStreamDeletedWhileItRuns: a stream deleted under a
// running group is logged and its leases are no longer taken once a shard
// sync found it gone (before, each take round started a reader that ended
// at once); the other stream reads on.
func TestGroupTakesNothingOfAStreamDeletedWhileItRuns(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		names := groupStreams(t, w, 1, 1)
		h := newHandled()
		gw := startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Streams: specsOf(names...)}, h.handler("w"), w.opts("w")...)
		waitFor(t, time.Minute, "both leases held", func() bool { return len(gw.g.Held()) == 2 })
		_, err := w.kin.(interface {
			DeleteStream(context.Context, *kinesis.DeleteStreamInput, ...func(*kinesis.Options)) (*kinesis.DeleteStreamOutput, error)
		}).DeleteStream(t.Context(), &kinesis.DeleteStreamInput{StreamName: aws.String(names[1])})
		require.NoError(t, err)
		waitFor(t, 2*time.Minute, "the deleted stream's lease let go", func() bool {
			return len(gw.g.Held()) == 1 && gw.g.Held()[0].Stream == names[0]
		})
		// A shard sync (every 5 take intervals here) finds the stream gone.
		l0 := gw.g.Stats().TableListings
		waitFor(t, 2*time.Minute, "a shard sync's worth of listings", func() bool { return gw.g.Stats().TableListings >= l0+6 })
		taken := gw.g.Stats().LeasesTaken
		l1 := gw.g.Stats().TableListings
		waitFor(t, 2*time.Minute, "ten more listings", func() bool { return gw.g.Stats().TableListings >= l1+10 })
		require.Equal(t, taken, gw.g.Stats().LeasesTaken, "a lease of the deleted stream was taken again")
		p := &produced{}
		putTo(t, w, p, names[0], 5)
		waitFor(t, time.Minute, "the other stream read on", func() bool { return h.distinct() == 5 })
	})
}

// A stream deleted from Kinesis while in the set costs the fleet no more
// listings than a stream that is there: its rows, let go by their readers,
// cannot be read, so nobody lists on to take them.
func TestGroupADeletedStreamCostsNoMoreListings(t *testing.T) {
	t.Parallel()
	worlds(t, 4, func(t *testing.T, w *world) {
		w.timed(t)
		names := groupStreams(t, w, 1, 4)
		var gws []*groupWorker
		for i := range 4 {
			gws = append(gws, startGroup(t, w, w.kin, shardlease.GroupConfig{Name: "readers", Streams: specsOf(names...)}, func(context.Context, *shardlease.Batch) error { return nil }, w.opts(fmt.Sprintf("w%d", i))...))
		}
		held := func() int {
			n := 0
			for _, gw := range gws {
				n += len(gw.g.Held())
			}
			return n
		}
		listings := func() int64 {
			var n int64
			for _, gw := range gws {
				n += gw.g.Stats().TableListings
			}
			return n
		}
		// Listings over ten take intervals of wall time, once settled.
		over10T := func() int64 {
			before := listings()
			deadline := time.Now().Add(10 * w.take)
			waitFor(t, 11*w.take, "ten take intervals", func() bool { return !time.Now().Before(deadline) })
			return listings() - before
		}
		waitFor(t, time.Minute, "every lease held", func() bool { return held() == 8 })
		waitFor(t, 10*w.lease, "the fleet settled", func() bool { return listings() > 0 })
		steady := over10T()

		_, err := w.kin.(interface {
			DeleteStream(context.Context, *kinesis.DeleteStreamInput, ...func(*kinesis.Options)) (*kinesis.DeleteStreamOutput, error)
		}).DeleteStream(t.Context(), &kinesis.DeleteStreamInput{StreamName: aws.String(names[1])})
		require.NoError(t, err)
		waitFor(t, 2*time.Minute, "the deleted stream's leases let go", func() bool { return held() == 4 })
		// A shard sync (every 5 take intervals here) on each worker finds it gone.
		l0 := listings()
		waitFor(t, 2*time.Minute, "a shard sync's worth of listings", func() bool { return listings() >= l0+6 })
		gone := over10T()
		t.Logf("%s: listings of 4 workers over 10 T: %d with both streams, %d with one deleted", w.name, steady, gone)
		require.LessOrEqual(t, gone, max(steady*3/2, steady+4), "a deleted stream makes the fleet list more")
	})
}
