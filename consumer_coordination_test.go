package shardlease_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/balance"
	"github.com/shardlease/shardlease/internal/crash"
)

// coordStore is what both built-in stores are: every capability the
// consumer looks for.
type coordStore interface {
	fullStore
	shardlease.EventualLister
	shardlease.NoteStore
	shardlease.SessionStore
}

// readCounter is one worker's view of the world's store, every capability
// passed on, counting the worker's listings and single-row reads.
type readCounter struct {
	coordStore
	lists, gets atomic.Int64
}

func newReadCounter(t *testing.T, s shardlease.LeaseStore) *readCounter {
	fs, ok := s.(coordStore)
	require.True(t, ok, "%T keeps worker rows, lists eventually and carries notes", s)
	return &readCounter{coordStore: fs}
}

func (s *readCounter) List(ctx context.Context, stream string) ([]shardlease.Lease, error) {
	s.lists.Add(1)
	return s.coordStore.List(ctx, stream)
}

func (s *readCounter) ListWithWorkers(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	s.lists.Add(1)
	return s.coordStore.ListWithWorkers(ctx, stream)
}

func (s *readCounter) ListWithWorkersEventually(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	s.lists.Add(1)
	return s.coordStore.ListWithWorkersEventually(ctx, stream)
}

func (s *readCounter) GetEventually(ctx context.Context, k shardlease.LeaseKey) (shardlease.Lease, error) {
	s.gets.Add(1)
	return s.coordStore.GetEventually(ctx, k)
}

func (s *readCounter) ReadSession(ctx context.Context, stream, owner string) (shardlease.Worker, error) {
	s.gets.Add(1)
	return s.coordStore.ReadSession(ctx, stream, owner)
}

// coordWorker is a running worker with its read counter and crash switch.
type coordWorker struct {
	*worker
	reads *readCounter
	sw    *crash.Switch
}

// startCoordFleet starts n workers over the world's stream, each with its
// own read counter and crash switch, and waits until they are balanced.
func startCoordFleet(t *testing.T, w *world, n, shards int, h *handled, extra ...shardlease.Option) []*coordWorker {
	t.Helper()
	var out []*coordWorker
	for i := range n {
		name := fmt.Sprintf("w%d", i)
		rc := newReadCounter(t, w.store)
		sw := &crash.Switch{}
		wk := startWorker(t, w, crash.Kinesis(w.kin, sw), crash.Store(rc, sw), h.handler(name), w.opts(name, extra...)...)
		out = append(out, &coordWorker{worker: wk, reads: rc, sw: sw})
	}
	lo, hi := shards/n, (shards+n-1)/n
	waitFor(t, 20*w.lease, "the fleet balanced", func() bool { return balancedOver(t, w, shards, lo, hi, out) })
	return out
}

// balancedOver reports whether the live workers run every lease between
// them, as the table says, each between lo and hi.
func balancedOver(t *testing.T, w *world, shards, lo, hi int, fleet []*coordWorker) bool {
	tb := w.table(t)
	var live []*worker
	total := 0
	for _, cw := range fleet {
		if cw.sw.Down() {
			continue
		}
		live = append(live, cw.worker)
		n := len(cw.c.Held())
		if n < lo || n > hi {
			return false
		}
		total += n
	}
	return total == shards && tb.agrees(live...)
}

// coordinatorOf returns the live worker that runs the first shard's lease.
func coordinatorOf(fleet []*coordWorker) *coordWorker {
	for _, cw := range fleet {
		if cw.sw.Down() {
			continue
		}
		for _, s := range cw.c.Held() {
			if s == "shardId-000000000000" {
				return cw
			}
		}
	}
	return nil
}

// hasDeputy reports whether a row names a deputy for the first shard.
func hasDeputy(t *testing.T, w *world) bool {
	for _, l := range w.leases(t) {
		if n := balance.ParseNote(l.Note); n.Kind == balance.NoteDeputy && n.FirstOn(l.Key.Stream) == l.Key.Stream+":shardId-000000000000" {
			return true
		}
	}
	return false
}

// notCoordinating returns the first worker of fleet other than coord.
func notCoordinating(fleet []*coordWorker, coord *coordWorker) *coordWorker {
	for _, cw := range fleet {
		if cw != coord {
			return cw
		}
	}
	return nil
}

