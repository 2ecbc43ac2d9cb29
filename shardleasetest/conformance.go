package shardleasetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

var streamSeq atomic.Int64

// uniqueStream returns a stream name no other subtest of this process uses.
func uniqueStream(t *testing.T) string {
	return fmt.Sprintf("st%d-%d", time.Now().UnixNano()%1_000_000_007, streamSeq.Add(1))
}

const firstShard = "shardId-000000000000"

// RunStoreConformance is the conformance suite every LeaseStore must pass:
// it runs each of its named subtests, in parallel, against a store that
// newStore returns. The subtests isolate themselves by stream name, so
// newStore may return one store (one table) for all of them.
//
// It checks the contract [shardlease.LeaseStore] documents: idempotent
// creation, the fencing counter on every write, stale holders refused,
// checkpoints, handoffs and cancelled contexts. Each optional capability a
// store may implement has subtests of its own (WorkerStore, EventualLister,
// NoteStore, LineageStore, IdentityStore, Rewinder, GroupLister,
// StreamRemover, HandoffWithdrawer, TableChecker, SessionStore,
// PackedCheckpointStore), and so has the lag a
// holder's writes carry (HolderLag); each skips, saying why, a store without
// its capability. Run one subtest with go test -run 'TestName/AcquireFree'.
func RunStoreConformance(t *testing.T, newStore func(t *testing.T) shardlease.LeaseStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s shardlease.LeaseStore)
	}{
		{"CreateIsIdempotent", testCreateIsIdempotent},
		{"CreateRejectsBadKey", testCreateRejectsBadKey},
		{"GetMissing", testGetMissing},
		{"AcquireFree", testAcquireFree},
		{"AcquireMissing", testAcquireMissing},
		{"AcquireHeldFails", testAcquireHeldFails},
		{"AcquireObservedCounterSucceedsOnce", testAcquireObservedOnce},
		{"ConcurrentAcquireOneWins", testConcurrentAcquire},
		{"ConcurrentStealOneWins", testConcurrentSteal},
		{"EveryWriteBumpsCounter", testEveryWriteBumps},
		{"StaleHolderRefused", testStaleHolderRefused},
		{"ABA", testABA},
		{"RepeatedWriteIsOwnWrite", testRepeatedWrite},
		{"ReleaseTwiceIsHarmless", testReleaseTwice},
		{"CheckpointSurvivesReleaseAndReacquire", testCheckpointSurvives},
		{"CheckpointRejectsBadValue", testCheckpointRejectsBadValue},
		{"WriteToMissingRowIsLost", testWriteToMissingRow},
		{"ListScopedToStream", testListScoped},
		{"ListManyRows", testListMany},
		{"ParentsRoundTrip", testParents},
		{"Handoff", testHandoff},
		{"HandoffRefusedWhenPendingOrMoved", testHandoffRefused},
		{"AcquireClearsHandoff", testAcquireClearsHandoff},
		{"ContextCancelled", testContextCancelled},
		{"HolderLeaseDurationOnRow", testHolderDuration},
		{"WorkerHeartbeatCreatesThenBumps", workers(testWorkerHeartbeat)},
		{"WorkerConcurrentHeartbeatsAllCount", workers(testWorkerConcurrentHeartbeats)},
		{"WorkerListWithWorkersMatchesList", workers(testWorkerListMatchesList)},
		{"WorkerRowsNotInList", workers(testWorkerRowsNotInList)},
		{"WorkerListScopedToStream", workers(testWorkerListScoped)},
		{"WorkerTwoOwnersSortedByOwner", workers(testWorkerTwoOwners)},
		{"WorkerRemoveCurrentCounter", workers(testWorkerRemoveCurrent)},
		{"WorkerRemoveStaleCounter", workers(testWorkerRemoveStale)},
		{"WorkerRemoveMissing", workers(testWorkerRemoveMissing)},
		{"WorkerRemoveLeavesOtherRows", workers(testWorkerRemoveLeavesOthers)},
		{"WorkerRejectsBadInput", workers(testWorkerBadInput)},
		{"WorkerContextCancelled", workers(testWorkerContextCancelled)},
	}
	tests = append(tests, lineageTests...)
	tests = append(tests, noteTests...)
	tests = append(tests, rewindTests...)
	tests = append(tests, capTests...)
	tests = append(tests, sessionTests...)
	tests = append(tests, packedTests...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// workers adapts a worker-row subtest: it runs only against a store that
// implements shardlease.WorkerStore and is skipped for one that does not.
// (The built-in stores both implement it; their conformance test asserts so,
// so these subtests never skip for them.)
func workers(fn func(t *testing.T, s shardlease.LeaseStore, ws shardlease.WorkerStore)) func(t *testing.T, s shardlease.LeaseStore) {
	return func(t *testing.T, s shardlease.LeaseStore) {
		ws, ok := s.(shardlease.WorkerStore)
		if !ok {
			t.Skipf("%T does not implement shardlease.WorkerStore", s)
		}
		fn(t, s, ws)
	}
}

func key(t *testing.T) shardlease.LeaseKey {
	return shardlease.LeaseKey{Stream: uniqueStream(t), Shard: firstShard}
}

// fresh creates a free row and returns its key.
func fresh(t *testing.T, s shardlease.LeaseStore) shardlease.LeaseKey {
	k := key(t)
	created, err := s.Create(t.Context(), k, nil)
	require.NoError(t, err)
	require.True(t, created)
	return k
}

func acquire(t *testing.T, s shardlease.LeaseStore, k shardlease.LeaseKey, owner string) shardlease.Lease {
	cur, err := s.Get(t.Context(), k)
	require.NoError(t, err)
	l, err := s.Acquire(t.Context(), k, owner, cur.Counter)
	require.NoError(t, err)
	return l
}

var expiry = time.UnixMilli(1_700_000_000_123)

func testCreateIsIdempotent(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, k, got.Key)
	assert.Empty(t, got.Owner)
	assert.False(t, got.Held())
	assert.Empty(t, got.Checkpoint)
	assert.Equal(t, int64(-1), got.SubSequence)

	held := acquire(t, s, k, "a")
	created, err := s.Create(ctx, k, []string{"shardId-000000000009"})
	require.NoError(t, err)
	assert.False(t, created, "second create reports the row existed")
	after, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, held.Owner, after.Owner, "create must not touch an existing row")
	assert.Equal(t, held.Counter, after.Counter)
	assert.Empty(t, after.Parents)
}

