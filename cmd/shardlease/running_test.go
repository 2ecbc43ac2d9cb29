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

// The list command shows the leases a running consumer holds.
func TestListShowsRunningConsumer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kc := emulator.Kinesis(t)
	stream := emulator.UniqueName("orders")
	require.NoError(t, emulator.CreateStream(t.Context(), kc, stream, 3))

	c, err := shardlease.NewConsumer(kc, f.store, stream,
		func(context.Context, *shardlease.Batch) error { return nil },
		shardlease.WithOwnerID("running-worker"), shardlease.WithLeaseDuration(2*time.Second),
		shardlease.WithTakeInterval(200*time.Millisecond), shardlease.WithIdlePollInterval(50*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(c.Held()) < 3 {
		require.True(t, time.Now().Before(deadline), "the consumer never held its 3 leases")
		time.Sleep(20 * time.Millisecond)
	}

	r := f.run(t, env{}, "list", "-stream", stream, "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var rows []struct {
		Shard string `json:"shard"`
		Owner string `json:"owner"`
		Held  bool   `json:"held"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows))
	require.Len(t, rows, 3)
	for _, row := range rows {
		assert.Equal(t, "running-worker", shardlease.OwnerName(row.Owner), row.Shard)
		assert.True(t, row.Held, row.Shard)
	}

	text := f.run(t, env{}, "list", "-stream", stream)
	require.Equal(t, 0, text.code, text.stderr)
	assert.Contains(t, text.stdout, "running-worker")
	assert.Contains(t, text.stdout, "shardId-000000000002")
}
