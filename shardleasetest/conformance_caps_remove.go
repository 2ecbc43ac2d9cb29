package shardleasetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// removedStream is a stream whose rows a test deletes, beside a stream whose
// name a prefix match would confuse with it.
type removedStream struct {
	stream, other string
	otherRows     []shardlease.Lease
}

// newRemovedStream makes stream's worker and identity rows (when the store
// keeps them) and another stream's rows, which no deletion of stream may
// touch.
func newRemovedStream(t *testing.T, s shardlease.LeaseStore) removedStream {
	ctx := t.Context()
	r := removedStream{stream: uniqueStream(t)}
	r.other = r.stream + "b"
	makeRows(t, s, r.other, 2)
	acquire(t, s, shardKey(r.other, 0), "a")
	if ws, ok := s.(shardlease.WorkerStore); ok {
		for _, st := range []string{r.stream, r.other} {
			_, err := ws.Heartbeat(ctx, st, "a")
			require.NoError(t, err)
		}
	}
	if is, ok := s.(shardlease.IdentityStore); ok {
		for _, st := range []string{r.stream, r.other} {
			_, _, err := is.RecordStreamIdentity(ctx, ident(st, time.Unix(1_700_000_000, 0)))
			require.NoError(t, err)
		}
	}
	r.otherRows = listed(t, s, r.other)
	return r
}

// check asserts what DeleteStreamRows leaves of stream: its lease rows
// want, no worker row, and its identity row while a lease row is left; and
// the other stream untouched.
func (r removedStream) check(t *testing.T, s shardlease.LeaseStore, want []shardlease.Lease) {
	t.Helper()
	ctx := t.Context()
	assert.Equal(t, want, listed(t, s, r.stream), "the lease rows left of %s", r.stream)
	if ws, ok := s.(shardlease.WorkerStore); ok {
		assert.Empty(t, workersOf(t, ws, r.stream), "the worker rows of %s are deleted", r.stream)
		assert.Len(t, workersOf(t, ws, r.other), 1, "the worker rows of %s stay", r.other)
	}
	if is, ok := s.(shardlease.IdentityStore); ok {
		_, err := is.StreamIdentity(ctx, r.stream)
		if len(want) > 0 {
			assert.NoError(t, err, "the identity row stays while a lease row of %s is left", r.stream)
		} else {
			assert.ErrorIs(t, err, shardlease.ErrLeaseNotFound, "the identity row goes with the last lease row of %s", r.stream)
		}
		_, err = is.StreamIdentity(ctx, r.other)
		assert.NoError(t, err, "the identity row of %s stays", r.other)
	}
	assert.Equal(t, r.otherRows, listed(t, s, r.other), "the rows of %s stay as they were", r.other)
}

// testRemoveKeepsHeld: free rows are deleted and counted, a held row is
// left as it is and counted, and its holder's handle still works; once it
// is released, a second call deletes the rest.
func testRemoveKeepsHeld(t *testing.T, s shardlease.LeaseStore, sr shardlease.StreamRemover) {
	ctx := t.Context()
	r := newRemovedStream(t, s)
	keys := makeRows(t, s, r.stream, 3)
	read := acquire(t, s, keys[0], "a")
	read, err := s.Checkpoint(ctx, read, "123", -1, expiry)
	require.NoError(t, err)
	_, err = s.Release(ctx, read) // free, with a checkpoint
	require.NoError(t, err)
	holder := acquire(t, s, keys[1], "b")
	heldRow, err := s.Get(ctx, keys[1])
	require.NoError(t, err)

	deleted, held, err := sr.DeleteStreamRows(ctx, r.stream, nil)
	require.NoError(t, err)
	assert.Equal(t, 2, deleted, "the two free rows")
	assert.Equal(t, 1, held, "the held row")
	r.check(t, s, []shardlease.Lease{heldRow})

	renewed, err := s.Renew(ctx, holder, expiry)
	require.NoError(t, err, "the holder's handle still works")
	_, err = s.Release(ctx, renewed)
	require.NoError(t, err)
	deleted, held, err = sr.DeleteStreamRows(ctx, r.stream, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, deleted, "the released row")
	assert.Zero(t, held)
	r.check(t, s, nil)
}

// testRemoveHonoursStale: a held row is deleted when stale names its shard
// with the row's counter, and kept when stale names another counter (its
// holder wrote since) or does not name it.
func testRemoveHonoursStale(t *testing.T, s shardlease.LeaseStore, sr shardlease.StreamRemover) {
	ctx := t.Context()
	r := newRemovedStream(t, s)
	keys := makeRows(t, s, r.stream, 4)
	gone := acquire(t, s, keys[0], "a")
	moved := acquire(t, s, keys[1], "b")
	renewed, err := s.Renew(ctx, moved, expiry)
	require.NoError(t, err)
	acquire(t, s, keys[2], "c")
	free, err := s.Get(ctx, keys[3])
	require.NoError(t, err)
	stale := map[string]int64{
		keys[0].Shard:          gone.Counter,
		keys[1].Shard:          moved.Counter, // seen before the renewal
		keys[3].Shard:          free.Counter + 5,
		"shardId-000000000099": 1, // no such row
	}
	left := []shardlease.Lease{}
	for _, k := range keys[1:3] {
		row, err := s.Get(ctx, k)
		require.NoError(t, err)
		left = append(left, row)
	}

	deleted, held, err := sr.DeleteStreamRows(ctx, r.stream, stale)
	require.NoError(t, err)
	assert.Equal(t, 2, deleted, "the stale row at its counter and the free row")
	assert.Equal(t, 2, held, "the row whose holder wrote since, and the one stale does not name")
	r.check(t, s, left)
	_, err = s.Renew(ctx, renewed, expiry)
	assert.NoError(t, err, "the holder that wrote since still holds")

	deleted, held, err = sr.DeleteStreamRows(ctx, r.stream, map[string]int64{keys[1].Shard: renewed.Counter + 1, keys[2].Shard: left[1].Counter})
	require.NoError(t, err)
	assert.Equal(t, 2, deleted)
	assert.Zero(t, held)
	r.check(t, s, nil)
}

// testRemoveNothingLeft: a stream without lease rows loses its worker and
// identity rows, and a second call is harmless.
func testRemoveNothingLeft(t *testing.T, s shardlease.LeaseStore, sr shardlease.StreamRemover) {
	r := newRemovedStream(t, s)
	for range 2 {
		deleted, held, err := sr.DeleteStreamRows(t.Context(), r.stream, nil)
		require.NoError(t, err)
		assert.Zero(t, deleted)
		assert.Zero(t, held)
		r.check(t, s, nil)
	}
	deleted, held, err := sr.DeleteStreamRows(t.Context(), uniqueStream(t), nil)
	require.NoError(t, err, "a stream the table never saw")
	assert.Zero(t, deleted)
	assert.Zero(t, held)
}

func testRemoveBadInput(t *testing.T, s shardlease.LeaseStore, sr shardlease.StreamRemover) {
	r := newRemovedStream(t, s)
	keys := makeRows(t, s, r.stream, 1)
	for _, bad := range []string{"", "has:colon", "bad stream!"} {
		_, _, err := sr.DeleteStreamRows(t.Context(), bad, nil)
		assert.ErrorIs(t, err, shardlease.ErrInvalidName, "stream %q", bad)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err := sr.DeleteStreamRows(ctx, r.stream, nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = s.Get(t.Context(), keys[0])
	assert.NoError(t, err, "a cancelled call deletes nothing")
	assert.Equal(t, r.otherRows, listed(t, s, r.other))
}