func testCreateRejectsBadKey(t *testing.T, s shardlease.LeaseStore) {
	for _, k := range []shardlease.LeaseKey{
		{Stream: "", Shard: firstShard},
		{Stream: "has:colon", Shard: firstShard},
		{Stream: "ok", Shard: ""},
		{Stream: "sp ace", Shard: firstShard},
	} {
		_, err := s.Create(t.Context(), k, nil)
		require.Error(t, err, "key %q", k)
		assert.ErrorIs(t, err, shardlease.ErrInvalidName, "key %q", k)
	}
}

func testGetMissing(t *testing.T, s shardlease.LeaseStore) {
	_, err := s.Get(t.Context(), key(t))
	assert.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
	var le *shardlease.LeaseError
	assert.ErrorAs(t, err, &le)
}

func testAcquireFree(t *testing.T, s shardlease.LeaseStore) {
	k := fresh(t, s)
	before, err := s.Get(t.Context(), k)
	require.NoError(t, err)
	// A free lease is taken at once whatever counter the caller observed.
	l, err := s.Acquire(t.Context(), k, "a", before.Counter+42)
	require.NoError(t, err)
	assert.Equal(t, "a", l.Owner)
	assert.Greater(t, l.Counter, before.Counter, "an acquire moves the counter up (by one, or more to pass a fence floor)")
	got, err := s.Get(t.Context(), k)
	require.NoError(t, err)
	assert.Equal(t, l.Owner, got.Owner)
	assert.Equal(t, l.Counter, got.Counter)
}

func testAcquireMissing(t *testing.T, s shardlease.LeaseStore) {
	_, err := s.Acquire(t.Context(), key(t), "a", 0)
	assert.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
}

func testAcquireHeldFails(t *testing.T, s shardlease.LeaseStore) {
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	_, err := s.Acquire(t.Context(), k, "b", a.Counter-1)
	require.ErrorIs(t, err, shardlease.ErrLeaseHeld)
	assert.NotErrorIs(t, err, shardlease.ErrLeaseLost)
	var le *shardlease.LeaseError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, k, le.Key)
	got, err := s.Get(t.Context(), k)
	require.NoError(t, err)
	assert.Equal(t, "a", got.Owner)
	assert.Equal(t, a.Counter, got.Counter, "a refused acquire writes nothing")
}

func testAcquireObservedOnce(t *testing.T, s shardlease.LeaseStore) {
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	b, err := s.Acquire(t.Context(), k, "b", a.Counter)
	require.NoError(t, err)
	assert.Equal(t, "b", b.Owner)
	assert.Greater(t, b.Counter, a.Counter)
	_, err = s.Acquire(t.Context(), k, "c", a.Counter)
	assert.ErrorIs(t, err, shardlease.ErrLeaseHeld, "the observed counter is spent")
}

func race(t *testing.T, s shardlease.LeaseStore, k shardlease.LeaseKey, observed int64) {
	const n = 16
	var wins atomic.Int32
	var winner atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			owner := fmt.Sprintf("w%d", i)
			_, err := s.Acquire(t.Context(), k, owner, observed)
			if err == nil {
				wins.Add(1)
				winner.Store(owner)
				return
			}
			assert.ErrorIs(t, err, shardlease.ErrLeaseHeld)
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, int32(1), wins.Load(), "exactly one of %d acquirers wins", n)
	got, err := s.Get(t.Context(), k)
	require.NoError(t, err)
	assert.Equal(t, winner.Load(), got.Owner)
}

