package shardlease_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// lostAcquireReply lands the first Acquire but reports it failed, as when
// its reply is lost.
type lostAcquireReply struct {
	shardlease.LeaseStore
	shardlease.WorkerStore
	n atomic.Int64
}

func (s *lostAcquireReply) Acquire(ctx context.Context, k shardlease.LeaseKey, owner string, observed int64) (shardlease.Lease, error) {
	l, err := s.LeaseStore.Acquire(ctx, k, owner, observed)
	if err == nil && s.n.Add(1) == 1 {
		return shardlease.Lease{}, errors.New("test: connection reset (the acquire landed)")
	}
	return l, err
}

// Defect: start-up and bad input, tried as a new user would: an endpoint
// with nothing listening kept Run retrying for minutes; typed nil clients
// passed the constructors and panicked in Run; a corrupt row was retried for
// seconds at start; Run leaving during start-up left its worker row behind,
// and cancelling during start-up was an error; WithLeaseDuration(1ns)
// blamed WithRenewInterval; a lost acquire reply counted as a handoff.
func TestOneReaderStartupAndBadInput(t *testing.T) {
	t.Parallel()
	t.Run("nil clients", func(t *testing.T) {
		_, err := shardlease.NewDynamoStore((*dynamodb.Client)(nil), "orders-leases")
		require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
		_, err = shardlease.NewConsumer((*kinesis.Client)(nil), shardlease.NewMemoryStore(), "orders",
			func(context.Context, *shardlease.Batch) error { return nil })
		require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
		assert.ErrorContains(t, err, "Kinesis client is nil")
		_, err = shardlease.NewConsumer(emulator.NewKinesisClient("http://127.0.0.1:1"), (*shardlease.MemoryStore)(nil), "orders",
			func(context.Context, *shardlease.Batch) error { return nil })
		require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
	})
	t.Run("tiny lease duration", func(t *testing.T) {
		_, err := shardlease.NewConsumer(emulator.NewKinesisClient("http://127.0.0.1:1"), shardlease.NewMemoryStore(), "orders",
			func(context.Context, *shardlease.Batch) error { return nil }, shardlease.WithLeaseDuration(time.Nanosecond))
		require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
		assert.ErrorContains(t, err, "WithLeaseDuration(1ns)")
		assert.NotContains(t, err.Error(), "WithRenewInterval")
	})
	t.Run("lost acquire reply is no handoff", func(t *testing.T) {
		worlds(t, 1, func(t *testing.T, w *world) {
			p := &produced{}
			w.put(t, p, 5, 2)
			h := newHandled()
			store := &lostAcquireReply{LeaseStore: w.store, WorkerStore: w.store.(shardlease.WorkerStore)}
			a := startWorker(t, w, w.kin, store, h.handler("a"), w.opts("a")...)
			waitFor(t, 10*w.lease, "every record handled", func() bool { return h.distinct() == 5 })
			require.NoError(t, a.stop(t))
			s := a.c.Stats()
			assert.Equal(t, int64(1), s.LeasesTaken, "taken once (again after the lost reply)")
			assert.Zero(t, s.LeasesHandedIn, "nothing was handed over")
		})
	})
	t.Run("no worker row left when start-up fails", func(t *testing.T) {
		worlds(t, 1, func(t *testing.T, w *world) {
			missing := w.stream + "-missing"
			c, err := shardlease.NewConsumer(w.kin, w.store, missing, newHandled().handler("a"), w.opts("a")...)
			require.NoError(t, err)
			err = c.Run(context.Background())
			var snf *shardlease.StreamNotFoundError
			require.ErrorAs(t, err, &snf)
			_, workers, err := w.store.(shardlease.WorkerStore).ListWithWorkers(context.Background(), missing)
			require.NoError(t, err)
			assert.Empty(t, workers, "the worker row is removed when Run returns during start-up")
		})
	})
	t.Run("cancelled during start-up", func(t *testing.T) {
		worlds(t, 1, func(t *testing.T, w *world) {
			c, err := shardlease.NewConsumer(w.kin, w.store, w.stream, newHandled().handler("a"), w.opts("a")...)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			assert.NoError(t, c.Run(ctx), "a cancelled Run returns nil")
		})
	})
	t.Run("corrupt row fails at once", func(t *testing.T) {
		worlds(t, 1, func(t *testing.T, w *world) {
			if w.name != "emulator" {
				t.Skip("a MemoryStore row cannot be corrupt")
			}
			ds := w.store.(*shardlease.DynamoStore)
			stream := emulator.UniqueName("corrupt")
			require.NoError(t, emulator.CreateStream(t.Context(), w.kin.(*kinesis.Client), stream, 1))
			_, err := w.dynamo.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(ds.Table()), Item: map[string]dtypes.AttributeValue{
				"lease_key":     &dtypes.AttributeValueMemberS{Value: stream + ":shardId-000000000000"},
				"lease_counter": &dtypes.AttributeValueMemberS{Value: "seven"},
			}})
			require.NoError(t, err)
			c, err := shardlease.NewConsumer(w.kin, w.store, stream, newHandled().handler("a"), w.opts("a")...)
			require.NoError(t, err)
			start := time.Now()
			err = c.Run(context.Background())
			took := time.Since(start)
			require.ErrorIs(t, err, shardlease.ErrCorruptLease)
			assert.Less(t, took, w.lease/2, "no retries of a row that stays corrupt")
		})
	})
	t.Run("nothing listening on the Kinesis endpoint", func(t *testing.T) {
		worlds(t, 1, func(t *testing.T, w *world) {
			if w.name != "emulator" {
				t.Skip("needs a real client and real time")
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			addr := l.Addr().String()
			require.NoError(t, l.Close())
			kc := emulator.NewKinesisClient("http://" + addr)
			c, err := shardlease.NewConsumer(kc, w.store, w.stream, newHandled().handler("a"), w.opts("a")...)
			require.NoError(t, err)
			start := time.Now()
			err = c.Run(context.Background())
			took := time.Since(start)
			t.Logf("Run failed after %v: %v", took, err)
			require.Error(t, err)
			assert.Contains(t, err.Error(), w.stream)
			assert.Contains(t, err.Error(), addr)
			assert.Less(t, took, 5*w.lease+10*time.Second, "start-up fails within five lease durations (45s at most)")
		})
	})
}

