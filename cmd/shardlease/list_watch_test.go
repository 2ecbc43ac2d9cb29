package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// frames is stdout for list -watch: it cancels the command once it holds
// want frames that satisfy done.
type frames struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel context.CancelFunc
	done   func(out string) bool
}

func (f *frames) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.buf.Write(p)
	if f.done(f.buf.String()) {
		f.cancel()
	}
	return n, err
}

func (f *frames) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.String()
}

// watchUntil runs list -watch on stream until done holds for its output,
// and returns the output.
func watchUntil(t *testing.T, f *fixture, stream string, done func(string) bool, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out := &frames{cancel: cancel, done: done}
	var stderr bytes.Buffer
	args := append([]string{"list", "-dynamodb-endpoint", f.endpoint, "-table", f.table, "-stream", stream, "-watch", "-every", "1s"}, extra...)
	code := run(ctx, args, out, &stderr, env{})
	require.Equal(t, 0, code, stderr.String())
	require.NotErrorIs(t, ctx.Err(), context.DeadlineExceeded, "list -watch did not show what was waited for within a minute:\n%s", out.String())
	return out.String()
}

// list -watch redraws the table every -every until interrupted, with each
// held shard's lag as its holder wrote it on the row: a shard whose handler
// keeps failing shows a checkpoint age that grows from frame to frame, and
// 0s once it moves. It exits 0 when interrupted.
func TestListWatchShowsLag(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kc := emulator.Kinesis(t)
	stream := emulator.UniqueName("orders")
	require.NoError(t, emulator.CreateStream(t.Context(), kc, stream, 1))
	var failing atomic.Bool
	failing.Store(true)
	c, err := shardlease.NewConsumer(kc, f.store, stream,
		func(context.Context, *shardlease.Batch) error {
			if failing.Load() {
				return errors.New("downstream is down")
			}
			return nil
		},
		shardlease.WithOwnerID("watched"), shardlease.WithLeaseDuration(2*time.Second),
		shardlease.WithTakeInterval(200*time.Millisecond), shardlease.WithIdlePollInterval(50*time.Millisecond),
		shardlease.WithRetryBackoff(20*time.Millisecond, 200*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	_, err = kc.PutRecord(t.Context(), &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String("k"), Data: []byte("x")})
	require.NoError(t, err)

	// Two frames whose checkpoint age is at least a second and grows.
	out := watchUntil(t, f, stream, func(out string) bool {
		ages := ageColumn(out)
		return len(ages) >= 2 && ages[len(ages)-1] > ages[len(ages)-2] && ages[len(ages)-2] >= time.Second
	})
	frame := lastFrame(out)
	assert.Contains(t, frame, "SHARD")
	assert.Contains(t, frame, "CHECKPOINT AGE")
	assert.Contains(t, frame, "watched#")
	assert.Contains(t, frame, "coordinating: watched#")
	assert.Greater(t, strings.Count(out, "stream "+stream+", table "), 1, "redrawn")

	failing.Store(false)
	out = watchUntil(t, f, stream, func(out string) bool {
		ages := ageColumn(out)
		return len(ages) > 0 && ages[len(ages)-1] == 0
	})
	assert.Equal(t, "0s", fieldsOf(lastFrame(out), 1)[4], "behind the tip of the shard: nothing")

	// -json prints one listing a line, with the lag fields.
	out = watchUntil(t, f, stream, func(out string) bool { return strings.Count(out, "\n") >= 2 }, "-json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &rows))
	require.Len(t, rows, 1)
	assert.Contains(t, rows[0], "behind_latest_ms")
	assert.Equal(t, 0.0, rows[0]["checkpoint_age_ms"])
}

// A free lease shows no lag.
func TestListWatchFreeLeaseShowsNoLag(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	key := shardlease.LeaseKey{Stream: "orders", Shard: shard(0)}
	_, err := f.store.Create(t.Context(), key, nil)
	require.NoError(t, err)
	out := watchUntil(t, f, "orders", func(out string) bool { return strings.Contains(out, shard(0)) })
	row := fieldsOf(lastFrame(out), 1)
	assert.Equal(t, []string{shard(0), "free", "0", "-", "-", "-", "-"}, row)

	r := f.run(t, env{}, "list", "-stream", "orders", "-watch", "-every", "10ms")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "at most once a second")
}

// lastFrame returns the last complete frame of list -watch's output: from
// its header line on.
func lastFrame(out string) string {
	i := strings.LastIndex(out, "\nstream ")
	if i < 0 {
		return out
	}
	return out[i+1:]
}

// fieldsOf returns the fields of line n of a frame (0: its header line).
func fieldsOf(frame string, n int) []string {
	lines := strings.Split(frame, "\n")
	if n+1 >= len(lines) {
		return nil
	}
	return strings.Fields(lines[n+1])
}

// ageColumn returns the checkpoint age of the first row of every frame of
// out that has one.
func ageColumn(out string) []time.Duration {
	var ages []time.Duration
	for _, frame := range strings.Split(out, "\nstream ")[1:] {
		row := fieldsOf("stream "+frame, 1)
		if len(row) < 7 {
			continue
		}
		d, err := time.ParseDuration(row[5])
		if err != nil {
			continue
		}
		ages = append(ages, d)
	}
	return ages
}
