package shardleasetest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// capTests are the subtests of the optional capabilities the other files
// of the suite leave out: GroupLister, StreamRemover, HandoffWithdrawer and
// TableChecker, the lag a holder's writes carry (see shardlease.HolderLag),
// and the parts of Rewinder that conformance_rewind.go does not check.
// Each is skipped, saying why, for a store without its capability.
var capTests = []struct {
	name string
	fn   func(t *testing.T, s shardlease.LeaseStore)
}{
	{"GroupListStreamsScoped", capable(testListStreamsScoped)},
	{"GroupListStreamsEventually", capable(testListStreamsEventually)},
	{"GroupListStreamsRejectsBadInput", capable(testListStreamsBadInput)},
	{"StreamRemoveFreeRowsKeepsHeld", capable(testRemoveKeepsHeld)},
	{"StreamRemoveHonoursStale", capable(testRemoveHonoursStale)},
	{"StreamRemoveNothingLeft", capable(testRemoveNothingLeft)},
	{"StreamRemoveRejectsBadInput", capable(testRemoveBadInput)},
	{"HandoffWithdrawn", capable(testWithdrawHandoff)},
	{"HandoffWithdrawLeavesOthers", capable(testWithdrawLeavesOthers)},
	{"TableCheckOnReadyTable", capable(testCheckTable)},
	{"RewindKeepsExpiryAndParents", capable(testRewindKeeps)},
	{"RewindContextCancelled", capable(testRewindCancelled)},
	{"LagRidesOnHolderWrites", keepsLag(testLagRides)},
	{"LagKeptByWritesThatLeaveTheCounter", keepsLag(testLagKept)},
	{"LagBelongsToOneHoldersRun", keepsLag(testLagOneRun)},
}

// capable runs fn if s implements the capability C and skips it, naming
// C, otherwise.
func capable[C any](fn func(t *testing.T, s shardlease.LeaseStore, c C)) func(t *testing.T, s shardlease.LeaseStore) {
	return func(t *testing.T, s shardlease.LeaseStore) {
		c, ok := any(s).(C)
		if !ok {
			t.Skipf("%T does not implement %v", s, reflect.TypeFor[C]())
		}
		fn(t, s, c)
	}
}

// leaseRows drops the rows a store keeps for itself beside a stream's
// leases (a shard part that starts with '#'), should a listing show them.
func leaseRows(rows []shardlease.Lease) []shardlease.Lease {
	var out []shardlease.Lease
	for _, l := range rows {
		if !strings.HasPrefix(l.Key.Shard, "#") {
			out = append(out, l)
		}
	}
	return out
}

// listed returns stream's lease rows as List reads them.
func listed(t *testing.T, s shardlease.LeaseStore, stream string) []shardlease.Lease {
	t.Helper()
	rows, err := s.List(t.Context(), stream)
	require.NoError(t, err)
	return leaseRows(rows)
}

// shardKey is the key of shard number i of stream.
func shardKey(stream string, i int) shardlease.LeaseKey {
	return shardlease.LeaseKey{Stream: stream, Shard: fmt.Sprintf("shardId-%012d", i)}
}

// makeRows creates n free rows of stream, shards 0 to n-1, and returns
// their keys.
func makeRows(t *testing.T, s shardlease.LeaseStore, stream string, n int) []shardlease.LeaseKey {
	t.Helper()
	keys := make([]shardlease.LeaseKey, n)
	for i := range n {
		keys[i] = shardKey(stream, i)
		created, err := s.Create(t.Context(), keys[i], nil)
		require.NoError(t, err)
		require.True(t, created)
	}
	return keys
}

// groupFixture is a table with two streams of a group's set (a and b,
// where b's name is a's with a suffix), streams outside the set whose names
// a prefix match would confuse with a, and worker rows under a's name and
// under the group's.
type groupFixture struct {
	a, b, group string
	outside     []string
	aWorker     shardlease.Worker
	groupOwners []string
}

func newGroupFixture(t *testing.T, s shardlease.LeaseStore) groupFixture {
	ctx := t.Context()
	base := uniqueStream(t)
	f := groupFixture{a: base, b: base + "b", group: base + "-g", outside: []string{base + ".b", base + "-1", "x" + base, base + "bb"}}
	makeRows(t, s, f.a, 3)
	makeRows(t, s, f.b, 1)
	for _, st := range f.outside {
		makeRows(t, s, st, 1)
	}
	held := acquire(t, s, shardKey(f.a, 1), "h")
	_, err := s.Checkpoint(ctx, held, "123", 4, expiry)
	require.NoError(t, err)
	if is, ok := s.(shardlease.IdentityStore); ok {
		_, _, err := is.RecordStreamIdentity(ctx, ident(f.a, time.Unix(1_700_000_000, 0)))
		require.NoError(t, err)
	}
	if ws, ok := s.(shardlease.WorkerStore); ok {
		f.aWorker, err = ws.Heartbeat(ctx, f.a, "wa")
		require.NoError(t, err)
		f.groupOwners = []string{"w1", "w2"}
		for _, o := range []string{"w2", "w1", "w1"} {
			_, err := ws.Heartbeat(ctx, f.group, o)
			require.NoError(t, err)
		}
		_, err = ws.Heartbeat(ctx, f.outside[0], "wx")
		require.NoError(t, err)
	}
	return f
}

