package shardlease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/balance"
	"github.com/shardlease/shardlease/internal/crash"
)

// The liveness tests: every failover and pickup bound holds whatever the
// roles of the workers that fail, together or alone, and when a worker
// renews but cannot list. They run with the default take interval (2L/5),
// as a fleet does.

// errScanThrottled is what a worker's listings get while they fail: a Scan
// throttled in provisioned mode (or slower than the call timeout, or not
// allowed).
var errScanThrottled = errors.New("ProvisionedThroughputExceededException: the Scan was throttled")

// faultyReads is one worker's view of the store whose listings can be made
// to fail and whose renewals can be made slow, each at the flip of a switch.
type faultyReads struct {
	*readCounter
	failLists atomic.Bool
	failGets  atomic.Bool  // single-row and session reads fail too
	slowRenew atomic.Int64 // ns each renewal and checkpoint waits before it is sent
}

func (s *faultyReads) GetEventually(ctx context.Context, k shardlease.LeaseKey) (shardlease.Lease, error) {
	if s.failGets.Load() {
		return shardlease.Lease{}, errScanThrottled
	}
	return s.readCounter.GetEventually(ctx, k)
}

func (s *faultyReads) ReadSession(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	if s.failGets.Load() {
		return shardlease.Worker{}, errScanThrottled
	}
	return s.readCounter.ReadSession(ctx, stream, owner)
}

func (s *faultyReads) listErr() error {
	if s.failLists.Load() {
		return errScanThrottled
	}
	return nil
}

func (s *faultyReads) List(ctx context.Context, stream string) ([]shardlease.Lease, error) {
	if err := s.listErr(); err != nil {
		return nil, err
	}
	return s.readCounter.List(ctx, stream)
}

func (s *faultyReads) ListWithWorkers(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	if err := s.listErr(); err != nil {
		return nil, nil, err
	}
	return s.readCounter.ListWithWorkers(ctx, stream)
}

func (s *faultyReads) ListWithWorkersEventually(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	if err := s.listErr(); err != nil {
		return nil, nil, err
	}
	return s.readCounter.ListWithWorkersEventually(ctx, stream)
}

// slow is the injected latency of a slow endpoint, before the call is sent.
func (s *faultyReads) slow() {
	if d := time.Duration(s.slowRenew.Load()); d > 0 {
		time.Sleep(d)
	}
}

func (s *faultyReads) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	s.slow()
	return s.readCounter.Renew(ctx, l, e)
}

func (s *faultyReads) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	s.slow()
	return s.readCounter.Checkpoint(ctx, l, cp, sub, e)
}

// liveWorker is a running worker of a liveness test.
type liveWorker struct {
	*coordWorker
	faults *faultyReads
}

// bound returns d in the fake world and half again in the emulators',
// whose real time on a shared machine runs late now and then.
func bound(w *world, d time.Duration) time.Duration {
	if w.name == "fake" {
		return d
	}
	return d * 3 / 2
}

// liveWorld returns w with the default take interval, 2L/5.
func liveWorld(w *world) *world {
	lw := *w
	lw.take = 2 * w.lease / 5
	return &lw
}

// scaledWorld returns w with its lease, renew and take intervals k times
// as long.
func scaledWorld(w *world, k time.Duration) *world {
	sw := *w
	sw.lease, sw.renew, sw.take = k*w.lease, k*w.renew, k*w.take
	return &sw
}

// startLiveFleet starts n workers over the world's stream, each with
// faults of its own, and waits until they are balanced over shards.
func startLiveFleet(t *testing.T, w *world, n, shards int, h *handled, extra ...shardlease.Option) []*liveWorker {
	t.Helper()
	var out []*liveWorker
	for i := range n {
		out = append(out, startLiveWorker(t, w, fmt.Sprintf("w%02d", i), h, extra...))
	}
	lo, hi := shards/n, (shards+n-1)/n
	waitFor(t, 20*w.lease, "the fleet balanced", func() bool { return balancedOver(t, w, shards, lo, hi, coords(out)) })
	return out
}

func startLiveWorker(t *testing.T, w *world, name string, h *handled, extra ...shardlease.Option) *liveWorker {
	t.Helper()
	fr := &faultyReads{readCounter: newReadCounter(t, w.store)}
	sw := &crash.Switch{}
	wk := startWorker(t, w, crash.Kinesis(w.kin, sw), crash.Store(fr, sw), h.handler(name),
		w.opts(name, append([]shardlease.Option{shardlease.WithIdlePollInterval(max(w.idle, w.take))}, extra...)...)...)
	return &liveWorker{coordWorker: &coordWorker{worker: wk, reads: fr.readCounter, sw: sw}, faults: fr}
}

