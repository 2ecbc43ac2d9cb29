package main

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// runConsumer runs a consumer of stream named owner, with extra options,
// until the test ends.
func runConsumer(t *testing.T, f *fixture, kc shardlease.KinesisAPI, stream, owner string, extra ...shardlease.Option) *shardlease.Consumer {
	t.Helper()
	c, err := shardlease.NewConsumer(kc, f.store, stream,
		func(context.Context, *shardlease.Batch) error { return nil },
		append([]shardlease.Option{shardlease.WithOwnerID(owner), shardlease.WithLeaseDuration(2 * time.Second),
			shardlease.WithTakeInterval(200 * time.Millisecond), shardlease.WithIdlePollInterval(50 * time.Millisecond)}, extra...)...)
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
	t.Parallel()
	f := newFixture(t)
	kc := emulator.Kinesis(t)
	stream := emulator.UniqueName("orders")
	require.NoError(t, emulator.CreateStream(t.Context(), kc, stream, 4))
	// Pinned to per-lease renewals: a drained worker keeps no worker row only without sessions.
	off := shardlease.WithSessions(false)
	a := runConsumer(t, f, kc, stream, "drain-a", off)
	b := runConsumer(t, f, kc, stream, "drain-b", off)
	require.Eventually(t, func() bool { return len(a.Held())+len(b.Held()) == 4 && len(a.Held()) > 0 },
		30*time.Second, 20*time.Millisecond, "the consumers never held the 4 leases between them, a some")

	r := f.run(t, env{poll: 20 * time.Millisecond}, "drain", "-stream", stream, "-owner", "drain-a", "-wait", "20s", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var res drainResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.Equal(t, []string{"drain-a"}, res.Drained)
	assert.Equal(t, []string{"drain-b"}, res.Others)
	assert.NotEmpty(t, res.Shards)
	// The rows stop naming drain-a when its releases are written; its
	// runners leave Held a moment after.
	assert.Eventually(t, func() bool { return len(a.Held()) == 0 }, 10*time.Second, 10*time.Millisecond, "the drained worker holds nothing")
	rows, err := f.store.List(t.Context(), stream)
	require.NoError(t, err)
	for _, l := range rows {
		assert.NotEqual(t, "drain-a", shardlease.OwnerName(l.Owner), l.Key.Shard)
	}
	require.Eventually(t, func() bool { return len(b.Held()) == 4 },
		30*time.Second, 20*time.Millisecond, "the other worker never took the drained leases")
	text := f.run(t, env{}, "drain", "-stream", stream, "-owner", "drain-a")
	require.Equal(t, 1, text.code, "drain-a is drained: it holds nothing and keeps no worker row: %s", text.stdout)
	assert.Contains(t, text.stderr, "no lease is held by a worker of owner id drain-a, so nothing was drained; leases are held by drain-b (4 leases)")
}

// drain -owner reaches a worker whose session keeps its leases (it writes
// its lease rows only for checkpoints): the note is mailed to its session,
// and it releases every lease while it keeps running.
func TestDrainCommandWithSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kc := emulator.Kinesis(t)
	stream := emulator.UniqueName("orders")
	require.NoError(t, emulator.CreateStream(t.Context(), kc, stream, 4))
	on := shardlease.WithSessions(true)
	a := runConsumer(t, f, kc, stream, "drain-a", on)
	b := runConsumer(t, f, kc, stream, "drain-b", on)
	require.Eventually(t, func() bool { return len(a.Held())+len(b.Held()) == 4 && len(a.Held()) > 0 },
		30*time.Second, 20*time.Millisecond, "the consumers never held the 4 leases between them, a some")
	rows, err := f.store.List(t.Context(), stream)
	require.NoError(t, err)
	for _, l := range rows {
		require.NotEmpty(t, l.Session, "%s is kept by a session", l.Key.Shard)
	}

	// The worker that does not coordinate lists nothing: only the mail
	// tells it of the note.
	require.Eventually(t, func() bool { return a.Stats().Coordinating != b.Stats().Coordinating },
		30*time.Second, 20*time.Millisecond, "one coordinator")
	drained, other, owner := a, b, "drain-a"
	if a.Stats().Coordinating {
		drained, other, owner = b, a, "drain-b"
	}
	require.NotEmpty(t, drained.Held())
	r := f.run(t, env{poll: 20 * time.Millisecond}, "drain", "-stream", stream, "-owner", owner, "-wait", "10s", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Eventually(t, func() bool { return len(drained.Held()) == 0 }, 10*time.Second, 10*time.Millisecond, "the drained worker holds nothing")
	require.Eventually(t, func() bool { return len(other.Held()) == 4 },
		30*time.Second, 20*time.Millisecond, "the other worker never took the drained leases")
}

// A drain nobody answers (the worker is gone, or of an earlier release)
// fails after -wait, naming the leases still held; bad flags are usage
// errors.
func TestDrainCommandUnanswered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	key := shardlease.LeaseKey{Stream: emulator.UniqueName("orders"), Shard: "shardId-000000000000"}
	f.held(t, key, "gone#0123456789abcdef")
	r := f.run(t, env{poll: 20 * time.Millisecond}, "drain", "-stream", key.Stream, "-owner", "gone", "-wait", "200ms", "-force")
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

// id is an identity of owner as a consumer writes it in rows.
func id(owner string) string { return owner + "#0123456789abcdef" }

// notes returns the note of each row of stream, by shard.
func (f *fixture) notes(t *testing.T, stream string) map[string]string {
	t.Helper()
	rows, err := f.store.List(t.Context(), stream)
	require.NoError(t, err)
	out := map[string]string{}
	for _, l := range rows {
		out[l.Key.Shard] = l.Note
	}
	return out
}

// drain -owner of an owner that holds nothing (a host name where the
// service sets no WithOwnerID, a typo) refuses with exit status 1, listing
// the owners that do hold leases and how owner ids are made; nothing is
// asked of anyone.
func TestMistakeDrainOfAnOwnerHoldingNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	stream := emulator.UniqueName("orders")
	f.held(t, shardlease.LeaseKey{Stream: stream, Shard: shard(0)}, id("pod-a"))
	f.held(t, shardlease.LeaseKey{Stream: stream, Shard: shard(1)}, id("pod-b"))
	f.held(t, shardlease.LeaseKey{Stream: stream, Shard: shard(2)}, id("pod-b"))

	for _, args := range [][]string{{"-owner", "ip-10-0-0-7"}, {"-owner", "ip-10-0-0-7", "-json"}} {
		r := f.run(t, env{}, "drain", append([]string{"-stream", stream, "-wait", "1s"}, args...)...)
		assert.Equal(t, 1, r.code, args)
		assert.Contains(t, r.stderr, "table "+f.table+", stream "+stream+": no lease is held by a worker of owner id ip-10-0-0-7, so nothing was drained; "+
			"leases are held by pod-a (1 lease), pod-b (2 leases)", args)
		assert.Contains(t, r.stderr, "without it, the host name plus \"-\" and 8 random hex digits", args)
		assert.Contains(t, r.stderr, "WithOwnerID(os.Getenv(\"POD_NAME\"))", args)
	}
	assert.Equal(t, map[string]string{shard(0): "", shard(1): "", shard(2): ""}, f.notes(t, stream), "nobody was asked to drain")

	// An owner that runs idle (a worker row, no lease) is nothing to do.
	_, err := f.store.Heartbeat(t.Context(), stream, id("pod-c"))
	require.NoError(t, err)
	r := f.run(t, env{}, "drain", "-stream", stream, "-owner", "pod-c")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "worker pod-c holds no lease of stream "+stream+" (it runs idle); nothing to drain\n", r.stdout)
}

