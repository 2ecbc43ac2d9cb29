package shardlease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shardlease/shardlease"
)

// Move a shard's checkpoint back, taking the lease from the worker that
// holds it. The row is left held by the reset's identity: consumers take it
// once it has stood still for the worker's lease duration, when the worker
// has stopped, so that no two handlers run on the shard.
func ExampleResetCheckpoint() {
	ctx := context.Background()
	store := shardlease.NewMemoryStore() // in a service: shardlease.NewDynamoStore(dynamodb.NewFromConfig(cfg), table)
	key := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000003"}
	_, _ = store.Create(ctx, key, nil)
	held, _ := store.Acquire(shardlease.WithHolderLeaseDuration(ctx, 10*time.Second), key, "worker-a#0123456789abcdef", 0)
	_, _ = store.Checkpoint(ctx, held, "49590338271490256608559692538361571095921575989136588898", -1, time.Now())

	rep, err := shardlease.ResetCheckpoint(ctx, store, key, "49590338271490256608559692538361571095921575989136588800",
		shardlease.WithResetHandover(), shardlease.WithResetOwner("ops#0123456789abcdef"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("taken from", shardlease.OwnerName(rep.TakenFrom))
	fmt.Println("replaced", rep.Previous.Checkpoint)
	fmt.Println("held by", shardlease.OwnerName(rep.Lease.Owner), "until it has stood still for", rep.ResumeAfter)
	// Output:
	// taken from worker-a
	// replaced 49590338271490256608559692538361571095921575989136588898
	// held by ops until it has stood still for 10s
}
