package shardleasetest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// rewindTests are the subtests of the optional Rewinder capability,
// skipped for a store without it.
var rewindTests = []struct {
	name string
	fn   func(t *testing.T, s shardlease.LeaseStore)
}{
	{"RewindClearsCheckpoint", rewinder(testRewindClears)},
	{"RewindToShardEnd", rewinder(testRewindToShardEnd)},
	{"RewindFencedOnHolder", rewinder(testRewindFenced)},
	{"RewindRejectsBadValue", rewinder(testRewindRejectsBadValue)},
	{"RewindRepeatedIsOwnWrite", rewinder(testRewindRepeated)},
}

// rewinder runs fn if s implements shardlease.Rewinder and skips it
// otherwise.
func rewinder(fn func(t *testing.T, s shardlease.LeaseStore, rw shardlease.Rewinder)) func(t *testing.T, s shardlease.LeaseStore) {
	return func(t *testing.T, s shardlease.LeaseStore) {
		rw, ok := s.(shardlease.Rewinder)
		if !ok {
			t.Skipf("%T does not implement shardlease.Rewinder", s)
		}
		fn(t, s, rw)
	}
}

// checkpointed returns a held row with a checkpoint inside an aggregate.
func checkpointed(t *testing.T, s shardlease.LeaseStore) shardlease.Lease {
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	cp, err := s.Checkpoint(t.Context(), a, "49590338271490256608559692538361571095921575989136588898", 3, expiry)
	require.NoError(t, err)
	return cp
}

func testRewindClears(t *testing.T, s shardlease.LeaseStore, rw shardlease.Rewinder) {
	ctx := t.Context()
	held := checkpointed(t, s)
	start := shardlease.Start{Position: shardlease.AtTimestamp, Timestamp: at}
	got, err := rw.RewindRow(ctx, held, "", start)
	require.NoError(t, err)
	assert.Equal(t, held.Counter+1, got.Counter, "a rewind bumps the counter")
	assert.Equal(t, held.Owner, got.Owner, "the holder keeps the lease")
	assert.Empty(t, got.Checkpoint)
	assert.Equal(t, int64(-1), got.SubSequence)
	assert.Equal(t, shardlease.AtTimestamp, got.Start.Position)
	assert.True(t, at.Equal(got.Start.Timestamp), "timestamp %v comes back as %v", at, got.Start.Timestamp)

	read, err := s.Get(ctx, held.Key)
	require.NoError(t, err)
	assert.Equal(t, got.Counter, read.Counter)
	assert.Empty(t, read.Checkpoint, "the checkpoint is gone from the row")
	assert.Equal(t, int64(-1), read.SubSequence)
	assert.True(t, at.Equal(read.Start.Timestamp))

	rel, err := s.Release(ctx, got)
	require.NoError(t, err)
	assert.Empty(t, rel.Checkpoint, "release keeps the rewound row as it is")
	assert.Equal(t, shardlease.AtTimestamp, rel.Start.Position)
}

func testRewindToShardEnd(t *testing.T, s shardlease.LeaseStore, rw shardlease.Rewinder) {
	ctx := t.Context()
	held := checkpointed(t, s)
	trim, err := rw.RewindRow(ctx, held, "", shardlease.Start{Position: shardlease.TrimHorizon})
	require.NoError(t, err)
	assert.Equal(t, shardlease.TrimHorizon, trim.Start.Position)
	assert.True(t, trim.Start.Timestamp.IsZero())

	end, err := rw.RewindRow(ctx, trim, shardlease.ShardEnd, shardlease.Start{})
	require.NoError(t, err)
	assert.True(t, end.Finished())
	assert.True(t, end.Start.IsZero(), "the zero Start removes the recorded one")
	read, err := s.Get(ctx, held.Key)
	require.NoError(t, err)
	assert.True(t, read.Finished())
	assert.True(t, read.Start.IsZero())
	assert.Equal(t, int64(-1), read.SubSequence)
}

func testRewindFenced(t *testing.T, s shardlease.LeaseStore, rw shardlease.Rewinder) {
	ctx := t.Context()
	held := checkpointed(t, s)
	renewed, err := s.Renew(ctx, held, expiry)
	require.NoError(t, err)
	_, err = rw.RewindRow(ctx, held, "", shardlease.Start{})
	require.ErrorIs(t, err, shardlease.ErrLeaseLost, "a stale handle")

	rel, err := s.Release(ctx, renewed)
	require.NoError(t, err)
	_, err = rw.RewindRow(ctx, rel, "", shardlease.Start{})
	require.ErrorIs(t, err, shardlease.ErrLeaseLost, "a free row has no holder to write")
	other := acquire(t, s, held.Key, "b")
	_, err = rw.RewindRow(ctx, renewed, "", shardlease.Start{})
	require.ErrorIs(t, err, shardlease.ErrLeaseLost, "another holder's row")
	read, err := s.Get(ctx, held.Key)
	require.NoError(t, err)
	assert.Equal(t, other.Counter, read.Counter, "refused writes change nothing")
	assert.Equal(t, held.Checkpoint, read.Checkpoint)

	missing := shardlease.Lease{Key: shardlease.LeaseKey{Stream: held.Key.Stream, Shard: "shardId-000000000009"}, Owner: "a", Counter: 1}
	_, err = rw.RewindRow(ctx, missing, "", shardlease.Start{})
	require.ErrorIs(t, err, shardlease.ErrLeaseLost, "a missing row")
}

func testRewindRejectsBadValue(t *testing.T, s shardlease.LeaseStore, rw shardlease.Rewinder) {
	ctx := t.Context()
	held := checkpointed(t, s)
	for _, bad := range []struct {
		checkpoint string
		start      shardlease.Start
	}{
		{"49590338271490256608559692538361571095921575989136588899", shardlease.Start{}},
		{"", shardlease.Start{Position: shardlease.AtTimestamp}},
		{"", shardlease.Start{Position: "SOMEWHERE"}},
	} {
		_, err := rw.RewindRow(ctx, held, bad.checkpoint, bad.start)
		require.ErrorIs(t, err, shardlease.ErrInvalidConfig, "%+v", bad)
	}
	read, err := s.Get(ctx, held.Key)
	require.NoError(t, err)
	assert.Equal(t, held.Counter, read.Counter, "nothing was written")
}

func testRewindRepeated(t *testing.T, s shardlease.LeaseStore, rw shardlease.Rewinder) {
	ctx := t.Context()
	held := checkpointed(t, s)
	start := shardlease.Start{Position: shardlease.AtTimestamp, Timestamp: at}
	first, err := rw.RewindRow(ctx, held, "", start)
	require.NoError(t, err)
	again, err := rw.RewindRow(ctx, held, "", start)
	require.NoError(t, err, "the same rewind again is the holder's own write")
	assert.Equal(t, first.Counter, again.Counter, "not applied twice")
	_, err = rw.RewindRow(ctx, held, shardlease.ShardEnd, shardlease.Start{})
	require.ErrorIs(t, err, shardlease.ErrLeaseLost, "another rewind under the old handle")
}