func coords(fleet []*liveWorker) []*coordWorker {
	out := make([]*coordWorker, len(fleet))
	for i, lw := range fleet {
		out[i] = lw.coordWorker
	}
	return out
}

// settledFleet starts n live workers over shards and waits until the fleet
// has settled (see settle): the coordinator, its deputies named, no other
// worker listing. It returns the fleet and its coordinator.
func settledFleet(t *testing.T, w *world, n, shards int, extra ...shardlease.Option) ([]*liveWorker, *liveWorker) {
	t.Helper()
	h := newHandled()
	fleet := startLiveFleet(t, w, n, shards, h, extra...)
	coord := liveCoordinator(fleet)
	settle(t, w, coords(fleet), coord.coordWorker)
	return fleet, coord
}

// liveCoordinator returns the live worker that runs the first shard.
func liveCoordinator(fleet []*liveWorker) *liveWorker {
	c := coordinatorOf(coords(fleet))
	for _, lw := range fleet {
		if lw.coordWorker == c {
			return lw
		}
	}
	return nil
}

// deputiesOf returns the live workers whose rows name them deputy of the
// first shard, as the table shows them.
func deputiesOf(t *testing.T, w *world, fleet []*liveWorker) []*liveWorker {
	owners := map[string]bool{}
	for _, l := range w.leases(t) {
		if n := balance.ParseNote(l.Note); n.Kind == balance.NoteDeputy && n.FirstOn(l.Key.Stream) == l.Key.Stream+":shardId-000000000000" {
			owners[l.Owner] = true
		}
	}
	var out []*liveWorker
	for _, lw := range fleet {
		if owners[lw.c.OwnerID()] && !lw.sw.Down() {
			out = append(out, lw)
		}
	}
	return out
}

// heldOf returns the shards the workers run.
func heldOf(ws ...*liveWorker) []string {
	var out []string
	for _, lw := range ws {
		out = append(out, lw.c.Held()...)
	}
	return out
}

// leave stops the workers together and returns when both have stopped.
func leave(t *testing.T, ws ...*liveWorker) {
	var wg sync.WaitGroup
	for _, lw := range ws {
		wg.Go(func() { assert.NoError(t, lw.stop(t)) })
	}
	wg.Wait()
	for _, lw := range ws {
		lw.sw.Crash() // out of the fleet for the helpers
	}
}

// listings returns the fleet's listings so far.
func listings(fleet []*liveWorker) int64 {
	var n int64
	for _, lw := range fleet {
		n += lw.reads.lists.Load()
	}
	return n
}

// eachFleet runs fn in both worlds for each fleet size, over perWorker
// shards a worker; the emulators run the smallest fleet only.
func eachFleet(t *testing.T, perWorker int, sizes []int, fn func(t *testing.T, w *world, n int)) {
	for i, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			worlds(t, int32(perWorker*n), func(t *testing.T, w *world) {
				if w.name != "fake" && i > 0 {
					t.Skip("the emulators run the smallest fleet")
				}
				w.timed(t)
				fn(t, liveWorld(w), n)
			})
		})
	}
}

// TestLivenessJointCrashOfCoordinatorAndDeputy: the coordinator and a deputy
// crash together (one node, one zone): every lease they held is held again
// within 2.5 lease durations, the same with 4, 8 and 16 workers.
func TestLivenessJointCrashOfCoordinatorAndDeputy(t *testing.T) {
	t.Parallel()
	eachFleet(t, 3, []int{4, 8, 16}, func(t *testing.T, w *world, n int) {
		fleet, coord := settledFleet(t, w, n, 3*n)
		deps := deputiesOf(t, w, fleet)
		require.NotEmpty(t, deps, "a deputy is named")
		lost := heldOf(coord, deps[0])
		crashed := time.Now()
		coord.sw.Crash()
		deps[0].sw.Crash()
		waitFor(t, 10*w.lease, "the leases of both held again", func() bool { return heldAgain(coords(fleet), lost) })
		took := time.Since(crashed)
		t.Logf("%s, %d workers: held again %.2f L after the coordinator and its deputy crashed", w.name, n, float64(took)/float64(w.lease))
		assert.LessOrEqual(t, took, bound(w, 5*w.lease/2), "within 2.5 lease durations")
	})
}

