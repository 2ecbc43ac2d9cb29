package shardlease_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/crash"
)

// The packed checkpoint tests: a worker whose session keeps its leases
// writes their checkpoints into its session row with its keeps
// (lease_packed.go), a taker starts from the newest one a crashed worker
// made durable, every tool reads them, and an idle lease writes nothing.

// packedOf returns the entries owner's session row carries, by shard id.
func packedOf(t *testing.T, w *world, owner string) map[string]shardlease.PackedCheckpoint {
	t.Helper()
	ps, ok := w.store.(shardlease.PackedCheckpointStore)
	require.True(t, ok, "%T carries packed checkpoints", w.store)
	got, err := ps.ReadPacked(context.Background(), w.stream, owner)
	require.NoError(t, err)
	out := map[string]shardlease.PackedCheckpoint{}
	for _, e := range got {
		out[e.Key.Shard] = e
	}
	return out
}

// rowOf returns shard's lease row as the row itself holds it (Get merges
// no packed checkpoint).
func rowOf(t *testing.T, w *world, shard string) shardlease.Lease {
	t.Helper()
	l, err := w.store.Get(context.Background(), shardlease.LeaseKey{Stream: w.stream, Shard: shard})
	require.NoError(t, err)
	return l
}

// lastSeqs returns the sequence number of the last record produced on each
// shard.
func lastSeqs(p *produced) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]string{}
	for shard, ids := range p.byShard {
		out[shard] = p.seq[ids[len(ids)-1]]
	}
	return out
}

// packedAt reports whether owner's session row carries want's checkpoint
// for every shard of want.
func packedAt(t *testing.T, w *world, owner string, want map[string]string) bool {
	got := packedOf(t, w, owner)
	for shard, seq := range want {
		if got[shard].Checkpoint != seq {
			return false
		}
	}
	return true
}

// TestCheckpointPackedTakerStartsFromTheNewestAfterACrash: a worker's keeps
// carried its checkpoints (its lease rows hold older ones) when it crashed;
// the worker that takes its leases over starts from the packed ones, and
// hands none of the crashed worker's records again.
func TestCheckpointPackedTakerStartsFromTheNewestAfterACrash(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		w.timed(t)
		h := newHandled()
		sw := &crash.Switch{}
		a := startWorker(t, w, crash.Kinesis(w.kin, sw), crash.Store(w.store, sw), h.handler("a"), w.opts("a", sessionsOn)...)
		waitFor(t, 10*w.lease, "a holds both leases", func() bool { return len(a.c.Held()) == 2 })
		p := &produced{}
		w.put(t, p, 30, 6)
		waitFor(t, 5*w.lease, "a handled every record", func() bool { return h.distinct() == p.count() })
		last := lastSeqs(p)
		waitFor(t, w.lease/2, "a's keeps carried its last checkpoints", func() bool { return packedAt(t, w, a.c.OwnerID(), last) })
		sw.Crash()
		for shard, seq := range last {
			assert.NotEqual(t, seq, rowOf(t, w, shard).Checkpoint, "%s: the lease row holds an older checkpoint", shard)
		}

		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b", sessionsOn)...)
		waitFor(t, 4*w.lease, "b holds both leases", func() bool { return len(b.c.Held()) == 2 })
		for shard, seq := range last {
			assert.Equal(t, seq, rowOf(t, w, shard).Checkpoint, "%s: the claim wrote the packed checkpoint on the row", shard)
		}
		w.put(t, p, 10, 6)
		waitFor(t, 5*w.lease, "b handled the new records", func() bool { return h.distinct() == p.count() })
		assert.Zero(t, h.duplicates(), "no record of the crashed worker handed again")
		assert.Empty(t, h.lost(p))
	})
}

