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

// A sink keeps the highest token per shard; a write with a lower one comes
// from a holder that lost its lease and is refused. Tokens of different
// shards are not ordered.
func ExampleFenceToken_Compare() {
	stale, _ := shardlease.ParseFenceToken("orders:shardId-000000000001", "0000018f3a2b1c00.0000000000000007")
	newer, _ := shardlease.ParseFenceToken("orders:shardId-000000000001", "0000018f3a2b1c00.000000000000000c")
	other, _ := shardlease.ParseFenceToken("orders:shardId-000000000002", "0000018f3a2b1c00.0000000000000003")
	c, err := stale.Compare(newer)
	fmt.Println(c, err)
	_, err = stale.Compare(other)
	fmt.Println(err != nil)
	fmt.Println(stale.Value() < newer.Value(), "(Value orders as Compare, for SQL or DynamoDB conditions)")
	// Output:
	// -1 <nil>
	// true
	// true (Value orders as Compare, for SQL or DynamoDB conditions)
}

// With four lanes, records of one partition key are handed in order, in
// one lane, while the lanes of other keys run at the same time.
func ExampleWithKeyConcurrency() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := shardleasetest.NewKinesis() // in a service: kinesis.NewFromConfig(cfg)
	_, _ = stream.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)})
	for i := range 12 {
		key := fmt.Sprintf("customer-%d", i%3)
		_, _ = stream.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String(key), Data: fmt.Appendf(nil, "%d", i)})
	}
	var mu sync.Mutex
	byKey := map[string][]string{}
	n := 0
	handle := func(ctx context.Context, batch *shardlease.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range batch.Records {
			byKey[r.PartitionKey] = append(byKey[r.PartitionKey], string(r.Data))
		}
		if n += len(batch.Records); n == 12 {
			cancel()
		}
		return nil
	}
	consumer, err := shardlease.NewConsumer(stream, shardlease.NewMemoryStore(), "orders", handle,
		shardlease.WithKeyConcurrency(4), shardlease.WithOwnerID("worker-1"), shardlease.WithIdlePollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := consumer.Run(ctx); err != nil {
		fmt.Println(err)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Println(k, byKey[k])
	}
	// Output:
	// customer-0 [0 3 6 9]
	// customer-1 [1 4 7 10]
	// customer-2 [2 5 8 11]
}
