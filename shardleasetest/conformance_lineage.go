package shardleasetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// lineageTests are the subtests of the optional LineageStore and
// IdentityStore capabilities.
var lineageTests = []struct {
	name string
	fn   func(t *testing.T, s shardlease.LeaseStore)
}{
	{"LineageCreateAtRoundTrip", lineage(testCreateAtRoundTrip)},
	{"LineageCreateAtRejectsBadStart", lineage(testCreateAtRejectsBadStart)},
	{"LineageSetOnUnreadRow", lineage(testSetLineage)},
	{"LineageSetRefusedOnceRead", lineage(testSetLineageRefused)},
	{"LineageDeleteFinished", lineage(testDeleteFinished)},
	{"IdentityRecordedOnce", identity(testIdentityRecordedOnce)},
	{"IdentityRowNotListed", identity(testIdentityNotListed)},
	{"IdentityResetStream", identity(testIdentityReset)},
}

// lineage runs fn if s implements shardlease.LineageStore and skips it
// otherwise.
func lineage(fn func(t *testing.T, s shardlease.LeaseStore, ls shardlease.LineageStore)) func(t *testing.T, s shardlease.LeaseStore) {
	return func(t *testing.T, s shardlease.LeaseStore) {
		ls, ok := s.(shardlease.LineageStore)
		if !ok {
			t.Skipf("%T does not implement shardlease.LineageStore", s)
		}
		fn(t, s, ls)
	}
}

// identity runs fn if s implements shardlease.IdentityStore and skips it
// otherwise.
func identity(fn func(t *testing.T, s shardlease.LeaseStore, is shardlease.IdentityStore)) func(t *testing.T, s shardlease.LeaseStore) {
	return func(t *testing.T, s shardlease.LeaseStore) {
		is, ok := s.(shardlease.IdentityStore)
		if !ok {
			t.Skipf("%T does not implement shardlease.IdentityStore", s)
		}
		fn(t, s, is)
	}
}

var at = time.UnixMilli(1_700_000_000_456)

func testCreateAtRoundTrip(t *testing.T, s shardlease.LeaseStore, ls shardlease.LineageStore) {
	ctx := t.Context()
	k := key(t)
	start := shardlease.Start{Position: shardlease.AtTimestamp, Timestamp: at}
	created, err := ls.CreateAt(ctx, k, []string{"shardId-000000000002", "shardId-000000000001"}, start)
	require.NoError(t, err)
	require.True(t, created)
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, []string{"shardId-000000000001", "shardId-000000000002"}, got.Parents)
	assert.Equal(t, shardlease.AtTimestamp, got.Start.Position)
	assert.True(t, at.Equal(got.Start.Timestamp), "timestamp %v comes back as %v", at, got.Start.Timestamp)
	assert.Zero(t, got.Counter)
	assert.Empty(t, got.Checkpoint)

	created, err = ls.CreateAt(ctx, k, nil, shardlease.Start{Position: shardlease.Latest})
	require.NoError(t, err)
	assert.False(t, created, "an existing row is not made again")
	again, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, got, again, "an existing row is not changed")

	a := acquire(t, s, k, "a")
	assert.Equal(t, got.Start.Position, a.Start.Position, "writes keep the start")
	list, err := s.List(ctx, k.Stream)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, shardlease.AtTimestamp, list[0].Start.Position)

	plain := shardlease.LeaseKey{Stream: k.Stream, Shard: "shardId-000000000009"}
	created, err = s.Create(ctx, plain, nil)
	require.NoError(t, err)
	require.True(t, created)
	p, err := s.Get(ctx, plain)
	require.NoError(t, err)
	assert.True(t, p.Start.IsZero(), "Create records no start")
}

