package shardlease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// A consumer over an in-process stream and MemoryStore. A service passes
// kinesis.NewFromConfig(cfg) and a DynamoStore instead.
func ExampleNewConsumer() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := shardleasetest.NewKinesis() // in a service: kinesis.NewFromConfig(cfg)
	_, _ = stream.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)})
	for _, order := range []string{"order-1", "order-2", "order-3"} {
		_, _ = stream.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String(order), Data: []byte(order)})
	}

	seen := 0
	handle := func(ctx context.Context, batch *shardlease.Batch) error {
		for _, r := range batch.Records {
			fmt.Printf("%s %s\n", batch.ShardID, r.Data)
			if seen++; seen == 3 {
				cancel() // stop after three records: Run checkpoints, releases and returns
			}
		}
		return nil // the batch is processed: checkpoint it
	}
	consumer, err := shardlease.NewConsumer(stream, shardlease.NewMemoryStore(), "orders", handle,
		shardlease.WithOwnerID("worker-1"), shardlease.WithIdlePollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := consumer.Run(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// shardId-000000000000 order-1
	// shardId-000000000000 order-2
	// shardId-000000000000 order-3
}

// NewDynamoStore makes no call; CheckTable (which Run calls) verifies the
// table. Bad names are refused with what is allowed.
func ExampleNewDynamoStore() {
	client := dynamodb.New(dynamodb.Options{Region: "us-east-1"}) // in a service: dynamodb.NewFromConfig(cfg)
	store, err := shardlease.NewDynamoStore(client, "orders-leases")
	fmt.Println(store.Table(), err)

	_, err = shardlease.NewDynamoStore(client, "orders leases")
	fmt.Println(err)
	fmt.Println(errors.Is(err, shardlease.ErrInvalidName))
	// Output:
	// orders-leases <nil>
	// shardlease: invalid name: table name "orders leases" has ' ' at byte 6; use only a-z, A-Z, 0-9, '_', '.' and '-'
	// true
}

// The fencing counter at work: a holder whose lease was taken cannot write,
// even after it holds the lease again.
func ExampleMemoryStore() {
	ctx := context.Background()
	store := shardlease.NewMemoryStore()
	key := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
	_, _ = store.Create(ctx, key, nil)

	a1, _ := store.Acquire(ctx, key, "a", 0)
	fmt.Println("a holds it at counter", a1.Counter)

	// b saw the counter stay at a1.Counter for a whole lease duration.
	b, _ := store.Acquire(ctx, key, "b", a1.Counter)
	fmt.Println("b takes it at counter", b.Counter)

	a2, _ := store.Acquire(ctx, key, "a", b.Counter)
	fmt.Println("a takes it back at counter", a2.Counter)

	_, err := store.Checkpoint(ctx, a1, "42", -1, time.Now())
	fmt.Println("a's first handle:", errors.Is(err, shardlease.ErrLeaseLost))
	now, err := store.Checkpoint(ctx, a2, "42", -1, time.Now())
	fmt.Println("a's current handle:", now.Checkpoint, err)
	// Output:
	// a holds it at counter 1
	// b takes it at counter 2
	// a takes it back at counter 3
	// a's first handle: true
	// a's current handle: 42 <nil>
}

// ParseLeaseKey splits the row key; a stream name cannot contain ':'.
func ExampleParseLeaseKey() {
	k, err := shardlease.ParseLeaseKey("orders:shardId-000000000003")
	fmt.Println(k.Stream, k.Shard, err)
	_, err = shardlease.ParseLeaseKey("shardId-000000000003")
	fmt.Println(strings.Contains(err.Error(), `a lease key is "stream:shard"`))
	// Output:
	// orders shardId-000000000003 <nil>
	// true
}
