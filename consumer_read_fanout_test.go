package shardlease_test

import (
	"context"
	"errors"
	"math/big"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/schemas"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/shardleasetest"
)

// consumerName is the stream consumer the fan-out tests register.
const consumerName = "orders-app"

// fanWorld is a world whose Kinesis serves enhanced fan-out, with control
// over the subscriptions' life.
type fanWorld struct {
	*world
	// lifetime sets after how long a subscription ends normally.
	lifetime func(time.Duration)
	// fault installs fn, asked before each event of a subscription on a
	// shard: true ends the subscription with InternalFailureException.
	fault func(fn func(shard string) bool)
	// subscriptions counts the subscriptions made on shard.
	subscriptions func(shard string) int
	// activation sets how long a newly registered consumer is CREATING
	// (kinesis-local here: 10ms, fixed).
	activation func(time.Duration)
	// fanOutKin is the client the tests subscribe with themselves.
	fanOutKin interface {
		shardlease.FanOutAPI
		ListStreamConsumers(ctx context.Context, params *kinesis.ListStreamConsumersInput, optFns ...func(*kinesis.Options)) (*kinesis.ListStreamConsumersOutput, error)
	}
}

// fanOutWorlds runs fn in the in-process fake (fake time) and on the wire:
// kinesis-local behind the emulator package's shim, with DynamoStore on
// dynalite, through a real *kinesis.Client.
func fanOutWorlds(t *testing.T, shards int32, fn func(t *testing.T, w *fanWorld)) {
	t.Run("fake", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake := shardleasetest.NewKinesis()
			var mu sync.Mutex
			subs := map[string]int{}
			var evFault func(string) bool
			fake.SetFaults(func(op, shard string) error {
				mu.Lock()
				defer mu.Unlock()
				switch op {
				case shardleasetest.OpSubscribeToShard:
					subs[shard]++
				case shardleasetest.OpSubscriptionEvent:
					if evFault != nil && evFault(shard) {
						return &types.InternalFailureException{Message: aws.String("injected")}
					}
				}
				return nil
			})
			w := newFakeWorld(t, fake, shards)
			fn(t, &fanWorld{
				world:      w,
				lifetime:   fake.SetSubscriptionLifetime,
				activation: fake.SetConsumerActivation,
				fault: func(fn func(string) bool) {
					mu.Lock()
					evFault = fn
					mu.Unlock()
				},
				subscriptions: func(shard string) int {
					mu.Lock()
					defer mu.Unlock()
					return subs[shard]
				},
				fanOutKin: fake,
			})
		})
	})
	t.Run("wire", func(t *testing.T) {
		if testing.Short() {
			t.Skip("the wire-protocol server needs Node.js; -short runs the in-process world only")
		}
		client, table := dynamoTable(t)
		store, err := shardlease.NewDynamoStore(client, table)
		require.NoError(t, err)
		shim := emulator.FanOut(t)
		kc := shim.Client()
		w := &world{name: "wire", kin: kc, store: store, stream: emulator.UniqueName("orders"),
			lease: 3 * time.Second, renew: time.Second, take: 300 * time.Millisecond, idle: 50 * time.Millisecond}
		require.NoError(t, emulator.CreateStream(t.Context(), kc, w.stream, shards))
		fn(t, &fanWorld{
			world:      w,
			lifetime:   shim.SetSubscriptionLifetime,
			activation: func(time.Duration) {},
			fault: func(fn func(string) bool) {
				if fn == nil {
					shim.SetEventFault(nil)
					return
				}
				shim.SetEventFault(func(shard string) string {
					if fn(shard) {
						return "InternalFailureException"
					}
					return ""
				})
			},
			subscriptions: shim.Subscriptions,
			fanOutKin:     kc,
		})
	})
}

// fanOpts is opts with enhanced fan-out.
func (w *fanWorld) fanOpts(owner string, extra ...shardlease.Option) []shardlease.Option {
	return w.opts(owner, append([]shardlease.Option{shardlease.WithEnhancedFanOut(consumerName)}, extra...)...)
}

func (w *fanWorld) streamARN(t *testing.T) string {
	t.Helper()
	out, err := w.fanOutKin.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(w.stream)})
	require.NoError(t, err)
	return aws.ToString(out.StreamDescriptionSummary.StreamARN)
}