func testCreateAtRejectsBadStart(t *testing.T, s shardlease.LeaseStore, ls shardlease.LineageStore) {
	ctx := t.Context()
	k := key(t)
	for _, bad := range []shardlease.Start{
		{Position: "SOMEWHERE"},
		{Position: shardlease.AtTimestamp},
		{Position: shardlease.Latest, Timestamp: at},
	} {
		_, err := ls.CreateAt(ctx, k, nil, bad)
		assert.ErrorIs(t, err, shardlease.ErrInvalidConfig, "start %+v", bad)
	}
	_, err := s.Get(ctx, k)
	assert.ErrorIs(t, err, shardlease.ErrLeaseNotFound, "nothing written")
}

func testSetLineage(t *testing.T, s shardlease.LeaseStore, ls shardlease.LineageStore) {
	ctx := t.Context()
	k := fresh(t, s)
	row, err := s.Get(ctx, k)
	require.NoError(t, err)
	got, err := ls.SetLineage(ctx, row, []string{"shardId-000000000007"}, shardlease.Start{Position: shardlease.TrimHorizon})
	require.NoError(t, err)
	assert.Equal(t, row.Counter+1, got.Counter, "the write bumps the counter")
	assert.Equal(t, []string{"shardId-000000000007"}, got.Parents)
	assert.Equal(t, shardlease.TrimHorizon, got.Start.Position)
	now, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, got, now)

	_, err = ls.SetLineage(ctx, row, []string{"shardId-000000000008"}, shardlease.Start{Position: shardlease.TrimHorizon})
	assert.ErrorIs(t, err, shardlease.ErrLeaseHeld, "a row that moved since it was read is left alone")
	missing := shardlease.Lease{Key: shardlease.LeaseKey{Stream: k.Stream, Shard: "shardId-000000000099"}}
	_, err = ls.SetLineage(ctx, missing, nil, shardlease.Start{Position: shardlease.TrimHorizon})
	assert.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
}

func testSetLineageRefused(t *testing.T, s shardlease.LeaseStore, ls shardlease.LineageStore) {
	ctx := t.Context()
	k := fresh(t, s)
	held := acquire(t, s, k, "a")
	_, err := ls.SetLineage(ctx, held, []string{"shardId-000000000007"}, shardlease.Start{Position: shardlease.TrimHorizon})
	assert.ErrorIs(t, err, shardlease.ErrLeaseHeld, "a held row is being read")
	cp, err := s.Checkpoint(ctx, held, "123", -1, expiry)
	require.NoError(t, err)
	free, err := s.Release(ctx, cp)
	require.NoError(t, err)
	_, err = ls.SetLineage(ctx, free, []string{"shardId-000000000007"}, shardlease.Start{Position: shardlease.TrimHorizon})
	assert.ErrorIs(t, err, shardlease.ErrLeaseHeld, "a row with a checkpoint was read")
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Empty(t, got.Parents)
	assert.Equal(t, free.Counter, got.Counter)
}

func testDeleteFinished(t *testing.T, s shardlease.LeaseStore, ls shardlease.LineageStore) {
	ctx := t.Context()
	k := fresh(t, s)
	held := acquire(t, s, k, "a")
	deleted, err := ls.DeleteFinished(ctx, held)
	require.NoError(t, err)
	assert.False(t, deleted, "a row that is not finished stays")

	end, err := s.Checkpoint(ctx, held, shardlease.ShardEnd, -1, expiry)
	require.NoError(t, err)
	deleted, err = ls.DeleteFinished(ctx, held)
	require.NoError(t, err)
	assert.False(t, deleted, "a row that moved since it was read stays")
	free, err := s.Release(ctx, end)
	require.NoError(t, err)
	deleted, err = ls.DeleteFinished(ctx, end)
	require.NoError(t, err)
	assert.False(t, deleted, "a stale counter keeps the row")

	deleted, err = ls.DeleteFinished(ctx, free)
	require.NoError(t, err)
	assert.True(t, deleted)
	_, err = s.Get(ctx, k)
	assert.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
	deleted, err = ls.DeleteFinished(ctx, free)
	require.NoError(t, err)
	assert.False(t, deleted, "deleting twice is harmless")
}