// TestLivenessJointLeaveOfCoordinatorAndDeputy: the coordinator and a deputy
// shut down together (a rolling deploy with maxUnavailable 2): every lease
// they released is held again within 2 take intervals of their shutdown,
// with 4, 16 and 64 workers.
func TestLivenessJointLeaveOfCoordinatorAndDeputy(t *testing.T) {
	t.Parallel()
	eachFleet(t, 2, []int{4, 16, 64}, func(t *testing.T, w *world, n int) {
		fleet, coord := settledFleet(t, w, n, 2*n)
		deps := deputiesOf(t, w, fleet)
		require.NotEmpty(t, deps, "a deputy is named")
		released := heldOf(coord, deps[0])
		leave(t, coord, deps[0])
		stopped := time.Now()
		waitFor(t, 20*w.take, "the released leases held again", func() bool { return heldAgain(coords(fleet), released) })
		took := time.Since(stopped)
		t.Logf("%s, %d workers: held again %.2f T after the coordinator and its deputy left", w.name, n, float64(took)/float64(w.take))
		assert.LessOrEqual(t, took, bound(w, 2*w.take), "within 2 take intervals")
	})
}

// TestLivenessDeputyCrashesThenCoordinatorLeaves: the deputy crashes, then
// the coordinator shuts down before it named another: the leases it
// released are held again within 2 take intervals, the crashed deputy's
// within 2.5 lease durations of its crash.
func TestLivenessDeputyCrashesThenCoordinatorLeaves(t *testing.T) {
	t.Parallel()
	eachFleet(t, 2, []int{6, 16}, func(t *testing.T, w *world, n int) {
		fleet, coord := settledFleet(t, w, n, 2*n)
		deps := deputiesOf(t, w, fleet)
		require.NotEmpty(t, deps, "a deputy is named")
		dep := deps[0]
		crashedLeases := dep.c.Held()
		crashed := time.Now()
		dep.sw.Crash()
		time.Sleep(w.renew)
		released := coord.c.Held()
		leave(t, coord)
		stopped := time.Now()
		waitFor(t, 20*w.take, "the released leases held again", func() bool { return heldAgain(coords(fleet), released) })
		tookReleased := time.Since(stopped)
		waitFor(t, 10*w.lease, "the crashed deputy's leases held again", func() bool { return heldAgain(coords(fleet), crashedLeases) })
		tookCrashed := time.Since(crashed)
		t.Logf("%s, %d workers: released held again %.2f T after the leave, crashed %.2f L after the crash", w.name, n,
			float64(tookReleased)/float64(w.take), float64(tookCrashed)/float64(w.lease))
		assert.LessOrEqual(t, tookReleased, bound(w, 2*w.take), "released leases within 2 take intervals")
		assert.LessOrEqual(t, tookCrashed, bound(w, 5*w.lease/2), "crashed leases within 2.5 lease durations")
	})
}

// TestLivenessCoordinatorCannotList: the coordinator keeps renewing but its
// listings fail: it gives coordination up within a lease duration and two
// take intervals, and then a crashed worker's leases are held again within
// L + T, a leaving worker's within 2 T.
func TestLivenessCoordinatorCannotList(t *testing.T) {
	t.Parallel()
	eachFleet(t, 3, []int{4}, func(t *testing.T, w *world, n int) {
		fleet, coord := settledFleet(t, w, n, 3*n)
		failed := time.Now()
		coord.faults.failLists.Store(true)
		waitFor(t, 10*w.lease, "another worker coordinating", func() bool {
			next := liveCoordinator(fleet)
			return next != nil && next != coord && next.c.Stats().Coordinating && !coord.c.Stats().Coordinating
		})
		gaveUp := time.Since(failed)
		t.Logf("%s: coordination given up %.2f L after the listings began to fail", w.name, float64(gaveUp)/float64(w.lease))
		assert.LessOrEqual(t, gaveUp, bound(w, w.lease+2*w.take), "given up within L + 2T")
		assert.Positive(t, coord.c.Stats().CoordinationStalls, "the stall is counted")

		next := liveCoordinator(fleet)
		settle(t, w, coords(fleet), next.coordWorker)
		var victim, leaver *liveWorker
		for _, lw := range fleet {
			switch {
			case lw == coord || lw == next:
			case victim == nil:
				victim = lw
			case leaver == nil:
				leaver = lw
			}
		}
		lost := victim.c.Held()
		crashed := time.Now()
		victim.sw.Crash()
		waitFor(t, 10*w.lease, "the crashed worker's leases held again", func() bool { return heldAgain(coords(fleet), lost) })
		took := time.Since(crashed)
		assert.LessOrEqual(t, took, bound(w, w.lease+w.take+w.take/4), "a crash: within L + T")
		released := leaver.c.Held()
		leave(t, leaver)
		stopped := time.Now()
		waitFor(t, 20*w.take, "the released leases held again", func() bool { return heldAgain(coords(fleet), released) })
		tookReleased := time.Since(stopped)
		t.Logf("%s: then a crash held again after %.2f L, a leave after %.2f T", w.name, float64(took)/float64(w.lease), float64(tookReleased)/float64(w.take))
		assert.LessOrEqual(t, tookReleased, bound(w, 2*w.take), "a leave: within 2 T")
	})
}