func testConcurrentAcquire(t *testing.T, s shardlease.LeaseStore) {
	k := fresh(t, s)
	cur, err := s.Get(t.Context(), k)
	require.NoError(t, err)
	race(t, s, k, cur.Counter)
}

func testConcurrentSteal(t *testing.T, s shardlease.LeaseStore) {
	k := fresh(t, s)
	a := acquire(t, s, k, "dead")
	race(t, s, k, a.Counter)
}

func testEveryWriteBumps(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	l := acquire(t, s, k, "a")
	steps := []func(shardlease.Lease) (shardlease.Lease, error){
		func(h shardlease.Lease) (shardlease.Lease, error) { return s.Renew(ctx, h, expiry) },
		func(h shardlease.Lease) (shardlease.Lease, error) {
			return s.Checkpoint(ctx, h, "49590338271490256608559692538361571095921575989136588898", -1, expiry)
		},
		func(h shardlease.Lease) (shardlease.Lease, error) { return s.Renew(ctx, h, expiry.Add(time.Second)) },
		func(h shardlease.Lease) (shardlease.Lease, error) { return s.Release(ctx, h) },
	}
	for i, step := range steps {
		next, err := step(l)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, l.Counter+1, next.Counter, "step %d bumps the counter by one", i)
		got, err := s.Get(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, next.Counter, got.Counter, "step %d returns the row as written", i)
		assert.Equal(t, next.Owner, got.Owner)
		assert.Equal(t, next.Checkpoint, got.Checkpoint)
		l = next
	}
	renewed, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Empty(t, renewed.Owner)
}

func testStaleHolderRefused(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	b, err := s.Acquire(ctx, k, "b", a.Counter)
	require.NoError(t, err)

	_, err = s.Renew(ctx, a, expiry)
	assert.ErrorIs(t, err, shardlease.ErrLeaseLost)
	_, err = s.Checkpoint(ctx, a, "100", -1, expiry)
	assert.ErrorIs(t, err, shardlease.ErrLeaseLost)
	_, err = s.Release(ctx, a)
	assert.ErrorIs(t, err, shardlease.ErrLeaseLost)
	var le *shardlease.LeaseError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, k, le.Key)

	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, b.Owner, got.Owner)
	assert.Equal(t, b.Counter, got.Counter, "refused writes change nothing")
	assert.Empty(t, got.Checkpoint, "the stale checkpoint was not written")
}

func testABA(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	a1 := acquire(t, s, k, "a")
	b, err := s.Acquire(ctx, k, "b", a1.Counter)
	require.NoError(t, err)
	a2, err := s.Acquire(ctx, k, "a", b.Counter)
	require.NoError(t, err)
	require.Equal(t, "a", a2.Owner)

	_, err = s.Checkpoint(ctx, a1, "100", -1, expiry)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost, "the first handle is stale although the owner is a again")
	_, err = s.Renew(ctx, a1, expiry)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost)
	_, err = s.Release(ctx, a1)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost)

	a3, err := s.Checkpoint(ctx, a2, "200", -1, expiry)
	require.NoError(t, err, "the current handle still works")
	assert.Equal(t, "200", a3.Checkpoint)
}

func testReleaseTwice(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	r1, err := s.Release(ctx, a)
	require.NoError(t, err)
	assert.Empty(t, r1.Owner)
	r2, err := s.Release(ctx, a)
	require.NoError(t, err, "releasing a free lease again is harmless")
	assert.Empty(t, r2.Owner)
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Empty(t, got.Owner)
	assert.Equal(t, r1.Counter, got.Counter, "the second release writes nothing")

	// Once somebody else holds it, a stale release is refused.
	b := acquire(t, s, k, "b")
	_, err = s.Release(ctx, a)
	assert.ErrorIs(t, err, shardlease.ErrLeaseLost)
	got, err = s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, b.Owner, got.Owner)
}

func testCheckpointSurvives(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	a, err := s.Checkpoint(ctx, a, "12345", 7, expiry)
	require.NoError(t, err)
	assert.Equal(t, "12345", a.Checkpoint)
	assert.Equal(t, int64(7), a.SubSequence)
	a, err = s.Renew(ctx, a, expiry)
	require.NoError(t, err)
	assert.Equal(t, "12345", a.Checkpoint, "renew keeps the checkpoint")
	assert.Equal(t, int64(7), a.SubSequence)
	_, err = s.Release(ctx, a)
	require.NoError(t, err)
	b := acquire(t, s, k, "b")
	assert.Equal(t, "12345", b.Checkpoint)
	assert.Equal(t, int64(7), b.SubSequence)

	b, err = s.Checkpoint(ctx, b, "12346", -1, expiry)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), b.SubSequence, "a whole-record checkpoint clears the sub-sequence")
	b, err = s.Checkpoint(ctx, b, shardlease.ShardEnd, -1, expiry)
	require.NoError(t, err)
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, shardlease.ShardEnd, got.Checkpoint)
	assert.Equal(t, b.Counter, got.Counter)
}

