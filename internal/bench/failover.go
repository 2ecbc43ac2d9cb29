package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/crash"
	"github.com/shardlease/shardlease/shardleasetest"
)

// fakeWorld is a stream on the in-process fake with a MemoryStore, run in
// real time with short timings.
type fakeWorld struct {
	fake   *shardleasetest.Kinesis
	store  *shardlease.MemoryStore
	stream string
	shards int
	lease  time.Duration
}

func newFakeWorld(ctx context.Context, shards int, lease time.Duration) (*fakeWorld, error) {
	w := &fakeWorld{fake: shardleasetest.NewKinesis(), store: shardlease.NewMemoryStore(), stream: "bench", shards: shards, lease: lease}
	_, err := w.fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(w.stream), ShardCount: aws.Int32(int32(shards))})
	return w, err
}

// take is the consumer's default take interval for the world's lease.
func (w *fakeWorld) take() time.Duration { return defaultTake(w.lease) }

func (w *fakeWorld) opts(owner string, extra ...shardlease.Option) []shardlease.Option {
	return append([]shardlease.Option{
		shardlease.WithOwnerID(owner),
		shardlease.WithLeaseDuration(w.lease),
		shardlease.WithIdlePollInterval(20 * time.Millisecond),
		shardlease.WithShutdownTimeout(w.lease),
		shardlease.WithRetryBackoff(w.take()/10, w.take()),
	}, extra...)
}

// produce puts a record on every shard every 20ms until ctx is done.
func (w *fakeWorld) produce(ctx context.Context, wg *sync.WaitGroup) {
	every(ctx, wg, 20*time.Millisecond, func() { _ = fill(ctx, w.fake, w.stream, w.shards, 1, 16) })
}

// every calls f every d, in a goroutine of wg, until ctx is done.
func every(ctx context.Context, wg *sync.WaitGroup, d time.Duration, f func()) {
	wg.Go(func() {
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				f()
			}
		}
	})
}

// running is a consumer running in its own goroutine.
type running struct {
	c      *shardlease.Consumer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error // Run's error, once stopped
}

func startConsumer(kin shardlease.KinesisAPI, store shardlease.LeaseStore, stream string, h shardlease.Handler, opts ...shardlease.Option) (*running, error) {
	c, err := shardlease.NewConsumer(kin, store, stream, h, opts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	return r, nil
}

// stop cancels the consumer and returns Run's error; stopping twice is
// harmless.
func (r *running) stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

// firstSeen records, per shard, when a handler first saw a record of it
// after arm was called.
type firstSeen struct {
	mu    sync.Mutex
	armed bool
	at    map[string]time.Time
}

func (f *firstSeen) watching(b *shardlease.Batch) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.armed {
		if _, ok := f.at[b.ShardID]; !ok {
			f.at[b.ShardID] = time.Now()
		}
	}
}

func (f *firstSeen) arm() {
	f.mu.Lock()
	f.armed, f.at = true, map[string]time.Time{}
	f.mu.Unlock()
}

func (f *firstSeen) all(shards []string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var last time.Time
	for _, s := range shards {
		t, ok := f.at[s]
		if !ok {
			return time.Time{}, false
		}
		if t.After(last) {
			last = t
		}
	}
	return last, true
}