// heldAgain reports whether the live workers run every one of shards.
func heldAgain(fleet []*coordWorker, shards []string) bool {
	have := map[string]bool{}
	for _, cw := range fleet {
		if !cw.sw.Down() {
			for _, s := range cw.c.Held() {
				have[s] = true
			}
		}
	}
	for _, s := range shards {
		if !have[s] {
			return false
		}
	}
	return true
}

// readsOf returns each worker's listings and single-row reads so far.
func readsOf(fleet []*coordWorker) (lists, gets []int64) {
	for _, cw := range fleet {
		lists = append(lists, cw.reads.lists.Load())
		gets = append(gets, cw.reads.gets.Load())
	}
	return lists, gets
}

// settle waits until no worker but the coordinator listed for three take
// intervals: the workers finished taking and asking.
func settle(t *testing.T, w *world, fleet []*coordWorker, coord *coordWorker) {
	t.Helper()
	deadline := time.Now().Add(20 * w.lease)
	for {
		before, _ := readsOf(fleet)
		named := hasDeputy(t, w) // and seen by the deputy after three take intervals
		time.Sleep(3 * w.take)
		after, _ := readsOf(fleet)
		quiet := true
		for i, cw := range fleet {
			if cw != coord && after[i] != before[i] {
				quiet = false
			}
		}
		if quiet && named {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers other than the coordinator kept listing: %v -> %v", before, after)
		}
	}
}

// TestCoordinationOneWorkerLists: once balanced, the coordinator alone lists
// the table (about once a take interval), its two deputies alone read the
// coordinator's row (each about once a take interval), and every other
// worker reads nothing: reads do not grow with the fleet.
func TestCoordinationOneWorkerLists(t *testing.T) {
	t.Parallel()
	worlds(t, 12, func(t *testing.T, w *world) {
		// Pinned to per-lease renewals: it counts the deputies' looks, which sessions replace with the rota.
		w.extra = append(w.extra, shardlease.WithSessions(false))
		w.timed(t)
		h := newHandled()
		fleet := startCoordFleet(t, w, 4, 12, h)
		coord := coordinatorOf(fleet)
		require.NotNil(t, coord)
		settle(t, w, fleet, coord)

		l0, g0 := readsOf(fleet)
		var s0 []int64
		for _, cw := range fleet {
			s0 = append(s0, cw.c.Stats().TableListings)
		}
		const window = 10
		time.Sleep(window * w.take)
		l1, g1 := readsOf(fleet)
		for i, cw := range fleet {
			st := cw.c.Stats()
			assert.Equal(t, cw == coord, st.Coordinating, "%s: Stats().Coordinating", cw.c.OwnerID())
			if cw == coord {
				assert.GreaterOrEqual(t, st.TableListings-s0[i], int64(window/2), "the coordinator's listings are counted")
			} else if w.name == "fake" {
				assert.Equal(t, s0[i], st.TableListings, "%s listed nothing", cw.c.OwnerID())
			}
		}
		var otherLists, getters int64
		for i, cw := range fleet {
			lists, gets := l1[i]-l0[i], g1[i]-g0[i]
			t.Logf("%s: %d listings, %d row reads in %d take intervals", cw.c.OwnerID(), lists, gets, window)
			if cw == coord {
				assert.GreaterOrEqual(t, lists, int64(window/2), "the coordinator lists every take interval")
				assert.LessOrEqual(t, lists, int64(window+2))
				continue
			}
			otherLists += lists
			// A deputy reads the coordinator's row about once a take
			// interval; a quiet worker may make one backstop look.
			assert.LessOrEqual(t, gets, int64(window+window/2), "a deputy reads the coordinator's row about once a take interval")
			if gets >= window/2 {
				getters++
			}
		}
		if w.name == "fake" {
			assert.Zero(t, otherLists, "no worker but the coordinator lists")
		} else {
			// Real time on a shared machine: a late renewal may make the
			// deputy look once.
			assert.LessOrEqual(t, otherLists, int64(3), "no worker but the coordinator lists")
		}
		assert.Equal(t, int64(2), getters, "two deputies read the coordinator's row")
	})
}