func testCheckpointRejectsBadValue(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	for _, cp := range []string{"", "abc", "12 3", "-5"} {
		_, err := s.Checkpoint(ctx, a, cp, -1, expiry)
		assert.ErrorIs(t, err, shardlease.ErrInvalidConfig, "checkpoint %q", cp)
	}
	_, err := s.Checkpoint(ctx, a, "5", -2, expiry)
	assert.ErrorIs(t, err, shardlease.ErrInvalidConfig)
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, a.Counter, got.Counter, "a refused checkpoint writes nothing")
}

func testWriteToMissingRow(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	ghost := shardlease.Lease{Key: key(t), Owner: "a", Counter: 3}
	_, err := s.Renew(ctx, ghost, expiry)
	assert.ErrorIs(t, err, shardlease.ErrLeaseLost)
	_, err = s.Checkpoint(ctx, ghost, "1", -1, expiry)
	assert.ErrorIs(t, err, shardlease.ErrLeaseLost)
	_, err = s.Get(ctx, ghost.Key)
	assert.ErrorIs(t, err, shardlease.ErrLeaseNotFound, "a refused write does not create the row")
}

func testListScoped(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	base := uniqueStream(t)
	streams := []string{base, base + "b", base + ".b", base + "-1", "x" + base}
	for i, st := range streams {
		for j := range i + 1 {
			_, err := s.Create(ctx, shardlease.LeaseKey{Stream: st, Shard: fmt.Sprintf("shardId-%012d", 2-j)}, nil)
			require.NoError(t, err)
		}
	}
	for i, st := range streams {
		got, err := s.List(ctx, st)
		require.NoError(t, err)
		require.Len(t, got, i+1, "stream %q sees only its own rows", st)
		for j, l := range got {
			assert.Equal(t, st, l.Key.Stream)
			if j > 0 {
				assert.Less(t, got[j-1].Key.Shard, l.Key.Shard, "ordered by shard id")
			}
		}
	}
	none, err := s.List(ctx, uniqueStream(t))
	require.NoError(t, err)
	assert.Empty(t, none)
	_, err = s.List(ctx, "bad:name")
	assert.ErrorIs(t, err, shardlease.ErrInvalidName)
}

func testListMany(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	st := uniqueStream(t)
	const n = 120
	for i := range n {
		_, err := s.Create(ctx, shardlease.LeaseKey{Stream: st, Shard: fmt.Sprintf("shardId-%012d", i)}, nil)
		require.NoError(t, err)
	}
	got, err := s.List(ctx, st)
	require.NoError(t, err)
	require.Len(t, got, n)
	for i, l := range got {
		assert.Equal(t, fmt.Sprintf("shardId-%012d", i), l.Key.Shard)
	}
}

func testParents(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := key(t)
	parents := []string{"shardId-000000000002", "shardId-000000000001"}
	created, err := s.Create(ctx, k, parents)
	require.NoError(t, err)
	require.True(t, created)
	want := []string{"shardId-000000000001", "shardId-000000000002"}
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, want, got.Parents, "parents come back sorted")
	list, err := s.List(ctx, k.Stream)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, want, list[0].Parents)
	a := acquire(t, s, k, "a")
	assert.Equal(t, want, a.Parents, "writes keep the parents")
	parents[0] = "mutated"
	got, err = s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, want, got.Parents, "the store keeps its own copy")
}

func testHandoff(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	seen, err := s.Get(ctx, k)
	require.NoError(t, err)

	marked, err := s.RequestHandoff(ctx, seen, "b")
	require.NoError(t, err)
	assert.Equal(t, "b", marked.HandoffTo)
	assert.Equal(t, a.Counter, marked.Counter, "a handoff request does not bump the counter")

	// The holder's handle is still good; its renewal shows the request.
	a, err = s.Renew(ctx, a, expiry)
	require.NoError(t, err)
	assert.Equal(t, "b", a.HandoffTo)
	a, err = s.Checkpoint(ctx, a, "777", -1, expiry)
	require.NoError(t, err)
	released, err := s.Release(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, "b", released.Owner, "release hands the lease to the taker")
	assert.Empty(t, released.HandoffTo)

	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, "b", got.Owner)
	assert.Equal(t, "777", got.Checkpoint)
	b, err := s.Renew(ctx, got, expiry)
	require.NoError(t, err, "the taker holds the lease at the counter it reads")
	assert.Equal(t, "b", b.Owner)
	_, err = s.Renew(ctx, a, expiry)
	assert.ErrorIs(t, err, shardlease.ErrLeaseLost)
}

