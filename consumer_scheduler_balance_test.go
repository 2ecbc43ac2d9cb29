package shardlease_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
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

// table is one reading of the lease table.
type table []shardlease.Lease

func (w *world) table(t *testing.T) table { return table(w.leases(t)) }

// owners maps every unfinished shard to its owner ("" when free).
func (tb table) owners() map[string]string {
	out := map[string]string{}
	for _, l := range tb {
		if l.Checkpoint != shardlease.ShardEnd {
			out[l.Key.Shard] = l.Owner
		}
	}
	return out
}

// sizes returns how many unfinished leases each owner holds, sorted.
func (tb table) sizes() []int {
	n := map[string]int{}
	for _, o := range tb.owners() {
		n[o]++
	}
	var out []int
	for _, c := range n {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// settled reports whether every unfinished lease is held, by one of
// workers, with no handoff pending, and the owners' loads are want.
func (tb table) settled(want []int, workers ...*worker) bool {
	live := map[string]bool{}
	for _, wk := range workers {
		live[wk.c.OwnerID()] = true
	}
	for _, l := range tb {
		if l.Checkpoint == shardlease.ShardEnd {
			continue
		}
		if !live[l.Owner] || l.HandoffTo != "" {
			return false
		}
	}
	return slices.Equal(tb.sizes(), want)
}

// agrees reports whether each worker runs exactly the leases the table
// says it owns.
func (tb table) agrees(workers ...*worker) bool {
	byOwner := map[string][]string{}
	for shard, o := range tb.owners() {
		byOwner[o] = append(byOwner[o], shard)
	}
	for _, wk := range workers {
		want := byOwner[wk.c.OwnerID()]
		slices.Sort(want)
		if !slices.Equal(want, wk.c.Held()) {
			return false
		}
	}
	return true
}

// waitSettled waits until the table is settled at want and every worker
// runs what it owns; it returns how long that took.
func waitSettled(t *testing.T, w *world, within time.Duration, want []int, workers ...*worker) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		tb := w.table(t)
		if tb.settled(want, workers...) && tb.agrees(workers...) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			held := map[string][]string{}
			for _, wk := range workers {
				held[wk.c.OwnerID()] = wk.c.Held()
			}
			var rows []string
			for _, l := range tb {
				rows = append(rows, fmt.Sprintf("%s owner=%q handoff=%q counter=%d checkpoint=%q", l.Key.Shard, l.Owner, l.HandoffTo, l.Counter, l.Checkpoint))
			}
			t.Fatalf("leases not settled at %v within %v: sizes %v, running %v, rows:\n%s", want, within, tb.sizes(), held, strings.Join(rows, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitHeldBy waits until workers run every unfinished lease between them,
// and returns how long that took.
func waitHeldBy(t *testing.T, w *world, within time.Duration, workers ...*worker) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		tb := w.table(t)
		live := map[string]bool{}
		for _, wk := range workers {
			live[wk.c.OwnerID()] = true
		}
		all := true
		for _, o := range tb.owners() {
			all = all && live[o]
		}
		if all && tb.agrees(workers...) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("the leases were not all held by %d workers within %v: owners %v", len(workers), within, tb.owners())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// producer writes records with unique ids every interval until stopped.
type producer struct {
	stop func()
}

func (w *world) produce(t *testing.T, p *produced, every time.Duration, n, keys int) *producer {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				w.put(t, p, n, keys)
			}
		}
	})
	var once sync.Once
	pr := &producer{stop: func() { once.Do(func() { close(done); wg.Wait() }) }}
	t.Cleanup(pr.stop)
	return pr
}

func rounds(d, take time.Duration) float64 { return float64(d) / float64(take) }

// manyOpts is opts for tests with many shards per worker: idle shards are
// polled once per take interval, so that a single-threaded emulator serving
// 16 shards is not what the test measures.
func (w *world) manyOpts(owner string) []shardlease.Option {
	return w.opts(owner, shardlease.WithIdlePollInterval(max(w.idle, w.take)))
}