// consumers lists the stream's registered consumers.
func (w *fanWorld) consumers(t *testing.T) []types.Consumer {
	t.Helper()
	out, err := w.fanOutKin.ListStreamConsumers(context.Background(), &kinesis.ListStreamConsumersInput{StreamARN: aws.String(w.streamARN(t))})
	require.NoError(t, err)
	return out.Consumers
}

// subscribable reports whether the test itself can subscribe to shard now
// (no other subscription of the consumer is open on it); the subscription
// is closed again at once.
func (w *fanWorld) subscribable(t *testing.T, shard string) bool {
	t.Helper()
	ctx := context.Background()
	d, err := w.fanOutKin.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{StreamARN: aws.String(w.streamARN(t)), ConsumerName: aws.String(consumerName)})
	require.NoError(t, err)
	out, err := w.fanOutKin.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{
		ConsumerARN: d.ConsumerDescription.ConsumerARN, ShardId: aws.String(shard),
		StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest},
	}, func(o *kinesis.Options) {
		// A codec of its own (aws/smithy-go issue 714), as the consumer does.
		o.Protocol = awsjson.New11(schemas.Kinesis_20131202)
	})
	var inUse *types.ResourceInUseException
	if errors.As(err, &inUse) {
		return false
	}
	require.NoError(t, err)
	stream := out.GetStream()
	defer stream.Close()
	// kinesis-local refuses with an exception event rather than an error
	// response: the first event tells.
	select {
	case _, ok := <-stream.Events():
		if !ok {
			return !errors.As(stream.Err(), &inUse)
		}
		return true
	case <-time.After(5 * time.Second):
		return true
	}
}

// since waits until d has passed on the world's clock from start.
func since(t *testing.T, start time.Time, d time.Duration) {
	t.Helper()
	waitFor(t, d+time.Minute, "the clock to move on", func() bool { return time.Since(start) > d })
}

func TestFanOutNeedsAClientWithTheFanOutCalls(t *testing.T) {
	t.Parallel()
	// A client with only the polling calls is refused at once, by name.
	var polling struct{ shardlease.KinesisAPI }
	_, err := shardlease.NewConsumer(polling, shardlease.NewMemoryStore(), "orders", func(context.Context, *shardlease.Batch) error { return nil },
		shardlease.WithEnhancedFanOut(consumerName))
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
	assert.ErrorContains(t, err, "SubscribeToShard")
	_, err = shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), "orders", func(context.Context, *shardlease.Batch) error { return nil },
		shardlease.WithEnhancedFanOut("no spaces allowed"))
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
	// Polling users need not implement the fan-out calls.
	_, err = shardlease.NewConsumer(polling, shardlease.NewMemoryStore(), "orders", func(context.Context, *shardlease.Batch) error { return nil })
	require.NoError(t, err)
}

// registerCounter counts the RegisterStreamConsumer calls of the workers
// sharing it, and those refused because the consumer was being registered.
type registerCounter struct {
	fanOutClient
	calls, inUse atomic.Int32
}

type fanOutClient interface {
	shardlease.KinesisAPI
	shardlease.FanOutAPI
}

func (c *registerCounter) RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, o ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	out, err := c.fanOutClient.RegisterStreamConsumer(ctx, in, o...)
	c.calls.Add(1)
	if errors.As(err, new(*types.ResourceInUseException)) {
		c.inUse.Add(1)
	}
	return out, err
}