// TestCheckpointPackedFencedSessionRefusesAStaleCheckpoint: once a taker
// fenced a session, a keep of it lands no checkpoint, and the taker's claim
// starts from the one the session made durable before the fence.
func TestCheckpointPackedFencedSessionRefusesAStaleCheckpoint(t *testing.T) {
	t.Parallel()
	worlds(t, 1, func(t *testing.T, w *world) {
		ctx := shardlease.WithHolderLeaseDuration(context.Background(), w.lease)
		ps := w.store.(shardlease.PackedCheckpointStore)
		key := shardlease.LeaseKey{Stream: w.stream, Shard: "shardId-000000000000"}
		_, err := w.store.Create(ctx, key, nil)
		require.NoError(t, err)
		a, err := ps.OpenSession(ctx, w.stream, "a")
		require.NoError(t, err)
		l, err := ps.AcquireInSession(ctx, key, a, 0)
		require.NoError(t, err)
		a, _, err = ps.KeepPacked(ctx, a, []shardlease.PackedCheckpoint{{Key: key, Counter: l.Counter, Checkpoint: "100", SubSequence: -1}}, nil)
		require.NoError(t, err)

		seen, err := ps.ReadSession(ctx, w.stream, "a")
		require.NoError(t, err)
		ended, err := ps.FenceSession(ctx, seen)
		require.NoError(t, err)
		require.True(t, ended)
		_, _, err = ps.KeepPacked(ctx, a, []shardlease.PackedCheckpoint{{Key: key, Counter: l.Counter, Checkpoint: "200", SubSequence: -1}}, nil)
		require.ErrorIs(t, err, shardlease.ErrLeaseLost, "the fenced session's keep is refused")
		assert.Equal(t, "100", packedOf(t, w, "a")["shardId-000000000000"].Checkpoint, "its checkpoint did not land")

		b, err := ps.OpenSession(ctx, w.stream, "b")
		require.NoError(t, err)
		claimed, err := ps.AcquireInSession(ctx, key, b, l.Counter)
		require.NoError(t, err)
		assert.Equal(t, "100", claimed.Checkpoint, "the taker starts from the last checkpoint before the fence")
		_, err = w.store.Checkpoint(ctx, l, "200", -1, time.Now())
		require.ErrorIs(t, err, shardlease.ErrLeaseLost, "nor does the fenced holder's write of the row land")
		assert.Equal(t, "100", rowOf(t, w, "shardId-000000000000").Checkpoint)
	})
}

// TestCheckpointPackedReleaseAndHandoffWriteTheLeaseRow: a handoff and a
// release write the final checkpoint on the lease row itself, and a worker
// that stops leaves no session row behind.
func TestCheckpointPackedReleaseAndHandoffWriteTheLeaseRow(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		w.timed(t)
		h := newHandled()
		a, p, last := busyPackedWorker(t, w, h)

		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b", sessionsOn)...)
		waitFor(t, 10*w.lease, "one lease handed over to b", func() bool { return len(b.c.Held()) == 1 })
		moved := b.c.Held()[0]
		assert.Equal(t, last[moved], rowOf(t, w, moved).Checkpoint, "the handoff wrote the final checkpoint on the row")

		require.NoError(t, a.stop(t))
		for shard, seq := range last {
			if shard != moved {
				row := rowOf(t, w, shard)
				assert.Equal(t, seq, row.Checkpoint, "%s: the release wrote the final checkpoint on the row", shard)
			}
		}
		assert.Empty(t, packedOf(t, w, a.c.OwnerID()), "a stopped worker leaves no entry and no session row")
		waitFor(t, 10*w.lease, "b holds both leases", func() bool { return len(b.c.Held()) == 2 })
		w.put(t, p, 10, 6)
		waitFor(t, 5*w.lease, "b handled the new records", func() bool { return h.distinct() == p.count() })
		assert.Zero(t, h.duplicates(), "no record handed twice across the handoff and the release")
	})
}