// TestCoordinationCrashOfThePlainWorker: the coordinator takes the leases of
// a crashed worker when a lease duration has passed since it first saw
// their counters (within a lease duration and a take interval of the
// crash), then wakes the workers below their share until the fleet is
// balanced again.
func TestCoordinationCrashOfThePlainWorker(t *testing.T) {
	t.Parallel()
	worlds(t, 12, func(t *testing.T, w *world) {
		w.timed(t)
		h := newHandled()
		fleet := startCoordFleet(t, w, 4, 12, h)
		coord := coordinatorOf(fleet)
		settle(t, w, fleet, coord)
		victim := notCoordinating(fleet, coord)
		lost := victim.c.Held()
		crashed := time.Now()
		victim.sw.Crash()
		waitFor(t, 3*w.lease, "the crashed worker's leases held again", func() bool { return heldAgain(fleet, lost) })
		took := time.Since(crashed)
		t.Logf("%s: leases of the crashed worker held again after %v (lease %v, take %v)", w.name, took, w.lease, w.take)
		if w.name == "fake" {
			assert.LessOrEqual(t, took, w.lease+w.take+w.take/4, "taken within a lease duration and a take interval")
		}
		waitFor(t, 10*w.lease, "the three live workers balanced", func() bool { return balancedOver(t, w, 12, 4, 4, fleet) })
	})
}

// TestCoordinationCrashOfTheCoordinator: the deputy notices that the
// coordinator's lease stands still, lists, takes it when it expires and
// coordinates: every lease of the crashed coordinator is held again and the
// fleet balanced, with one coordinator listing.
func TestCoordinationCrashOfTheCoordinator(t *testing.T) {
	t.Parallel()
	worlds(t, 12, func(t *testing.T, w *world) {
		w.timed(t)
		h := newHandled()
		fleet := startCoordFleet(t, w, 4, 12, h)
		coord := coordinatorOf(fleet)
		settle(t, w, fleet, coord)
		crashed := time.Now()
		coord.sw.Crash()
		waitFor(t, 10*w.lease, "the three live workers balanced", func() bool { return balancedOver(t, w, 12, 4, 4, fleet) })
		t.Logf("%s: balanced again %v after the coordinator crashed (lease %v)", w.name, time.Since(crashed), w.lease)
		next := coordinatorOf(fleet)
		require.NotNil(t, next, "a live worker runs the first lease")
		settle(t, w, fleet, next)
		l0, _ := readsOf(fleet)
		time.Sleep(5 * w.take)
		l1, _ := readsOf(fleet)
		for i, cw := range fleet {
			if cw == next {
				assert.Greater(t, l1[i]-l0[i], int64(1), "the new coordinator lists")
			}
		}
	})
}

// TestCoordinationCoordinatorLeaves: a coordinator that shuts down releases
// its leases and its deputy takes them, the first one included, within a
// take interval.
func TestCoordinationCoordinatorLeaves(t *testing.T) {
	t.Parallel()
	worlds(t, 8, func(t *testing.T, w *world) {
		w.timed(t)
		h := newHandled()
		fleet := startCoordFleet(t, w, 2, 8, h)
		coord := coordinatorOf(fleet)
		settle(t, w, fleet, coord)
		other := notCoordinating(fleet, coord)
		require.NoError(t, coord.stop(t))
		coord.sw.Crash() // out of the fleet for balancedOver
		stopped := time.Now()
		waitFor(t, 5*w.lease, "the other worker runs every lease", func() bool { return len(other.c.Held()) == 8 })
		took := time.Since(stopped)
		t.Logf("%s: released leases held again %v after the coordinator stopped (take %v)", w.name, took, w.take)
		if w.name == "fake" {
			assert.LessOrEqual(t, took, w.take, "the deputy takes them within a take interval")
		}
		l0, _ := readsOf(fleet)
		time.Sleep(3 * w.take)
		l1, _ := readsOf(fleet)
		assert.Greater(t, l1[1]-l0[1]+l1[0]-l0[0], int64(1), "the worker left coordinates: it lists")
	})
}

