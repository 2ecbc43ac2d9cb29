package shardleasetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// packedTests are the subtests of shardlease.PackedCheckpointStore, skipped
// for a store that does not implement it: checkpoints a session's keeps
// carry, fenced with the session, read by listings and carried by claims.
var packedTests = []struct {
	name string
	fn   func(t *testing.T, s shardlease.LeaseStore)
}{
	{"PackedKeepWritesAndDrops", capable(testPackedKeep)},
	{"PackedListingReturnsTheNewest", capable(testPackedListing)},
	{"PackedFencedKeepLandsNothing", capable(testPackedFenced)},
	{"PackedClaimCarriesTheEntry", capable(testPackedClaim)},
	{"PackedStaleEntryNotCarried", capable(testPackedStale)},
	{"PackedRemoveWorkerKeepsEntries", capable(testPackedRemoveWorker)},
	{"PackedReopenKeepsEarlierEntries", capable(testPackedReopen)},
	{"PackedFenceOfReleasedLeasesDeletesTheRow", capable(testPackedFenceReleased)},
	{"PackedSessionOfAnotherStream", capable(testPackedOtherStream)},
}

// longSeq is a sequence number as long as Kinesis's.
const longSeq = "49590338271490256608559692538361571095921575989136588898"

// packedLease opens owner's session on a fresh stream, takes a lease in it
// and packs cp for it with one keep.
func packedLease(t *testing.T, s shardlease.LeaseStore, ps shardlease.PackedCheckpointStore, owner, cp string) (shardlease.Worker, shardlease.Lease) {
	t.Helper()
	w, l := keptLease(t, s, ps, owner)
	w = keepPacked(t, ps, w, []shardlease.PackedCheckpoint{{Key: l.Key, Counter: l.Counter, Checkpoint: cp, SubSequence: -1}}, nil)
	return w, l
}

// keepPacked keeps w writing put and dropping drop.
func keepPacked(t *testing.T, ps shardlease.PackedCheckpointStore, w shardlease.Worker, put []shardlease.PackedCheckpoint, drop []shardlease.LeaseKey) shardlease.Worker {
	t.Helper()
	kept, _, err := ps.KeepPacked(holderCtx(t, 20*time.Second), w, put, drop)
	require.NoError(t, err)
	return kept
}

// readPacked returns the entries of owner's row of stream, by lease key.
func readPacked(t *testing.T, ps shardlease.PackedCheckpointStore, stream, owner string) map[string]shardlease.PackedCheckpoint {
	t.Helper()
	got, err := ps.ReadPacked(t.Context(), stream, owner)
	require.NoError(t, err)
	out := map[string]shardlease.PackedCheckpoint{}
	for _, e := range got {
		out[e.Key.String()] = e
	}
	return out
}

func testPackedKeep(t *testing.T, s shardlease.LeaseStore, ps shardlease.PackedCheckpointStore) {
	w, l := keptLease(t, s, ps, "a")
	other := shardlease.LeaseKey{Stream: l.Key.Stream, Shard: "shardId-000000000009"}
	lag := &shardlease.Lag{BehindLatest: 1500 * time.Millisecond, CheckpointAge: 2 * time.Second}
	put := []shardlease.PackedCheckpoint{
		{Key: l.Key, Counter: l.Counter, Checkpoint: longSeq, SubSequence: 3, Lag: lag},
		{Key: other, Counter: 7, Checkpoint: shardlease.ShardEnd, SubSequence: -1},
	}
	kept := keepPacked(t, ps, w, put, nil)
	assert.Equal(t, w.Counter+1, kept.Counter, "a keep that packs bumps the counter once")
	assert.Equal(t, w.Gen, kept.Gen)
	got := readPacked(t, ps, w.Stream, w.Owner)
	require.Len(t, got, 2)
	assert.Equal(t, put[0], got[l.Key.String()], "a sequence number, its sub-sequence and the lag come back as written")
	assert.Equal(t, put[1], got[other.String()], "ShardEnd comes back")

	kept = keepPacked(t, ps, kept, []shardlease.PackedCheckpoint{{Key: l.Key, Counter: l.Counter, Checkpoint: "12345", SubSequence: -1}}, []shardlease.LeaseKey{other})
	got = readPacked(t, ps, w.Stream, w.Owner)
	require.Len(t, got, 1, "a drop removes the entry")
	assert.Equal(t, "12345", got[l.Key.String()].Checkpoint, "a put replaces the entry")

	keepPacked(t, ps, kept, nil, nil)
	assert.Len(t, readPacked(t, ps, w.Stream, w.Owner), 1, "a keep leaves the entries it does not name")
	assert.Empty(t, readPacked(t, ps, w.Stream, "nobody"), "a missing row has no entries")
}

