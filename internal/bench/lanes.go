package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/crash"
	"github.com/shardlease/shardlease/shardleasetest"
)

// Per-key concurrency (in-process fake, real time): one shard, 1,000
// partition keys, a handler that spends 2 ms a record.
const (
	laneKeys      = 1000
	lanePerRecord = 2 * time.Millisecond
	laneInFlight  = 256
	laneFlush     = 5 * time.Millisecond
)

// laneStream returns a fake with one shard of n records over laneKeys keys.
func laneStream(ctx context.Context, n int) (*shardleasetest.Kinesis, error) {
	f := shardleasetest.NewKinesis()
	if _, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("lanes"), ShardCount: aws.Int32(1)}); err != nil {
		return nil, err
	}
	for i := range n {
		if _, _, err := f.Put("lanes", fmt.Sprintf("key-%04d", i%laneKeys), fmt.Appendf(nil, "rec-%07d", i)); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// laneRun is what the lanes bench's handlers handled.
type laneRun struct {
	mu      sync.Mutex
	seen    map[string]int
	handled atomic.Int64
	first   time.Time
}

func (lr *laneRun) handler(sw *crash.Switch) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		if sw != nil && sw.Down() {
			return errors.New("crashed")
		}
		lr.mu.Lock()
		if lr.first.IsZero() {
			lr.first = time.Now() // the first call entered
		}
		lr.mu.Unlock()
		t := time.NewTimer(time.Duration(len(b.Records)) * lanePerRecord)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		if sw != nil && sw.Down() {
			return errors.New("crashed")
		}
		lr.mu.Lock()
		for _, r := range b.Records {
			lr.seen[string(r.Data)]++
		}
		lr.mu.Unlock()
		lr.handled.Add(int64(len(b.Records)))
		return nil
	}
}

func (lr *laneRun) distinct() int {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return len(lr.seen)
}

func (lr *laneRun) duplicates() int {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	d := 0
	for _, n := range lr.seen {
		d += n - 1
	}
	return d
}

// runUntil runs a consumer until cond holds (or a minute passes), then
// stops it gracefully.
func runUntil(ctx context.Context, c *shardlease.Consumer, cond func() bool) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			cancel()
			<-done
			return errors.New("not done within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	return <-done
}

func laneOpts(n int, extra ...shardlease.Option) []shardlease.Option {
	opts := []shardlease.Option{shardlease.WithIdlePollInterval(50 * time.Millisecond), shardlease.WithTakeInterval(100 * time.Millisecond),
		shardlease.WithBatchSize(1000), shardlease.WithCheckpointInterval(laneFlush)}
	if n > 1 {
		opts = append(opts, shardlease.WithKeyConcurrency(n), shardlease.WithMaxInFlight(laneInFlight))
	}
	return append(opts, extra...)
}

// laneThroughput returns records per second with n lanes.
func laneThroughput(ctx context.Context, n, records int) (float64, error) {
	f, err := laneStream(ctx, records)
	if err != nil {
		return 0, err
	}
	lr := &laneRun{seen: map[string]int{}}
	c, err := shardlease.NewConsumer(f, shardlease.NewMemoryStore(), "lanes", lr.handler(nil), laneOpts(n)...)
	if err != nil {
		return 0, err
	}
	var last time.Time
	if err := runUntil(ctx, c, func() bool {
		if lr.distinct() == records {
			last = time.Now()
			return true
		}
		return false
	}); err != nil {
		return 0, err
	}
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return float64(records) / last.Sub(lr.first).Seconds(), nil
}

// laneCrashDuplicates crashes a worker with 8 lanes halfway through and
// returns how many records the next worker handed again.
func laneCrashDuplicates(ctx context.Context, records int) (int, error) {
	f, err := laneStream(ctx, records)
	if err != nil {
		return 0, err
	}
	store := shardlease.NewMemoryStore()
	lr := &laneRun{seen: map[string]int{}}
	sw := &crash.Switch{}
	a, err := shardlease.NewConsumer(crash.Kinesis(f, sw), crash.Store(store, sw), "lanes", lr.handler(sw), laneOpts(8, shardlease.WithLeaseDuration(time.Second))...)
	if err != nil {
		return 0, err
	}
	if err := runUntil(ctx, a, func() bool {
		if lr.distinct() >= records/2 {
			sw.Crash()
			return true
		}
		return false
	}); err != nil {
		return 0, err
	}
	b, err := shardlease.NewConsumer(f, store, "lanes", lr.handler(nil), laneOpts(8, shardlease.WithLeaseDuration(time.Second))...)
	if err != nil {
		return 0, err
	}
	if err := runUntil(ctx, b, func() bool { return lr.distinct() == records }); err != nil {
		return 0, err
	}
	return lr.duplicates(), nil
}

