package kinesisread_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease/internal/kinesisread"
	"github.com/shardlease/shardlease/shardleasetest"
)

// readerGoroutines counts the goroutines whose stack is in this package's
// code.
func readerGoroutines() int {
	buf := make([]byte, 1<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "internal/kinesisread.") && !strings.Contains(g, "readerGoroutines") {
			n++
		}
	}
	return n
}

// A started polling reader of an idle shard holds no goroutine between its
// polls, reads what arrives after it parked, in order, and once ctx ends
// while it is parked calls done, once, with nothing more delivered.
func TestPollingStartHoldsNoGoroutineWhileIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := shardleasetest.NewKinesis()
		_, err := f.CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)})
		require.NoError(t, err)
		sh := shardOf(f, &sink{})
		sh.Config.IdlePoll = time.Second
		ctx, cancel := context.WithCancel(t.Context())
		var mu sync.Mutex
		var got []string
		var dones atomic.Int32
		(&kinesisread.PollingReader{Shard: sh}).Start(ctx, kinesisread.Position{SubSequence: -1, Initial: trimHorizon}, func(b kinesisread.Batch) bool {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range b.Records {
				got = append(got, string(r.Data))
			}
			return true
		}, func() { dones.Add(1) })

		for i, key := range []string{"a", "b", "c"} {
			time.Sleep(1500 * time.Millisecond) // a pause and a half: the reader is parked
			synctest.Wait()
			assert.Zero(t, readerGoroutines(), "goroutines in the reader while parked, after %d records", i)
			_, _, err := f.Put("orders", key, []byte(key))
			require.NoError(t, err)
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		assert.Equal(t, []string{"a", "b", "c"}, got)
		mu.Unlock()
		assert.Zero(t, dones.Load(), "done before ctx ended")

		cancel()
		synctest.Wait()
		assert.Equal(t, int32(1), dones.Load(), "done once ctx ended while parked")
		_, _, err = f.Put("orders", "d", []byte("d"))
		require.NoError(t, err)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		assert.Equal(t, int32(1), dones.Load())
		mu.Lock()
		assert.Equal(t, []string{"a", "b", "c"}, got, "nothing delivered once done")
		mu.Unlock()
	})
}
