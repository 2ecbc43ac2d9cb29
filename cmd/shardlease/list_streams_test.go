package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// Without -stream, list shows the leases of every stream in the table in
// one table with a STREAM column, ordered by stream and shard, and a line
// for each stream and one with the totals. Worker rows (a consumer's and a
// group's), identity rows and bare keys of an older layout name no stream;
// another table's rows are not shown. -stream X still lists only X.
func TestListEveryStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	prefix := emulator.UniqueName("s")
	a, b, c := prefix+"-a", prefix+"-b", prefix+"-c"
	key := func(stream string, n int) shardlease.LeaseKey {
		return shardlease.LeaseKey{Stream: stream, Shard: shard(n)}
	}

	f.held(t, key(a, 0), "worker-a")
	_, err := f.store.Create(ctx, key(a, 1), nil)
	require.NoError(t, err)
	f.held(t, key(b, 0), "worker-b")
	f.held(t, key(b, 1), "worker-a")
	f.held(t, key(b, 2), "worker-b")
	_, err = f.store.Create(ctx, key(c, 0), []string{shard(9)})
	require.NoError(t, err)
	_, err = f.store.Heartbeat(ctx, a, "worker-d")
	require.NoError(t, err)
	_, err = f.store.Heartbeat(ctx, prefix+"-group", "worker-g")
	require.NoError(t, err)
	_, _, err = f.store.RecordStreamIdentity(ctx, shardlease.StreamIdentity{
		Stream: prefix + "-gone", ARN: "arn:aws:kinesis:us-east-1:123456789012:stream/" + prefix + "-gone", Created: time.UnixMilli(1_700_000_000_000)})
	require.NoError(t, err)
	_, err = emulator.Dynamo(t).PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(f.table),
		Item:      map[string]types.AttributeValue{"lease_key": &types.AttributeValueMemberS{Value: shard(7)}},
	})
	require.NoError(t, err)

	// Another table's rows are not listed.
	other := newFixture(t)
	other.held(t, key(prefix+"-elsewhere", 0), "worker-z")
	other.held(t, key(a, 5), "worker-z")

	t.Run("text", func(t *testing.T) {
		r := f.run(t, env{}, "list")
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
		require.Len(t, lines, 12, r.stdout)
		assert.Equal(t, []string{"STREAM", "SHARD", "OWNER", "COUNTER", "CHECKPOINT", "PARENTS", "HANDOFF", "EXPIRY", "(HOLDER'S", "CLOCK)"}, strings.Fields(lines[0]))
		// An acquire's counter comes from its stream's fence floor: read it.
		counter := func(stream string, n int) string { return strconv.FormatInt(f.get(t, key(stream, n)).Counter, 10) }
		want := [][]string{
			{a, shard(0), "worker-a", counter(a, 0), "-", "-", "-", "-"},
			{a, shard(1), "free", "0", "-", "-", "-", "-"},
			{b, shard(0), "worker-b", counter(b, 0), "-", "-", "-", "-"},
			{b, shard(1), "worker-a", counter(b, 1), "-", "-", "-", "-"},
			{b, shard(2), "worker-b", counter(b, 2), "-", "-", "-", "-"},
			{c, shard(0), "free", "0", "-", shard(9), "-", "-"},
		}
		for i, w := range want {
			assert.Equal(t, w, strings.Fields(lines[i+1]), "row %d", i)
		}
		col := strings.Index(lines[0], "SHARD")
		for _, line := range lines[1:7] {
			assert.Equal(t, "shardId-", line[col:col+len("shardId-")], "aligned: %q", line)
		}
		assert.Equal(t, []string{
			"stream " + a + ": 2 leases, 1 held, owners: worker-a",
			"stream " + b + ": 3 leases, 3 held, owners: worker-a, worker-b",
			"stream " + c + ": 1 lease, 0 held, owners: -",
			"  no live worker holds a lease of stream " + c + ": each of its 1 unfinished lease is free or its holder's expiry passed; " +
				"start a worker that reads the stream, or see 'Leases nobody takes' in docs/operating.md",
			"3 streams, 6 leases, 4 held, 2 owners",
		}, lines[7:])
		for _, absent := range []string{"elsewhere", "worker-z", "-group", "worker-g", "worker-d", "-gone", shard(7) + " "} {
			assert.NotContains(t, r.stdout, absent)
		}
	})

	t.Run("json", func(t *testing.T) {
		r := f.run(t, env{}, "list", "-json")
		require.Equal(t, 0, r.code, r.stderr)
		var rows []leaseJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows), r.stdout)
		var got []string
		for _, row := range rows {
			got = append(got, row.LeaseKey)
		}
		assert.Equal(t, []string{
			key(a, 0).String(), key(a, 1).String(),
			key(b, 0).String(), key(b, 1).String(), key(b, 2).String(),
			key(c, 0).String(),
		}, got)
	})

	t.Run("one stream", func(t *testing.T) {
		r := f.run(t, env{}, "list", "-stream", b)
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
		require.Len(t, lines, 5, r.stdout)
		assert.Equal(t, "SHARD", strings.Fields(lines[0])[0])
		for i, owner := range []string{"worker-b", "worker-a", "worker-b"} {
			assert.Equal(t, []string{shard(i), owner, strconv.FormatInt(f.get(t, key(b, i)).Counter, 10), "-", "-", "-", "-"}, strings.Fields(lines[i+1]))
		}
		assert.Equal(t, "coordinating: worker-b (holds "+shard(0)+", the first readable lease)", lines[4])
		assert.NotContains(t, r.stdout, a)
		assert.NotContains(t, r.stdout, c)
	})

	t.Run("watch", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		out := &frames{cancel: cancel, done: func(out string) bool {
			return strings.Count(out, "3 streams, 6 leases, 4 held, 2 owners\n") >= 2
		}}
		var stderr strings.Builder
		code := run(ctx, []string{"list", "-dynamodb-endpoint", f.endpoint, "-table", f.table, "-watch", "-every", "1s"}, out, &stderr, env{})
		require.Equal(t, 0, code, stderr.String())
		require.NotErrorIs(t, ctx.Err(), context.DeadlineExceeded, "list -watch did not redraw within a minute:\n%s", out.String())
		text := out.String()
		assert.GreaterOrEqual(t, strings.Count(text, "every stream, table "+f.table+", at "), 2, text)
		frame := text[strings.LastIndex(text, "every stream, table "):]
		lines := strings.Split(frame, "\n")
		assert.Equal(t, []string{"STREAM", "SHARD", "OWNER", "COUNTER", "CHECKPOINT", "BEHIND", "CHECKPOINT", "AGE", "HANDOFF"}, strings.Fields(lines[1]))
		assert.Equal(t, []string{b, shard(1), "worker-a", strconv.FormatInt(f.get(t, key(b, 1)).Counter, 10), "-", "-", "-", "-"}, strings.Fields(lines[5]))
		assert.Equal(t, "stream "+c+": 1 lease, 0 held, owners: -", lines[10])
	})
}