// measureLanes is the per-key concurrency section.
func measureLanes(ctx context.Context, e *env) error {
	records := 4000
	if e.sz.quick {
		records = 2000
	}
	one, err := laneThroughput(ctx, 1, records)
	if err != nil {
		return err
	}
	eight, err := laneThroughput(ctx, 8, records)
	if err != nil {
		return err
	}
	dups, err := laneCrashDuplicates(ctx, records)
	if err != nil {
		return err
	}
	const sec = "per-key concurrency (in-process fake, one shard, 1,000 keys, 2 ms a record)"
	ratio := eight / one
	e.add(row{Section: sec, Metric: "throughput with 1 lane", Value: one, Unit: "records/s", Shown: fmt.Sprintf("%.0f/s", one), Target: "-",
		Note: fmt.Sprintf("%d records on one shard of the in-process fake, a handler that sleeps 2 ms per record of its batch; from the first handler call entered to the last record handled", records)})
	e.add(row{Section: sec, Metric: "throughput with WithKeyConcurrency(8)", Value: eight, Unit: "records/s", Shown: fmt.Sprintf("%.0f/s", eight), Target: "-"})
	e.add(row{Section: sec, Metric: "8 lanes vs 1: throughput ratio", Value: ratio, Unit: "x", Shown: fmt.Sprintf("%.1fx", ratio), Target: ">= 6x", OK: okp(ratio >= 6)})
	bound := laneInFlight + int(eight*laneFlush.Seconds())
	e.add(row{Section: sec, Metric: "records handed again after a crash halfway (8 lanes)", Value: float64(dups), Unit: "records",
		Shown: fmt.Sprint(dups), Target: fmt.Sprintf("<= %d", bound), OK: okp(dups <= bound),
		Note: fmt.Sprintf("the bound is WithMaxInFlight (%d records dealt out above the watermark) plus what 8 lanes handle in one checkpoint interval (%v)", laneInFlight, laneFlush)})
	return nil
}

// measureWindow is the batching window section: handler calls per minute on
// a shard that trickles 20 records a second, without and with
// WithBatchWindow(100, 5s).
func measureWindow(ctx context.Context, e *env) error {
	span := time.Minute
	if e.sz.quick {
		span = 20 * time.Second
	}
	without, err := windowCalls(ctx, span)
	if err != nil {
		return err
	}
	with, err := windowCalls(ctx, span, shardlease.WithBatchWindow(100, 5*time.Second))
	if err != nil {
		return err
	}
	const sec = "batching window (in-process fake, one shard, 20 records/s)"
	perMin := func(n int) float64 { return float64(n) * float64(time.Minute) / float64(span) }
	a, b := perMin(without), perMin(with)
	e.add(row{Section: sec, Metric: "handler calls per minute without a window", Value: a, Unit: "calls/min", Shown: fmt.Sprintf("%.0f", a), Target: "-",
		Note: fmt.Sprintf("records put at 20/s for %v, default polling (1s idle wait); calls counted over the span", span)})
	e.add(row{Section: sec, Metric: "handler calls per minute with WithBatchWindow(100, 5s)", Value: b, Unit: "calls/min", Shown: fmt.Sprintf("%.0f", b), Target: "<= 15", OK: okp(b <= 15)})
	return nil
}

// windowCalls puts 20 records a second for span and counts handler calls.
func windowCalls(ctx context.Context, span time.Duration, opts ...shardlease.Option) (int, error) {
	f := shardleasetest.NewKinesis()
	if _, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("trickle"), ShardCount: aws.Int32(1)}); err != nil {
		return 0, err
	}
	var calls, records atomic.Int64
	c, err := shardlease.NewConsumer(f, shardlease.NewMemoryStore(), "trickle", func(_ context.Context, b *shardlease.Batch) error {
		calls.Add(1)
		records.Add(int64(len(b.Records)))
		return nil
	}, append([]shardlease.Option{shardlease.WithTakeInterval(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		return 0, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(span)
	put := 0
	for time.Now().Before(end) {
		<-tick.C
		if _, _, err := f.Put("trickle", fmt.Sprintf("key-%d", put%10), []byte("x")); err != nil {
			cancel()
			return 0, errors.Join(err, <-done)
		}
		put++
	}
	n := int(calls.Load())
	cancel()
	if err := <-done; err != nil {
		return 0, err
	}
	if records.Load() == 0 {
		return 0, errors.New("no record handled")
	}
	return n, nil
}