func owners(ws []shardlease.Worker) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Owner)
	}
	return out
}

// testListStreamsScoped: a consistent ListStreams returns what List returns
// for each stream of the set, ordered by stream and shard, no row of any
// other stream, and the worker rows of workersOf alone.
func testListStreamsScoped(t *testing.T, s shardlease.LeaseStore, gl shardlease.GroupLister) {
	ctx := t.Context()
	f := newGroupFixture(t, s)
	want := append(listed(t, s, f.a), listed(t, s, f.b)...)
	require.Len(t, want, 4)

	leases, workers, err := gl.ListStreams(ctx, []string{f.b, f.a}, f.group, true)
	require.NoError(t, err)
	assert.Equal(t, want, leaseRows(leases), "the rows of %s and %s as List reads them, by stream then shard, and no other stream's", f.a, f.b)
	_, isWorkers := s.(shardlease.WorkerStore)
	if isWorkers {
		assert.Equal(t, f.groupOwners, owners(workers), "the worker rows of %s alone, by owner", f.group)
		for _, w := range workers {
			assert.Equal(t, f.group, w.Stream)
		}
	}

	leases, workers, err = gl.ListStreams(ctx, []string{f.a}, f.a, true)
	require.NoError(t, err)
	assert.Equal(t, listed(t, s, f.a), leaseRows(leases))
	if isWorkers {
		assert.Equal(t, []shardlease.Worker{f.aWorker}, workers, "workersOf names the stream whose worker rows come back")
	}

	leases, _, err = gl.ListStreams(ctx, nil, f.group, true)
	require.NoError(t, err)
	assert.Empty(t, leaseRows(leases), "no stream, no lease row")
	leases, workers, err = gl.ListStreams(ctx, []string{uniqueStream(t)}, uniqueStream(t), true)
	require.NoError(t, err)
	assert.Empty(t, leaseRows(leases), "a stream without rows")
	assert.Empty(t, workers)
}

// testListStreamsEventually: a listing that need not be consistent may show
// a row as it was a moment before its latest write, but only rows of the
// set's streams, each once, in order, never ahead of the table.
func testListStreamsEventually(t *testing.T, s shardlease.LeaseStore, gl shardlease.GroupLister) {
	ctx := t.Context()
	f := newGroupFixture(t, s)
	current := make(map[shardlease.LeaseKey]int64)
	for _, l := range append(listed(t, s, f.a), listed(t, s, f.b)...) {
		current[l.Key] = l.Counter
	}
	leases, workers, err := gl.ListStreams(ctx, []string{f.a, f.b}, f.group, false)
	require.NoError(t, err)
	leases = leaseRows(leases)
	for i, l := range leases {
		c, ok := current[l.Key]
		if !assert.True(t, ok, "row %s is no row of %s or %s", l.Key, f.a, f.b) {
			continue
		}
		assert.LessOrEqual(t, l.Counter, c, "row %s is ahead of the table", l.Key)
		if i > 0 {
			prev := leases[i-1].Key
			assert.True(t, prev.Stream < l.Key.Stream || prev.Stream == l.Key.Stream && prev.Shard < l.Key.Shard,
				"rows ordered by stream then shard, each once: %s then %s", prev, l.Key)
		}
	}
	for _, w := range workers {
		assert.Equal(t, f.group, w.Stream, "only the worker rows of %s", f.group)
	}
}