// Workers starting together all register the one consumer: the ones that
// lose the race wait for it to be ACTIVE instead of failing, and none reads
// before it is.
func TestFanOutRegistrationByWorkersStartingTogether(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 4, func(t *testing.T, w *fanWorld) {
		w.activation(3 * time.Second) // the service takes seconds
		p := &produced{}
		w.put(t, p, 40, 8)
		h := newHandled()
		kin := &registerCounter{fanOutClient: w.kin.(fanOutClient)}
		var ws []*worker
		for _, name := range []string{"a", "b", "c"} {
			ws = append(ws, startWorker(t, w.world, kin, w.store, h.handler(name), w.fanOpts(name)...))
		}
		waitFor(t, 30*w.lease, "the records put before the start handled", func() bool { return h.distinct() == p.count() })
		w.put(t, p, 40, 8)
		waitFor(t, 30*w.lease, "the records put while subscribed handled", func() bool { return h.distinct() == p.count() })
		// One of the four shards gets none of these partition keys, so
		// its records do not tell that it is subscribed: wait for that too.
		waitFor(t, 30*w.lease, "every shard subscribed", func() bool {
			n := int64(0)
			for _, wk := range ws {
				n += wk.c.Stats().Subscriptions
			}
			return n >= 4
		})
		subs := int64(0)
		for _, wk := range ws {
			require.NoError(t, wk.stop(t), "worker %s", wk.c.OwnerID())
			subs += wk.c.Stats().Subscriptions
		}
		assert.Empty(t, h.lost(p))
		assert.GreaterOrEqual(t, subs, int64(4), "every shard read by subscription")
		cs := w.consumers(t)
		require.Len(t, cs, 1, "one consumer registered")
		assert.Equal(t, consumerName, aws.ToString(cs[0].ConsumerName))
		assert.Equal(t, types.ConsumerStatusActive, cs[0].ConsumerStatus)
		assert.GreaterOrEqual(t, kin.calls.Load(), int32(1))
		assert.Equal(t, kin.calls.Load()-1, kin.inUse.Load(), "every registration after the first was refused as under way, and waited for")
		t.Logf("%s: %d registrations, %d refused as under way", w.name, kin.calls.Load(), kin.inUse.Load())
	})
}

// Each initial position is honoured by the first subscription of a shard
// that has no checkpoint.
func TestFanOutInitialPositions(t *testing.T) {
	t.Parallel()
	for _, pos := range []shardlease.InitialPosition{shardlease.TrimHorizon, shardlease.Latest, shardlease.AtTimestamp} {
		t.Run(string(pos), func(t *testing.T) {
			fanOutWorlds(t, 1, func(t *testing.T, w *fanWorld) {
				p := &produced{}
				w.put(t, p, 5, 1)
				opt := shardlease.WithInitialPosition(pos)
				if pos == shardlease.AtTimestamp {
					// Arrival times are in milliseconds: start well after
					// the records before and well before the ones after.
					mark := time.Now()
					since(t, mark, 50*time.Millisecond)
					opt = shardlease.WithStartTimestamp(time.Now())
					since(t, time.Now(), 50*time.Millisecond)
					w.put(t, p, 5, 1)
				}
				h := newHandled()
				a := startWorker(t, w.world, w.kin, w.store, h.handler("a"), w.fanOpts("a", opt)...)
				waitFor(t, 30*w.lease, "subscribed", func() bool { return a.c.Stats().Subscriptions > 0 })
				w.put(t, p, 5, 1)
				want := p.ids[5:]
				if pos == shardlease.TrimHorizon {
					want = p.ids
				}
				waitFor(t, 30*w.lease, "the records from the position handled", func() bool { return h.distinct() >= len(want) })
				require.NoError(t, a.stop(t))
				h.mu.Lock()
				defer h.mu.Unlock()
				assert.Equal(t, want, h.byShard["shardId-000000000000"], "from %s, in order, once", pos)
			})
		})
	}
}

// A checkpoint inside a KPL aggregate resumes at the next user record of
// the aggregate.
func TestFanOutResumesFromACheckpointInsideAnAggregate(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 1, func(t *testing.T, w *fanWorld) {
		ctx := context.Background()
		p := &produced{}
		w.put(t, p, 2, 1)
		ids := aggIDs("agg", 10)
		seq := w.putAggregate(t, p, ids, "k")
		w.put(t, p, 2, 1)

		// The row says agg-004 was the last processed user record.
		key := shardlease.LeaseKey{Stream: w.stream, Shard: "shardId-000000000000"}
		_, err := w.store.Create(ctx, key, nil)
		require.NoError(t, err)
		row, err := w.store.Get(ctx, key)
		require.NoError(t, err)
		held, err := w.store.Acquire(ctx, key, "before", row.Counter)
		require.NoError(t, err)
		held, err = w.store.Checkpoint(ctx, held, seq, 4, time.Now().Add(w.lease))
		require.NoError(t, err)
		_, err = w.store.Release(ctx, held)
		require.NoError(t, err)

		h := newHandled()
		a := startWorker(t, w.world, w.kin, w.store, h.handler("a"), w.fanOpts("a")...)
		waitFor(t, 30*w.lease, "the rest handled", func() bool { return h.distinct() == 7 })
		w.put(t, p, 2, 1)
		waitFor(t, 30*w.lease, "the records put later handled", func() bool { return h.distinct() == 9 })
		require.NoError(t, a.stop(t))
		h.mu.Lock()
		defer h.mu.Unlock()
		want := append(append([]string{}, ids[5:]...), p.ids[12:]...)
		assert.Equal(t, want, h.byShard["shardId-000000000000"], "resumed after agg-004, once each")
	})
}

