package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// list and export of a stream the table holds no lease of fail, naming the
// streams it does hold and the nearest one, instead of an empty listing
// or a valid empty backup.
func TestMistakeListAndExportOfAStreamNotInTheTable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	stream := emulator.UniqueName("orders")
	f.held(t, shardlease.LeaseKey{Stream: stream, Shard: shard(0)}, "pod-0")
	f.held(t, shardlease.LeaseKey{Stream: "payments", Shard: shard(0)}, "pod-0")
	misspelt := stream[:len(stream)-1] // one letter short

	for _, cmd := range []string{"list", "export"} {
		r := f.run(t, env{}, cmd, "-stream", misspelt)
		assert.Equal(t, 1, r.code, "%s: %s", cmd, r.stdout)
		assert.Empty(t, r.stdout, cmd)
		assert.Contains(t, r.stderr, "shardlease "+cmd+": table "+f.table+", stream "+misspelt+": no lease of the stream in the table", cmd)
		assert.Contains(t, r.stderr, "the table holds leases of "+stream+", payments only; did you mean -stream "+stream+"?", cmd)

		if cmd == "list" {
			r = f.run(t, env{}, cmd, "-stream", misspelt, "-json")
			assert.Equal(t, 1, r.code, cmd)
			var e jsonError
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &e), "%s: %s", cmd, r.stdout)
			assert.Contains(t, e.Error, "did you mean -stream "+stream, cmd)
		}

		r = f.run(t, env{}, cmd, "-stream", stream)
		assert.Equal(t, 0, r.code, "%s of the stream it holds: %s", cmd, r.stderr)
	}
}

// An empty table says so, and what to check.
func TestMistakeListOfAStreamInAnEmptyTable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, cmd := range []string{"list", "export"} {
		r := f.run(t, env{}, cmd, "-stream", "orders")
		assert.Equal(t, 1, r.code, cmd)
		assert.Contains(t, r.stderr, "the table holds no lease of any stream; check -table, -region and -dynamodb-endpoint", cmd)
	}
	// A stream whose workers run but have not synced its shards yet is
	// one the table knows.
	_, err := f.store.Heartbeat(t.Context(), "orders", "pod-0")
	require.NoError(t, err)
	r := f.run(t, env{}, "list", "-stream", "orders")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "no leases of stream orders in table "+f.table+" yet")
	assert.Contains(t, r.stdout, "workers holding no lease: pod-0")
}

// A stream ARN given as -stream is a usage error that says which part is
// the name.
func TestMistakeStreamARNGivenAsStreamName(t *testing.T) {
	t.Parallel()
	arn := "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"
	for _, args := range [][]string{
		{"list", "-table", "orders-leases", "-stream", arn},
		{"export", "-table", "orders-leases", "-stream", arn},
		{"drain", "-table", "orders-leases", "-stream", arn, "-owner", "pod-0"},
		{"put", "-stream", arn},
	} {
		r := runCLI(t, env{}, args...)
		assert.Equal(t, 2, r.code, args)
		assert.Contains(t, r.stderr, "give the stream's name, not its ARN: -stream orders", args)
	}
}
