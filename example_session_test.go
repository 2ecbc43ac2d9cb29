package shardlease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// With sessions, one write to the worker's row each renew interval keeps
// every lease it holds, and the lease row names the session that keeps it.
func ExampleWithSessions() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := shardleasetest.NewKinesis() // in a service: kinesis.NewFromConfig(cfg)
	_, _ = stream.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)})
	_, _ = stream.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String("order-1"), Data: []byte("order-1")})

	store := shardlease.NewMemoryStore()
	handle := func(ctx context.Context, batch *shardlease.Batch) error {
		for _, r := range batch.Records {
			fmt.Printf("%s %s\n", batch.ShardID, r.Data)
		}
		rows, _ := store.List(ctx, "orders")
		fmt.Println("kept by", shardlease.OwnerName(rows[0].Owner), "through", rows[0].Session != "")
		cancel() // stop: Run releases the lease and closes the session
		return nil
	}
	consumer, err := shardlease.NewConsumer(stream, store, "orders", handle,
		shardlease.WithOwnerID("worker-1"), shardlease.WithSessions(true), shardlease.WithIdlePollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := consumer.Run(ctx); err != nil {
		fmt.Println(err)
	}
	_, err = store.ReadSession(context.Background(), "orders", consumer.OwnerID())
	fmt.Println("session row left behind:", err == nil)
	// Output:
	// shardId-000000000000 order-1
	// kept by worker-1 through true
	// session row left behind: false
}