// When a subscription ends (after five minutes on the service; shortened
// here), the reader subscribes again after the last event: nothing is
// skipped or handed twice.
func TestFanOutResubscribesAfterTheSubscriptionEnds(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 1, func(t *testing.T, w *fanWorld) {
		// kinesis-local sends an event a second.
		life := 3 * time.Second
		w.lifetime(life)
		p := &produced{}
		h := newHandled()
		a := startWorker(t, w.world, w.kin, w.store, h.handler("a"), w.fanOpts("a")...)
		for range 4 {
			w.put(t, p, 5, 2)
			waitFor(t, 30*w.lease, "the records handled", func() bool { return h.distinct() == p.count() })
			since(t, time.Now(), life)
		}
		require.NoError(t, a.stop(t))
		assert.GreaterOrEqual(t, w.subscriptions("shardId-000000000000"), 4, "subscribed again after each end")
		assert.Zero(t, h.duplicates(), "nothing handed twice")
		assert.Empty(t, h.lost(p))
		requireKeyOrder(t, p, h)
		assert.Zero(t, a.c.Stats().LeasesLost)
	})
}

// A subscription that ends with an error is replaced, after a backoff, by
// one that starts after the last event handed on.
func TestFanOutResubscribesAfterAnError(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 1, func(t *testing.T, w *fanWorld) {
		p := &produced{}
		h := newHandled()
		a := startWorker(t, w.world, w.kin, w.store, h.handler("a"), w.fanOpts("a")...)
		w.put(t, p, 10, 2)
		waitFor(t, 30*w.lease, "the first records handled", func() bool { return h.distinct() == p.count() })
		before := w.subscriptions("shardId-000000000000")
		var injected atomic.Int32
		w.fault(func(string) bool { return injected.CompareAndSwap(0, 1) })
		w.put(t, p, 10, 2)
		waitFor(t, 30*w.lease, "the error injected", func() bool { return injected.Load() == 1 })
		waitFor(t, 30*w.lease, "the records handled", func() bool { return h.distinct() == p.count() })
		w.put(t, p, 10, 2)
		waitFor(t, 30*w.lease, "the records after handled", func() bool { return h.distinct() == p.count() })
		require.NoError(t, a.stop(t))
		assert.Greater(t, w.subscriptions("shardId-000000000000"), before, "subscribed again")
		assert.Zero(t, h.duplicates(), "nothing handed twice")
		assert.Empty(t, h.lost(p))
		requireKeyOrder(t, p, h)
		assert.Zero(t, a.c.Stats().LeasesLost)
	})
}

// A worker joining one that holds every lease is handed its share: the old
// holder hands the batch in hand, closes its subscription, writes its
// checkpoint and releases; the new holder subscribes after the checkpoint.
func TestFanOutHandoffHandsNoRecordTwice(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 2, func(t *testing.T, w *fanWorld) {
		p := &produced{}
		h := newHandled()
		a := startWorker(t, w.world, w.kin, w.store, h.handler("a"), w.fanOpts("a")...)
		waitSettled(t, w.world, 30*w.lease, []int{2}, a)
		pr := w.produce(t, p, w.idle, 2, 8)
		waitFor(t, 30*w.lease, "records flowing", func() bool { return h.distinct() >= 20 })
		b := startWorker(t, w.world, w.kin, w.store, h.handler("b"), w.fanOpts("b")...)
		waitSettled(t, w.world, 30*w.lease, []int{1, 1}, a, b)
		n := p.count()
		waitFor(t, 30*w.lease, "records handled after the handoff", func() bool { return h.distinct() >= n+20 })
		pr.stop()
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		require.NoError(t, a.stop(t))
		require.NoError(t, b.stop(t))
		assert.Zero(t, h.duplicates(), "no record handed twice")
		assert.Empty(t, h.lost(p))
		requireKeyOrder(t, p, h)
		assert.GreaterOrEqual(t, b.c.Stats().LeasesHandedIn, int64(1), "b was handed a lease")
		assert.Zero(t, a.c.Stats().LeasesLost+b.c.Stats().LeasesLost)
	})
}