func testHandoffRefused(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	free, err := s.Get(ctx, k)
	require.NoError(t, err)
	_, err = s.RequestHandoff(ctx, shardlease.Lease{Key: k, Owner: "a", Counter: free.Counter}, "b")
	assert.ErrorIs(t, err, shardlease.ErrLeaseHeld, "nobody holds it to hand it over")

	a := acquire(t, s, k, "a")
	_, err = s.RequestHandoff(ctx, a, "b")
	require.NoError(t, err)
	_, err = s.RequestHandoff(ctx, a, "c")
	assert.ErrorIs(t, err, shardlease.ErrLeaseHeld, "one pending handoff at a time")

	_, err = s.RequestHandoff(ctx, shardlease.Lease{Key: key(t), Owner: "a"}, "b")
	assert.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
}

func testAcquireClearsHandoff(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	_, err := s.RequestHandoff(ctx, a, "b")
	require.NoError(t, err)
	// The holder never answered; the taker acquires the ordinary way.
	b, err := s.Acquire(ctx, k, "b", a.Counter)
	require.NoError(t, err)
	assert.Empty(t, b.HandoffTo)
	released, err := s.Release(ctx, b)
	require.NoError(t, err)
	assert.Empty(t, released.Owner, "no stale handoff survives to redirect a release")
}

func testContextCancelled(t *testing.T, s shardlease.LeaseStore) {
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls := map[string]func() error{
		"create": func() error { _, err := s.Create(ctx, key(t), nil); return err },
		"get":    func() error { _, err := s.Get(ctx, k); return err },
		"list":   func() error { _, err := s.List(ctx, k.Stream); return err },
		"acquire": func() error {
			_, err := s.Acquire(ctx, k, "b", a.Counter)
			return err
		},
		"renew":      func() error { _, err := s.Renew(ctx, a, expiry); return err },
		"checkpoint": func() error { _, err := s.Checkpoint(ctx, a, "1", -1, expiry); return err },
		"release":    func() error { _, err := s.Release(ctx, a); return err },
		"handoff":    func() error { _, err := s.RequestHandoff(ctx, a, "b"); return err },
	}
	for name, call := range calls {
		err := call()
		require.Error(t, err, name)
		assert.True(t, errors.Is(err, context.Canceled), "%s: %v", name, err)
	}
	got, err := s.Get(t.Context(), k)
	require.NoError(t, err)
	assert.Equal(t, a.Owner, got.Owner)
	assert.Equal(t, a.Counter, got.Counter, "no call with a cancelled context wrote")
}

// testRepeatedWrite: a holder's write sent again unchanged after it landed
// (its reply was lost) is recognised as the holder's own write and not
// applied twice; a different write under the same old handle is refused.
func testRepeatedWrite(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	a := acquire(t, s, k, "a")

	r1, err := s.Renew(ctx, a, expiry)
	require.NoError(t, err)
	r2, err := s.Renew(ctx, a, expiry)
	require.NoError(t, err, "the same renewal again is the holder's own write")
	assert.Equal(t, r1.Counter, r2.Counter, "not applied twice")
	_, err = s.Renew(ctx, a, expiry.Add(time.Second))
	require.ErrorIs(t, err, shardlease.ErrLeaseLost, "another renewal under the old handle")

	c1, err := s.Checkpoint(ctx, r1, "100", -1, expiry)
	require.NoError(t, err)
	c2, err := s.Checkpoint(ctx, r1, "100", -1, expiry)
	require.NoError(t, err, "the same checkpoint again is the holder's own write")
	assert.Equal(t, c1.Counter, c2.Counter)
	assert.Equal(t, "100", c2.Checkpoint)
	_, err = s.Checkpoint(ctx, r1, "200", -1, expiry)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost, "another checkpoint under the old handle")

	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, c1.Counter, got.Counter)
	assert.Equal(t, "100", got.Checkpoint)
}

// workersOf returns the stream's worker rows as ListWithWorkers sees them.
func workersOf(t *testing.T, ws shardlease.WorkerStore, st string) []shardlease.Worker {
	t.Helper()
	_, w, err := ws.ListWithWorkers(t.Context(), st)
	require.NoError(t, err)
	return w
}

func testWorkerHeartbeat(t *testing.T, _ shardlease.LeaseStore, ws shardlease.WorkerStore) {
	ctx := t.Context()
	st := uniqueStream(t)
	w1, err := ws.Heartbeat(ctx, st, "w1")
	require.NoError(t, err)
	assert.Equal(t, shardlease.Worker{Stream: st, Owner: "w1", Counter: 1}, w1, "the first heartbeat creates the row at counter 1")
	assert.Equal(t, st+":@w1", w1.Key())
	assert.Equal(t, []shardlease.Worker{w1}, workersOf(t, ws, st))

	w2, err := ws.Heartbeat(ctx, st, "w1")
	require.NoError(t, err)
	assert.Equal(t, shardlease.Worker{Stream: st, Owner: "w1", Counter: 2}, w2, "the next heartbeat bumps the counter by one")
	assert.Equal(t, []shardlease.Worker{w2}, workersOf(t, ws, st), "still one row, as written")
}