func TestBalanceThreeWorkersSixteenShards(t *testing.T) {
	t.Parallel()
	worlds(t, 16, func(t *testing.T, w *world) {
		// Pinned to per-lease renewals: it counts each lease row's renewals.
		w.extra = append(w.extra, shardlease.WithSessions(false))
		w.timed(t)
		h := newHandled()
		var workers []*worker
		start := time.Now()
		for _, name := range []string{"a", "b", "c"} {
			workers = append(workers, startWorker(t, w, w.kin, w.store, h.handler(name), w.manyOpts(name)...))
		}
		// The first round takes the free leases; the next ones ask for the
		// surplus, which holders answer at their next renewal: about 2T + R.
		// Allow twice that.
		took := waitSettled(t, w, 2*(2*w.take+w.renew), []int{5, 5, 6}, workers...)
		t.Logf("%s: 3 workers starting together settled at 5/5/6 after %v (%.1f take rounds)", w.name, took, rounds(time.Since(start), w.take))

		// Once balanced, no lease moves and nobody asks for one.
		before := w.table(t)
		want := before.owners()
		for i := range 50 {
			time.Sleep(w.take)
			tb := w.table(t)
			require.Equal(t, want, tb.owners(), "owners changed in take round %d after balancing", i+1)
			for _, l := range tb {
				require.Empty(t, l.HandoffTo, "handoff of %s requested in take round %d after balancing", l.Key.Shard, i+1)
			}
		}
		require.True(t, w.table(t).agrees(workers...), "workers run what the table says they own")
		for _, l := range w.table(t) {
			assert.Greater(t, l.Counter, before[slices.IndexFunc(before, func(b shardlease.Lease) bool { return b.Key == l.Key })].Counter,
				"%s renewed while balanced", l.Key.Shard)
		}
	})
}

// balancedFleet starts workers a, b and c over the world's 16 shards with
// records flowing, and returns once they settled at 5/5/6 and handled some.
func (w *world) balancedFleet(t *testing.T, p *produced, h *handled) ([]*worker, *producer) {
	t.Helper()
	w.timed(t)
	var workers []*worker
	for _, name := range []string{"a", "b", "c"} {
		workers = append(workers, startWorker(t, w, w.kin, w.store, h.handler(name), w.manyOpts(name)...))
	}
	prod := w.produce(t, p, w.take/3, 4, 64)
	waitSettled(t, w, 20*w.take, []int{5, 5, 6}, workers...)
	waitFor(t, 30*w.lease, "records flowing", func() bool { return h.distinct() > 40 })
	return workers, prod
}

func TestBalanceFourthWorkerJoins(t *testing.T) {
	t.Parallel()
	worlds(t, 16, func(t *testing.T, w *world) {
		// Pinned to per-lease renewals: d's store wrapper keeps no sessions, and holders answer at their renewals.
		w.extra = append(w.extra, shardlease.WithSessions(false))
		p := &produced{}
		h := newHandled()
		workers, prod := w.balancedFleet(t, p, h)

		clock := newHandoffClock(w.store)
		counting := newCountingStore(clock)
		joined := time.Now()
		d := startWorker(t, w, w.kin, counting, h.handler("d"), w.manyOpts("d")...)
		workers = append(workers, d)
		// Each holder answers at its next renewal and d adopts at its next
		// take round: a renew interval and a take interval, plus a round.
		took := waitSettled(t, w, w.renew+2*w.take, []int{4, 4, 4, 4}, workers...)
		t.Logf("%s: a fourth worker got its share of 4 after %v (%.1f take rounds; lease %v, renew %v); %d handoff requests sent",
			w.name, took, rounds(time.Since(joined), w.take), w.lease, w.renew, counting.snapshot()["handoff"])
		asked, _ := clock.times()
		assert.Len(t, asked, 4, "d asked for exactly its share")
		assert.Equal(t, 4, counting.snapshot()["handoff"], "d asked for no lease twice")

		// Keep producing a while on the new layout, then drain.
		time.Sleep(5 * w.take)
		prod.stop()
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		for _, wk := range workers {
			require.NoError(t, wk.stop(t))
		}
		assert.Empty(t, h.lost(p))
		assert.Zero(t, h.duplicates(), "a graceful handoff hands no record to two workers")
		requireKeyOrder(t, p, h)
		h.mu.Lock()
		defer h.mu.Unlock()
		byD := 0
		for _, ws := range h.worker {
			if slices.Contains(ws, "d") {
				byD++
			}
		}
		assert.Positive(t, byD, "d handled records")
	})
}