// notelessStore hides the store's notes: every worker lists each take
// interval, as before coordination.
type notelessStore struct {
	shardlease.LeaseStore
	shardlease.WorkerStore
	lists atomic.Int64
}

func (s *notelessStore) ListWithWorkers(ctx context.Context, stream string) ([]shardlease.Lease, []shardlease.Worker, error) {
	s.lists.Add(1)
	return s.WorkerStore.ListWithWorkers(ctx, stream)
}

// TestCoordinationNeedsNotes: with a store that carries no notes, every
// worker lists each take interval (nobody could wake it).
func TestCoordinationNeedsNotes(t *testing.T) {
	t.Parallel()
	worlds(t, 6, func(t *testing.T, w *world) {
		w.timed(t)
		h := newHandled()
		var stores []*notelessStore
		for i := range 3 {
			ns := &notelessStore{LeaseStore: w.store, WorkerStore: w.store.(shardlease.WorkerStore)}
			stores = append(stores, ns)
			name := fmt.Sprintf("w%d", i)
			startWorker(t, w, w.kin, ns, h.handler(name), w.opts(name)...)
		}
		waitFor(t, 20*w.lease, "every lease held", func() bool {
			for _, o := range w.table(t).owners() {
				if o == "" {
					return false
				}
			}
			return true
		})
		before := make([]int64, len(stores))
		for i, s := range stores {
			before[i] = s.lists.Load()
		}
		time.Sleep(6 * w.take)
		for i, s := range stores {
			assert.GreaterOrEqual(t, s.lists.Load()-before[i], int64(3), "worker %d lists every take interval", i)
		}
	})
}

// TestCoordinationFleetRestartedTogether: after every worker stopped (its
// leases released, so the rows are not new), workers started together still
// take their shares in their first round: the one that wins the first lease
// takes beyond its share only from its second round on, as coordinator.
func TestCoordinationFleetRestartedTogether(t *testing.T) {
	t.Parallel()
	worlds(t, 16, func(t *testing.T, w *world) {
		w.timed(t)
		h := newHandled()
		z := startWorker(t, w, w.kin, w.store, h.handler("z"), w.manyOpts("z")...)
		waitSettled(t, w, 10*w.take, []int{16}, z)
		require.NoError(t, z.stop(t))
		for _, l := range w.leases(t) {
			require.Empty(t, l.Owner, "%s released", l.Key.Shard)
			require.Positive(t, l.Counter)
		}
		var ws []*worker
		for _, name := range []string{"c", "b", "a"} {
			ws = append(ws, startWorker(t, w, w.kin, w.store, h.handler(name), w.manyOpts(name)...))
		}
		took := waitSettled(t, w, 10*w.take, []int{5, 5, 6}, ws...)
		t.Logf("%s: balanced %v after the restart (take interval %v)", w.name, took, w.take)
		if w.name == "fake" {
			assert.Less(t, took, w.take, "balanced by the first take round")
			for _, wk := range ws {
				assert.Zero(t, wk.c.Stats().LeasesHandedIn, "%s: nothing moved by handoff", wk.c.OwnerID())
			}
		}
	})
}

// TestCoordinationCoordinatorCrashesEarly: a coordinator that crashes the
// moment the fleet is balanced, before its deputy can have read its naming,
// is noticed by the workers that stopped listing without a deputy in sight:
// they watch the first lease for a while, as the deputy would.
func TestCoordinationCoordinatorCrashesEarly(t *testing.T) {
	t.Parallel()
	worlds(t, 16, func(t *testing.T, w *world) {
		w.timed(t)
		h := newHandled()
		fleet := startCoordFleet(t, w, 4, 16, h)
		coord := coordinatorOf(fleet)
		require.NotNil(t, coord)
		lost := coord.c.Held()
		crashed := time.Now()
		coord.sw.Crash()
		waitFor(t, 3*w.lease, "the coordinator's leases held again", func() bool { return heldAgain(fleet, lost) })
		t.Logf("%s: the coordinator's leases held again %v after it crashed (lease %v)", w.name, time.Since(crashed), w.lease)
		if w.name == "fake" {
			assert.LessOrEqual(t, time.Since(crashed), 5*w.lease/2, "within 2.5 lease durations")
		}
	})
}