// TestCheckpointPackedToolsReadThem: while the checkpoints live in the
// session row (the lease rows hold older ones), the listings tools read
// (list, drain, export) and the holder's Status show the packed ones.
func TestCheckpointPackedToolsReadThem(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		w.timed(t)
		h := newHandled()
		a, _, last := busyPackedWorker(t, w, h)
		for shard, seq := range last {
			require.NotEqual(t, seq, rowOf(t, w, shard).Checkpoint, "%s: the lease row holds an older checkpoint", shard)
		}

		ctx := context.Background()
		exp, err := shardlease.Export(ctx, w.store, w.stream)
		require.NoError(t, err)
		for _, sc := range exp.Shards {
			if seq, ok := last[sc.Shard]; ok {
				assert.Equal(t, seq, sc.Checkpoint, "export: %s", sc.Shard)
			}
		}
		leases, _, err := w.store.(shardlease.WorkerStore).ListWithWorkers(ctx, w.stream)
		require.NoError(t, err)
		for _, l := range leases {
			if seq, ok := last[l.Key.Shard]; ok {
				assert.Equal(t, seq, l.Checkpoint, "list: %s", l.Key.Shard)
				assert.NotNil(t, l.Lag, "list: %s: the lag rides with the entry", l.Key.Shard)
			}
		}
		for _, s := range a.c.Status().Shards {
			if seq, ok := last[s.Shard]; ok {
				assert.Equal(t, seq, s.Checkpoint, "status: %s", s.Shard)
			}
		}
	})
}

// packedCounter counts one worker's writes: lease row renewals and
// checkpoints, keeps, and the entries the keeps write and remove.
type packedCounter struct {
	coordStore
	ps                                      shardlease.PackedCheckpointStore
	renews, checkpoints, keeps, puts, drops atomic.Int64
	maxPut                                  atomic.Int64
}

// startPacked starts worker "a" alone, with sessions and extra options, on
// a packedCounter over w's store, and waits up to wait until it holds all
// n leases. It returns the counter, the handled records and the worker.
func startPacked(t *testing.T, w *world, n int, wait time.Duration, extra ...shardlease.Option) (*packedCounter, *handled, *worker) {
	t.Helper()
	pc := newPackedCounter(t, w.store)
	h := newHandled()
	a := startWorker(t, w, w.kin, pc, h.handler("a"), w.opts("a", append([]shardlease.Option{sessionsOn}, extra...)...)...)
	waitFor(t, wait, "a holds every lease", func() bool { return len(a.c.Held()) == n })
	return pc, h, a
}

func newPackedCounter(t *testing.T, s shardlease.LeaseStore) *packedCounter {
	cs, ok := s.(coordStore)
	require.True(t, ok)
	ps, ok := s.(shardlease.PackedCheckpointStore)
	require.True(t, ok)
	return &packedCounter{coordStore: cs, ps: ps}
}

func (s *packedCounter) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	s.renews.Add(1)
	return s.coordStore.Renew(ctx, l, e)
}

func (s *packedCounter) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	s.checkpoints.Add(1)
	return s.coordStore.Checkpoint(ctx, l, cp, sub, e)
}

func (s *packedCounter) KeepSession(ctx context.Context, w shardlease.Worker) (shardlease.Worker, []string, error) {
	s.keeps.Add(1)
	return s.coordStore.KeepSession(ctx, w)
}

func (s *packedCounter) KeepPacked(ctx context.Context, w shardlease.Worker, put []shardlease.PackedCheckpoint, drop []shardlease.LeaseKey) (shardlease.Worker, []string, error) {
	s.keeps.Add(1)
	s.puts.Add(int64(len(put)))
	s.drops.Add(int64(len(drop)))
	if n := int64(len(put)); n > s.maxPut.Load() {
		s.maxPut.Store(n)
	}
	return s.ps.KeepPacked(ctx, w, put, drop)
}

func (s *packedCounter) ReadPacked(ctx context.Context, stream, owner string) ([]shardlease.PackedCheckpoint, error) {
	return s.ps.ReadPacked(ctx, stream, owner)
}

