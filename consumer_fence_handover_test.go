package shardlease_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// shardHandlers records the handlers running on each shard: how many at
// once at most, and the token and records of every batch.
type shardHandlers struct {
	mu      sync.Mutex
	running map[string]int // shard → handlers running now
	peak    map[string]int // shard → most handlers running at once
	batches []fencedBatch
	work    time.Duration // how long each handler call works
}

// fencedBatch is one handler call: who made it, its token, its records.
type fencedBatch struct {
	worker string
	token  shardlease.FenceToken
	ids    []string
}

func newShardHandlers(work time.Duration) *shardHandlers {
	return &shardHandlers{running: map[string]int{}, peak: map[string]int{}, work: work}
}

// handler returns worker's handler: it notes its entry, works, and notes
// its exit.
func (s *shardHandlers) handler(worker string) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		s.mu.Lock()
		s.running[b.ShardID]++
		s.peak[b.ShardID] = max(s.peak[b.ShardID], s.running[b.ShardID])
		fb := fencedBatch{worker: worker, token: b.Fence()}
		for _, r := range b.Records {
			fb.ids = append(fb.ids, string(r.Data))
		}
		s.batches = append(s.batches, fb)
		s.mu.Unlock()
		time.Sleep(s.work) // the handler's work, not a wait for a condition
		s.mu.Lock()
		s.running[b.ShardID]--
		s.mu.Unlock()
		return nil
	}
}

// times returns how often each record was handed to a handler.
func (s *shardHandlers) times() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, b := range s.batches {
		for _, id := range b.ids {
			out[id]++
		}
	}
	return out
}

// lastToken returns the token of the last batch handled so far.
func (s *shardHandlers) lastToken() shardlease.FenceToken {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batches[len(s.batches)-1].token
}

// since returns the batches handled after the first n.
func (s *shardHandlers) since(n int) []fencedBatch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches[n:])
}

func (s *shardHandlers) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.batches)
}

func (s *shardHandlers) peakOf(shard string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak[shard]
}

// produceEvery writes a record every gap until stop returns; records go
// into p as put would write them.
func (w *world) produceEvery(t *testing.T, p *produced, gap time.Duration) (stop func()) {
	t.Helper()
	done, exited := make(chan struct{}), make(chan error, 1)
	go func() {
		ticker := time.NewTicker(gap)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				exited <- nil
				return
			case <-ticker.C:
			}
			if err := w.putOne(p); err != nil {
				exited <- err
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			require.NoError(t, <-exited)
		})
	}
}

// putOne writes one record with a unique id, as put does.
func (w *world) putOne(p *produced) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := fmt.Sprintf("rec-%06d", p.n)
	key := fmt.Sprintf("key-%03d", p.n%4)
	out, err := w.kin.PutRecord(context.Background(), &kinesis.PutRecordInput{
		StreamName: aws.String(w.stream), PartitionKey: aws.String(key), Data: []byte(id),
	})
	if err != nil {
		return err
	}
	p.n++
	p.ids = append(p.ids, id)
	p.byShard[aws.ToString(out.ShardId)] = append(p.byShard[aws.ToString(out.ShardId)], id)
	p.byKey[key] = append(p.byKey[key], id)
	p.seq[id] = aws.ToString(out.SequenceNumber)
	return nil
}

// handoverMove is what a test does to a live holder's shard: it moves the
// shard back so that the records after the first before are read again,
// taking the lease from its holder, and returns who it took it from.
type handoverMove func(ctx context.Context, w *world, p *produced, before int) (takenFrom string, err error)