// A worker that loses its lease closes its subscription and hands nothing
// more under it: the batch in hand is the last.
func TestFanOutLostLeaseClosesTheSubscription(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 1, func(t *testing.T, w *fanWorld) {
		ctx := context.Background()
		shard := "shardId-000000000000"
		p := &produced{}
		var mu sync.Mutex
		var block chan struct{}
		entered := make(chan struct{}, 1)
		var afterLoss []int64 // LeasesTaken at each call after the loss
		var a *worker
		lostAt := atomic.Bool{}
		h := newHandled()
		handler := func(hctx context.Context, b *shardlease.Batch) error {
			if lostAt.Load() {
				mu.Lock()
				afterLoss = append(afterLoss, a.c.Stats().LeasesTaken)
				mu.Unlock()
			}
			h.add("a", b)
			mu.Lock()
			gate := block
			mu.Unlock()
			if gate != nil {
				select {
				case entered <- struct{}{}:
				default:
				}
				<-gate
			}
			return nil
		}
		a = startWorker(t, w.world, w.kin, w.store, handler, w.fanOpts("a")...)
		w.put(t, p, 5, 1)
		waitFor(t, 30*w.lease, "the first records handled", func() bool { return h.distinct() == 5 })

		// The handler blocks in the next batch; meanwhile the lease is
		// taken from under it.
		gate := make(chan struct{})
		mu.Lock()
		block = gate
		mu.Unlock()
		w.put(t, p, 5, 1)
		<-entered
		row, err := w.store.Get(ctx, shardlease.LeaseKey{Stream: w.stream, Shard: shard})
		require.NoError(t, err)
		thief, err := w.store.Acquire(ctx, row.Key, "thief", row.Counter)
		require.NoError(t, err)
		waitFor(t, 2*w.lease, "the loss noticed", func() bool { return a.c.Stats().LeasesLost == 1 })
		lostAt.Store(true)
		mu.Lock()
		block = nil
		mu.Unlock()
		close(gate)

		// Its subscription is closed: the consumer can subscribe again
		// while the thief holds the lease (renewing it, so that a does not
		// take it back meanwhile).
		waitFor(t, 4*w.lease, "the subscription closed", func() bool {
			thief, err = w.store.Renew(ctx, thief, time.Now().Add(w.lease))
			require.NoError(t, err)
			return w.subscribable(t, shard)
		})
		w.put(t, p, 5, 1)
		// a may have taken the lease back already, if the thief's last
		// renewal stood still a lease duration while the records were put
		// (a lists on while the stream's first lease stands still).
		if _, err = w.store.Release(ctx, thief); err != nil {
			require.ErrorIs(t, err, shardlease.ErrLeaseLost)
		}
		// a takes the shard back and hands the rest: never under the lost
		// lease.
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		require.NoError(t, a.stop(t))
		mu.Lock()
		defer mu.Unlock()
		for _, taken := range afterLoss {
			assert.GreaterOrEqual(t, taken, int64(2), "a batch handed after the loss only under a lease taken again")
		}
	})
}

