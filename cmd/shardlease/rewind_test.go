package main

import (
	"context"
	"encoding/json"
	"strings"
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
	t.Parallel()
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
	assert.Contains(t, r.stdout, "would be refused: held by pod-0", "and prints what the real run would do")
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
	row = f.get(t, key)
	assert.Empty(t, row.Checkpoint)
	assert.True(t, strings.HasPrefix(row.Owner, "shardlease-cli@"), "taken from a holder, the row is left held by the command until the holder has stopped: %q", row.Owner)
	assert.Zero(t, rep.Shards[0].ResumeAfterMillis, "pod-1's row carried no lease duration: the consumers' own applies")
}

// TestRewindUsage covers what rewind checks before it calls AWS.
func TestRewindUsage(t *testing.T) {
	t.Parallel()
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

// rewind -dry-run shows what the real run would do, refusals included, and
// exits as it would: each held shard "would be refused", the others "would
// be rewound", exit status 1, one JSON report with -json; with -handover,
// every shard would be rewound, the held ones taken from their workers.
func TestMistakeRewindDryRunShowsTheRefusal(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kc := emulator.Kinesis(t)
	stream := emulator.UniqueName("cli-rewind-dry")
	require.NoError(t, emulator.CreateStream(t.Context(), kc, stream, 2))
	seqs := writeRecords(t, kc, stream, 1)
	held := shardlease.LeaseKey{Stream: stream, Shard: shard(0)}
	free := shardlease.LeaseKey{Stream: stream, Shard: shard(1)}
	f.checkpointed(t, held, id("pod-0"), seqs[0])
	_, err := f.store.Release(t.Context(), f.checkpointed(t, free, id("pod-1"), seqs[0]))
	require.NoError(t, err)
	before := map[string]shardlease.Lease{held.Shard: f.get(t, held), free.Shard: f.get(t, free)}
	args := []string{"-stream", stream, "-to", "1h", "-kinesis-endpoint", emulator.KinesisEndpoint(t)}

	real := f.run(t, env{}, "rewind", args...)
	dry := f.run(t, env{}, "rewind", append(args, "-dry-run")...)
	assert.Equal(t, 1, real.code, real.stderr)
	assert.Equal(t, real.code, dry.code, "the dry run exits as the real run")
	lines := strings.Split(dry.stdout, "\n")
	require.GreaterOrEqual(t, len(lines), 4, dry.stdout)
	assert.Contains(t, lines[1], shard(0))
	assert.Contains(t, lines[1], "would be refused: held by pod-0 (stop it, or use -handover)")
	assert.Contains(t, lines[2], shard(1))
	assert.Contains(t, lines[2], "would be rewound")
	assert.Contains(t, lines[3], "dry run: the rewind would be refused and write nothing, as 1 shard is held by running workers")
	assert.Contains(t, dry.stderr, "nothing was changed", "the error is the real run's")

	r := f.run(t, env{}, "rewind", append(args, "-dry-run", "-json")...)
	assert.Equal(t, 1, r.code)
	var rep rewindJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), "one JSON report: %s", r.stdout)
	assert.True(t, rep.Refused)
	require.Len(t, rep.Shards, 2)
	assert.True(t, rep.Shards[0].Refused)
	assert.False(t, rep.Shards[1].Refused)

	r = f.run(t, env{}, "rewind", append(args, "-dry-run", "-handover")...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "would be rewound; taken from pod-0")
	assert.Contains(t, r.stdout, "would rewind (dry run: nothing written) 2 of 2 shards")

	for _, k := range []shardlease.LeaseKey{held, free} {
		assert.Equal(t, before[k.Shard], f.get(t, k), "nothing written to %s", k.Shard)
	}
}
