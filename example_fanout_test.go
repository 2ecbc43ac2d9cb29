package shardlease_test

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// Enhanced fan-out: Run registers the stream consumer "orders-app" (or finds
// it registered) and each held shard is read with SubscribeToShard; records
// are pushed as they are put. Everything else is as with polling.
func ExampleWithEnhancedFanOut() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := shardleasetest.NewKinesis() // in a service: kinesis.NewFromConfig(cfg)
	_, _ = stream.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)})
	for _, order := range []string{"order-1", "order-2"} {
		_, _ = stream.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String(order), Data: []byte(order)})
	}

	seen := 0
	handle := func(ctx context.Context, batch *shardlease.Batch) error {
		for _, r := range batch.Records {
			fmt.Printf("%s %s\n", batch.ShardID, r.Data)
			if seen++; seen == 2 {
				cancel()
			}
		}
		return nil
	}
	consumer, err := shardlease.NewConsumer(stream, shardlease.NewMemoryStore(), "orders", handle,
		shardlease.WithOwnerID("worker-1"), shardlease.WithEnhancedFanOut("orders-app"))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := consumer.Run(ctx); err != nil {
		fmt.Println(err)
	}
	out, _ := stream.ListStreamConsumers(context.Background(), &kinesis.ListStreamConsumersInput{StreamARN: aws.String("arn:aws:kinesis:us-east-1:000000000000:stream/orders")})
	for _, c := range out.Consumers {
		fmt.Println("registered:", *c.ConsumerName, c.ConsumerStatus)
	}
	fmt.Println("subscriptions:", consumer.Stats().Subscriptions)
	// Output:
	// shardId-000000000000 order-1
	// shardId-000000000000 order-2
	// registered: orders-app ACTIVE
	// subscriptions: 1
}