// A split shard's records are all handled before any of its children's.
func TestFanOutSplitReadsParentBeforeChildren(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 1, func(t *testing.T, w *fanWorld) {
		ctx := context.Background()
		p := &produced{}
		var mu sync.Mutex
		var order []string // shard of each handled record, in handling order
		h := newHandled()
		handler := func(_ context.Context, b *shardlease.Batch) error {
			mu.Lock()
			for range b.Records {
				order = append(order, b.ShardID)
			}
			mu.Unlock()
			h.add("a", b)
			return nil
		}
		w.put(t, p, 10, 8)
		a := startWorker(t, w.world, w.kin, w.store, handler, w.fanOpts("a")...)
		waitFor(t, 30*w.lease, "the parent's first records handled", func() bool { return h.distinct() == 10 })
		w.put(t, p, 10, 8)
		mid := new(big.Int).Lsh(big.NewInt(1), 127)
		_, err := w.kin.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String(w.stream), ShardToSplit: aws.String("shardId-000000000000"), NewStartingHashKey: aws.String(mid.String())})
		require.NoError(t, err)
		waitFor(t, 30*w.lease, "the split done", func() bool {
			out, err := w.kin.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(w.stream)})
			require.NoError(t, err)
			open := 0
			for _, s := range out.Shards {
				if s.SequenceNumberRange.EndingSequenceNumber == nil {
					open++
				}
			}
			return len(out.Shards) == 3 && open == 2
		})
		w.put(t, p, 20, 8)
		waitFor(t, 60*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		require.NoError(t, a.stop(t))
		assert.Empty(t, h.lost(p))
		mu.Lock()
		defer mu.Unlock()
		lastParent := slices.Index(order, "shardId-000000000000")
		for i, s := range order {
			if s == "shardId-000000000000" {
				lastParent = i
			}
		}
		for i, s := range order {
			if s != "shardId-000000000000" {
				assert.Greater(t, i, lastParent, "child %s handled before its parent's end", s)
				break
			}
		}
		assert.Len(t, slices.Compact(slices.Sorted(slices.Values(order))), 3, "both children read")
		rows := w.leases(t)
		for _, l := range rows {
			if l.Key.Shard == "shardId-000000000000" {
				assert.Equal(t, shardlease.ShardEnd, l.Checkpoint, "the parent is finished")
			}
		}
		requireKeyOrder(t, p, h)
	})
}

// Shutdown hands the batch in hand, closes every subscription, writes the
// final checkpoints and releases the leases.
func TestFanOutGracefulShutdown(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 2, func(t *testing.T, w *fanWorld) {
		p := &produced{}
		h := newHandled()
		a := startWorker(t, w.world, w.kin, w.store, h.handler("a"), w.fanOpts("a")...)
		w.put(t, p, 20, 8)
		waitFor(t, 30*w.lease, "every record handled", func() bool { return h.distinct() == p.count() })
		require.NoError(t, a.stop(t))
		assert.Equal(t, int64(2), a.c.Stats().LeasesReleased)
		last := map[string]string{}
		p.mu.Lock()
		for shard, ids := range p.byShard {
			last[shard] = p.seq[ids[len(ids)-1]]
		}
		p.mu.Unlock()
		for _, l := range w.leases(t) {
			assert.Empty(t, l.Owner, "%s released", l.Key.Shard)
			if want, ok := last[l.Key.Shard]; ok {
				assert.Equal(t, want, l.Checkpoint, "%s checkpointed at its last record", l.Key.Shard)
			}
			waitFor(t, 4*w.lease, "the subscription closed", func() bool { return w.subscribable(t, l.Key.Shard) })
		}
		assert.Zero(t, h.duplicates())
	})
}

// A checkpoint Kinesis refuses to subscribe at (here a sequence number of
// another shard) is counted and the lease released, as with polling, not
// retried forever.
func TestFanOutRejectedCheckpointIsCounted(t *testing.T) {
	t.Parallel()
	fanOutWorlds(t, 2, func(t *testing.T, w *fanWorld) {
		if w.name == "wire" {
			t.Skip("kinesis-local 0.6.2 subscribes at a sequence number of another shard without complaint; the service (and the fake) refuse it with InvalidArgumentException")
		}
		ctx := context.Background()
		key, other := checkpointOfAnotherShard(t, w.world)

		h := newHandled()
		a := startWorker(t, w.world, w.kin, w.store, h.handler("a"), w.fanOpts("a", shardlease.WithShardSyncInterval(20*w.take))...)
		waitFor(t, 10*w.lease, "the checkpoint rejected", func() bool { return a.c.Stats().CheckpointsRejected >= 1 })
		waitFor(t, 10*w.lease, "the lease released", func() bool {
			row, err := w.store.Get(ctx, key)
			return err == nil && row.Owner == ""
		})
		row, err := w.store.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, other, row.Checkpoint, "the checkpoint is kept for the operator")
		require.NoError(t, a.stop(t))
	})
}