func testPackedListing(t *testing.T, s shardlease.LeaseStore, ps shardlease.PackedCheckpointStore) {
	ctx := t.Context()
	w, l := keptLease(t, s, ps, "a")
	l, err := s.Checkpoint(ctx, l, "100", -1, expiry)
	require.NoError(t, err)
	keepPacked(t, ps, w, []shardlease.PackedCheckpoint{{Key: l.Key, Counter: l.Counter, Checkpoint: "300", SubSequence: 2}}, nil)
	rows := listed(t, s, l.Key.Stream)
	require.Len(t, rows, 1)
	assert.Equal(t, "300", rows[0].Checkpoint, "the listing shows the packed checkpoint, newer than the row's")
	assert.Equal(t, int64(2), rows[0].SubSequence)
	assert.Equal(t, l.Counter, rows[0].Counter, "and the row's counter")

	// The holder writes its row: the entry, of the counter before, no
	// longer holds.
	l, err = s.Checkpoint(ctx, l, "200", -1, expiry)
	require.NoError(t, err)
	rows = listed(t, s, l.Key.Stream)
	require.Len(t, rows, 1)
	assert.Equal(t, "200", rows[0].Checkpoint, "an entry of an earlier holding is not shown")
}

func testPackedFenced(t *testing.T, s shardlease.LeaseStore, ps shardlease.PackedCheckpointStore) {
	ctx := t.Context()
	w, l := packedLease(t, s, ps, "a", "300")
	ended, err := ps.FenceSession(ctx, w)
	require.NoError(t, err)
	require.True(t, ended)

	_, _, err = ps.KeepPacked(ctx, w, []shardlease.PackedCheckpoint{{Key: l.Key, Counter: l.Counter, Checkpoint: "900", SubSequence: -1}}, nil)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost, "a keep of a fenced session is refused")
	got := readPacked(t, ps, w.Stream, w.Owner)
	assert.Equal(t, "300", got[l.Key.String()].Checkpoint, "and lands none of its checkpoints; the fence kept the entry")
	_, _, err = ps.KeepSession(ctx, w)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost)

	_, err = ps.ReadSession(ctx, w.Stream, w.Owner)
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound, "an ended session reads as gone")
	mailed, err := ps.MailSession(ctx, w, l.Key)
	require.NoError(t, err)
	assert.False(t, mailed, "no mail for an ended session")
	w.Counter = -1
	ended, err = ps.FenceSession(ctx, w)
	require.NoError(t, err)
	assert.True(t, ended, "a confirmation finds it over")
	if ws, ok := s.(shardlease.WorkerStore); ok {
		_, workers, err := ws.ListWithWorkers(ctx, w.Stream)
		require.NoError(t, err)
		assert.Empty(t, workers, "an ended session's row is no worker")
	}
	rows := listed(t, s, l.Key.Stream)
	assert.Equal(t, "300", rows[0].Checkpoint, "listings still show the ended session's checkpoint")
}

func testPackedClaim(t *testing.T, s shardlease.LeaseStore, ps shardlease.PackedCheckpointStore) {
	ctx := t.Context()
	w, l := packedLease(t, s, ps, "a", longSeq)
	ended, err := ps.FenceSession(ctx, w)
	require.NoError(t, err)
	require.True(t, ended)
	b := open(t, ps, l.Key.Stream, "b", 20*time.Second)
	claimed, err := ps.AcquireInSession(holderCtx(t, 20*time.Second), l.Key, b, l.Counter)
	require.NoError(t, err)
	assert.Equal(t, longSeq, claimed.Checkpoint, "the taker starts from the newest durable checkpoint")
	got, err := s.Get(ctx, l.Key)
	require.NoError(t, err)
	assert.Equal(t, longSeq, got.Checkpoint, "the claim wrote it on the lease row")
	assert.Empty(t, readPacked(t, ps, w.Stream, "a"), "the claim took the entry, and the ended row went with it")
}

func testPackedStale(t *testing.T, s shardlease.LeaseStore, ps shardlease.PackedCheckpointStore) {
	ctx := t.Context()
	w, l := packedLease(t, s, ps, "a", "300")
	// The holder wrote its row since (a flush): the entry is of the
	// holding before.
	l, err := s.Checkpoint(ctx, l, "250", -1, expiry)
	require.NoError(t, err)
	ended, err := ps.FenceSession(ctx, w)
	require.NoError(t, err)
	require.True(t, ended)
	b := open(t, ps, l.Key.Stream, "b", 20*time.Second)
	claimed, err := ps.AcquireInSession(holderCtx(t, 20*time.Second), l.Key, b, l.Counter)
	require.NoError(t, err)
	assert.Equal(t, "250", claimed.Checkpoint, "an entry the lease row no longer backs is not carried")
	assert.Empty(t, readPacked(t, ps, w.Stream, "a"), "the fence removed the stale entry and the row")
}

