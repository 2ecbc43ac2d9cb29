package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
)

// latencyTrial starts one consumer on a one-shard stream of the in-process
// fake, in real time, with the default idle poll interval, and puts n
// records at random intervals of 0.1 to 1.3s: a sparse stream, which the
// polling reader has caught up with when the next record comes, and puts at
// every phase of its poll. It returns, for each record, the time from just before its
// PutRecord call to its handler call.
func latencyTrial(ctx context.Context, n int, fanOut bool) ([]time.Duration, error) {
	w, err := newFakeWorld(ctx, 1, 10*time.Second)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var got []time.Duration
	done := make(chan struct{})
	handler := func(_ context.Context, b *shardlease.Batch) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for _, r := range b.Records {
			put := time.Unix(0, int64(binary.BigEndian.Uint64(r.Data)))
			got = append(got, now.Sub(put))
		}
		if len(got) == n {
			close(done)
		}
		return nil
	}
	opts := []shardlease.Option{shardlease.WithOwnerID("bench"), shardlease.WithLeaseDuration(w.lease)}
	if fanOut {
		opts = append(opts, shardlease.WithEnhancedFanOut("bench-app"))
	}
	r, err := startConsumer(w.fake, w.store, w.stream, handler, opts...)
	if err != nil {
		return nil, err
	}
	defer r.stop()
	if !waitUntil(time.Minute, func() bool { return len(r.c.Held()) == 1 }) {
		return nil, fmt.Errorf("the consumer took no lease within a minute")
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for range n {
		if !sleep(ctx, 100*time.Millisecond+time.Duration(rng.Int64N(int64(1200*time.Millisecond)))) {
			return nil, ctx.Err()
		}
		data := binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))
		if _, err := w.fake.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(w.stream), PartitionKey: aws.String("k"), Data: data}); err != nil {
			return nil, err
		}
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("only %d of %d records handled within a minute", len(got), n)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(got), nil
}

// quantile returns the q-quantile of sorted ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// measureLatency puts records one at a time on a caught-up consumer and
// compares the time from put to handler of the two reading modes.
func measureLatency(ctx context.Context, e *env) error {
	const sec = "put-to-handler latency (in-process fake + MemoryStore, real time)"
	n := 150
	if e.sz.quick {
		n = 40
	}
	// Both modes at once, each on a fake of its own.
	var ds [2][]time.Duration
	var errs [2]error
	var wg sync.WaitGroup
	for i, fanOut := range []bool{false, true} {
		wg.Go(func() { ds[i], errs[i] = latencyTrial(ctx, n, fanOut) })
	}
	wg.Wait()
	var medians [2]time.Duration
	for i, fanOut := range []bool{false, true} {
		if errs[i] != nil {
			return errs[i]
		}
		slices.Sort(ds[i])
		med, p99 := quantile(ds[i], 0.5), quantile(ds[i], 0.99)
		medians[i] = med
		name, note := "polling (GetRecords, idle poll interval 1s, the default)", fmt.Sprintf("%d records put one at a time, 0.1-1.3s apart, on one shard of a caught-up consumer", n)
		if fanOut {
			name, note = "enhanced fan-out (SubscribeToShard)", "the same, run alongside; the fake pushes a record to the subscription as it is put (the service: typically within 70ms), so this is the consumer's own share"
		}
		e.add(row{Section: sec, Metric: name + ": median; p99", Value: float64(med.Microseconds()) / 1000, Unit: "ms",
			Shown: fmt.Sprintf("%s; %s", med.Round(100*time.Microsecond), p99.Round(100*time.Microsecond)), Target: "-", Note: note})
	}
	ratio := float64(medians[1]) / float64(medians[0])
	e.add(row{Section: sec, Metric: "fan-out median / polling median", Value: ratio, Unit: "ratio",
		Shown: fmt.Sprintf("%.4f", ratio), Target: "<= 0.2", OK: okp(ratio <= 0.2)})
	return nil
}
