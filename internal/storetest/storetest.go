// Package storetest is the conformance suite every LeaseStore must pass.
// Run it from a test with a function that returns a ready store; the suite
// isolates its subtests by stream name, so one store (one table) may serve
// every subtest.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

var streamSeq atomic.Int64

// stream returns a stream name no other subtest of this process uses.
func stream(t *testing.T) string {
	return fmt.Sprintf("st%d-%d", time.Now().UnixNano()%1_000_000_007, streamSeq.Add(1))
}

const shard = "shardId-000000000000"

// Run runs every conformance subtest against the store newStore returns.
func Run(t *testing.T, newStore func(t *testing.T) shardlease.LeaseStore) {
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

func key(t *testing.T) shardlease.LeaseKey {
	return shardlease.LeaseKey{Stream: stream(t), Shard: shard}
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
		{Stream: "", Shard: shard},
		{Stream: "has:colon", Shard: shard},
		{Stream: "ok", Shard: ""},
		{Stream: "sp ace", Shard: shard},
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
	assert.Equal(t, before.Counter+1, l.Counter)
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
	assert.Equal(t, a.Counter+1, b.Counter)
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
	base := stream(t)
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
	none, err := s.List(ctx, stream(t))
	require.NoError(t, err)
	assert.Empty(t, none)
	_, err = s.List(ctx, "bad:name")
	assert.ErrorIs(t, err, shardlease.ErrInvalidName)
}

func testListMany(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	st := stream(t)
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