// requireOneHandlerThroughHandover runs two workers on a stream of one
// shard while records keep arriving, and moves the shard back with move
// just after its holder renewed, the worst time: the holder's handler then
// runs on until its next renewal fails. It asserts that no two handlers
// ever ran on the shard at once, that the next holding read the records
// after the first 20 again, and that its token is above the old holding's.
// between, when set, runs between the first 20 records and the next 20.
func requireOneHandlerThroughHandover(t *testing.T, w *world, move handoverMove, between func()) {
	w.timed(t)
	p := &produced{}
	w.put(t, p, 20, 4)
	if between != nil {
		between()
	}
	w.put(t, p, 20, 4)
	again := slices.Clone(p.ids[20:])
	hs := newShardHandlers(w.renew / 4)
	a := startWorker(t, w, w.kin, w.store, hs.handler("a"), w.opts("a", shardlease.WithInitialPosition(shardlease.TrimHorizon))...)
	waitFor(t, 30*w.lease, "a handles every record and holds the shard", func() bool {
		return len(hs.times()) == p.count() && len(heldBy(w.leases(t))["a"]) == 1
	})
	startWorker(t, w, w.kin, w.store, hs.handler("b"), w.opts("b", shardlease.WithInitialPosition(shardlease.TrimHorizon))...)
	waitFor(t, 30*w.lease, "b is running", func() bool { return workerRunning(t, w, "b") })
	stop := w.produceEvery(t, p, w.lease/40)
	defer stop()
	waitFor(t, 10*w.lease, "a handles a record that keeps arriving", func() bool { return len(hs.times()) > 40 })

	// Just after a's renewal (with sessions, its keep), a keeps handling
	// for a renewal interval.
	shard := w.leases(t)[0]
	kept := func() int64 {
		s, ok := shard.KeptBy()
		if !ok {
			return 0
		}
		row, err := w.store.(shardlease.SessionStore).ReadSession(t.Context(), s.Stream, s.Owner)
		require.NoError(t, err)
		return row.Counter
	}
	keeps := kept()
	waitFor(t, 10*w.lease, "a renews", func() bool {
		l := w.leases(t)[0]
		return (l.Counter != shard.Counter || l.Session != "" && kept() != keeps) && shardlease.OwnerName(l.Owner) == "a"
	})
	old, mark := hs.lastToken(), hs.count()
	from, err := move(t.Context(), w, p, 20)
	require.NoError(t, err)
	assert.Equal(t, "a", shardlease.OwnerName(from), "the lease was taken from a")

	waitFor(t, 30*w.lease, "the records after the first 20 read again", func() bool {
		n := hs.times()
		for _, id := range again {
			if n[id] < 2 {
				return false
			}
		}
		return true
	})
	// The old holding has ended, and the new one handles what keeps
	// arriving: any overlap of the two has happened by then.
	waitFor(t, 30*w.lease, "a finds its lease lost", func() bool { return a.c.Stats().LeasesLost > 0 })
	lost := hs.count()
	waitFor(t, 30*w.lease, "more batches after a's loss", func() bool { return hs.count() > lost+2 })
	stop()
	assert.Equal(t, 1, hs.peakOf(shard.Key.Shard), "handlers running on %s at once", shard.Key.Shard)
	readAgain := 0
	for _, b := range hs.since(mark) {
		if slices.Contains(again, b.ids[0]) {
			readAgain++
			c, err := b.token.Compare(old)
			require.NoError(t, err)
			assert.Equal(t, 1, c, "%s's token %s after the move is above the old holding's %s", b.worker, b.token, old)
		}
	}
	assert.Positive(t, readAgain, "batches of the records read again")
	require.NoError(t, a.stop(t))
}

// workerRunning reports whether owner's worker row is in the stream's
// table.
func workerRunning(t *testing.T, w *world, owner string) bool {
	t.Helper()
	ws, ok := w.store.(shardlease.WorkerStore)
	require.True(t, ok, "the store keeps worker rows")
	_, workers, err := ws.ListWithWorkers(t.Context(), w.stream)
	require.NoError(t, err)
	return slices.ContainsFunc(workers, func(wk shardlease.Worker) bool { return shardlease.OwnerName(wk.Owner) == owner })
}

// TestFenceRewindHandoverOneHandlerAtATime: Rewind with handover on a live
// holder never runs the new holder's handler beside the old one's, the
// records after the time are read again, and the next holding's token is
// above the old one's.
func TestFenceRewindHandoverOneHandlerAtATime(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		var at time.Time
		requireOneHandlerThroughHandover(t, w, func(ctx context.Context, w *world, p *produced, before int) (string, error) {
			rep, err := shardlease.Rewind(ctx, w.store, w.kin, w.stream, at, shardlease.WithRewindHandover(), shardlease.WithRewindOwner("ops#rewind"))
			if err != nil {
				return "", err
			}
			return rep.Shards[0].TakenFrom, nil
		}, func() { at = pastTime(t) })
	})
}

// TestFenceResetHandoverOneHandlerAtATime: ResetCheckpoint with handover
// on a live holder never runs the new holder's handler beside the old
// one's, the records after the new checkpoint are read again, and the next
// holding's token is above the old one's.
func TestFenceResetHandoverOneHandlerAtATime(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		requireOneHandlerThroughHandover(t, w, func(ctx context.Context, w *world, p *produced, before int) (string, error) {
			p.mu.Lock()
			cp := p.seq[p.ids[before-1]]
			p.mu.Unlock()
			key := shardlease.LeaseKey{Stream: w.stream, Shard: w.leases(t)[0].Key.Shard}
			rep, err := shardlease.ResetCheckpoint(ctx, w.store, key, cp, shardlease.WithResetHandover(), shardlease.WithResetOwner("ops#reset"))
			if err != nil {
				return "", err
			}
			return rep.TakenFrom, nil
		}, nil)
	})
}
