package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
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

func TestMain(m *testing.M) { emulator.Main(m) }

// syncBuffer is an output two goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// totals sums the sink's items: the amounts and the records applied.
func totals(t *testing.T, table string) (sum, records int64) {
	t.Helper()
	out, err := emulator.Dynamo(t).Scan(t.Context(), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if nf := (*types.ResourceNotFoundException)(nil); errors.As(err, &nf) {
		return 0, 0 // not made yet
	}
	require.NoError(t, err)
	for _, item := range out.Items {
		for name, into := range map[string]*int64{"total": &sum, "records": &records} {
			if n, ok := item[name].(*types.AttributeValueMemberN); ok {
				v, err := strconv.ParseInt(n.Value, 10, 64)
				require.NoError(t, err)
				*into += v
			}
		}
	}
	return sum, records
}

// runUntil runs the example until cond holds, then cancels it and returns
// what it printed.
func runUntil(t *testing.T, args []string, what string, cond func() bool) string {
	t.Helper()
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &stdout, &stderr) }()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		select {
		case err := <-done:
			t.Fatalf("run returned before %s: %v\n%s", what, err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute\n%s", what, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	require.NoError(t, <-done, stderr.String())
	return stdout.String()
}

// The service applies 20 amounts once each; rewound to the start, it is
// handed them all again and applies none of them twice.
func TestRunAppliesEachRecordOnce(t *testing.T) {
	emulator.SDKEnv(t)
	stream, table, sinkTable := emulator.UniqueName("fenced"), emulator.UniqueName("fenced-leases"), emulator.UniqueName("fenced-totals")
	require.NoError(t, emulator.CreateStream(t.Context(), emulator.Kinesis(t), stream, 2))
	start := time.Now().Add(-time.Minute)
	args := []string{"-stream", stream, "-table", table, "-sink", sinkTable, "-lease", "3s", "-lanes", "2"}

	out := runUntil(t, append(args, "-create-tables", "-produce", "20"), "every amount applied", func() bool {
		_, n := totals(t, sinkTable)
		return n == 20
	})
	assert.Contains(t, out, "stopped: 20 records applied, 0 passed over")
	sum, n := totals(t, sinkTable)
	assert.Equal(t, int64(210), sum, "1 + ... + 20")
	assert.Equal(t, int64(20), n)

	store, err := shardlease.NewDynamoStore(emulator.Dynamo(t), table)
	require.NoError(t, err)
	_, err = shardlease.Rewind(t.Context(), store, emulator.Kinesis(t), stream, start)
	require.NoError(t, err)
	out = runUntil(t, args, "the replay read to the end", func() bool {
		ls, err := store.List(t.Context(), stream)
		require.NoError(t, err)
		for _, l := range ls {
			if l.Checkpoint == "" {
				return false
			}
		}
		return len(ls) == 2
	})
	assert.Contains(t, out, "stopped: 0 records applied, 20 passed over as applied already")
	sum, n = totals(t, sinkTable)
	assert.Equal(t, int64(210), sum, "nothing applied twice")
	assert.Equal(t, int64(20), n)
}

func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-table", "t", "-sink", "s"},
		{"-stream", "s", "-sink", "s"},
		{"-stream", "s", "-table", "t"},
		{"-stream", "s", "-table", "t", "-sink", "k", "-lanes", "0"},
		{"-stream", "s", "-table", "t", "-sink", "k", "extra"},
		{"-nope"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), args, &stdout, &stderr)
		assert.True(t, errors.Is(err, errUsage), "%v: %v", args, err)
		assert.NotEmpty(t, stderr.String(), fmt.Sprint(args))
	}
}
