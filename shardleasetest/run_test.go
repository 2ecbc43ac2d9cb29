package shardleasetest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

func newConsumer(t *testing.T, k *shardleasetest.Kinesis, stream string, h shardlease.Handler) *shardlease.Consumer {
	t.Helper()
	c, err := shardlease.NewConsumer(k, shardlease.NewMemoryStore(), stream, h,
		shardlease.WithOwnerID("worker-1"), shardlease.WithIdlePollInterval(10*time.Millisecond),
		shardlease.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	return c
}

// A consumer run by Run hands every record to the handler under test; the
// Collector keeps those it processed, and WaitFor returns once they are
// all there. Stop ends Run cleanly.
func TestRunAndCollect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := shardleasetest.NewKinesis()
		require.NoError(t, k.AddStream("orders", 2))
		var want []string
		for i := range 20 {
			want = append(want, fmt.Sprintf("order-%d", i))
			_, _, err := k.Put("orders", want[i], []byte(want[i]))
			require.NoError(t, err)
		}
		var mu sync.Mutex
		failed := map[string]bool{}
		handler := func(ctx context.Context, b *shardlease.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			if !failed[b.ShardID] {
				failed[b.ShardID] = true
				return errors.New("the first batch of each shard fails once")
			}
			return nil
		}
		got := shardleasetest.Collect(handler)
		running := shardleasetest.Run(t, newConsumer(t, k, "orders", got.Handle))

		records := got.WaitFor(t, 20, time.Minute)
		var data []string
		for _, r := range records {
			assert.Equal(t, "orders", r.Stream)
			assert.Equal(t, r.PartitionKey, string(r.Data))
			data = append(data, string(r.Data))
		}
		slices.Sort(data)
		slices.Sort(want)
		assert.Equal(t, want, data, "each record once: a failed batch is kept only when it succeeds")
		assert.Len(t, got.Records(), 20)
		require.NoError(t, running.Stop())
		require.NoError(t, running.Stop(), "Stop may be called again")
		<-running.Done()
	})
}

// WaitFor fails the test, saying how many records it holds, when they do
// not come in time; Wait returns them with the context's error.
func TestWaitForTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := shardleasetest.Collect(nil)
		require.NoError(t, c.Handle(t.Context(), &shardlease.Batch{ShardID: "shardId-000000000000", Records: []shardlease.Record{{Data: []byte("a")}}}))
		ft := &fakeT{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.WaitFor(ft, 2, time.Second)
		}()
		<-done
		assert.Equal(t, []string{"shardleasetest: 1 records processed within 1s, want 2; is the handler failing, or the consumer not running?"}, ft.fatals)

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		got, err := c.Wait(ctx, 2)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Len(t, got, 1, "Wait returns what it holds")
		got, err = c.Wait(t.Context(), 1)
		require.NoError(t, err)
		assert.Equal(t, "a", string(got[0].Data))
	})
}

// Run's error reaches the test: through Err or Stop if it asks, else as a
// failure at cleanup.
func TestRunError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := shardleasetest.NewKinesis()
		var notFound *types.ResourceNotFoundException

		taken := shardleasetest.Run(t, newConsumer(t, k, "missing", shardleasetest.Collect(nil).Handle))
		<-taken.Done()
		require.ErrorAs(t, taken.Err(), &notFound)

		ft := &fakeT{TB: t}
		untaken := shardleasetest.Run(ft, newConsumer(t, k, "missing", shardleasetest.Collect(nil).Handle))
		<-untaken.Done()
		ft.cleanup()
		require.Len(t, ft.errors, 1)
		assert.Contains(t, ft.errors[0], "shardleasetest: Consumer.Run returned an error: shardlease: stream missing: start-up failed")
	})
}

// fakeT records what the helpers report instead of failing the test, and
// runs cleanups when told to.
type fakeT struct {
	testing.TB
	mu       sync.Mutex
	errors   []string
	fatals   []string
	cleanups []func()
}

func (f *fakeT) Helper() {}

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
}

func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

func (f *fakeT) cleanup() {
	for _, fn := range slices.Backward(f.cleanups) {
		fn()
	}
}