// An empty table says so; -json prints an empty array.
func TestListEveryStreamEmpty(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.run(t, env{}, "list")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "no leases in table "+f.table+" (check -table and -region; a consumer creates a stream's leases when it first syncs its shards)\n", r.stdout)
	r = f.run(t, env{}, "list", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.JSONEq(t, `[]`, r.stdout)
}

// A stream none of whose unfinished leases a live worker holds is named:
// every lease free, or its holder's expiry passed; a lease handed over but
// not adopted yet (no expiry) counts as held, and finished leases do not
// count.
func TestUnheldText(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_700_000_000_000)
	key := shardlease.LeaseKey{Stream: "orders", Shard: shard(0)}
	lease := func(owner string, expiry time.Time, checkpoint string) shardlease.Lease {
		return shardlease.Lease{Key: key, Owner: owner, Expiry: expiry, Checkpoint: checkpoint}
	}
	for name, tc := range map[string]struct {
		leases []shardlease.Lease
		named  bool
	}{
		"free":               {[]shardlease.Lease{lease("", time.Time{}, "")}, true},
		"holder expired":     {[]shardlease.Lease{lease("w", now.Add(-time.Second), "")}, true},
		"held":               {[]shardlease.Lease{lease("w", now.Add(time.Second), ""), lease("", time.Time{}, "")}, false},
		"handed over":        {[]shardlease.Lease{lease("w", time.Time{}, "")}, false},
		"finished only":      {[]shardlease.Lease{lease("", time.Time{}, shardlease.ShardEnd)}, false},
		"finished and free":  {[]shardlease.Lease{lease("", time.Time{}, shardlease.ShardEnd), lease("", time.Time{}, "")}, true},
		"expired and active": {[]shardlease.Lease{lease("w", now.Add(-time.Second), ""), lease("v", now.Add(time.Minute), "")}, false},
	} {
		got := unheldText(tc.leases, now)
		assert.Equal(t, tc.named, got != "", "%s: %q", name, got)
	}
}