func testWorkerConcurrentHeartbeats(t *testing.T, _ shardlease.LeaseStore, ws shardlease.WorkerStore) {
	st := uniqueStream(t)
	const n = 16
	var wg sync.WaitGroup
	counters := make([]int64, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			w, err := ws.Heartbeat(t.Context(), st, "w1")
			if assert.NoError(t, err) {
				counters[i] = w.Counter
			}
		})
	}
	close(start)
	wg.Wait()
	slices.Sort(counters)
	want := make([]int64, n)
	for i := range want {
		want[i] = int64(i + 1)
	}
	assert.Equal(t, want, counters, "every heartbeat bumps once and sees its own counter")
	assert.Equal(t, []shardlease.Worker{{Stream: st, Owner: "w1", Counter: n}}, workersOf(t, ws, st))
}

func testWorkerListMatchesList(t *testing.T, s shardlease.LeaseStore, ws shardlease.WorkerStore) {
	ctx := t.Context()
	st := uniqueStream(t)
	for i := range 3 {
		_, err := s.Create(ctx, shardlease.LeaseKey{Stream: st, Shard: fmt.Sprintf("shardId-%012d", 2-i)}, []string{"shardId-000000000009"})
		require.NoError(t, err)
	}
	held := acquire(t, s, shardlease.LeaseKey{Stream: st, Shard: "shardId-000000000001"}, "a")
	_, err := s.Checkpoint(ctx, held, "123", 4, expiry)
	require.NoError(t, err)
	w, err := ws.Heartbeat(ctx, st, "idle")
	require.NoError(t, err)

	list, err := s.List(ctx, st)
	require.NoError(t, err)
	require.Len(t, list, 3)
	leases, workers, err := ws.ListWithWorkers(ctx, st)
	require.NoError(t, err)
	assert.Equal(t, list, leases, "ListWithWorkers returns what List returns")
	assert.Equal(t, []shardlease.Worker{w}, workers)
	if el, ok := s.(shardlease.EventualLister); ok {
		// The emulator and MemoryStore are always current: the eventually
		// consistent listing returns the same rows.
		leases, workers, err := el.ListWithWorkersEventually(ctx, st)
		require.NoError(t, err)
		assert.Equal(t, list, leases, "ListWithWorkersEventually returns what List returns")
		assert.Equal(t, []shardlease.Worker{w}, workers)
	}

	// A stream with leases and no worker rows, and one with neither.
	other := uniqueStream(t)
	_, err = s.Create(ctx, shardlease.LeaseKey{Stream: other, Shard: firstShard}, nil)
	require.NoError(t, err)
	leases, workers, err = ws.ListWithWorkers(ctx, other)
	require.NoError(t, err)
	require.Len(t, leases, 1)
	assert.Equal(t, firstShard, leases[0].Key.Shard)
	assert.Empty(t, workers)
	leases, workers, err = ws.ListWithWorkers(ctx, uniqueStream(t))
	require.NoError(t, err)
	assert.Empty(t, leases)
	assert.Empty(t, workers)
}

func testWorkerRowsNotInList(t *testing.T, s shardlease.LeaseStore, ws shardlease.WorkerStore) {
	ctx := t.Context()
	st := uniqueStream(t)
	_, err := ws.Heartbeat(ctx, st, "w1")
	require.NoError(t, err)
	list, err := s.List(ctx, st)
	require.NoError(t, err)
	assert.Empty(t, list, "a stream with only a worker row lists no lease")

	k := shardlease.LeaseKey{Stream: st, Shard: firstShard}
	_, err = s.Create(ctx, k, nil)
	require.NoError(t, err)
	_, err = ws.Heartbeat(ctx, st, "w2")
	require.NoError(t, err)
	list, err = s.List(ctx, st)
	require.NoError(t, err)
	require.Len(t, list, 1, "List returns the lease and no worker row")
	assert.Equal(t, k, list[0].Key)
	leases, workers, err := ws.ListWithWorkers(ctx, st)
	require.NoError(t, err)
	assert.Equal(t, list, leases)
	assert.Len(t, workers, 2)

	_, err = s.Get(ctx, shardlease.LeaseKey{Stream: st, Shard: "w1"})
	assert.ErrorIs(t, err, shardlease.ErrLeaseNotFound, "a worker row is not a lease named by its owner")
}