func waitUntil(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// How a failover trial ends its victim.
const (
	stopGracefully   = iota // cancel the first worker's context
	crashPlain              // crash the worker that does not coordinate
	crashCoordinator        // crash the worker that runs the first shard's lease
)

// failoverTrial runs two workers over 8 shards, 4 each (the second joins
// the first and is handed its share), then crashes (or gracefully stops) one
// and returns how long until the other has handled a record of every shard
// the first held.
func failoverTrial(ctx context.Context, lease time.Duration, how int) (time.Duration, error) {
	w, err := newFakeWorld(ctx, 8, lease)
	if err != nil {
		return 0, err
	}
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	w.produce(pctx, &wg)

	sw := &crash.Switch{}
	seenA := &firstSeen{}
	a, err := startConsumer(crash.Kinesis(w.fake, sw), crash.Store(w.store, sw), w.stream, func(_ context.Context, bt *shardlease.Batch) error {
		seenA.watching(bt)
		return nil
	}, w.opts("a")...)
	if err != nil {
		return 0, err
	}
	defer a.stop()
	if !waitUntil(10*lease, func() bool { return len(a.c.Held()) == 8 }) {
		return 0, fmt.Errorf("worker a holds %d leases, not 8", len(a.c.Held()))
	}
	seen := &firstSeen{}
	swb := &crash.Switch{}
	b, err := startConsumer(crash.Kinesis(w.fake, swb), crash.Store(w.store, swb), w.stream, func(_ context.Context, bt *shardlease.Batch) error {
		seen.watching(bt)
		return nil
	}, w.opts("b")...)
	if err != nil {
		return 0, err
	}
	defer b.stop()
	// b joins and is handed its share: 4 each, neither capped, so either
	// can take over the other's.
	if !waitUntil(10*lease, func() bool { return len(b.c.Held()) == 4 && len(a.c.Held()) == 4 }) {
		return 0, fmt.Errorf("workers a and b hold %d and %d leases, not 4 each", len(a.c.Held()), len(b.c.Held()))
	}
	// Let both settle into steady renewals, then crash or stop at a random
	// point of the take and renew cycles.
	time.Sleep(lease + rand.N(lease))
	victim, vsw := a, sw
	if how != stopGracefully && slices.Contains(a.c.Held(), "shardId-000000000000") != (how == crashCoordinator) {
		victim, vsw, seen = b, swb, seenA
	}
	victims := victim.c.Held()
	seen.arm()
	t0 := time.Now()
	if how == stopGracefully {
		a.cancel()
	} else {
		vsw.Crash()
	}
	var at time.Time
	if !waitUntil(10*lease, func() bool {
		var ok bool
		at, ok = seen.all(victims)
		return ok
	}) {
		return 0, fmt.Errorf("the surviving worker did not read all of %v within %v", victims, 10*lease)
	}
	return at.Sub(t0), nil
}

func measureFailover(ctx context.Context, e *env) error {
	lease := e.sz.lease
	take := defaultTake(lease)
	const sec = "failover (in-process fake + MemoryStore, real time)"
	for _, how := range []int{crashPlain, crashCoordinator, stopGracefully} {
		var ds []time.Duration
		for range e.sz.trials {
			d, err := failoverTrial(ctx, lease, how)
			if err != nil {
				return err
			}
			ds = append(ds, d)
		}
		slices.Sort(ds)
		worst, median := ds[len(ds)-1], ds[len(ds)/2]
		switch how {
		case crashPlain:
			v := worst.Seconds() / lease.Seconds()
			e.add(row{Section: sec, Metric: "after a crash: until every shard is read again, in lease durations (worst; median)", Value: v, Unit: "lease durations",
				Shown: fmt.Sprintf("%.2f; %.2f", v, median.Seconds()/lease.Seconds()), Target: "<= 1.5", OK: okp(v <= 1.5),
				Note: fmt.Sprintf("2 workers over 8 shards, 4 each, records on every shard every 20ms; lease %v, renew %v, take %v; %d trials; from the moment every call of one worker fails until the other has handled a record of each of its shards; the crashed worker is the one that does not coordinate", lease, (lease / 3).Round(time.Millisecond), take, e.sz.trials)})
		case crashCoordinator:
			v := worst.Seconds() / lease.Seconds()
			e.add(row{Section: sec, Metric: "after a crash of the coordinating worker: the same (worst; median)", Value: v, Unit: "lease durations",
				Shown: fmt.Sprintf("%.2f; %.2f", v, median.Seconds()/lease.Seconds()), Target: "<= 2.5", OK: okp(v <= 2.5),
				Note: "the crashed worker runs the first shard's lease; the other is its deputy"})
		default:
			v := worst.Seconds() / take.Seconds()
			e.add(row{Section: sec, Metric: "after a graceful shutdown: the same, in take intervals (worst; median)", Value: v, Unit: "take intervals",
				Shown: fmt.Sprintf("%.3f; %.3f", v, median.Seconds()/take.Seconds()), Target: "<= 1", OK: okp(v <= 1),
				Note: "from the cancel of the worker's context"})
		}
	}
	return nil
}
