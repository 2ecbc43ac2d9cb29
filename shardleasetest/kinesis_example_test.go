package shardleasetest_test

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease/shardleasetest"
)

// Reading a shard to its end after a split: the last GetRecords returns the
// children and no next iterator.
func ExampleKinesis_GetRecords() {
	ctx := context.Background()
	f := shardleasetest.NewKinesis()
	stream := aws.String("orders")
	if _, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: stream, ShardCount: aws.Int32(1)}); err != nil {
		panic(err)
	}
	for _, key := range []string{"a", "b", "c"} {
		if _, err := f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: stream, PartitionKey: aws.String(key), Data: []byte(key)}); err != nil {
			panic(err)
		}
	}
	if _, err := f.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: stream,
		ShardToSplit: aws.String("shardId-000000000000"), NewStartingHashKey: aws.String("170141183460469231731687303715884105728")}); err != nil {
		panic(err)
	}

	it, err := f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: stream,
		ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		panic(err)
	}
	out, err := f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil {
		panic(err)
	}
	for _, r := range out.Records {
		fmt.Printf("%s %d digits\n", r.Data, len(*r.SequenceNumber))
	}
	fmt.Println("next iterator:", out.NextShardIterator != nil)
	for _, c := range out.ChildShards {
		fmt.Println("child", *c.ShardId, "of", c.ParentShards)
	}
	// Output:
	// a 56 digits
	// b 56 digits
	// c 56 digits
	// next iterator: false
	// child shardId-000000000001 of [shardId-000000000000]
	// child shardId-000000000002 of [shardId-000000000000]
}
