package shardleasetest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// Testing a handler against the in-process stream: put records, run a
// consumer on a MemoryStore, wait until the handler has processed them. In
// a test, shardleasetest.Run(t, consumer) starts and stops the consumer,
// got.WaitFor(t, 3, time.Minute) waits, failing the test on a timeout, and
// shardlease.WithLogger(shardleasetest.Logger(t)) puts the consumer's log
// in the test's; an example has no test, so its consumer logs nowhere.
func Example() {
	stream := shardleasetest.NewKinesis()
	if err := stream.AddStream("orders", 1); err != nil {
		fmt.Println(err)
		return
	}
	for i, amount := range []string{"10", "25", "7"} {
		if _, _, err := stream.Put("orders", fmt.Sprint("order-", i), []byte(amount)); err != nil {
			fmt.Println(err)
			return
		}
	}

	// sumAmounts is the handler under test.
	total := 0
	sumAmounts := func(ctx context.Context, batch *shardlease.Batch) error {
		for _, r := range batch.Records {
			n, err := strconv.Atoi(string(r.Data))
			if err != nil {
				return fmt.Errorf("order %s: %w", r.PartitionKey, err)
			}
			total += n
		}
		return nil
	}
	got := shardleasetest.Collect(sumAmounts)
	consumer, err := shardlease.NewConsumer(stream, shardlease.NewMemoryStore(), "orders", got.Handle,
		shardlease.WithIdlePollInterval(10*time.Millisecond), shardlease.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- consumer.Run(ctx) }()

	records, err := got.Wait(ctx, 3)
	cancel()
	fmt.Println("run:", <-stopped, "wait:", err)
	for _, r := range records {
		fmt.Println(r.ShardID, r.PartitionKey, string(r.Data))
	}
	fmt.Println("total:", total)
	// Output:
	// run: <nil> wait: <nil>
	// shardId-000000000000 order-0 10
	// shardId-000000000000 order-1 25
	// shardId-000000000000 order-2 7
	// total: 42
}

// A LeaseStore of your own runs the suite from a test of its package, with
// a function that returns a ready store (one per subtest, or one shared:
// the subtests keep to streams of their own).
func ExampleRunStoreConformance() {
	testConformance := func(t *testing.T) { // func TestConformance(t *testing.T) in the store's package
		shardleasetest.RunStoreConformance(t, func(t *testing.T) shardlease.LeaseStore {
			return shardlease.NewMemoryStore() // here: your store, on a fresh table
		})
	}
	_ = testConformance
}

// Faults: a FaultFunc sees every call, by operation and shard, and the error
// it returns is the call's. Here the first iterator asked for is throttled,
// as a consumer's retry tests want.
func ExampleKinesis_SetFaults() {
	stream := shardleasetest.NewKinesis()
	if err := stream.AddStream("orders", 1); err != nil {
		fmt.Println(err)
		return
	}
	stream.SetFaults(func(op, shardID string) error {
		if op == shardleasetest.OpGetShardIterator && stream.Calls(op) == 1 {
			return &types.ProvisionedThroughputExceededException{Message: aws.String("Rate exceeded for shard " + shardID)}
		}
		return nil
	})
	for range 2 {
		_, err := stream.GetShardIterator(context.Background(), &kinesis.GetShardIteratorInput{StreamName: aws.String("orders"),
			ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		var throttled *types.ProvisionedThroughputExceededException
		fmt.Println("throttled:", errors.As(err, &throttled))
	}
	fmt.Println(stream.Calls(shardleasetest.OpGetShardIterator), "calls")
	// Output:
	// throttled: true
	// throttled: false
	// 2 calls
}

// Resharding by shard id: Split returns the children, Merge the child.
func ExampleKinesis_Split() {
	stream := shardleasetest.NewKinesis()
	if err := stream.AddStream("orders", 1); err != nil {
		fmt.Println(err)
		return
	}
	low, high, err := stream.Split("orders", "shardId-000000000000")
	fmt.Println(low, high, err)
	child, err := stream.Merge("orders", low, high)
	fmt.Println(child, err)
	shards, _ := stream.Shards("orders")
	for _, s := range shards {
		fmt.Println(*s.ShardId, "open:", s.SequenceNumberRange.EndingSequenceNumber == nil)
	}
	// Output:
	// shardId-000000000001 shardId-000000000002 <nil>
	// shardId-000000000003 <nil>
	// shardId-000000000000 open: false
	// shardId-000000000001 open: false
	// shardId-000000000002 open: false
	// shardId-000000000003 open: true
}