func testWorkerListScoped(t *testing.T, s shardlease.LeaseStore, ws shardlease.WorkerStore) {
	ctx := t.Context()
	a := uniqueStream(t)
	ab := a + "b" // "ab:" does not start with "a:", and the other way round
	wa, err := ws.Heartbeat(ctx, a, "w1")
	require.NoError(t, err)
	_, err = ws.Heartbeat(ctx, ab, "w1")
	require.NoError(t, err)
	wab, err := ws.Heartbeat(ctx, ab, "w1")
	require.NoError(t, err)
	wab2, err := ws.Heartbeat(ctx, ab, "w2")
	require.NoError(t, err)
	_, err = s.Create(ctx, shardlease.LeaseKey{Stream: ab, Shard: firstShard}, nil)
	require.NoError(t, err)

	leases, workers, err := ws.ListWithWorkers(ctx, a)
	require.NoError(t, err)
	assert.Empty(t, leases, "stream %q sees no lease of %q", a, ab)
	assert.Equal(t, []shardlease.Worker{wa}, workers, "stream %q sees only its own worker row", a)

	leases, workers, err = ws.ListWithWorkers(ctx, ab)
	require.NoError(t, err)
	require.Len(t, leases, 1)
	assert.Equal(t, ab, leases[0].Key.Stream)
	assert.Equal(t, []shardlease.Worker{wab, wab2}, workers, "stream %q sees only its own worker rows", ab)
	assert.Equal(t, int64(1), wa.Counter, "the same owner's rows of two streams count apart")
	assert.Equal(t, int64(2), wab.Counter)
}

func testWorkerTwoOwners(t *testing.T, _ shardlease.LeaseStore, ws shardlease.WorkerStore) {
	ctx := t.Context()
	st := uniqueStream(t)
	// Owner ids are free-form: a colon or '@' in one must not confuse the key.
	owners := []string{"w2", "host-1:pid@42", "w10"}
	for i, o := range owners {
		for range i + 1 {
			_, err := ws.Heartbeat(ctx, st, o)
			require.NoError(t, err)
		}
	}
	assert.Equal(t, []shardlease.Worker{
		{Stream: st, Owner: "host-1:pid@42", Counter: 2},
		{Stream: st, Owner: "w10", Counter: 3},
		{Stream: st, Owner: "w2", Counter: 1},
	}, workersOf(t, ws, st), "ordered by owner, each with its own counter")
}

func testWorkerRemoveCurrent(t *testing.T, _ shardlease.LeaseStore, ws shardlease.WorkerStore) {
	ctx := t.Context()
	st := uniqueStream(t)
	_, err := ws.Heartbeat(ctx, st, "w1")
	require.NoError(t, err)
	w, err := ws.Heartbeat(ctx, st, "w1")
	require.NoError(t, err)
	removed, err := ws.RemoveWorker(ctx, w)
	require.NoError(t, err)
	assert.True(t, removed, "the row at the caller's counter is deleted")
	assert.Empty(t, workersOf(t, ws, st), "the row is gone")

	removed, err = ws.RemoveWorker(ctx, w)
	require.NoError(t, err, "removing again is harmless")
	assert.False(t, removed)

	again, err := ws.Heartbeat(ctx, st, "w1")
	require.NoError(t, err)
	assert.Equal(t, int64(1), again.Counter, "a heartbeat after removal creates the row afresh")
}

func testWorkerRemoveStale(t *testing.T, _ shardlease.LeaseStore, ws shardlease.WorkerStore) {
	ctx := t.Context()
	st := uniqueStream(t)
	stale, err := ws.Heartbeat(ctx, st, "w1")
	require.NoError(t, err)
	cur, err := ws.Heartbeat(ctx, st, "w1")
	require.NoError(t, err)
	for _, c := range []int64{stale.Counter, cur.Counter + 1, 0} {
		w := stale
		w.Counter = c
		removed, err := ws.RemoveWorker(ctx, w)
		require.NoError(t, err, "a row that moved on is not an error (counter %d)", c)
		assert.False(t, removed, "counter %d", c)
	}
	assert.Equal(t, []shardlease.Worker{cur}, workersOf(t, ws, st), "a row that moved on stays as it is")
}

func testWorkerRemoveMissing(t *testing.T, _ shardlease.LeaseStore, ws shardlease.WorkerStore) {
	ctx := t.Context()
	st := uniqueStream(t)
	removed, err := ws.RemoveWorker(ctx, shardlease.Worker{Stream: st, Owner: "ghost", Counter: 1})
	require.NoError(t, err)
	assert.False(t, removed)
	assert.Empty(t, workersOf(t, ws, st), "removing a missing row creates nothing")
}

func testWorkerRemoveLeavesOthers(t *testing.T, s shardlease.LeaseStore, ws shardlease.WorkerStore) {
	ctx := t.Context()
	st := uniqueStream(t)
	k := shardlease.LeaseKey{Stream: st, Shard: firstShard}
	_, err := s.Create(ctx, k, nil)
	require.NoError(t, err)
	held := acquire(t, s, k, "w1")
	w1, err := ws.Heartbeat(ctx, st, "w1")
	require.NoError(t, err)
	w2, err := ws.Heartbeat(ctx, st, "w2")
	require.NoError(t, err)
	w1b, err := ws.Heartbeat(ctx, st+"b", "w1")
	require.NoError(t, err)

	removed, err := ws.RemoveWorker(ctx, w1)
	require.NoError(t, err)
	require.True(t, removed)
	assert.Equal(t, []shardlease.Worker{w2}, workersOf(t, ws, st), "only w1's row of this stream is deleted")
	assert.Equal(t, []shardlease.Worker{w1b}, workersOf(t, ws, st+"b"), "w1's row of another stream stays")
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, held.Owner, got.Owner, "the lease w1 holds stays")
	assert.Equal(t, held.Counter, got.Counter)
}