// A drain that would leave the stream to nobody is refused unless -force:
// the drained workers are the only ones holding leases or running.
func TestMistakeDrainLeavingTheStreamToNobody(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	stream := emulator.UniqueName("orders")
	f.held(t, shardlease.LeaseKey{Stream: stream, Shard: shard(0)}, id("pod-a"))
	f.held(t, shardlease.LeaseKey{Stream: stream, Shard: shard(1)}, id("pod-b"))

	// -all-but naming nobody alive.
	r := f.run(t, env{}, "drain", "-stream", stream, "-all-but", "pod-gone", "-wait", "1s")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "draining pod-a, pod-b would leave the stream to nobody")
	assert.Contains(t, r.stderr, "Nothing was drained; start another worker first and run this again, or pass -force")
	// Only pod-a remains a holder once pod-b's lease is gone.
	_, err := f.store.Release(t.Context(), f.get(t, shardlease.LeaseKey{Stream: stream, Shard: shard(1)}))
	require.NoError(t, err)
	r = f.run(t, env{}, "drain", "-stream", stream, "-owner", "pod-a")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "draining pod-a would leave the stream to nobody", r.stderr)
	assert.Contains(t, r.stderr, "its 1 held lease would not be read")
	assert.Equal(t, map[string]string{shard(0): "", shard(1): ""}, f.notes(t, stream), "nobody was asked to drain")
}

