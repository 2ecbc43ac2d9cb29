package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// Defect: release -wait judged a lease dead after -wait even when its holder
// runs with a longer lease duration and renews less often than that. The
// wait is now the longer of -wait and the holder's lease duration written on
// the row.
func TestOneReaderReleaseWaitsHolderLeaseDuration(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	key := shardlease.LeaseKey{Stream: emulator.UniqueName("orders"), Shard: shard(0)}
	_, err := f.store.Create(ctx, key, nil)
	require.NoError(t, err)
	held, err := f.store.Acquire(shardlease.WithHolderLeaseDuration(ctx, 10*time.Minute), key, "worker-slow", 0)
	require.NoError(t, err)

	// The holder renews 300ms after the watch starts: well within its own
	// lease duration, but after -wait.
	renewed := make(chan error, 1)
	e := env{poll: 10 * time.Millisecond, watching: func(l shardlease.Lease) {
		time.AfterFunc(300*time.Millisecond, func() {
			_, err := f.store.Renew(ctx, l, time.Now())
			renewed <- err
		})
	}}
	r := f.run(t, e, "release", "-stream", key.Stream, "-shard", key.Shard, "-wait", "50ms")
	require.NoError(t, <-renewed)
	assert.Equal(t, 1, r.code, r.stdout)
	assert.Contains(t, r.stderr, "watching "+key.String()+" for 10m0s")
	assert.Contains(t, r.stderr, "holder is alive")
	now := f.get(t, key)
	assert.Equal(t, "worker-slow", now.Owner)
	assert.Equal(t, held.Counter+1, now.Counter, "only the holder's renewal")
}