// TestLivenessNoWorkerCanList: every worker's listings fail (a table whose
// Scans are throttled for all): nobody can end the stall, and it is loud:
// an Error line and the stall metric from the workers that see it.
func TestLivenessNoWorkerCanList(t *testing.T) {
	t.Parallel()
	eachFleet(t, 2, []int{3}, func(t *testing.T, w *world, n int) {
		fleet, coord := settledFleet(t, w, n, 2*n)
		for _, lw := range fleet {
			lw.faults.failLists.Store(true)
		}
		waitFor(t, 3*w.lease, "the stall counted", func() bool { return coord.c.Stats().CoordinationStalls > 0 })
		// Every lease stays read by its holder meanwhile: nothing was given
		// up to a worker that cannot take it.
		time.Sleep(2 * w.lease)
		assert.Len(t, heldOf(fleet...), 2*n, "every lease still held")
	})
}

// TestLivenessDeputyBalancedAfterShrink: the deputy holds one lease and the
// fleet shrinks: the deputy is woken like anyone below its share, and the
// fleet is balanced within 2 lease durations; then no lease moves.
func TestLivenessDeputyBalancedAfterShrink(t *testing.T) {
	t.Parallel()
	eachFleet(t, 1, []int{4}, func(t *testing.T, w *world, n int) {
		fleet, coord := settledFleet(t, w, n, n)
		deps := deputiesOf(t, w, fleet)
		require.NotEmpty(t, deps)
		var leavers []*liveWorker
		for _, lw := range fleet {
			if lw != coord && lw != deps[0] {
				leavers = append(leavers, lw)
			}
		}
		leave(t, leavers...)
		stopped := time.Now()
		waitFor(t, 20*w.lease, "balanced 2/2", func() bool { return balancedOver(t, w, n, n/2, n/2, coords(fleet)) })
		took := time.Since(stopped)
		t.Logf("%s: balanced %.2f L after the fleet shrank", w.name, float64(took)/float64(w.lease))
		assert.LessOrEqual(t, took, bound(w, 2*w.lease), "balanced within 2 lease durations")
		want := w.table(t).owners()
		time.Sleep(10 * w.take)
		assert.Equal(t, want, w.table(t).owners(), "no lease moves once balanced")
	})
}

// TestLivenessOneLeaseFreed: in a 2-worker fleet over 4 shards one lease of
// the worker that does not coordinate is freed (an operator took and
// released it): whoever takes it, the fleet is 2/2 again within 2 lease
// durations.
func TestLivenessOneLeaseFreed(t *testing.T) {
	t.Parallel()
	eachFleet(t, 2, []int{2}, func(t *testing.T, w *world, n int) {
		fleet, coord := settledFleet(t, w, n, 2*n)
		other := fleet[0]
		if other == coord {
			other = fleet[1]
		}
		shard := other.c.Held()[0]
		ctx := context.Background()
		key := shardlease.LeaseKey{Stream: w.stream, Shard: shard}
		l, err := w.store.Get(ctx, key)
		require.NoError(t, err)
		op, err := w.store.Acquire(ctx, key, "operator", l.Counter)
		require.NoError(t, err)
		_, err = w.store.Release(ctx, op)
		require.NoError(t, err)
		freed := time.Now()
		waitFor(t, 20*w.lease, "balanced 2/2", func() bool { return balancedOver(t, w, 2*n, 2, 2, coords(fleet)) })
		took := time.Since(freed)
		t.Logf("%s: balanced %.2f L after a lease was freed", w.name, float64(took)/float64(w.lease))
		assert.LessOrEqual(t, took, bound(w, 2*w.lease), "balanced within 2 lease durations")
	})
}