// TestCheckpointCostIdleLeaseWritesNothing: idle leases cost no write but
// their share of the keeps; a lease that was busy and fell idle has its
// checkpoint flushed to its row once, its entry removed, and then writes
// nothing either.
func TestCheckpointCostIdleLeaseWritesNothing(t *testing.T) {
	t.Parallel()
	worlds(t, 4, func(t *testing.T, w *world) {
		w.timed(t)
		pc, h, a := startPacked(t, w, 4, 10*w.lease)
		const window = 5
		idle := func(what string) {
			t.Helper()
			renews, checkpoints, puts, keeps := pc.renews.Load(), pc.checkpoints.Load(), pc.puts.Load(), pc.keeps.Load()
			time.Sleep(window * w.lease)
			assert.Equal(t, renews, pc.renews.Load(), "%s: no lease row renewed", what)
			assert.Equal(t, checkpoints, pc.checkpoints.Load(), "%s: no checkpoint written to a lease row", what)
			assert.Equal(t, puts, pc.puts.Load(), "%s: no checkpoint packed", what)
			assert.Positive(t, pc.keeps.Load()-keeps, "%s: the session is kept", what)
		}
		idle("idle from the start")

		p := &produced{}
		w.put(t, p, 40, 8)
		waitFor(t, 5*w.lease, "a handled every record", func() bool { return h.distinct() == p.count() })
		last := lastSeqs(p)
		busy := int64(len(last))
		waitFor(t, w.lease, "the keeps carried the checkpoints", func() bool { return packedAt(t, w, a.c.OwnerID(), last) })
		waitFor(t, 3*w.lease, "every entry flushed to its row and removed", func() bool {
			return len(packedOf(t, w, a.c.OwnerID())) == 0 && pc.checkpoints.Load() == busy
		})
		for shard, seq := range last {
			assert.Equal(t, seq, rowOf(t, w, shard).Checkpoint, "%s: the flush wrote the row", shard)
		}
		assert.Equal(t, busy, pc.drops.Load(), "each entry removed once")
		idle("idle again")
	})
}

// TestCheckpointPackedOffWithAShortCheckpointInterval: a checkpoint
// interval shorter than the renew interval asks for checkpoints sooner than
// keeps come: each goes to its lease row within that interval, and nothing
// is packed.
func TestCheckpointPackedOffWithAShortCheckpointInterval(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		w.timed(t)
		pc, h, a := startPacked(t, w, 2, 10*w.lease, shardlease.WithCheckpointInterval(w.renew/4))
		p := &produced{}
		w.put(t, p, 20, 4)
		waitFor(t, 5*w.lease, "a handled every record", func() bool { return h.distinct() == p.count() })
		handled := time.Now()
		last := lastSeqs(p)
		waitFor(t, w.lease, "the lease rows hold the last checkpoints", func() bool {
			for shard, seq := range last {
				if rowOf(t, w, shard).Checkpoint != seq {
					return false
				}
			}
			return true
		})
		assert.LessOrEqual(t, time.Since(handled), bound(w, w.renew/2), "written within the checkpoint interval, not at a keep")
		assert.Zero(t, pc.puts.Load(), "nothing packed")
		assert.Empty(t, packedOf(t, w, a.c.OwnerID()))
	})
}

// itemSize is the size DynamoDB bills an item by: each attribute's name
// and value (a map's entries with one byte each, and three of its own).
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return (len(v.Value)+1)/2 + 1
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += len(k) + valueSize(e) + 1
		}
		return n
	}
	return 1
}

// TestCheckpointPackedMoreLeasesThanOneWriteUnit: a worker holding 40 busy
// leases, more than a 1 KB keep carries, has every checkpoint land in its
// session row; the emulator's row shows what each keep is billed.
func TestCheckpointPackedMoreLeasesThanOneWriteUnit(t *testing.T) {
	t.Parallel()
	const shards = 40
	worlds(t, shards, func(t *testing.T, w *world) {
		w.timed(t)
		pc, h, a := startPacked(t, w, shards, 20*w.lease, shardlease.WithMaxLeases(shards))
		p := &produced{}
		w.put(t, p, 400, 400)
		waitFor(t, 10*w.lease, "a handled every record", func() bool { return h.distinct() == p.count() })
		last := lastSeqs(p)
		require.Greater(t, len(last), 30, "records on most shards")
		waitFor(t, w.lease, "every checkpoint carried", func() bool { return packedAt(t, w, a.c.OwnerID(), last) })
		assert.Greater(t, pc.maxPut.Load(), int64(10), "one keep carried more than ten checkpoints")
		if w.dynamo == nil {
			return
		}
		ds := w.store.(*shardlease.DynamoStore)
		out, err := w.dynamo.GetItem(context.Background(), &dynamodb.GetItemInput{
			TableName: aws.String(ds.Table()), Key: map[string]types.AttributeValue{"lease_key": &types.AttributeValueMemberS{Value: w.stream + ":@" + a.c.OwnerID()}},
		})
		require.NoError(t, err)
		size := itemSize(out.Item)
		perEntry := float64(size) / float64(len(last))
		units := math.Ceil(float64(size) / 1024)
		t.Logf("session row with %d entries: %d bytes (%.0f a lease), %.0f write units a keep", len(last), size, perEntry, units)
		assert.Less(t, perEntry, 80.0, "an entry takes under 80 bytes")
		assert.Greater(t, units, 1.0, "more than one write unit a keep")
	})
}