// Defect: a row that turned corrupt while the consumers ran made every take
// round of the stream fail. The row is now left alone (an Error log and a
// metric name it) and the others are balanced.
func TestOneReaderCorruptRowWhileRunning(t *testing.T) {
	t.Parallel()
	worlds(t, 3, func(t *testing.T, w *world) {
		if w.name != "emulator" {
			t.Skip("a MemoryStore row cannot be corrupt")
		}
		h := newHandled()
		a := startWorker(t, w, w.kin, w.store, h.handler("a"), w.opts("a")...)
		waitFor(t, 10*w.lease, "a holds every shard", func() bool { return len(a.c.Held()) == 3 })
		b := startWorker(t, w, w.kin, w.store, h.handler("b"), w.opts("b")...)
		waitFor(t, 10*w.lease, "b holds its share", func() bool { return len(b.c.Held()) == 1 && len(a.c.Held()) == 2 })

		held := a.c.Held()
		ds := w.store.(*shardlease.DynamoStore)
		_, err := w.dynamo.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
			TableName:                 aws.String(ds.Table()),
			Key:                       map[string]dtypes.AttributeValue{"lease_key": &dtypes.AttributeValueMemberS{Value: w.stream + ":" + held[0]}},
			UpdateExpression:          aws.String("SET lease_counter = :bad"),
			ExpressionAttributeValues: map[string]dtypes.AttributeValue{":bad": &dtypes.AttributeValueMemberS{Value: "seven"}},
		})
		require.NoError(t, err)
		_ = a.stop(t) // its other lease is released; the corrupt row's release fails

		waitFor(t, 5*w.lease, "b takes the lease a released", func() bool { return slices.Contains(b.c.Held(), held[1]) })
		assert.NotContains(t, b.c.Held(), held[0], "the corrupt row is left alone")
		waitFor(t, 5*w.lease, "b counts the corrupt row", func() bool { return b.c.Stats().CorruptRows >= 1 })
		require.NoError(t, b.stop(t))
		assert.EqualValues(t, 1, b.c.Stats().CorruptRows, "counted once per row and run")
	})
}