// TestLivenessCapsWhenTheCoordinatorCrashes: every worker may hold one more
// lease than its share (WithMaxLeases); the coordinator crashes, so its
// deputy is at its cap once it takes the first lease: the others, woken at
// the alarm, take the rest within 2.5 lease durations of the crash (about
// 1.9), and then the fleet does not list for nothing.
func TestLivenessCapsWhenTheCoordinatorCrashes(t *testing.T) {
	t.Parallel()
	eachFleet(t, 3, []int{4}, func(t *testing.T, w *world, n int) {
		fleet, coord := settledFleet(t, w, n, 3*n, shardlease.WithMaxLeases(4))
		lost := coord.c.Held()
		crashed := time.Now()
		coord.sw.Crash()
		waitFor(t, 10*w.lease, "the coordinator's leases held again", func() bool { return heldAgain(coords(fleet), lost) })
		took := time.Since(crashed)
		t.Logf("%s: held again %.2f L after the crash", w.name, float64(took)/float64(w.lease))
		assert.LessOrEqual(t, took, bound(w, 5*w.lease/2), "within 2.5 lease durations")
		assertQuiet(t, w, fleet)
	})
}

// assertQuiet asserts that, once they have settled, the fleet's listings
// are about the coordinator's: one per take interval.
func assertQuiet(t *testing.T, w *world, fleet []*liveWorker) {
	t.Helper()
	time.Sleep(w.lease + 2*w.take)
	before := listings(fleet)
	const window = 20
	time.Sleep(window * w.take)
	lists := listings(fleet) - before
	t.Logf("%s: then %d listings in %d take intervals", w.name, lists, window)
	assert.LessOrEqual(t, lists, int64(window+window/2), "about one worker lists, not every worker every T")
}

// TestLivenessFirstLeaseNobodyCanTake: every worker is at its cap
// (WithMaxLeases) when the coordinator crashes, so nobody can take its
// leases, the first one among them: the stall is logged and counted, and
// nobody lists every take interval for good.
func TestLivenessFirstLeaseNobodyCanTake(t *testing.T) {
	t.Parallel()
	eachFleet(t, 3, []int{3}, func(t *testing.T, w *world, n int) {
		fleet, coord := settledFleet(t, w, n, 3*n, shardlease.WithMaxLeases(3))
		crashed := time.Now()
		coord.sw.Crash()
		stalls := func() int64 {
			var n int64
			for _, lw := range fleet {
				if !lw.sw.Down() {
					n += lw.c.Stats().CoordinationStalls
				}
			}
			return n
		}
		waitFor(t, 5*w.lease, "the stall counted", func() bool { return stalls() > 0 })
		t.Logf("%s: the stall counted %.2f L after the crash", w.name, float64(time.Since(crashed))/float64(w.lease))
		assert.LessOrEqual(t, time.Since(crashed), bound(w, 3*w.lease+w.take), "counted within 3 L and a take interval")
		assertQuiet(t, w, fleet)
	})
}

// TestLivenessIdleWorkersDoNotList: more workers than shards: the idle
// workers do not list every take interval, so the fleet's listings per take
// interval are about the same with 2 and with 64 workers over 16 shards.
func TestLivenessIdleWorkersDoNotList(t *testing.T) {
	t.Parallel()
	per := map[int]float64{}
	for _, n := range []int{2, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			worlds(t, 16, func(t *testing.T, w *world) {
				if w.name != "fake" && n > 16 {
					t.Skip("the emulators run 16 workers at most")
				}
				w = liveWorld(w)
				w.timed(t)
				h := newHandled()
				fleet := startLiveFleet(t, w, n, 16, h)
				time.Sleep(3 * w.lease)
				before := listings(fleet)
				// The count of take intervals averaged over. The fake world's
				// listings depend on the order its goroutines run in, and
				// 64 workers over 20 intervals gave 1.10 to 1.65 listings
				// per interval from run to run; over 100 (fake time costs
				// nothing) 1.19 to 1.33.
				window := 20
				if w.name == "fake" {
					window = 100
				}
				time.Sleep(time.Duration(window) * w.take)
				per[n] = float64(listings(fleet)-before) / float64(window)
				t.Logf("%s, %d workers over 16 shards: %.2f listings per take interval", w.name, n, per[n])
				if n > 2 {
					assert.LessOrEqual(t, per[n], 1.5*per[2]+0.1, "listings per take interval about as with 2 workers")
				}
			})
		})
	}
}