// TestCheckpointCostTenBusyLeases: a worker with ten busy leases at the
// default ratio of renew interval to lease duration writes one keep a renew
// interval (each within one 1 KB write unit) and no lease row: 18 keeps a
// minute at L = 10 s make under 2 write units a lease-minute.
func TestCheckpointCostTenBusyLeases(t *testing.T) {
	t.Parallel()
	const shards = 10
	worlds(t, shards, func(t *testing.T, w *world) {
		w.timed(t)
		if w.dynamo != nil {
			w.dynamo.Capacity = true
		}
		pc, h, _ := startPacked(t, w, shards, 20*w.lease)
		p := &produced{}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(w.renew / 4):
					w.put(t, p, 40, 40)
				}
			}
		}()
		waitFor(t, 5*w.lease, "records handled", func() bool { return h.distinct() > 100 })
		var units0 float64
		if w.dynamo != nil {
			units0 = w.dynamo.WriteUnits()
		}
		keeps, puts, rows := pc.keeps.Load(), pc.puts.Load(), pc.checkpoints.Load()+pc.renews.Load()
		const window = 6
		time.Sleep(window * w.lease)
		close(stop)
		<-done
		k, ps, r := pc.keeps.Load()-keeps, pc.puts.Load()-puts, pc.checkpoints.Load()+pc.renews.Load()-rows
		// The window is six lease durations: a minute at the default 10 s.
		leaseMinutes := float64(shards) * window * float64(10*time.Second) / float64(time.Minute)
		t.Logf("%d keeps carrying %d checkpoints, %d lease row writes: %.2f writes a lease-minute at L = 10 s", k, ps, r, float64(k+r)/leaseMinutes)
		assert.Zero(t, r, "no lease row written while busy")
		assert.Greater(t, ps, 3*k, "the keeps carry the busy leases' checkpoints")
		// One keep of slack: the window's edges may catch one keep more.
		assert.LessOrEqual(t, float64(k-1+r)/leaseMinutes, 2.0, "at most 2 writes a lease-minute")
		if w.dynamo != nil {
			units := w.dynamo.WriteUnits() - units0
			t.Logf("%.1f write units consumed (producer excluded): %.2f a keep, %.2f a lease-minute at L = 10 s", units, units/float64(k), units/leaseMinutes)
			assert.LessOrEqual(t, units/float64(k), 1.0, "a keep of ten entries is one write unit")
			assert.LessOrEqual(t, (units-units/float64(k))/leaseMinutes, 2.0, "at most 2 write units a lease-minute")
		}
		waitFor(t, 5*w.lease, "every record handled", func() bool { return len(h.lost(p)) == 0 })
	})
}

