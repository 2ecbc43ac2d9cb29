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

// The idle-lease rows measure what one held, idle lease costs a running
// process: one worker holds 1,000 or 10,000 leases of a stream whose
// shards carry one record each, on MemoryStore and the in-process stream
// (so that neither a table's client nor its connections are in the
// figure), with sessions off and on. `-only idle-leases` runs them alone.
//
// The figure is stable against the machine's load. Every reading is taken
// after one collection, as a running process's own periodic collections
// leave it: the live heap (HeapAlloc) and the goroutines' stacks
// (StackInuse). The leases are held for three renew intervals, with a
// collection after each, before the readings; the row is the median of
// seven readings spread over two renew intervals, less the median before
// the consumer was made. The
// stream's records and the store's rows are made before that first
// reading, so neither is counted. HeapInuse, which adds the free room of
// the heap's partly used spans, is shown beside it.

// idleReadings is how many readings make a figure (their median).
const idleReadings = 7

// leaseCost is what the held leases cost, per lease.
type leaseCost struct {
	perLease, heap, stacks float64 // bytes: live heap and stacks; each apart
	inuse                  float64 // bytes: HeapInuse and stacks
	goroutines             float64
}

// idleLeaseRuns are the rows: leases held, sessions (the default), target
// in KiB; per-lease renewals (WithSessions(false)) last.
var idleLeaseRuns = []struct {
	n        int
	sessions bool
	target   float64
}{{1000, true, 12}, {10000, true, 12}, {10000, false, 24}}

// measureLeaseMemory adds the memory and goroutines per held idle lease.
func measureLeaseMemory(ctx context.Context, e *env, sec string) error {
	g0 := runtime.NumGoroutine()
	for i, run := range idleLeaseRuns {
		// What ran before (a run's last timers and goroutines) may still
		// hold its state for a moment: the baseline waits for it to go.
		if !waitUntil(time.Minute, func() bool { return runtime.NumGoroutine() <= g0 }) {
			return fmt.Errorf("%d goroutines a minute after the run before, %d before it", runtime.NumGoroutine(), g0)
		}
		time.Sleep(2 * defIdle)
		runtime.GC()
		c, err := idleLeaseCost(ctx, run.n, run.sessions)
		if err != nil {
			return err
		}
		with := "without sessions"
		if run.sessions {
			with = "with sessions"
		}
		note := ""
		if i == 0 {
			note = fmt.Sprintf("MemoryStore and the in-process stream, one record a shard (a checkpoint on every row), default timings; the live heap (HeapAlloc) and StackInuse after one collection, the median of %d readings over two renew intervals once every lease was held for three (a collection after each), less the median before the consumer was made (the stream's records and the store's rows are made before it, so neither is counted); HeapInuse instead of the live heap adds the free room of partly used spans; goroutines: runtime.NumGoroutine likewise; -only idle-leases runs these rows alone", idleReadings)
		}
		e.add(row{Section: sec, Metric: fmt.Sprintf("%s idle leases %s, MemoryStore: memory per held lease", thousands(run.n), with), Value: c.perLease, Unit: "bytes",
			Shown:  fmt.Sprintf("%.1f KiB (heap %.1f, stacks %.1f; with HeapInuse %.1f); %.2f goroutines", c.perLease/1024, c.heap/1024, c.stacks/1024, c.inuse/1024, c.goroutines),
			Target: fmt.Sprintf("<= %.0f KiB", run.target), OK: okp(c.perLease <= run.target*1024), Note: note})
	}
	return nil
}

// measureIdleLeases is the idle-lease rows alone.
func measureIdleLeases(ctx context.Context, e *env) error {
	return measureLeaseMemory(ctx, e, "idle leases (one worker, MemoryStore, the in-process stream)")
}

// thousands writes n with a comma every three digits.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// idleLeaseCost runs one worker until it holds n idle leases, and returns
// their cost per lease.
func idleLeaseCost(ctx context.Context, n int, sessions bool) (leaseCost, error) {
	const stream = "leases"
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
		shardlease.WithOwnerID("leases"), shardlease.WithSessions(sessions))
	if err != nil {
		return leaseCost{}, err
	}
	defer func() { _ = r.stop() }()
	if !waitUntil(5*time.Minute, func() bool { return len(r.c.Held()) == n }) {
		return leaseCost{}, fmt.Errorf("holds %d of %d leases after 5 minutes", len(r.c.Held()), n)
	}
	// Steady state: every lease kept at least three times, its one record
	// handled, and the collections a running process makes now and then
	// (at least every two minutes) have given back the stacks the start
	// grew; one halves a stack at most.
	for range 3 {
		time.Sleep(defRenew)
		runtime.GC()
	}
	held := readings(idleReadings, 2*defRenew/idleReadings)
	per := func(a, b float64) float64 { return (a - b) / float64(n) }
	c := leaseCost{
		perLease: per(held.heap+held.stacks, before.heap+before.stacks),
		heap:     per(held.heap, before.heap), stacks: per(held.stacks, before.stacks),
		inuse:      per(held.inuse+held.stacks, before.inuse+before.stacks),
		goroutines: per(held.goroutines, before.goroutines),
	}
	return c, r.stop()
}

// reading is one look at the process's memory: the medians of readings.
type reading struct{ heap, inuse, stacks, goroutines float64 }

// readings returns the median of k readings, each after one collection,
// gap apart.
func readings(k int, gap time.Duration) reading {
	var heap, inuse, stacks, gs []float64
	for i := range k {
		if i > 0 {
			time.Sleep(gap)
		}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heap = append(heap, float64(ms.HeapAlloc))
		inuse = append(inuse, float64(ms.HeapInuse))
		stacks = append(stacks, float64(ms.StackInuse))
		gs = append(gs, float64(runtime.NumGoroutine()))
	}
	return reading{median(heap), median(inuse), median(stacks), median(gs)}
}

// median returns the middle of vs (which it sorts).
func median(vs []float64) float64 {
	slices.Sort(vs)
	return vs[len(vs)/2]
}
