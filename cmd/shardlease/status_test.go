package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// shardlease status exists (it was an unknown command) and shows who
// reads the stream: leases per worker with their lag, the coordinator, the
// idle workers and the leases nobody reads.
func TestMistakeStatusCommandExists(t *testing.T) {
	t.Parallel()
	r := runCLI(t, env{}, "status")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "shardlease status: missing -table", "a command, not an unknown one")

	f := newFixture(t)
	ctx := t.Context()
	stream := emulator.UniqueName("orders")
	key := func(n int) shardlease.LeaseKey { return shardlease.LeaseKey{Stream: stream, Shard: shard(n)} }
	// 0: pod-a, 1.5s behind, checkpoint waiting 4s. 1: pod-a, no lag
	// written. 2: pod-b, asked to hand off. 3: finished. 4: free.
	a0 := f.held(t, key(0), id("pod-a"))
	_, err := f.store.Renew(shardlease.WithHolderLag(ctx, shardlease.Lag{BehindLatest: 1500 * time.Millisecond, CheckpointAge: 4 * time.Second}), a0, time.Now())
	require.NoError(t, err)
	f.held(t, key(1), id("pod-a"))
	b2 := f.held(t, key(2), id("pod-b"))
	_, err = f.store.RequestHandoff(ctx, b2, id("pod-c"))
	require.NoError(t, err)
	_, err = f.store.Release(ctx, f.checkpointed(t, key(3), id("pod-b"), shardlease.ShardEnd))
	require.NoError(t, err)
	_, err = f.store.Create(ctx, key(4), nil)
	require.NoError(t, err)
	_, err = f.store.Heartbeat(ctx, stream, id("pod-c"))
	require.NoError(t, err)
	f.held(t, shardlease.LeaseKey{Stream: "payments", Shard: shard(0)}, id("pod-z"))

	r = f.run(t, env{}, "status", "-stream", stream)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	require.Len(t, lines, 6, r.stdout)
	assert.Equal(t, "stream "+stream+", table "+f.table+": 5 leases: 3 held by 2 workers, 1 free, 1 finished", lines[0])
	assert.Equal(t, []string{"OWNER", "LEASES", "MAX", "BEHIND", "MAX", "CHECKPOINT", "AGE", "NOTE"}, strings.Fields(lines[1]))
	assert.Equal(t, []string{"pod-a", "2", "1.5s", "4s", "coordinating"}, strings.Fields(lines[2]))
	assert.Equal(t, []string{"pod-b", "1", "-", "-", "handing", "off", "1"}, strings.Fields(lines[3]))
	assert.Equal(t, "idle (running, holding no lease): pod-c", lines[4])
	assert.True(t, strings.HasPrefix(lines[5], "read by nobody now: 1 lease free ("+shard(4)+")"), lines[5])

	r = f.run(t, env{}, "status", "-stream", stream, "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var res tableStatus
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	require.Len(t, res.Streams, 1)
	s := res.Streams[0]
	assert.Equal(t, []string{shard(4)}, s.ReadableFree)
	assert.Equal(t, []string{"pod-c"}, s.Idle)
	require.Len(t, s.Workers, 2)
	assert.Equal(t, []string{shard(0), shard(1)}, s.Workers[0].Shards)
	require.NotNil(t, s.Workers[0].MaxBehindMs)
	assert.Equal(t, int64(1500), *s.Workers[0].MaxBehindMs)
	assert.Nil(t, s.Workers[1].MaxBehindMs)

	// Every stream: one block each.
	r = f.run(t, env{}, "status")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "stream "+stream+", table "+f.table+": 5 leases")
	assert.Contains(t, r.stdout, "stream payments, table "+f.table+": 1 lease: 1 held by 1 worker, 0 free, 0 finished")

	// A stream the table does not hold fails as list does.
	r = f.run(t, env{}, "status", "-stream", "paymnets")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "did you mean -stream payments?")
}

// A typo of a command suggests the nearest instead of the whole usage.
func TestMistakeUnknownCommandSuggestsTheNearest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ typed, want string }{
		{"lsit", `did you mean "list"?`},
		{"stauts", `did you mean "status"?`},
		{"rewnid", `did you mean "rewind"?`},
		{"drian", `did you mean "drain"?`},
		{"creat-table", `did you mean "create-table"?`},
		{"dereg", `did you mean "deregister-consumer"?`},
		{"frobnicate", "the commands are: create-table, list, status, "},
	} {
		r := runCLI(t, env{}, tc.typed)
		assert.Equal(t, 2, r.code, tc.typed)
		assert.Contains(t, r.stderr, `shardlease: unknown command "`+tc.typed+`"; `+tc.want, tc.typed)
		assert.LessOrEqual(t, strings.Count(r.stderr, "\n"), 2, "%s: no 30 lines of usage: %s", tc.typed, r.stderr)
	}
	r := runCLI(t, env{}, "help", "stauts")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `did you mean "status"?`)
}
