package shardlease_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// A group of two streams over an in-process Kinesis and MemoryStore: one
// Run reads both, and each batch names its stream. A service passes
// kinesis.NewFromConfig(cfg) and a DynamoStore instead.
func ExampleNewGroup() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kin := shardleasetest.NewKinesis() // in a service: kinesis.NewFromConfig(cfg)
	for _, stream := range []string{"orders", "refunds"} {
		_, _ = kin.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(1)})
		_, _ = kin.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String("k"), Data: []byte(stream + "-1")})
	}

	var mu sync.Mutex
	var seen []string
	handle := func(ctx context.Context, batch *shardlease.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range batch.Records {
			seen = append(seen, fmt.Sprintf("%s %s: %s", batch.Stream, batch.ShardID, r.Data))
		}
		if len(seen) == 2 {
			cancel() // stop after both records: Run checkpoints, releases and returns
		}
		return nil
	}
	group, err := shardlease.NewGroup(kin, shardlease.NewMemoryStore(), shardlease.GroupConfig{
		Name:    "orders-service",
		Streams: []shardlease.StreamSpec{{Name: "orders"}, {Name: "refunds"}},
	}, handle, shardlease.WithOwnerID("worker-1"), shardlease.WithIdlePollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := group.Run(ctx); err != nil {
		fmt.Println(err)
	}
	sort.Strings(seen) // the two streams are read concurrently
	for _, s := range seen {
		fmt.Println(s)
	}
	// Output:
	// orders shardId-000000000000: orders-1
	// refunds shardId-000000000000: refunds-1
}

// Two specs that would write the same rows are refused before anything
// runs: here a name and an ARN of one stream.
func ExampleNewGroup_refused() {
	_, err := shardlease.NewGroup(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), shardlease.GroupConfig{
		Name: "orders-service",
		Streams: []shardlease.StreamSpec{
			{Name: "orders"},
			{ARN: "arn:aws:kinesis:us-east-1:111122223333:stream/orders"},
		},
	}, func(context.Context, *shardlease.Batch) error { return nil })
	fmt.Println(err)
	// Output:
	// shardlease: invalid configuration: group orders-service: orders and arn:aws:kinesis:us-east-1:111122223333:stream/orders both name stream orders, whose rows they would both write (streams of one name in two accounts or regions need a lease table each): give it once
}