func ident(stream string, created time.Time) shardlease.StreamIdentity {
	return shardlease.StreamIdentity{Stream: stream, ARN: "arn:aws:kinesis:us-east-1:000000000000:stream/" + stream, Created: created}
}

func testIdentityRecordedOnce(t *testing.T, _ shardlease.LeaseStore, is shardlease.IdentityStore) {
	ctx := t.Context()
	st := uniqueStream(t)
	_, err := is.StreamIdentity(ctx, st)
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
	first := ident(st, time.Unix(1_700_000_000, 123_456_789))
	got, created, err := is.RecordStreamIdentity(ctx, first)
	require.NoError(t, err)
	assert.True(t, created)
	assert.True(t, first.Same(got))
	second := ident(st, first.Created.Add(time.Hour))
	got, created, err = is.RecordStreamIdentity(ctx, second)
	require.NoError(t, err)
	assert.False(t, created, "an identity is recorded once")
	assert.True(t, first.Same(got), "the recorded identity is returned: %v", got)
	got, err = is.StreamIdentity(ctx, st)
	require.NoError(t, err)
	assert.True(t, first.Same(got))

	_, _, err = is.RecordStreamIdentity(ctx, shardlease.StreamIdentity{Stream: st})
	assert.ErrorIs(t, err, shardlease.ErrInvalidConfig)
}

func testIdentityNotListed(t *testing.T, s shardlease.LeaseStore, is shardlease.IdentityStore) {
	ctx := t.Context()
	k := fresh(t, s)
	_, _, err := is.RecordStreamIdentity(ctx, ident(k.Stream, time.Unix(1_700_000_000, 0)))
	require.NoError(t, err)
	list, err := s.List(ctx, k.Stream)
	require.NoError(t, err)
	require.Len(t, list, 1, "the identity row is no lease")
	assert.Equal(t, k, list[0].Key)
	if ws, ok := s.(shardlease.WorkerStore); ok {
		leases, workers, err := ws.ListWithWorkers(ctx, k.Stream)
		require.NoError(t, err)
		assert.Len(t, leases, 1)
		assert.Empty(t, workers)
	}
}

func testIdentityReset(t *testing.T, s shardlease.LeaseStore, is shardlease.IdentityStore) {
	ctx := t.Context()
	k := fresh(t, s)
	other := fresh(t, s)
	second := shardlease.LeaseKey{Stream: k.Stream, Shard: "shardId-000000000001"}
	_, err := s.Create(ctx, second, nil)
	require.NoError(t, err)
	acquire(t, s, second, "a")
	if ws, ok := s.(shardlease.WorkerStore); ok {
		_, err := ws.Heartbeat(ctx, k.Stream, "idle")
		require.NoError(t, err)
	}
	old := ident(k.Stream, time.Unix(1_700_000_000, 0))
	_, _, err = is.RecordStreamIdentity(ctx, old)
	require.NoError(t, err)

	now := ident(k.Stream, old.Created.Add(24*time.Hour))
	n, err := is.ResetStream(ctx, now)
	require.NoError(t, err)
	assert.Equal(t, 2, n, "both lease rows deleted")
	list, err := s.List(ctx, k.Stream)
	require.NoError(t, err)
	assert.Empty(t, list)
	if ws, ok := s.(shardlease.WorkerStore); ok {
		_, workers, err := ws.ListWithWorkers(ctx, k.Stream)
		require.NoError(t, err)
		assert.Empty(t, workers)
	}
	got, err := is.StreamIdentity(ctx, k.Stream)
	require.NoError(t, err)
	assert.True(t, now.Same(got), "the new identity is recorded: %v", got)
	_, err = s.Get(ctx, other)
	assert.NoError(t, err, "other streams keep their rows")
}
