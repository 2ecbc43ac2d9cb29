package shardlease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// hangingFanOut hangs one call of each enhanced fan-out operation until its
// context is done, as a call whose connection stopped answering: the first
// RegisterStreamConsumer, DescribeStreamConsumer and SubscribeToShard. The
// registration describes no stream: it takes the ARN the identity check
// found at start (whose DescribeStreamSummary has deadlines of its own).
type hangingFanOut struct {
	kinesisAdmin
	fo    shardlease.FanOutAPI
	mu    sync.Mutex
	calls map[string]int
	hung  map[string]int
}

func newHangingFanOut(k kinesisAdmin) *hangingFanOut {
	return &hangingFanOut{kinesisAdmin: k, fo: k.(shardlease.FanOutAPI), calls: map[string]int{}, hung: map[string]int{}}
}

func (k *hangingFanOut) hang(ctx context.Context, op string, at int) error {
	k.mu.Lock()
	k.calls[op]++
	n := k.calls[op]
	if n == at {
		k.hung[op]++
	}
	k.mu.Unlock()
	if n != at {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (k *hangingFanOut) count(m map[string]int, op string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return m[op]
}

func (k *hangingFanOut) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	return k.fo.DescribeStreamSummary(ctx, in, o...)
}

func (k *hangingFanOut) RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, o ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	if err := k.hang(ctx, "RegisterStreamConsumer", 1); err != nil {
		return nil, err
	}
	return k.fo.RegisterStreamConsumer(ctx, in, o...)
}

func (k *hangingFanOut) DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	if err := k.hang(ctx, "DescribeStreamConsumer", 1); err != nil {
		return nil, err
	}
	return k.fo.DescribeStreamConsumer(ctx, in, o...)
}

func (k *hangingFanOut) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, o ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	if err := k.hang(ctx, "SubscribeToShard", 1); err != nil {
		return nil, err
	}
	return k.fo.SubscribeToShard(ctx, in, o...)
}

// Defect: enhanced fan-out's calls had no deadline: a registration call or
// a SubscribeToShard that never answered stalled Run, or kept a lease
// renewed while its shard read nothing. Each now has a deadline of a lease
// duration and is tried again.
func TestOneReaderFanOutDeadlines(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 1, func(t *testing.T, w *fanWorld) {
		p := &produced{}
		w.put(t, p, 10, 2)
		h := newHandled()
		kin := newHangingFanOut(w.kin)
		a := startWorker(t, w.world, kin, w.store, h.handler("a"), w.fanOpts("a")...)
		waitFor(t, 12*w.lease, "every record handled", func() bool { return h.distinct() == 10 })
		for op, at := range map[string]int{"RegisterStreamConsumer": 1, "DescribeStreamConsumer": 1, "SubscribeToShard": 1} {
			assert.Equal(t, 1, kin.count(kin.hung, op), "a %s call hung", op)
			assert.Greater(t, kin.count(kin.calls, op), at, "%s was called again after the hung call", op)
		}
		require.NoError(t, a.stop(t))
		assert.Empty(t, h.lost(p))
	})
}

// Defect: a subscription that stopped delivering events (none, not even the
// empty ones Kinesis sends at least every five seconds) was kept open while
// the lease was renewed and the shard read nothing. It is now closed after
// the silence timeout (max(L, 10s)) and the reader subscribes again after
// its last event.
func TestFanOutSilentSubscription(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 1, func(t *testing.T, w *fanWorld) {
		fake, ok := w.kin.(*shardleasetest.Kinesis)
		if !ok {
			t.Skip("the wire server cannot hold a subscription silent; the in-process fake can (shardleasetest.ErrSilence)")
		}
		var silence, subs atomic.Int64
		fake.SetFaults(func(op, shard string) error {
			switch op {
			case shardleasetest.OpSubscribeToShard:
				subs.Add(1)
			case shardleasetest.OpSubscriptionEvent:
				if silence.CompareAndSwap(1, 2) {
					return shardleasetest.ErrSilence
				}
			}
			return nil
		})
		p := &produced{}
		h := newHandled()
		a := startWorker(t, w.world, w.kin, w.store, h.handler("a"), w.fanOpts("a")...)
		w.put(t, p, 5, 2)
		waitFor(t, 10*w.lease, "the first records handled", func() bool { return h.distinct() == 5 })
		before := subs.Load()
		silence.Store(1) // the next event is not sent, nor anything after it
		w.put(t, p, 5, 2)
		waitFor(t, 5*w.lease, "the records put while the subscription was silent handled", func() bool { return h.distinct() == 10 })
		assert.Equal(t, int64(2), silence.Load(), "the subscription went silent")
		assert.Greater(t, subs.Load(), before, "subscribed again")
		require.NoError(t, a.stop(t))
		assert.Zero(t, h.duplicates(), "nothing handed twice")
		assert.Empty(t, h.lost(p))
		assert.Zero(t, a.c.Stats().LeasesLost, "the lease was kept")
	})
}
