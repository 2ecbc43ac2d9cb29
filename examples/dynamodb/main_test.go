package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

func TestMain(m *testing.M) { emulator.Main(m) }

// recordLine is a line -print writes for a record.
var recordLine = regexp.MustCompile(`(?m)^  (shardId-\d+) \d+ key=key-(\d+) data="record (\d+)"$`)

// watcher is an output that reports when every record 1..n was printed.
type watcher struct {
	n    int
	mu   sync.Mutex
	buf  bytes.Buffer
	done chan struct{} // closed once every record was printed
}

func newWatcher(n int) *watcher { return &watcher{n: n, done: make(chan struct{})} }

func (w *watcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if len(w.printed()) == w.n {
		select {
		case <-w.done:
		default:
			close(w.done)
		}
	}
	return len(p), nil
}

// printed returns the record numbers printed so far, with how often each
// was printed. Call with mu held.
func (w *watcher) printed() map[string]int {
	seen := make(map[string]int)
	for _, m := range recordLine.FindAllStringSubmatch(w.buf.String(), -1) {
		seen[m[3]]++
	}
	return seen
}

func (w *watcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// The example creates its table, produces 20 records, prints each of them,
// and on cancellation (Ctrl-C) returns after releasing its leases, with
// every checkpoint written.
func TestRunAgainstEmulators(t *testing.T) {
	emulator.SDKEnv(t)
	stream, table := emulator.UniqueName("example-stream"), emulator.UniqueName("example-leases")
	setup, cancelSetup := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancelSetup()
	require.NoError(t, emulator.CreateStream(setup, emulator.Kinesis(t), stream, 2))

	const n = 20
	stdout, stderr := newWatcher(n), &watcher{done: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-stream", stream, "-table", table, "-create-table", "-produce", fmt.Sprint(n),
			"-print", "-lease", "3s", "-owner", "example-test", "-v"}, stdout, stderr)
	}()
	select {
	case <-stdout.done:
	case err := <-done:
		t.Fatalf("run returned before printing every record: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	case <-time.After(time.Minute):
		t.Fatalf("not every record was printed within a minute\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "stderr:\n%s", stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not return within 30s of the cancellation\nstderr:\n%s", stderr)
	}

	out := stdout.String()
	stdout.mu.Lock()
	printed := stdout.printed()
	stdout.mu.Unlock()
	for i := 1; i <= n; i++ {
		assert.Equal(t, 1, printed[fmt.Sprint(i)], "record %d printed once:\n%s", i, out)
	}
	assert.Regexp(t, `(?m)^shardId-\d+: \d+ records, \d+ ms behind latest$`, out)
	for _, m := range recordLine.FindAllStringSubmatch(out, -1) {
		assert.Equal(t, m[2], m[3], "partition key and data of one record: %s", m[0])
	}
	errText := stderr.String()
	assert.Contains(t, errText, fmt.Sprintf("put %d test records", n))
	assert.Regexp(t, fmt.Sprintf(`stopped: %d records in \d+ batches handled; 2 leases released`, n), errText)
	assert.Contains(t, errText, "level=INFO", "-v logs the library's lease changes")

	// The rows are released, each with a checkpoint written on the way out.
	store, err := shardlease.NewDynamoStore(emulator.Dynamo(t), table)
	require.NoError(t, err)
	leases, err := store.List(t.Context(), stream)
	require.NoError(t, err)
	require.Len(t, leases, 2)
	for _, l := range leases {
		assert.False(t, l.Held(), "%s still held by %s", l.Key, l.Owner)
		assert.NotEmpty(t, l.Checkpoint, "%s has no checkpoint", l.Key)
	}
}

// A missing stream fails Run with the library's error naming it.
func TestRunMissingStream(t *testing.T) {
	emulator.SDKEnv(t)
	stream, table := emulator.UniqueName("missing-stream"), emulator.UniqueName("example-leases")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"-stream", stream, "-table", table, "-create-table"}, &stdout, &stderr)
	var notFound *shardlease.StreamNotFoundError
	require.True(t, errors.As(err, &notFound), "%v", err)
	assert.Equal(t, stream, notFound.Stream)
}

func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-table", "t"},
		{"-stream", "s"},
		{"-stream", "s", "-table", "t", "-position", "oldest"},
		{"-stream", "s", "-table", "t", "-produce", "-1"},
		{"-stream", "s", "-table", "t", "extra"},
		{"-nope"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), args, &stdout, &stderr)
		assert.True(t, errors.Is(err, errUsage), "%v: %v", args, err)
		assert.NotEmpty(t, stderr.String(), args)
	}
}