func TestBalanceWorkerLeavesGracefully(t *testing.T) {
	t.Parallel()
	worlds(t, 16, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		workers, prod := w.balancedFleet(t, p, h)

		leaving := workers[0]
		stopping := time.Now()
		require.NoError(t, leaving.stop(t))
		released := time.Now()
		for _, l := range w.table(t) {
			require.NotEqual(t, leaving.c.OwnerID(), l.Owner, "%s released on shutdown", l.Key.Shard)
		}
		// The coordinator (or, when the leaving worker coordinated, its
		// deputy) takes the free leases at its next take round: at most a
		// take interval away, plus the writes of that round.
		slack := w.take / 2
		if w.name != "fake" {
			// Real time on one busy server: the coordinator takes the
			// leases one acquire (a round trip) at a time.
			slack = w.take
		}
		took := waitHeldBy(t, w, w.take+slack, workers[1:]...)
		// Then the worker below its share is woken and asks for it: its
		// next renewal returns the note, and a handoff takes a round or two.
		balanced := waitSettled(t, w, w.renew+5*w.take+slack, []int{8, 8}, workers[1:]...)
		t.Logf("%s: shutdown took %v; the released leases were held again %v later, and balanced %v after that (take interval %v, lease %v)",
			w.name, released.Sub(stopping), took, balanced, w.take, w.lease)

		prod.stop()
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		assert.Empty(t, h.lost(p))
		assert.Zero(t, h.duplicates(), "the leaving worker checkpointed what it handled")
		requireKeyOrder(t, p, h)
	})
}

// handoffClock records when a store asked for handoffs and acquired leases.
type handoffClock struct {
	shardlease.LeaseStore
	mu       sync.Mutex
	asked    map[string]time.Time
	acquired map[string]time.Time
}

func newHandoffClock(s shardlease.LeaseStore) *handoffClock {
	return &handoffClock{LeaseStore: s, asked: map[string]time.Time{}, acquired: map[string]time.Time{}}
}

func (s *handoffClock) RequestHandoff(ctx context.Context, l shardlease.Lease, taker string) (shardlease.Lease, error) {
	got, err := s.LeaseStore.RequestHandoff(ctx, l, taker)
	if err == nil {
		s.mu.Lock()
		s.asked[l.Key.Shard] = time.Now()
		s.mu.Unlock()
	}
	return got, err
}

func (s *handoffClock) Acquire(ctx context.Context, k shardlease.LeaseKey, owner string, observed int64) (shardlease.Lease, error) {
	got, err := s.LeaseStore.Acquire(ctx, k, owner, observed)
	if err == nil {
		s.mu.Lock()
		s.acquired[k.Shard] = time.Now()
		s.mu.Unlock()
	}
	return got, err
}

func (s *handoffClock) times() (asked, acquired map[string]time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps(s.asked), maps(s.acquired)
}

func maps(m map[string]time.Time) map[string]time.Time {
	out := make(map[string]time.Time, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// deafStore hides handoff requests from its user: a live holder that keeps
// renewing but never answers.
type deafStore struct{ shardlease.LeaseStore }

func (s deafStore) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	got, err := s.LeaseStore.Renew(ctx, l, e)
	got.HandoffTo = ""
	return got, err
}

func (s deafStore) List(ctx context.Context, stream string) ([]shardlease.Lease, error) {
	ls, err := s.LeaseStore.List(ctx, stream)
	for i := range ls {
		ls[i].HandoffTo = ""
	}
	return ls, err
}

func (s deafStore) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	got, err := s.LeaseStore.Checkpoint(ctx, l, cp, sub, e)
	got.HandoffTo = ""
	return got, err
}