// TestLivenessHalfTheFleetLeaves: half of an 8-worker fleet over 64 shards
// shuts down: no worker ever holds more than 1.5 times its final share (16)
// while the leases move, and every lease is held again within 2 T.
func TestLivenessHalfTheFleetLeaves(t *testing.T) {
	t.Parallel()
	eachFleet(t, 8, []int{8}, func(t *testing.T, w *world, n int) {
		if w.name != "fake" {
			// The woken workers take the rest before the coordinator's next
			// round because R < T; the margin is T - R = L/15, 133 ms at the
			// emulator world's L = 2 s, which a loaded machine's call
			// latencies eat now and then (a peak of 25, once in 19 runs).
			// At L = 4 s the margin is 267 ms, the bound unchanged.
			w = scaledWorld(w, 2)
		}
		fleet, coord := settledFleet(t, w, n, 8*n)
		var leavers []*liveWorker
		for _, lw := range fleet {
			if lw != coord && len(leavers) < n/2 {
				leavers = append(leavers, lw)
			}
		}
		released := heldOf(leavers...)
		peak := 0
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(10 * time.Millisecond):
				}
				for _, lw := range fleet {
					if !lw.sw.Down() {
						peak = max(peak, len(lw.c.Held()))
					}
				}
			}
		})
		leave(t, leavers...)
		stopped := time.Now()
		waitFor(t, 20*w.take, "the released leases held again", func() bool { return heldAgain(coords(fleet), released) })
		took := time.Since(stopped)
		waitFor(t, 20*w.lease, "balanced 16 each", func() bool { return balancedOver(t, w, 8*n, 16, 16, coords(fleet)) })
		close(done)
		wg.Wait()
		t.Logf("%s: held again %.2f T after half the fleet left; peak %d leases on one worker (final share 16)", w.name, float64(took)/float64(w.take), peak)
		assert.LessOrEqual(t, peak, 24, "no worker above 1.5 times its final share")
		assert.LessOrEqual(t, took, bound(w, 2*w.take), "held again within 2 T")
	})
}

// TestLivenessSlowCoordinator: the coordinator's renewals take long (but
// its leases never run out): no lease moves, and the fleet lists at most
// one extra time per take interval.
func TestLivenessSlowCoordinator(t *testing.T) {
	t.Parallel()
	eachFleet(t, 3, []int{4}, func(t *testing.T, w *world, n int) {
		fleet, coord := settledFleet(t, w, n, 3*n)
		want := w.table(t).owners()
		coord.faults.slowRenew.Store(int64(w.take * 3 / 4))
		before := listings(fleet)
		const window = 30
		time.Sleep(window * w.take)
		lists := listings(fleet) - before
		t.Logf("%s: %d listings in %d take intervals with a slow coordinator", w.name, lists, window)
		assert.Equal(t, want, w.table(t).owners(), "no lease moved")
		assert.LessOrEqual(t, lists, int64(2*window+2), "at most one extra listing per take interval")
	})
}

// TestLivenessCoordinatorCrashesAfterTheDeputyRowMoved: the row that names
// the deputy is handed to another worker, and the coordinator crashes at
// once: its leases are held again within 2.5 lease durations.
func TestLivenessCoordinatorCrashesAfterTheDeputyRowMoved(t *testing.T) {
	t.Parallel()
	eachFleet(t, 3, []int{4}, func(t *testing.T, w *world, n int) {
		fleet, coord := settledFleet(t, w, n, 3*n)
		// Every row naming a deputy moves: an operator takes it and
		// releases it, so the coordinator takes it.
		ctx := context.Background()
		for _, l := range w.leases(t) {
			if !strings.HasPrefix(l.Note, "deputy ") {
				continue
			}
			op, err := w.store.Acquire(ctx, l.Key, "operator", l.Counter)
			require.NoError(t, err)
			_, err = w.store.Release(ctx, op)
			require.NoError(t, err)
		}
		time.Sleep(w.take / 2)
		lost := coord.c.Held()
		crashed := time.Now()
		coord.sw.Crash()
		waitFor(t, 10*w.lease, "the coordinator's leases held again", func() bool { return heldAgain(coords(fleet), lost) })
		took := time.Since(crashed)
		t.Logf("%s: held again %.2f L after the crash", w.name, float64(took)/float64(w.lease))
		assert.LessOrEqual(t, took, bound(w, 5*w.lease/2), "within 2.5 lease durations")
	})
}
