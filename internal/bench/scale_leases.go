package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// measureLeaseMemory adds the memory and goroutines per held lease of one
// worker holding 1,000 and 10,000 idle leases, with MemoryStore and the
// in-process stream, so that neither the table's client nor its
// connections are in the figure.
func measureLeaseMemory(ctx context.Context, e *env, sec string) error {
	for _, n := range []int{1000, 10000} {
		perLease, goroutines, err := leaseMemory(ctx, n)
		if err != nil {
			return err
		}
		note := ""
		if n == 1000 {
			note = "MemoryStore and the in-process stream, one record a shard (a checkpoint on every row), default timings; the store's rows are in the figure, the stream's are not; HeapInuse+StackInuse after the collections that shrink the stacks, and runtime.NumGoroutine with every lease held and renewed twice, minus before the consumer was made, per lease"
		}
		e.add(row{Section: sec, Metric: fmt.Sprintf("%d idle leases, MemoryStore: memory per held lease (heap + stacks); goroutines per lease", n), Value: perLease, Unit: "bytes",
			Shown: fmt.Sprintf("%.1f KiB; %.2f", perLease/1024, goroutines), Target: "<= 24 KiB", OK: okp(perLease <= 24*1024), Note: note})
	}
	return nil
}

// leaseMemory runs one worker until it holds n leases and returns its
// memory and goroutines per held lease.
func leaseMemory(ctx context.Context, n int) (perLease, goroutines float64, err error) {
	const stream = "leases"
	fake := shardleasetest.NewKinesis()
	if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(int32(n))}); err != nil {
		return 0, 0, err
	}
	if err := fill(ctx, fake, stream, n, 1, 16); err != nil {
		return 0, 0, err
	}
	store := shardlease.NewMemoryStore()
	mem0, g0 := heapAndStacks(), runtime.NumGoroutine()
	r, err := startConsumer(fake, store, stream, func(context.Context, *shardlease.Batch) error { return nil },
		shardlease.WithOwnerID("leases"))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = r.stop() }()
	if !waitUntil(5*time.Minute, func() bool { return len(r.c.Held()) == n }) {
		return 0, 0, fmt.Errorf("holds %d of %d leases after 5 minutes", len(r.c.Held()), n)
	}
	// Steady state: every lease renewed, its first batch handled.
	time.Sleep(2 * defRenew)
	mem1, g1 := heapAndStacks(), runtime.NumGoroutine()
	return float64(int64(mem1)-int64(mem0)) / float64(n), float64(g1-g0) / float64(n), r.stop()
}