func TestHandoffGracefulTiming(t *testing.T) {
	t.Parallel()
	worlds(t, 4, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a")...)
		waitSettled(t, w, 10*w.take, []int{4}, a)
		prod := w.produce(t, p, w.take/3, 4, 32)
		waitFor(t, 30*w.lease, "records flowing", func() bool { return h.distinct() > 20 })

		clock := newHandoffClock(w.store)
		b := startWorker(t, w, w.kin, clock, h.handler("b"), w.opts("b")...)
		waitSettled(t, w, w.lease, []int{2, 2}, a, b)
		asked, _ := clock.times()
		require.Len(t, asked, 2, "b asked for its share by handoff")
		var slowest time.Duration
		for shard, at := range asked {
			var took time.Duration
			waitFor(t, w.lease, "b runs "+shard, func() bool {
				took = time.Since(at)
				return slices.Contains(b.c.Held(), shard)
			})
			slowest = max(slowest, took)
		}
		// The holder sees the request on its next renewal (within a renew
		// interval), finishes its batch and releases; b adopts the lease at
		// its next take round.
		t.Logf("%s: graceful handoff took at most %v (renew %v, take %v)", w.name, slowest, w.renew, w.take)
		assert.Less(t, slowest, w.renew+w.take+w.take/2, "answered at the holder's next renewal, adopted at the taker's next take round")

		prod.stop()
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		assert.Empty(t, h.lost(p))
		assert.Zero(t, h.duplicates())
		requireKeyOrder(t, p, h)
	})
}

func TestHandoffUnansweredCrashedHolder(t *testing.T) {
	t.Parallel()
	worlds(t, 4, func(t *testing.T, w *world) {
		// Pinned to per-lease renewals: b's store wrapper keeps no sessions, and it times per-lease handoffs.
		w.extra = append(w.extra, shardlease.WithSessions(false))
		p := &produced{}
		h := newHandled()
		sw := &crash.Switch{}
		a := startWorker(t, w, crash.Kinesis(w.kin, sw), crash.Store(w.store, sw), h.handler("a"), w.opts("a")...)
		waitSettled(t, w, 10*w.take, []int{4}, a)
		w.put(t, p, 40, 16)
		waitFor(t, 30*w.lease, "a handles the first records", func() bool { return h.distinct() == 40 })

		sw.Crash() // a dies holding every lease
		clock := newHandoffClock(w.store)
		started := time.Now()
		b := startWorker(t, w, w.kin, clock, h.handler("b"), w.opts("b")...)
		waitFor(t, w.lease, "b asks a for its share", func() bool {
			asked, _ := clock.times()
			return len(asked) == 2
		})
		w.put(t, p, 40, 16)
		waitSettled(t, w, 3*w.lease, []int{4}, b)
		took := time.Since(started)
		asked, acquired := clock.times()
		for shard, at := range acquired {
			if ask, ok := asked[shard]; ok {
				assert.GreaterOrEqual(t, at.Sub(ask), w.lease, "%s taken before its handoff request went unanswered for a lease duration", shard)
			}
			assert.GreaterOrEqual(t, at.Sub(started), w.lease, "%s taken before a lease duration on b's clock", shard)
		}
		t.Logf("%s: b held a crashed holder's leases %v after starting (lease %v, take %v)", w.name, took, w.lease, w.take)
		assert.Less(t, took, w.lease+2*w.take+w.take/2, "taken over about a lease duration after it was first seen")
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		assert.Empty(t, h.lost(p))
	})
}

// A live holder that never answers a handoff request keeps its leases:
// the asker waits, and takes them only when they are free or expired.
func TestHandoffUnansweredLiveHolder(t *testing.T) {
	t.Parallel()
	worlds(t, 4, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		a := startWorker(t, w, w.kin, deafStore{w.store}, h.handler("a"), w.opts("a")...)
		waitSettled(t, w, 10*w.take, []int{4}, a)
		prod := w.produce(t, p, w.take/3, 4, 32)
		waitFor(t, 30*w.lease, "records flowing", func() bool { return h.distinct() > 20 })

		clock := newHandoffClock(w.store)
		b := startWorker(t, w, w.kin, clock, h.handler("b"), w.opts("b")...)
		waitFor(t, w.lease, "b asks a for its share", func() bool {
			asked, _ := clock.times()
			return len(asked) == 2
		})
		asked := time.Now()
		waitFor(t, 4*w.lease, "three lease durations", func() bool {
			require.Empty(t, b.c.Held(), "b took a lease from a live holder")
			return time.Since(asked) > 3*w.lease
		})
		assert.Len(t, a.c.Held(), 4)
		assert.Zero(t, a.c.Stats().LeasesLost)

		// a shuts down: its leases are free, and b takes them at once.
		require.NoError(t, a.stop(t))
		waitSettled(t, w, 2*w.take, []int{4}, b)
		prod.stop()
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		assert.Empty(t, h.lost(p))
		requireKeyOrder(t, p, h)
	})
}