// TestCoordinationQuietWorkerFinishesAShard: a worker that does not list
// reads a shard to its end after a split; it makes its children's rows and
// takes them at once instead of leaving them to the coordinator's next
// shard sync (here an hour away), so no record on the children waits.
func TestCoordinationQuietWorkerFinishesAShard(t *testing.T) {
	t.Parallel()
	worlds(t, 4, func(t *testing.T, w *world) {
		w.timed(t)
		h := newHandled()
		p := &produced{}
		fleet := startCoordFleet(t, w, 2, 4, h, shardlease.WithShardSyncInterval(time.Hour))
		coord := coordinatorOf(fleet)
		require.NotNil(t, coord)
		settle(t, w, fleet, coord)
		quiet := notCoordinating(fleet, coord)
		parent := quiet.c.Held()[0]
		w.put(t, p, 20, 256)
		children := w.split(t, parent)
		// Until both children have records (the stream routes to them once
		// the split is done).
		onChildren := func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return len(p.byShard[children[0]]) > 0 && len(p.byShard[children[1]]) > 0
		}
		for range 50 {
			if onChildren() {
				break
			}
			w.put(t, p, 10, 256)
		}
		require.True(t, onChildren(), "records were put on both children")
		waitFor(t, 10*w.lease, "every record handled, the children's included", func() bool { return h.distinct() == p.count() })
		assert.Empty(t, h.lost(p))
		requireKeyOrder(t, p, h)
	})
}

// TestCoordinationCoordinatorAtItsCap: a coordinator that may hold no more
// (WithMaxLeases) cannot take a crashed worker's leases itself; it wakes the
// workers below their share, which list until the leases expire for them
// and take them.
func TestCoordinationCoordinatorAtItsCap(t *testing.T) {
	t.Parallel()
	worlds(t, 12, func(t *testing.T, w *world) {
		w.timed(t)
		h := newHandled()
		fleet := startCoordFleet(t, w, 3, 12, h, shardlease.WithMaxLeases(5))
		coord := coordinatorOf(fleet)
		settle(t, w, fleet, coord)
		victim := notCoordinating(fleet, coord)
		victim.sw.Crash()
		// 10 of the 12 can be held (two workers of at most 5 each), and
		// no worker ever holds more than 5.
		most := 0
		waitFor(t, 5*w.lease, "both live workers at their cap", func() bool {
			for _, cw := range fleet {
				most = max(most, len(cw.c.Held()))
			}
			return balancedOver(t, w, 10, 5, 5, fleet)
		})
		assert.LessOrEqual(t, most, 5, "WithMaxLeases(5) holds while the coordinator takes over")
	})
}

// TestCoordinationNoteEditedByHand: a lease_note an operator edited into a
// number makes the row corrupt, with an error that names the table, the row
// and the attribute and says what to do; a note edited into text the
// consumer does not know is ignored (the lease is renewed as before).
func TestCoordinationNoteEditedByHand(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator")
	}
	client, table := dynamoTable(t)
	ctx := t.Context()
	store, err := shardlease.NewDynamoStore(client, table)
	require.NoError(t, err)
	key := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
	_, err = store.Create(ctx, key, nil)
	require.NoError(t, err)
	held, err := store.Acquire(ctx, key, "w1", 0)
	require.NoError(t, err)
	edit := func(note types.AttributeValue) {
		_, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: map[string]types.AttributeValue{"lease_key": &types.AttributeValueMemberS{Value: key.String()}},
			UpdateExpression: aws.String("SET lease_note = :n"), ExpressionAttributeValues: map[string]types.AttributeValue{":n": note},
		})
		require.NoError(t, err)
	}

	edit(&types.AttributeValueMemberS{Value: "please hand this over"})
	renewed, err := store.Renew(ctx, held, time.Now())
	require.NoError(t, err, "a note the consumer does not know leaves the lease alone")
	assert.Equal(t, "please hand this over", renewed.Note)

	edit(&types.AttributeValueMemberN{Value: "7"})
	_, err = store.Get(ctx, key)
	requireMessage(t, err, shardlease.ErrCorruptLease, "table "+table, `"orders:shardId-000000000000"`, "attribute lease_note is a number, want a string", "fix the attribute by hand or delete the row")
}