func testListStreamsBadInput(t *testing.T, s shardlease.LeaseStore, gl shardlease.GroupLister) {
	st := uniqueStream(t)
	makeRows(t, s, st, 1)
	for _, tc := range []struct {
		name      string
		streams   []string
		workersOf string
	}{
		{"bad stream", []string{st, "bad stream!"}, st},
		{"colon stream", []string{"has:colon"}, st},
		{"bad workersOf", []string{st}, "has:colon"},
	} {
		_, _, err := gl.ListStreams(t.Context(), tc.streams, tc.workersOf, true)
		assert.ErrorIs(t, err, shardlease.ErrInvalidName, tc.name)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, consistent := range []bool{true, false} {
		_, _, err := gl.ListStreams(ctx, []string{st}, st, consistent)
		require.Error(t, err)
		assert.ErrorIs(t, err, context.Canceled, "consistent %v", consistent)
	}
}

// testWithdrawHandoff: withdrawing the request leaves the counter, so the
// holder's handle still works, and the holder's release, although its handle
// saw the request, then frees the row instead of handing it to the taker.
func testWithdrawHandoff(t *testing.T, s shardlease.LeaseStore, hw shardlease.HandoffWithdrawer) {
	ctx := t.Context()
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	_, err := s.RequestHandoff(ctx, a, "b")
	require.NoError(t, err)
	seen, err := s.Renew(ctx, a, expiry)
	require.NoError(t, err)
	require.Equal(t, "b", seen.HandoffTo, "the holder's renewal shows the request")

	withdrawn, err := hw.WithdrawHandoff(ctx, k, "b")
	require.NoError(t, err)
	assert.True(t, withdrawn)
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Empty(t, got.HandoffTo, "the request is gone")
	assert.Equal(t, seen.Counter, got.Counter, "withdrawing leaves the counter")
	assert.Equal(t, "a", got.Owner)

	withdrawn, err = hw.WithdrawHandoff(ctx, k, "b")
	require.NoError(t, err, "withdrawing twice is harmless")
	assert.False(t, withdrawn)

	released, err := s.Release(ctx, seen)
	require.NoError(t, err, "the holder's handle still works")
	assert.Empty(t, released.Owner, "the release frees the row: it goes to no withdrawn taker")
	got, err = s.Get(ctx, k)
	require.NoError(t, err)
	assert.Empty(t, got.Owner)
	assert.Empty(t, got.HandoffTo)
}

// testWithdrawLeavesOthers: a request naming another taker, one already
// answered and a missing row are left alone, without an error.
func testWithdrawLeavesOthers(t *testing.T, s shardlease.LeaseStore, hw shardlease.HandoffWithdrawer) {
	ctx := t.Context()
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	_, err := s.RequestHandoff(ctx, a, "b")
	require.NoError(t, err)
	a, err = s.Renew(ctx, a, expiry) // the holder sees the request
	require.NoError(t, err)
	withdrawn, err := hw.WithdrawHandoff(ctx, k, "c")
	require.NoError(t, err)
	assert.False(t, withdrawn, "a request naming another taker")
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, "b", got.HandoffTo, "is left as it is")

	handed, err := s.Release(ctx, a)
	require.NoError(t, err)
	require.Equal(t, "b", handed.Owner)
	withdrawn, err = hw.WithdrawHandoff(ctx, k, "b")
	require.NoError(t, err)
	assert.False(t, withdrawn, "a request already answered")
	got, err = s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, "b", got.Owner, "the taker keeps the lease")
	assert.Equal(t, handed.Counter, got.Counter)

	missing := shardlease.LeaseKey{Stream: k.Stream, Shard: "shardId-000000000009"}
	withdrawn, err = hw.WithdrawHandoff(ctx, missing, "b")
	require.NoError(t, err)
	assert.False(t, withdrawn, "a missing row")
	_, err = s.Get(ctx, missing)
	assert.ErrorIs(t, err, shardlease.ErrLeaseNotFound, "withdrawing creates no row")

	_, err = hw.WithdrawHandoff(ctx, k, "")
	assert.ErrorIs(t, err, shardlease.ErrInvalidConfig, "an empty taker")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = hw.WithdrawHandoff(cancelled, k, "b")
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
}

// testCheckTable: the store newStore returns is ready, so its check passes;
// a cancelled check fails with the context's error.
func testCheckTable(t *testing.T, _ shardlease.LeaseStore, tc shardlease.TableChecker) {
	require.NoError(t, tc.CheckTable(t.Context()), "the store the suite was given is ready")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := tc.CheckTable(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
}

// testRewindKeeps: a rewind changes the checkpoint and the start, and
// leaves the owner, the parents and the expiry the holder wrote.
func testRewindKeeps(t *testing.T, s shardlease.LeaseStore, rw shardlease.Rewinder) {
	ctx := t.Context()
	k := key(t)
	parents := []string{"shardId-000000000001", "shardId-000000000002"}
	_, err := s.Create(ctx, k, parents)
	require.NoError(t, err)
	a := acquire(t, s, k, "a")
	cp, err := s.Checkpoint(ctx, a, "49590338271490256608559692538361571095921575989136588898", -1, expiry)
	require.NoError(t, err)
	got, err := rw.RewindRow(ctx, cp, "", shardlease.Start{Position: shardlease.TrimHorizon})
	require.NoError(t, err)
	read, err := s.Get(ctx, k)
	require.NoError(t, err)
	for name, l := range map[string]shardlease.Lease{"returned": got, "read": read} {
		assert.Equal(t, "a", l.Owner, name)
		assert.Equal(t, parents, l.Parents, "%s: the parents stay", name)
		assert.True(t, expiry.Equal(l.Expiry), "%s: the expiry stays %v, is %v", name, expiry, l.Expiry)
		assert.Empty(t, l.Checkpoint, name)
	}
}

func testRewindCancelled(t *testing.T, s shardlease.LeaseStore, rw shardlease.Rewinder) {
	held := checkpointed(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := rw.RewindRow(ctx, held, "", shardlease.Start{Position: shardlease.TrimHorizon})
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	read, err := s.Get(t.Context(), held.Key)
	require.NoError(t, err)
	assert.Equal(t, held.Counter, read.Counter, "a cancelled rewind writes nothing")
	assert.Equal(t, held.Checkpoint, read.Checkpoint)
}
