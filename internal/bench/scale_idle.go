package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// The idle-leases section measures what one held, idle lease costs a
// running process: one worker holds 10,000 leases of a stream whose
// shards carry one record each, on MemoryStore and the in-process stream,
// with sessions off and on.
//
// The figure is stable against the machine's load. Every reading is
// HeapInuse+StackInuse after one collection, as a running process's own
// periodic collections leave it; the row is the median of several readings
// spread over a renew interval, less the median before the consumer was
// made. The stream's records and the store's rows are made before that
// first reading, so neither is in the figure.

// idleLeases is how many leases the section's worker holds.
const idleLeases = 10000

// idleReadings is how many readings make a figure (their median).
const idleReadings = 5

// leaseCost is what the held leases cost, per lease.
type leaseCost struct {
	perLease, heap, stacks float64 // bytes
	goroutines             float64
}

// measureIdleLeases adds the idle-leases rows: memory per held lease with
// sessions off and on.
func measureIdleLeases(ctx context.Context, e *env) error {
	const sec = "idle leases (one worker, MemoryStore, the in-process stream)"
	for _, sessions := range []bool{false, true} {
		c, err := idleLeaseCost(ctx, idleLeases, sessions)
		if err != nil {
			return err
		}
		name, target := "without sessions", 24.0
		if sessions {
			name, target = "with sessions", 12
		}
		e.add(row{Section: sec, Metric: fmt.Sprintf("%d idle leases %s, MemoryStore: memory per held lease", idleLeases, name), Value: c.perLease, Unit: "bytes",
			Shown:  fmt.Sprintf("%.1f KiB (heap %.1f KiB, stacks %.1f KiB; %.2f goroutines a lease)", c.perLease/1024, c.heap/1024, c.stacks/1024, c.goroutines),
			Target: fmt.Sprintf("<= %.0f KiB", target), OK: okp(c.perLease <= target*1024),
			Note: fmt.Sprintf("default timings; HeapInuse+StackInuse after one collection, median of %d readings over a renew interval with every lease held, less the median before the consumer was made (the stream's records and the store's rows are made before it, so neither is counted); goroutines: runtime.NumGoroutine likewise", idleReadings)})
	}
	return nil
}

// idleLeaseCost runs one worker until it holds n idle leases, and returns
// their cost per lease.
func idleLeaseCost(ctx context.Context, n int, sessions bool) (leaseCost, error) {
	const stream = "idle"
	fake := shardleasetest.NewKinesis()
	if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(int32(n))}); err != nil {
		return leaseCost{}, err
	}
	if err := fill(ctx, fake, stream, n, 1, 16); err != nil {
		return leaseCost{}, err
	}
	store := shardlease.NewMemoryStore()
	for i := range n {
		if _, err := store.Create(ctx, shardlease.LeaseKey{Stream: stream, Shard: fmt.Sprintf("shardId-%012d", i)}, nil); err != nil {
			return leaseCost{}, err
		}
	}
	before := readings(idleReadings, 0)
	r, err := startConsumer(fake, store, stream, func(context.Context, *shardlease.Batch) error { return nil },
		shardlease.WithOwnerID("idle"), shardlease.WithSessions(sessions))
	if err != nil {
		return leaseCost{}, err
	}
	defer func() { _ = r.stop() }()
	if !waitUntil(5*time.Minute, func() bool { return len(r.c.Held()) == n }) {
		return leaseCost{}, fmt.Errorf("holds %d of %d leases after 5 minutes", len(r.c.Held()), n)
	}
	// Steady state: every lease kept at least twice, its one record handled.
	time.Sleep(2 * defRenew)
	held := readings(idleReadings, defRenew/idleReadings)
	per := func(a, b float64) float64 { return (a - b) / float64(n) }
	c := leaseCost{
		perLease: per(held.heap+held.stacks, before.heap+before.stacks),
		heap:     per(held.heap, before.heap), stacks: per(held.stacks, before.stacks),
		goroutines: per(held.goroutines, before.goroutines),
	}
	return c, r.stop()
}

// reading is one look at the process's memory.
type reading struct{ heap, stacks, goroutines float64 }

// readings returns the median of k readings, each after one collection,
// gap apart.
func readings(k int, gap time.Duration) reading {
	var heap, stacks, gs []float64
	for i := range k {
		if i > 0 {
			time.Sleep(gap)
		}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heap = append(heap, float64(ms.HeapInuse))
		stacks = append(stacks, float64(ms.StackInuse))
		gs = append(gs, float64(runtime.NumGoroutine()))
	}
	return reading{median(heap), median(stacks), median(gs)}
}

// median returns the middle of vs (which it sorts).
func median(vs []float64) float64 {
	slices.Sort(vs)
	return vs[len(vs)/2]
}