// TestCheckpointPackedTakerDiesBetweenFenceAndClaim: the worker that fences
// a crashed worker's session dies before it claims; the fenced session's
// row keeps its checkpoints, and the worker that finishes the takeover
// starts from them, as it starts from the dead taker's own: no record
// handled before the crashes is handed again.
func TestCheckpointPackedTakerDiesBetweenFenceAndClaim(t *testing.T) {
	t.Parallel()
	sessionWorlds(t, 6, func(t *testing.T, w *world, h *handled, g *overlapGuard) {
		fleet := startFenceThenCrashFleet(t, w, h, g)
		waitBalanced(t, w, fleet, 6)
		p := &produced{}
		w.put(t, p, 60, 12)
		waitFor(t, 5*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		last := lastSeqs(p)
		// Durable: packed by the keeps, or (a first checkpoint, or one idle
		// for L) written to the lease row; the listing merges both.
		waitFor(t, w.lease, "every last checkpoint durable", func() bool {
			durable := 0
			for _, l := range w.leases(t) {
				if l.Checkpoint == last[l.Key.Shard] {
					durable++
				}
			}
			return durable == len(last)
		})
		fleet[0].sw.Crash()
		waitFor(t, 3*w.lease, "a taker fenced and died", func() bool {
			down := 0
			for _, sw := range fleet {
				if sw.sw.Down() {
					down++
				}
			}
			return down == 2
		})
		waitFor(t, bound(w, 6*w.lease), "every lease held again", func() bool { return heldAgain(sessionCoords(fleet), allShards(6)) })
		for shard, seq := range last {
			assert.Equal(t, seq, rowOf(t, w, shard).Checkpoint, "%s: the claim carried the packed checkpoint", shard)
		}
		w.put(t, p, 12, 12)
		waitFor(t, 10*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		assert.Zero(t, h.duplicates(), "no record handed again")
	})
}

// The session tests' store wrappers pass packed checkpoints on, so that
// every session test runs with the default: checkpoints riding the keeps.

func (s *readCounter) KeepPacked(ctx context.Context, w shardlease.Worker, put []shardlease.PackedCheckpoint, drop []shardlease.LeaseKey) (shardlease.Worker, []string, error) {
	return s.coordStore.(shardlease.PackedCheckpointStore).KeepPacked(ctx, w, put, drop)
}

func (s *readCounter) ReadPacked(ctx context.Context, stream, owner string) ([]shardlease.PackedCheckpoint, error) {
	return s.coordStore.(shardlease.PackedCheckpointStore).ReadPacked(ctx, stream, owner)
}

func (s *fenceThenCrash) KeepPacked(ctx context.Context, w shardlease.Worker, put []shardlease.PackedCheckpoint, drop []shardlease.LeaseKey) (shardlease.Worker, []string, error) {
	return s.coordStore.(shardlease.PackedCheckpointStore).KeepPacked(ctx, w, put, drop)
}

func (s *fenceThenCrash) ReadPacked(ctx context.Context, stream, owner string) ([]shardlease.PackedCheckpoint, error) {
	return s.coordStore.(shardlease.PackedCheckpointStore).ReadPacked(ctx, stream, owner)
}

// KeepPacked fails, or is slow, as KeepSession does.
func (s *faultySession) KeepPacked(ctx context.Context, w shardlease.Worker, put []shardlease.PackedCheckpoint, drop []shardlease.LeaseKey) (shardlease.Worker, []string, error) {
	if err := s.fault(ctx); err != nil {
		return shardlease.Worker{}, nil, err
	}
	return s.coordStore.(shardlease.PackedCheckpointStore).KeepPacked(ctx, w, put, drop)
}

func (s *faultySession) ReadPacked(ctx context.Context, stream, owner string) ([]shardlease.PackedCheckpoint, error) {
	return s.coordStore.(shardlease.PackedCheckpointStore).ReadPacked(ctx, stream, owner)
}

func (s refuseFirst) KeepPacked(ctx context.Context, w shardlease.Worker, put []shardlease.PackedCheckpoint, drop []shardlease.LeaseKey) (shardlease.Worker, []string, error) {
	return s.coordStore.(shardlease.PackedCheckpointStore).KeepPacked(ctx, w, put, drop)
}

func (s refuseFirst) ReadPacked(ctx context.Context, stream, owner string) ([]shardlease.PackedCheckpoint, error) {
	return s.coordStore.(shardlease.PackedCheckpointStore).ReadPacked(ctx, stream, owner)
}

// busyPackedWorker starts worker "a" with sessions over the world's two
// shards, hands it records, and waits until its keeps carry the last
// checkpoint of each shard (by shard, in last).
func busyPackedWorker(t *testing.T, w *world, h *handled) (a *worker, p *produced, last map[string]string) {
	t.Helper()
	a = startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a", sessionsOn)...)
	waitFor(t, 10*w.lease, "a holds both leases", func() bool { return len(a.c.Held()) == 2 })
	p = &produced{}
	w.put(t, p, 30, 6)
	waitFor(t, 5*w.lease, "a handled every record", func() bool { return h.distinct() == p.count() })
	last = lastSeqs(p)
	waitFor(t, w.lease/2, "a's keeps carried its last checkpoints", func() bool { return packedAt(t, w, a.c.OwnerID(), last) })
	return a, p, last
}
