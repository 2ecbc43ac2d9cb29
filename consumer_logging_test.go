package shardlease_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// logRecords is a slog.Handler that keeps every record.
type logRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

func (*logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

// at returns the records logged at level.
func (h *logRecords) at(level slog.Level) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Record
	for _, r := range h.records {
		if r.Level == level {
			out = append(out, r)
		}
	}
	return out
}

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

//go:noinline
func panicAtFirstSite() { panic("first site") }

//go:noinline
func panicAtSecondSite() { panic("second site") }

// A handler that panics on the same batch at the same place, retry after
// retry, gives one Error line with the stack as a list of frames starting at
// the panic site; a panic at another place is a line of its own. Every
// panic is counted.
func TestHandlerPanicLoggedOncePerSiteAndBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		kin := ordersStream(t, 1, 3)
		logs := &logRecords{}
		var calls, handled atomic.Int64
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			switch n := calls.Add(1); {
			case n <= 3:
				panicAtFirstSite()
			case n <= 5:
				panicAtSecondSite()
			}
			handled.Add(int64(len(b.Records)))
			return nil
		}
		c, err := shardlease.NewConsumer(kin, shardlease.NewMemoryStore(), "orders", handler,
			shardlease.WithLogger(slog.New(logs)), shardlease.WithRetryBackoff(10*time.Millisecond, 10*time.Millisecond))
		require.NoError(t, err)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(runCtx) }()
		waitFor(t, time.Minute, "the batch handled after the panics", func() bool { return handled.Load() == 3 })
		cancel()
		require.NoError(t, <-done)

		assert.Equal(t, int64(5), c.Stats().HandlerPanics)
		var errs []slog.Record
		for _, r := range logs.at(slog.LevelError) {
			if strings.HasPrefix(r.Message, "handler panicked") {
				errs = append(errs, r)
			}
		}
		require.Len(t, errs, 2, "one Error line per panic site and batch")
		for i, want := range []string{"panicAtFirstSite", "panicAtSecondSite"} {
			r := errs[i]
			assert.Contains(t, r.Message, "handler panicked")
			assert.Contains(t, attr(r, "site").String(), want)
			stack, ok := attr(r, "stack").Any().([]string)
			require.True(t, ok, "stack is a list of frames, not one string: %v", attr(r, "stack"))
			require.NotEmpty(t, stack)
			assert.Contains(t, stack[0], want, "the stack starts at the panic site")
			assert.Contains(t, strings.Join(stack, "\n"), "TestHandlerPanicLoggedOncePerSiteAndBatch", "the handler's frame is in the stack")
			for _, f := range stack {
				assert.NotContains(t, f, "runtime.gopanic")
				assert.NotContains(t, f, "leaseRunner")
			}
		}
		for _, r := range logs.at(slog.LevelWarn) {
			assert.NotContains(t, r.Message, "handler failed", "a panic is not logged again as a failed handler")
		}
	})
}

// Without WithLogger the consumer logs to slog.Default(): lease changes at
// Info. Not parallel: it replaces the process's default logger, which the
// other tests' consumers would write to.
func TestDefaultLoggerIsSlogDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logRecords{}
		old := slog.Default()
		slog.SetDefault(slog.New(logs))
		defer slog.SetDefault(old)
		kin := shardleasetest.NewKinesis()
		_, err := kin.CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)})
		require.NoError(t, err)
		c, err := shardlease.NewConsumer(kin, shardlease.NewMemoryStore(), "orders", nopHandler)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		waitFor(t, time.Minute, "the lease taken", func() bool { return len(c.Held()) == 1 })
		cancel()
		require.NoError(t, <-done)
		var msgs []string
		for _, r := range logs.at(slog.LevelInfo) {
			msgs = append(msgs, r.Message)
		}
		assert.Subset(t, msgs, []string{"started", "lease created", "lease taken", "lease released"})
	})
}

// stalledTable is a DynamoDB client whose DescribeTable hangs until its
// context ends, as a call to an endpoint that does not answer does.
type stalledTable struct{ shardlease.DynamoDBAPI }

func (stalledTable) DescribeTable(ctx context.Context, _ *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A start-up that hangs is not silent: every lease duration it logs at Warn
// which step it is waiting on. A start-up that completes logs "started".
func TestStuckStartupIsLogged(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		logs := &logRecords{}
		store, err := shardlease.NewDynamoStore(stalledTable{}, "orders-leases")
		require.NoError(t, err)
		c, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), store, "orders", nopHandler,
			shardlease.WithLogger(slog.New(logs)), shardlease.WithLeaseDuration(10*time.Second))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(25 * time.Second) // fake time: two lease durations and a half
		synctest.Wait()
		warns := logs.at(slog.LevelWarn)
		require.Len(t, warns, 2)
		for _, r := range warns {
			assert.Equal(t, "start-up is taking long; still checking the lease table", r.Message)
		}
		assert.Equal(t, "10s", attr(warns[0], "waited").String())
		cancel()
		<-done
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Len(t, logs.at(slog.LevelWarn), 2, "no more once Run has returned")
		assert.Empty(t, logs.at(slog.LevelInfo), "never started")
	})
}