// With -force the last worker drains, and the output says that nobody
// reads the stream now instead of naming other workers that do not exist.
func TestMistakeDrainOfTheLastWorkerForcedSaysNobodyReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kc := emulator.Kinesis(t)
	stream := emulator.UniqueName("orders")
	require.NoError(t, emulator.CreateStream(t.Context(), kc, stream, 2))
	a := runConsumer(t, f, kc, stream, "last-worker")
	require.Eventually(t, func() bool { return len(a.Held()) == 2 },
		30*time.Second, 20*time.Millisecond, "the consumer never held its 2 leases")
	r := f.run(t, env{poll: 20 * time.Millisecond}, "drain", "-stream", stream, "-owner", "last-worker", "-wait", "20s")
	require.Equal(t, 1, r.code, r.stdout)
	assert.Contains(t, r.stderr, "would leave the stream to nobody")
	assert.Len(t, a.Held(), 2, "nothing was asked of the worker")

	r = f.run(t, env{poll: 20 * time.Millisecond}, "drain", "-stream", stream, "-owner", "last-worker", "-wait", "20s", "-force")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "drained last-worker: 2 leases of stream "+stream+" released (-force): no other worker runs, so nobody reads the stream until one starts")
	assert.NotContains(t, r.stdout, "other workers (")
	// The rows stop naming the worker when its releases are written; its
	// runners leave Held a moment after.
	assert.Eventually(t, func() bool { return len(a.Held()) == 0 }, 10*time.Second, 10*time.Millisecond, "the drained worker holds nothing")
}

// Where the service sets no WithOwnerID, -owner HOST drains the worker
// whose owner id is the library's default for that host, and no other.
func TestMistakeDrainByHostNameFindsTheDefaultOwnerID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	stream := emulator.UniqueName("orders")
	f.held(t, shardlease.LeaseKey{Stream: stream, Shard: shard(0)}, id("orders-7d9f-abcde-1a2b3c4d"))
	f.held(t, shardlease.LeaseKey{Stream: stream, Shard: shard(1)}, id("orders-7d9f-fghij-5e6f7a8b"))
	r := f.run(t, env{poll: 20 * time.Millisecond}, "drain", "-stream", stream, "-owner", "orders-7d9f-abcde", "-wait", "200ms")
	require.Equal(t, 1, r.code, "nothing answers the note here: %s", r.stdout)
	assert.Contains(t, r.stderr, "still name a worker asked to drain: "+shard(0)+" ("+id("orders-7d9f-abcde-1a2b3c4d")+")")
	assert.Equal(t, map[string]string{shard(0): "drain cli-1", shard(1): ""}, f.notes(t, stream), "only the host's worker is asked")
}

// planDrain's choices, as tables of listings and the plan each gives.
func TestPlanDrain(t *testing.T) {
	t.Parallel()
	lease := func(shard, owner string) shardlease.Lease {
		return shardlease.Lease{Key: shardlease.LeaseKey{Stream: "s", Shard: shard}, Owner: owner}
	}
	worker := func(owner string) shardlease.Worker { return shardlease.Worker{Stream: "s", Owner: owner} }
	now := time.Now()
	leases := []shardlease.Lease{lease("0", id("a")), lease("1", id("a")), lease("2", id("b")), lease("3", ""), lease("4", id("host-1a2b3c4d"))}
	leases[2].Expiry = now.Add(-30 * time.Second) // b's lease lapsed, but not long ago: b may be slow, not gone
	gone := shardlease.Lease{Key: shardlease.LeaseKey{Stream: "s", Shard: "5"}, Owner: id("dead"), Expiry: now.Add(-2 * time.Minute)}
	for _, tc := range []struct {
		name          string
		workers       []shardlease.Worker
		owner, allBut string
		drain, others []string
		shards        int
		idle          bool
		extra         []shardlease.Lease
	}{
		{name: "owner", owner: "a", drain: []string{"a"}, others: []string{"b", "host-1a2b3c4d"}, shards: 2},
		{name: "idle workers take leases too", owner: "a", workers: []shardlease.Worker{worker(id("c"))}, drain: []string{"a"}, others: []string{"b", "c", "host-1a2b3c4d"}, shards: 2},
		{name: "host name", owner: "host", drain: []string{"host-1a2b3c4d"}, others: []string{"a", "b"}, shards: 1},
		{name: "nobody", owner: "zed", others: []string{"a", "b", "host-1a2b3c4d"}},
		{name: "idle owner", owner: "c", workers: []shardlease.Worker{worker(id("c"))}, others: []string{"a", "b", "host-1a2b3c4d"}, idle: true},
		{name: "all but", allBut: "b", drain: []string{"a", "host-1a2b3c4d"}, others: []string{"b"}, shards: 3},
		{name: "all but nobody alive", allBut: "gone", drain: []string{"a", "b", "host-1a2b3c4d"}, others: []string{}, shards: 4},
		{name: "a crashed holder is no one to leave the stream to", owner: "a", extra: []shardlease.Lease{gone}, drain: []string{"a"}, others: []string{"b", "host-1a2b3c4d"}, shards: 2},
		{name: "only a crashed holder left", allBut: "dead", extra: []shardlease.Lease{gone}, drain: []string{"a", "b", "host-1a2b3c4d"}, others: []string{}, shards: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planDrain(append(slices.Clone(leases), tc.extra...), tc.workers, tc.owner, tc.allBut, now)
			assert.Equal(t, tc.drain, p.drain)
			assert.Equal(t, tc.others, p.others)
			assert.Equal(t, tc.shards, p.shards)
			assert.Equal(t, tc.idle, p.idle)
		})
	}
}