func testWorkerBadInput(t *testing.T, _ shardlease.LeaseStore, ws shardlease.WorkerStore) {
	ctx := t.Context()
	st := uniqueStream(t)
	for _, tc := range []struct {
		name   string
		call   func() error
		target error
		names  string
	}{
		{"heartbeat empty owner", func() error { _, err := ws.Heartbeat(ctx, st, ""); return err }, shardlease.ErrInvalidConfig, st + ":@"},
		{"heartbeat bad stream", func() error { _, err := ws.Heartbeat(ctx, "bad stream!", "w1"); return err }, shardlease.ErrInvalidName, `"bad stream!"`},
		{"heartbeat colon stream", func() error { _, err := ws.Heartbeat(ctx, "has:colon", "w1"); return err }, shardlease.ErrInvalidName, `"has:colon"`},
		{"heartbeat empty stream", func() error { _, err := ws.Heartbeat(ctx, "", "w1"); return err }, shardlease.ErrInvalidName, "stream is empty"},
		{"remove empty owner", func() error {
			_, err := ws.RemoveWorker(ctx, shardlease.Worker{Stream: st, Counter: 1})
			return err
		}, shardlease.ErrInvalidConfig, st + ":@"},
		{"remove bad stream", func() error {
			_, err := ws.RemoveWorker(ctx, shardlease.Worker{Stream: "bad stream!", Owner: "w1", Counter: 1})
			return err
		}, shardlease.ErrInvalidName, `"bad stream!"`},
		{"list bad stream", func() error { _, _, err := ws.ListWithWorkers(ctx, "bad stream!"); return err }, shardlease.ErrInvalidName, `"bad stream!"`},
		{"list colon stream", func() error { _, _, err := ws.ListWithWorkers(ctx, "has:colon"); return err }, shardlease.ErrInvalidName, `"has:colon"`},
	} {
		err := tc.call()
		require.Error(t, err, tc.name)
		assert.ErrorIs(t, err, tc.target, tc.name)
		assert.Contains(t, err.Error(), tc.names, "%s: the error names the stream or row", tc.name)
	}
	assert.Empty(t, workersOf(t, ws, st), "no refused call wrote a row")
}

func testWorkerContextCancelled(t *testing.T, _ shardlease.LeaseStore, ws shardlease.WorkerStore) {
	st := uniqueStream(t)
	w, err := ws.Heartbeat(t.Context(), st, "w1")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls := map[string]func() error{
		"list":          func() error { _, _, err := ws.ListWithWorkers(ctx, st); return err },
		"heartbeat":     func() error { _, err := ws.Heartbeat(ctx, st, "w1"); return err },
		"heartbeat new": func() error { _, err := ws.Heartbeat(ctx, st, "w2"); return err },
		"remove":        func() error { _, err := ws.RemoveWorker(ctx, w); return err },
	}
	for name, call := range calls {
		err := call()
		require.Error(t, err, name)
		assert.True(t, errors.Is(err, context.Canceled), "%s: %v", name, err)
	}
	assert.Equal(t, []shardlease.Worker{w}, workersOf(t, ws, st), "no call with a cancelled context wrote")
}

// The holder's lease duration carried by the context is written on the row
// by Acquire, Renew and Checkpoint, read back by Get and List, and cleared by
// an Acquire that carries none.
func testHolderDuration(t *testing.T, s shardlease.LeaseStore) {
	k := fresh(t, s)
	ctx := shardlease.WithHolderLeaseDuration(t.Context(), 42*time.Second)
	l, err := s.Acquire(ctx, k, "a", 0)
	require.NoError(t, err)
	require.Equal(t, 42*time.Second, l.Duration)
	l, err = s.Renew(shardlease.WithHolderLeaseDuration(t.Context(), time.Minute), l, expiry)
	require.NoError(t, err)
	require.Equal(t, time.Minute, l.Duration)
	l, err = s.Checkpoint(t.Context(), l, "1", -1, expiry)
	require.NoError(t, err)
	require.Equal(t, time.Minute, l.Duration, "a write without a duration keeps the row's")
	got, err := s.Get(t.Context(), k)
	require.NoError(t, err)
	require.Equal(t, time.Minute, got.Duration)
	ls, err := s.List(t.Context(), k.Stream)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, time.Minute, ls[0].Duration)
	l, err = s.Acquire(t.Context(), k, "b", l.Counter)
	require.NoError(t, err)
	require.Zero(t, l.Duration, "a new holder that names no duration clears the old one")
}
