package shardleasetest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// noteTests are the subtests of shardlease.NoteStore, skipped for a store
// that does not implement it.
var noteTests = []struct {
	name string
	fn   func(t *testing.T, s shardlease.LeaseStore)
}{
	{"NoteLeavesCounterAndRenewalReturnsIt", notes(testNoteRoundTrip)},
	{"NoteRefusedWhenOwnerMoved", notes(testNoteRefused)},
	{"NoteClearedByAcquireAndRelease", notes(testNoteCleared)},
	{"GetEventuallyReadsTheRow", notes(testGetEventually)},
}

func notes(fn func(t *testing.T, s shardlease.LeaseStore, ns shardlease.NoteStore)) func(t *testing.T, s shardlease.LeaseStore) {
	return func(t *testing.T, s shardlease.LeaseStore) {
		ns, ok := s.(shardlease.NoteStore)
		if !ok {
			t.Skipf("%T does not implement shardlease.NoteStore", s)
		}
		fn(t, s, ns)
	}
}

func testNoteRoundTrip(t *testing.T, s shardlease.LeaseStore, ns shardlease.NoteStore) {
	k := fresh(t, s)
	l := acquire(t, s, k, "a")
	noted, err := ns.Note(t.Context(), l, "wake 1")
	require.NoError(t, err)
	assert.Equal(t, l.Counter, noted.Counter, "a note leaves the counter")
	assert.Equal(t, "a", noted.Owner)
	assert.Equal(t, "wake 1", noted.Note)
	// The holder's handle is still good, and its renewal returns the note.
	renewed, err := s.Renew(t.Context(), l, expiry)
	require.NoError(t, err)
	assert.Equal(t, "wake 1", renewed.Note)
	assert.Equal(t, l.Counter+1, renewed.Counter)
	// A later note replaces it; an empty one removes it.
	_, err = ns.Note(t.Context(), renewed, "deputy s 2")
	require.NoError(t, err)
	got, err := s.Get(t.Context(), k)
	require.NoError(t, err)
	assert.Equal(t, "deputy s 2", got.Note)
	_, err = ns.Note(t.Context(), renewed, "")
	require.NoError(t, err)
	got, err = s.Get(t.Context(), k)
	require.NoError(t, err)
	assert.Empty(t, got.Note)
}

func testNoteRefused(t *testing.T, s shardlease.LeaseStore, ns shardlease.NoteStore) {
	k := fresh(t, s)
	free, err := s.Get(t.Context(), k)
	require.NoError(t, err)
	_, err = ns.Note(t.Context(), free, "wake 1")
	assert.Error(t, err, "a free row has no holder to note")
	a := acquire(t, s, k, "a")
	b, err := s.Acquire(t.Context(), k, "b", a.Counter)
	require.NoError(t, err)
	_, err = ns.Note(t.Context(), a, "wake 1")
	require.ErrorIs(t, err, shardlease.ErrLeaseHeld, "the row moved to b")
	got, err := s.Get(t.Context(), k)
	require.NoError(t, err)
	assert.Empty(t, got.Note)
	assert.Equal(t, b.Counter, got.Counter)
	_, err = ns.Note(t.Context(), shardlease.Lease{Key: shardlease.LeaseKey{Stream: k.Stream, Shard: "shardId-missing"}, Owner: "a"}, "wake 1")
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
}

func testNoteCleared(t *testing.T, s shardlease.LeaseStore, ns shardlease.NoteStore) {
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	_, err := ns.Note(t.Context(), a, "deputy s 1")
	require.NoError(t, err)
	b, err := s.Acquire(t.Context(), k, "b", a.Counter)
	require.NoError(t, err)
	assert.Empty(t, b.Note, "a new holder starts without the old holder's note")
	_, err = ns.Note(t.Context(), b, "wake 2")
	require.NoError(t, err)
	r, err := s.Release(t.Context(), b)
	require.NoError(t, err)
	assert.Empty(t, r.Note, "a released row carries no note")
}

func testGetEventually(t *testing.T, s shardlease.LeaseStore, ns shardlease.NoteStore) {
	k := fresh(t, s)
	a := acquire(t, s, k, "a")
	got, err := ns.GetEventually(t.Context(), k)
	require.NoError(t, err)
	assert.Equal(t, a.Owner, got.Owner)
	assert.Equal(t, a.Counter, got.Counter)
	_, err = ns.GetEventually(t.Context(), shardlease.LeaseKey{Stream: k.Stream, Shard: "shardId-missing"})
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
}
