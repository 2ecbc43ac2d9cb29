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
	t.Parallel()
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
	assert.Contains(t, r.stderr, "watching it for 10m0s")
	assert.Contains(t, r.stderr, "holder is alive")
	now := f.get(t, key)
	assert.Equal(t, "worker-slow", now.Owner)
	assert.Equal(t, held.Counter+1, now.Counter, "only the holder's renewal")
}

// Defect: reset and release acquired a free row whatever its counter, so a
// consumer that took the row, checkpointed and released it between the
// command's read and its write had its checkpoint overwritten, and the
// command reported a checkpoint it had not replaced. They now acquire on the
// exact counter they read, under an identity unique to the command.
func TestOneReaderCLIExactCounter(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	stream := emulator.UniqueName("orders")
	key := shardlease.LeaseKey{Stream: stream, Shard: shard(0)}
	_, err := f.store.Create(ctx, key, nil)
	require.NoError(t, err)
	l, err := f.store.Acquire(ctx, key, "worker-a", 0)
	require.NoError(t, err)
	l, err = f.store.Checkpoint(ctx, l, "100", -1, time.Now())
	require.NoError(t, err)
	_, err = f.store.Release(ctx, l)
	require.NoError(t, err)

	// A consumer takes the free row, checkpoints 500 and releases it while
	// the command runs.
	var moved bool
	e := env{acquiring: func(seen shardlease.Lease) {
		if moved {
			return
		}
		moved = true
		l, err := f.store.Acquire(ctx, key, "worker-b", seen.Counter)
		require.NoError(t, err)
		l, err = f.store.Checkpoint(ctx, l, "500", -1, time.Now())
		require.NoError(t, err)
		_, err = f.store.Release(ctx, l)
		require.NoError(t, err)
	}}
	r := f.run(t, e, "reset", "-stream", stream, "-shard", key.Shard, "-to", "42")
	assert.Equal(t, 1, r.code, r.stdout)
	assert.Contains(t, r.stderr, "nothing was changed")
	assert.Equal(t, "500", f.get(t, key).Checkpoint, "the consumer's checkpoint stands")

	// Run again, it resets what it shows.
	r = f.run(t, env{}, "reset", "-stream", stream, "-shard", key.Shard, "-to", "42", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"previous_checkpoint": "500"`)
	assert.Equal(t, "42", f.get(t, key).Checkpoint)
}