func testPackedRemoveWorker(t *testing.T, s shardlease.LeaseStore, ps shardlease.PackedCheckpointStore) {
	ws, ok := s.(shardlease.WorkerStore)
	if !ok {
		t.Skipf("%T keeps no worker rows", s)
	}
	ctx := t.Context()
	w, l := packedLease(t, s, ps, "a", "300")
	removed, err := ws.RemoveWorker(ctx, w)
	require.NoError(t, err)
	require.True(t, removed, "a row that stood still is removed")
	_, err = ps.ReadSession(ctx, w.Stream, w.Owner)
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound, "its session is over")
	_, _, err = ps.KeepSession(ctx, w)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost)
	b := open(t, ps, l.Key.Stream, "b", 20*time.Second)
	claimed, err := ps.AcquireInSession(holderCtx(t, 20*time.Second), l.Key, b, l.Counter)
	require.NoError(t, err)
	assert.Equal(t, "300", claimed.Checkpoint, "its entries stayed for the claims")
}

func testPackedReopen(t *testing.T, s shardlease.LeaseStore, ps shardlease.PackedCheckpointStore) {
	ctx := t.Context()
	_, l := packedLease(t, s, ps, "a", "300")
	again := open(t, ps, l.Key.Stream, "a", 20*time.Second)
	assert.Equal(t, "300", readPacked(t, ps, again.Stream, "a")[l.Key.String()].Checkpoint, "a restart under the same owner id keeps the entries")
	keepPacked(t, ps, again, nil, nil)
	claimed, err := ps.AcquireInSession(holderCtx(t, 20*time.Second), l.Key, again, l.Counter)
	require.NoError(t, err)
	assert.Equal(t, "300", claimed.Checkpoint, "the claim of the earlier generation's lease carries its entry")
	got, err := s.Get(ctx, l.Key)
	require.NoError(t, err)
	assert.Equal(t, again.Gen, got.SessionGen)
}

func testPackedFenceReleased(t *testing.T, s shardlease.LeaseStore, ps shardlease.PackedCheckpointStore) {
	ctx := t.Context()
	w, l := packedLease(t, s, ps, "a", "300")
	l, err := s.Checkpoint(ctx, l, "300", -1, expiry)
	require.NoError(t, err)
	_, err = s.Release(ctx, l)
	require.NoError(t, err)
	ended, err := ps.FenceSession(ctx, w)
	require.NoError(t, err)
	require.True(t, ended)
	assert.Empty(t, readPacked(t, ps, w.Stream, "a"), "a fenced row whose entries no lease row backs is deleted")
	_, err = ps.ReadSession(ctx, w.Stream, "a")
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
}

// testPackedOtherStream: a session on the worker rows of a group (a name of
// its own) keeps a lease of a stream: the stream's listings read its entry,
// and a claim carries it.
func testPackedOtherStream(t *testing.T, s shardlease.LeaseStore, ps shardlease.PackedCheckpointStore) {
	ctx := t.Context()
	k := fresh(t, s)
	group := uniqueStream(t)
	w := open(t, ps, group, "a", 20*time.Second)
	l, err := ps.AcquireInSession(holderCtx(t, 20*time.Second), k, w, 0)
	require.NoError(t, err)
	w = keepPacked(t, ps, w, []shardlease.PackedCheckpoint{{Key: k, Counter: l.Counter, Checkpoint: longSeq, SubSequence: -1}}, nil)
	assert.Equal(t, longSeq, readPacked(t, ps, group, "a")[k.String()].Checkpoint, "an entry of another stream's lease comes back")
	rows := listed(t, s, k.Stream)
	require.Len(t, rows, 1)
	assert.Equal(t, longSeq, rows[0].Checkpoint, "the stream's listing reads the group's session row")

	ended, err := ps.FenceSession(ctx, w)
	require.NoError(t, err)
	require.True(t, ended)
	b := open(t, ps, k.Stream, "b", 20*time.Second)
	claimed, err := ps.AcquireInSession(holderCtx(t, 20*time.Second), k, b, l.Counter)
	require.NoError(t, err)
	assert.Equal(t, longSeq, claimed.Checkpoint, "the claim carries it")
	assert.Empty(t, readPacked(t, ps, group, "a"))
}