// positioned records the shards one worker got an iterator for.
type positioned struct {
	shardlease.KinesisAPI
	mu     sync.Mutex
	shards map[string]bool
}

func (k *positioned) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	out, err := k.KinesisAPI.GetShardIterator(ctx, in, o...)
	if err == nil {
		k.mu.Lock()
		k.shards[aws.ToString(in.ShardId)] = true
		k.mu.Unlock()
	}
	return out, err
}

// has reports whether the worker got an iterator for each of shards.
func (k *positioned) has(shards []string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range shards {
		if !k.shards[s] {
			return false
		}
	}
	return true
}

// shardsOf lists the stream's shards by id.
func (w *world) shardsOf(t *testing.T) map[string]types.Shard {
	t.Helper()
	out := map[string]types.Shard{}
	in := &kinesis.ListShardsInput{StreamName: aws.String(w.stream)}
	for {
		page, err := w.kin.ListShards(context.Background(), in)
		require.NoError(t, err)
		for _, s := range page.Shards {
			out[aws.ToString(s.ShardId)] = s
		}
		if page.NextToken == nil {
			return out
		}
		in = &kinesis.ListShardsInput{NextToken: page.NextToken}
	}
}

// retryBusy retries a resharding call while the stream is still updating
// from the last one.
func retryBusy(t *testing.T, w *world, what string, call func() error) {
	t.Helper()
	var err error
	waitFor(t, 10*time.Second, what, func() bool {
		err = call()
		var inUse *types.ResourceInUseException
		var limit *types.LimitExceededException
		return err == nil || !errors.As(err, &inUse) && !errors.As(err, &limit)
	})
	require.NoError(t, err, what)
}

