package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// reset -force on a running consumer's lease leaves the row held by the
// command, with the consumer's lease duration, and a consumer takes it only
// once it has stood still for that long: never beside the old holder.
func TestResetForceLeavesTheLeaseHeldUntilTheHolderStopped(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kc := emulator.Kinesis(t)
	stream, seqs := streamWithRecords(t, kc, "cli-reset-force", 3)
	key := shardlease.LeaseKey{Stream: stream, Shard: shard(0)}
	c := runConsumer(t, f, kc, stream, "reset-a")
	require.Eventually(t, func() bool { return slices.Contains(c.Held(), key.Shard) },
		30*time.Second, 20*time.Millisecond, "the consumer never took the lease")

	start := time.Now()
	r := f.run(t, env{hostname: func() (string, error) { return "ops-box", nil }}, "reset", "-stream", stream, "-shard", key.Shard, "-to", seqs[0], "-force", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var res resetResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.Equal(t, "reset-a", shardlease.OwnerName(res.PreviousOwner))
	assert.Equal(t, "shardlease-cli@ops-box", shardlease.OwnerName(res.Owner), "left held by the command")
	assert.Equal(t, int64(2000), res.ResumeAfterMillis, "the consumer's lease duration")
	row := f.get(t, key)
	assert.Equal(t, res.Owner, row.Owner)
	assert.Equal(t, seqs[0], row.Checkpoint)
	assert.Equal(t, 2*time.Second, row.Duration)

	// The consumer loses the lease, then takes it back once the row stood
	// still for its lease duration after the command's last write.
	var taken time.Duration
	require.Eventually(t, func() bool {
		l := f.get(t, key)
		if l.Owner == res.Owner {
			return false
		}
		taken = time.Since(start)
		return strings.HasPrefix(l.Owner, "reset-a#")
	}, 30*time.Second, 10*time.Millisecond, "no consumer took the lease back")
	assert.GreaterOrEqual(t, taken, 2*time.Second, "taken only after the holder's lease duration")
	require.Eventually(t, func() bool { return slices.Contains(c.Held(), key.Shard) },
		30*time.Second, 20*time.Millisecond, "the consumer reads the shard again")

	// Without -force, the text says the lease is free; with it, who keeps it
	// and for how long.
	r = f.run(t, env{hostname: func() (string, error) { return "ops-box", nil }}, "reset", "-stream", stream, "-shard", key.Shard, "-to", seqs[1], "-force")
	require.Equal(t, 0, r.code, r.stderr)
	for _, want := range []string{"checkpoint moved from ", "took the lease from reset-a#", "the lease stays with shardlease-cli@ops-box#",
		"stood still for the holder's lease duration (2s), when the old holder has stopped"} {
		assert.Contains(t, r.stdout, want)
	}
}
