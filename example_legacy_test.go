package shardlease_test

import (
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/shardlease/shardlease"
)

// While upgrading from a release that kept one row per shard, name the stream
// those rows belong to. Without the option, a shard whose bare row holds a
// checkpoint is refused with an error that says what to do.
func ExampleWithLegacyStream() {
	// In a service: dynamodb.NewFromConfig(cfg). NewDynamoStore makes no call.
	client := dynamodb.New(dynamodb.Options{Region: "us-east-1"})
	store, err := shardlease.NewDynamoStore(client, "orders-leases",
		shardlease.WithLegacyStream("orders")) // only while upgrading from bare-shard rows
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("store over", store.Table())

	// What Acquire and Get return for such a shard when no stream is named:
	var refused error = &shardlease.UnattributedLegacyRowError{
		Table: "orders-leases", Shard: "shardId-000000000000", Stream: "orders",
	}
	fmt.Println(errors.Is(refused, shardlease.ErrLegacyRow))
	fmt.Println(refused)
	// Output:
	// store over orders-leases
	// true
	// shardlease: table orders-leases: shard shardId-000000000000 of stream orders is not read: the table holds a checkpoint row keyed by the bare shard id "shardId-000000000000", written by an earlier release, and no stream was named for such rows; if the checkpoint belongs to stream orders, create the store with shardlease.WithLegacyStream("orders"), otherwise delete the row with lease_key "shardId-000000000000" from table orders-leases
}
