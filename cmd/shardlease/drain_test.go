package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// runConsumer runs a consumer of stream named owner until the test ends.
func runConsumer(t *testing.T, f *fixture, kc shardlease.KinesisAPI, stream, owner string) *shardlease.Consumer {
	t.Helper()
	c, err := shardlease.NewConsumer(kc, f.store, stream,
		func(context.Context, *shardlease.Batch) error { return nil },
		shardlease.WithOwnerID(owner), shardlease.WithLeaseDuration(2*time.Second),
		shardlease.WithTakeInterval(200*time.Millisecond), shardlease.WithIdlePollInterval(50*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return c
}

// drain -owner asks a running worker to drain through the table: it
// releases every lease while it keeps running, the other worker takes
// them, and the command returns once no lease names it.
func TestDrainCommand(t *testing.T) {
	f := newFixture(t)
	kc := emulator.Kinesis(t)
	stream := emulator.UniqueName("orders")
	require.NoError(t, emulator.CreateStream(t.Context(), kc, stream, 4))
	a := runConsumer(t, f, kc, stream, "drain-a")
	b := runConsumer(t, f, kc, stream, "drain-b")
	deadline := time.Now().Add(30 * time.Second)
	for len(a.Held())+len(b.Held()) < 4 || len(a.Held()) == 0 {
		require.True(t, time.Now().Before(deadline), "the consumers never held the 4 leases between them, a some")
		time.Sleep(20 * time.Millisecond)
	}

	r := f.run(t, env{poll: 20 * time.Millisecond}, "drain", "-stream", stream, "-owner", "drain-a", "-wait", "20s", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var res drainResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.Equal(t, []string{"drain-a"}, res.Drained)
	assert.NotEmpty(t, res.Shards)
	// The rows stop naming drain-a when its releases are written; its
	// runners leave Held a moment after.
	assert.Eventually(t, func() bool { return len(a.Held()) == 0 }, 10*time.Second, 10*time.Millisecond, "the drained worker holds nothing")
	rows, err := f.store.List(t.Context(), stream)
	require.NoError(t, err)
	for _, l := range rows {
		assert.NotEqual(t, "drain-a", shardlease.OwnerName(l.Owner), l.Key.Shard)
	}
	deadline = time.Now().Add(30 * time.Second) // the drain itself may have taken up to its -wait
	for len(b.Held()) < 4 {
		require.True(t, time.Now().Before(deadline), "the other worker never took the drained leases")
		time.Sleep(20 * time.Millisecond)
	}
	again := f.run(t, env{}, "drain", "-stream", stream, "-owner", "drain-a")
	require.Equal(t, 0, again.code, again.stderr)
	assert.Contains(t, again.stdout, "nothing to do")
}

// A drain nobody answers (the worker is gone, or of an earlier release)
// fails after -wait, naming the leases still held; bad flags are usage
// errors.
func TestDrainCommandUnanswered(t *testing.T) {
	f := newFixture(t)
	key := shardlease.LeaseKey{Stream: emulator.UniqueName("orders"), Shard: "shardId-000000000000"}
	f.held(t, key, "gone#0123456789abcdef")
	r := f.run(t, env{poll: 20 * time.Millisecond}, "drain", "-stream", key.Stream, "-owner", "gone", "-wait", "200ms")
	require.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "shardId-000000000000")
	assert.Contains(t, r.stderr, "still name a worker asked to drain")
	assert.Equal(t, "drain cli-1", f.get(t, key).Note, "the note asks the holder to drain")

	for _, args := range [][]string{
		{"-stream", key.Stream},
		{"-stream", key.Stream, "-owner", "a", "-all-but", "b"},
		{"-stream", key.Stream, "-owner", "a", "-wait", "0s"},
	} {
		u := f.run(t, env{}, "drain", args...)
		assert.Equal(t, 2, u.code, "%v: %s", args, u.stderr)
	}
}
