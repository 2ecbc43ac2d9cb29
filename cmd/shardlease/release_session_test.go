package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// keptLease makes key's row and takes it in a new session of owner, whose
// lease duration is d.
func (f *fixture) keptLease(t *testing.T, key shardlease.LeaseKey, owner string, d time.Duration) (shardlease.Worker, shardlease.Lease) {
	t.Helper()
	ctx := shardlease.WithHolderLeaseDuration(t.Context(), d)
	_, err := f.store.Create(ctx, key, nil)
	require.NoError(t, err)
	w, err := f.store.OpenSession(ctx, key.Stream, owner)
	require.NoError(t, err)
	l, err := f.store.AcquireInSession(ctx, key, w, 0)
	require.NoError(t, err)
	return w, l
}

// TestSessionReleaseWaitsOnTheSession: the row of a lease a session keeps
// stands still while its holder runs, so release -wait judges the holder by
// its session: refused while the session is kept during the wait (the
// lease stays with its holder), released once the session stood still for
// the wait and its session's lease duration, after a fence that ends the
// holder's keeps.
func TestSessionReleaseWaitsOnTheSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	stream := emulator.UniqueName("orders")

	t.Run("live", func(t *testing.T) {
		key := shardlease.LeaseKey{Stream: stream, Shard: shard(0)}
		w, l := f.keptLease(t, key, "worker-live", 300*time.Millisecond)
		kept := make(chan error, 1)
		e := env{poll: 10 * time.Millisecond, watching: func(shardlease.Lease) {
			time.AfterFunc(100*time.Millisecond, func() {
				_, _, err := f.store.KeepSession(ctx, w)
				kept <- err
			})
		}}
		r := f.run(t, e, "release", "-stream", stream, "-shard", key.Shard, "-wait", "50ms")
		require.NoError(t, <-kept)
		assert.Equal(t, 1, r.code, r.stdout)
		assert.Contains(t, r.stderr, "holder is alive")
		now := f.get(t, key)
		assert.Equal(t, "worker-live", now.Owner)
		assert.Equal(t, l.Counter, now.Counter, "nothing was written to the row")
		assert.Equal(t, w.Key(), now.Session)
		_, _, err := f.store.KeepSession(ctx, w)
		require.NoError(t, err, "the holder's session lives on")
	})

	t.Run("dead", func(t *testing.T) {
		key := shardlease.LeaseKey{Stream: stream, Shard: shard(1)}
		w, l := f.keptLease(t, key, "worker-dead", 200*time.Millisecond)
		start := time.Now()
		r := f.run(t, env{poll: 10 * time.Millisecond}, "release", "-stream", stream, "-shard", key.Shard, "-wait", "50ms")
		require.Equal(t, 0, r.code, r.stderr)
		assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "the wait is the session's lease duration at least")
		now := f.get(t, key)
		assert.False(t, now.Held())
		assert.Empty(t, now.Session)
		assert.Greater(t, now.Counter, l.Counter)
		_, _, err := f.store.KeepSession(ctx, w)
		require.ErrorIs(t, err, shardlease.ErrLeaseLost, "the session was fenced before the take")
	})
}
