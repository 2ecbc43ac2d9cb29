package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// streamWithRecords makes a one-shard stream on the emulator and writes n
// records to it; it returns the stream and their sequence numbers.
func streamWithRecords(t *testing.T, kc *kinesis.Client, prefix string, n int) (string, []string) {
	t.Helper()
	ctx := t.Context()
	stream := emulator.UniqueName(prefix)
	require.NoError(t, emulator.CreateStream(ctx, kc, stream, 1))
	return stream, writeRecords(t, kc, stream, n)
}

// writeRecords writes n records to stream's first shard.
func writeRecords(t *testing.T, kc *kinesis.Client, stream string, n int) []string {
	t.Helper()
	var seqs []string
	for i := range n {
		out, err := kc.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String(stream), Data: []byte{byte(i)},
			PartitionKey: aws.String("k"), ExplicitHashKey: aws.String("0")})
		require.NoError(t, err)
		seqs = append(seqs, aws.ToString(out.SequenceNumber))
	}
	return seqs
}

// checkpointed makes key's row, held by owner with checkpoint seq.
func (f *fixture) checkpointed(t *testing.T, key shardlease.LeaseKey, owner, seq string) shardlease.Lease {
	t.Helper()
	l, err := f.store.Checkpoint(t.Context(), f.held(t, key, owner), seq, -1, time.Now())
	require.NoError(t, err)
	return l
}

// TestRewindCommand runs rewind against the emulators: refused while a
// worker holds the lease, a dry run that writes nothing, the rewind, a
// second run that changes nothing, and -handover.
func TestRewindCommand(t *testing.T) {
	f := newFixture(t)
	kc := emulator.Kinesis(t)
	stream, _ := streamWithRecords(t, kc, "cli-rewind", 2)
	at := time.UnixMilli(time.Now().UnixMilli() + 2)
	require.Eventually(t, func() bool { return time.Now().After(at.Add(time.Millisecond)) }, time.Second, time.Millisecond)
	seqs := writeRecords(t, kc, stream, 2)
	key := shardlease.LeaseKey{Stream: stream, Shard: shard(0)}
	held := f.checkpointed(t, key, "pod-0#0123456789abcdef", seqs[1])
	args := []string{"-stream", stream, "-to", at.UTC().Format(time.RFC3339Nano), "-kinesis-endpoint", emulator.KinesisEndpoint(t)}

	r := f.run(t, env{}, "rewind", args...)
	require.Equal(t, 1, r.code, r.stderr)
	for _, want := range []string{"table " + f.table, "stream " + stream, "nothing was changed", "shardId-000000000000 by pod-0", "stop the consumers of stream " + stream, "-handover"} {
		assert.Contains(t, r.stderr, want)
	}
	r = f.run(t, env{}, "rewind", append(args, "-dry-run")...)
	require.Equal(t, 1, r.code, "a dry run says the rewind would refuse")
	assert.Contains(t, r.stdout, "would be rewound", "and prints what would change")
	_, err := f.store.Release(t.Context(), held)
	require.NoError(t, err)
	before := f.get(t, key)

	r = f.run(t, env{}, "rewind", append(args, "-dry-run")...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "shardId-000000000000  at time  free   "+seqs[1])
	assert.Contains(t, r.stdout, "would rewind (dry run: nothing written) 1 of 1 shards")
	assert.Equal(t, before, f.get(t, key), "a dry run writes nothing")

	r = f.run(t, env{}, "rewind", append(args, "-json")...)
	require.Equal(t, 0, r.code, r.stderr)
	var rep rewindJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	assert.Equal(t, 1, rep.Changed)
	require.Len(t, rep.Shards, 1)
	assert.Equal(t, "at time", rep.Shards[0].Action)
	assert.Equal(t, seqs[1], rep.Shards[0].PreviousCheckpoint)
	row := f.get(t, key)
	assert.False(t, row.Held())
	assert.Empty(t, row.Checkpoint)
	assert.Equal(t, shardlease.Start{Position: shardlease.AtTimestamp, Timestamp: at}.String(), row.Start.String())

	r = f.run(t, env{}, "rewind", args...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "rewound 0 of 1 shards", "a second run changes nothing")

	l, err := f.store.Acquire(t.Context(), key, "pod-1#0123456789abcdef", row.Counter)
	require.NoError(t, err)
	_, err = f.store.Checkpoint(t.Context(), l, seqs[1], -1, time.Now())
	require.NoError(t, err)
	r = f.run(t, env{}, "rewind", append(args, "-handover", "-json")...)
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	assert.Equal(t, "pod-1#0123456789abcdef", rep.Shards[0].TakenFrom)
	assert.Empty(t, f.get(t, key).Checkpoint)
	assert.False(t, f.get(t, key).Held())
}

// TestRewindUsage covers what rewind checks before it calls AWS.
func TestRewindUsage(t *testing.T) {
	awsEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rewind", "-stream", "s", "-to", "1h"}, "missing -table"},
		{[]string{"rewind", "-table", "tbl", "-to", "1h"}, "missing -stream"},
		{[]string{"rewind", "-table", "tbl", "-stream", "s"}, "missing -to"},
		{[]string{"rewind", "-table", "tbl", "-stream", "s", "-to", "yesterday"}, `-to "yesterday": not an RFC 3339 time`},
	} {
		r := runCLI(t, env{}, tc.args...)
		assert.Equal(t, 2, r.code, tc.args)
		assert.Contains(t, r.stderr, tc.want, tc.args)
	}
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	got, err := parseTime("90m", now)
	require.NoError(t, err)
	assert.Equal(t, now.Add(-90*time.Minute), got)
	got, err = parseTime("2026-01-02T14:04:05.5Z", now)
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 1, 2, 14, 4, 5, 5e8, time.UTC), got)
}