func TestLineageSplitAndMergeKeepKeyOrder(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		p := &produced{}
		h := newHandled()
		var mu sync.Mutex
		var order []string               // shard of each batch, in handling order
		var early []string               // batches of a child read before a parent ended
		parents := map[string][]string{} // child → parents, from its row
		handler := func(worker string) shardlease.Handler {
			return func(ctx context.Context, b *shardlease.Batch) error {
				row, err := w.store.Get(ctx, shardlease.LeaseKey{Stream: w.stream, Shard: b.ShardID})
				if err != nil {
					return err
				}
				for _, ps := range row.Parents {
					pl, err := w.store.Get(ctx, shardlease.LeaseKey{Stream: w.stream, Shard: ps})
					if err == nil && pl.Checkpoint != shardlease.ShardEnd {
						mu.Lock()
						early = append(early, fmt.Sprintf("%s before parent %s ended (checkpoint %q)", b.ShardID, ps, pl.Checkpoint))
						mu.Unlock()
					}
				}
				mu.Lock()
				order = append(order, b.ShardID)
				parents[b.ShardID] = row.Parents
				mu.Unlock()
				h.add(worker, b)
				return nil
			}
		}
		// Shards without a checkpoint start at LATEST; children of a tracked
		// parent must still be read from their start.
		kinA := &positioned{KinesisAPI: w.kin, shards: map[string]bool{}}
		kinB := &positioned{KinesisAPI: w.kin, shards: map[string]bool{}}
		extra := shardlease.WithInitialPosition(shardlease.Latest)
		a := startWorker(t, w, kinA, w.store, handler("a"), w.opts("a", extra)...)
		b := startWorker(t, w, kinB, w.store, handler("b"), w.opts("b", extra)...)
		waitSettled(t, w, 10*w.take, []int{1, 1}, a, b)
		// Records written before a reader's first LATEST iterator are not
		// the consumer's to read: wait until the final holders are reading.
		waitFor(t, w.lease, "both readers positioned", func() bool {
			return kinA.has(a.c.Held()) && kinB.has(b.c.Held())
		})

		const keys = 16
		w.put(t, p, 48, keys)
		shards := w.shardsOf(t)
		require.Len(t, shards, 2)
		var ids []string
		for id := range shards {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		first := shards[ids[0]]
		lo, _ := new(big.Int).SetString(aws.ToString(first.HashKeyRange.StartingHashKey), 10)
		hi, _ := new(big.Int).SetString(aws.ToString(first.HashKeyRange.EndingHashKey), 10)
		mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
		retryBusy(t, w, "split", func() error {
			_, err := w.kin.SplitShard(context.Background(), &kinesis.SplitShardInput{
				StreamName: aws.String(w.stream), ShardToSplit: first.ShardId, NewStartingHashKey: aws.String(mid.String()),
			})
			return err
		})
		w.put(t, p, 48, keys)

		// Merge the upper child of the split with the other original shard:
		// their hash key ranges are adjacent.
		var upper string
		for id, s := range w.shardsOf(t) {
			if aws.ToString(s.ParentShardId) == aws.ToString(first.ShardId) && aws.ToString(s.HashKeyRange.StartingHashKey) == mid.String() {
				upper = id
			}
		}
		require.NotEmpty(t, upper, "split made a child starting at %s", mid)
		retryBusy(t, w, "merge", func() error {
			_, err := w.kin.MergeShards(context.Background(), &kinesis.MergeShardsInput{
				StreamName: aws.String(w.stream), ShardToMerge: aws.String(upper), AdjacentShardToMerge: aws.String(ids[1]),
			})
			return err
		})
		w.put(t, p, 48, keys)

		after := w.shardsOf(t)
		require.Len(t, after, 5, "two originals, two children of the split, one child of the merge")
		deadline := time.Now().Add(60 * w.lease)
		for h.distinct() != p.count() {
			if time.Now().After(deadline) {
				var rows []string
				for _, l := range w.leases(t) {
					rows = append(rows, fmt.Sprintf("%s owner=%q handoff=%q parents=%v checkpoint=%q", l.Key.Shard, l.Owner, l.HandoffTo, l.Parents, l.Checkpoint))
				}
				lost := h.lost(p)
				where := map[string]int{}
				p.mu.Lock()
				for s, ids := range p.byShard {
					for _, id := range ids {
						if slices.Contains(lost, id) {
							where[s]++
						}
					}
				}
				p.mu.Unlock()
				t.Fatalf("%d of %d records handled; lost by shard %v; a runs %v, b runs %v; rows:\n%s", h.distinct(), p.count(), where, a.c.Held(), b.c.Held(), strings.Join(rows, "\n"))
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.NoError(t, a.stop(t))
		require.NoError(t, b.stop(t))

		assert.Empty(t, h.lost(p))
		assert.Zero(t, h.duplicates())
		requireKeyOrder(t, p, h)
		mu.Lock()
		defer mu.Unlock()
		assert.Empty(t, early, "no child record handled before its parents reached SHARD_END")
		// The same, from the order of handling: every batch of a child comes
		// after every batch of each of its parents.
		children := 0
		for child, ps := range parents {
			if len(ps) == 0 {
				continue
			}
			children++
			firstChild := slices.Index(order, child)
			for _, parent := range ps {
				lastParent := -1
				for i, s := range order {
					if s == parent {
						lastParent = i
					}
				}
				assert.Less(t, lastParent, firstChild, "child %s handled before the last batch of parent %s", child, parent)
			}
		}
		assert.Equal(t, 3, children, "the three children were read")
		for _, l := range w.leases(t) {
			if after[l.Key.Shard].SequenceNumberRange.EndingSequenceNumber != nil {
				assert.Equal(t, shardlease.ShardEnd, l.Checkpoint, "closed shard %s finished", l.Key.Shard)
			}
		}
	})
}
