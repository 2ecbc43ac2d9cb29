package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/dyncount"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/shardleasetest"
)

// Default timings of the consumer, which the baseline uses too.
const (
	defLease = 10 * time.Second
	defRenew = defLease / 3
	defTake  = defLease * 2 / 5 // the consumer's default: two fifths of the lease
	defIdle  = time.Second
)

// measureCost runs, side by side, a consumer and a baseline that writes
// every renewal and every checkpoint separately (as kinsumer and the KCL
// do), each on its own lease table on dynalite and its own stream of the
// in-process fake, with the same records arriving on every shard and a
// checkpoint after every batch. Both use the consumer's default timings.
// DynamoDB calls are counted through the narrow client interface.
func measureCost(ctx context.Context, e *env) error {
	n := e.sz.costLeases
	fake := shardleasetest.NewKinesis()
	dc := emulator.NewDynamoClient(e.dynamo)
	newSide := func(stream string) (*countingDynamo, *shardlease.DynamoStore, error) {
		if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(int32(n))}); err != nil {
			return nil, nil, err
		}
		table := emulator.UniqueName("leases")
		if err := shardlease.CreateTable(ctx, dc, table); err != nil {
			return nil, nil, err
		}
		counting := &countingDynamo{Client: dyncount.Client{DynamoDBAPI: dc}}
		store, err := shardlease.NewDynamoStore(counting, table)
		return counting, store, err
	}
	cDyn, cStore, err := newSide("consumer")
	if err != nil {
		return err
	}
	bDyn, bStore, err := newSide("baseline")
	if err != nil {
		return err
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	// Producer: two records on every shard of both streams every 100ms.
	every(runCtx, &wg, 100*time.Millisecond, func() {
		for _, s := range []string{"consumer", "baseline"} {
			_ = fill(runCtx, fake, s, n, 2, 100)
		}
	})

	var cBatches, bBatches atomic.Int64
	c, err := shardlease.NewConsumer(fake, cStore, "consumer", func(context.Context, *shardlease.Batch) error {
		cBatches.Add(1)
		return nil
	})
	if err != nil {
		return err
	}
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(runCtx) }()
	baseErr := make(chan error, 1)
	go func() { baseErr <- baseline(runCtx, fake, bStore, "baseline", &bBatches) }()

	deadline := time.Now().Add(30 * time.Second)
	for len(c.Held()) < n || cBatches.Load() < int64(2*n) || bBatches.Load() < int64(2*n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("no steady state within 30s: consumer holds %d of %d leases", len(c.Held()), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cw0, cr0, cb0 := cDyn.Writes(), cDyn.Reads(), cBatches.Load()
	bw0, br0, bb0 := bDyn.Writes(), bDyn.Reads(), bBatches.Load()
	w := e.sz.costWindow
	time.Sleep(w)
	cw, cr, cb := cDyn.Writes()-cw0, cDyn.Reads()-cr0, cBatches.Load()-cb0
	bw, br, bb := bDyn.Writes()-bw0, bDyn.Reads()-br0, bBatches.Load()-bb0
	cancel()
	if err := <-runErr; err != nil {
		return err
	}
	if err := <-baseErr; err != nil && runCtx.Err() == nil {
		return err
	}

	addCostRows(e, n, w, costCounts{writes: cw, reads: cr, batches: cb}, costCounts{writes: bw, reads: br, batches: bb})
	return nil
}

// costCounts are one side's DynamoDB calls and batches over the window.
type costCounts struct{ writes, reads, batches int64 }

// addCostRows adds the cost section's rows: n leases counted over w, c the
// consumer's counts and b the baseline's.
func addCostRows(e *env, n int, w time.Duration, c, b costCounts) {
	perMin := func(v int64) float64 { return float64(v) / float64(n) / w.Minutes() }
	const sec = "DynamoDB cost, steady state (dynalite)"
	note := fmt.Sprintf("%d leases, records on every shard every 100ms, a checkpoint after every batch, default timings (lease %v, renew %v, take %v); counted over %v through the DynamoDB client; the baseline holds its leases, renews each every renew interval, writes a checkpoint after every batch and lists the table every take interval",
		n, defLease, defRenew.Round(10*time.Millisecond), defTake, w)
	e.add(row{Section: sec, Metric: "batches per lease per minute (consumer; baseline)", Value: perMin(c.batches), Unit: "batches/lease/min",
		Shown: fmt.Sprintf("%.0f; %.0f", perMin(c.batches), perMin(b.batches)), Target: "-", Note: note})
	e.add(row{Section: sec, Metric: "consumer: writes per lease per minute", Value: perMin(c.writes), Unit: "writes/lease/min",
		Shown: fmt.Sprintf("%.1f", perMin(c.writes)), Target: "-"})
	e.add(row{Section: sec, Metric: "baseline (separate writes): writes per lease per minute", Value: perMin(b.writes), Unit: "writes/lease/min",
		Shown: fmt.Sprintf("%.1f", perMin(b.writes)), Target: "-"})
	ratio := float64(c.writes) / float64(b.writes)
	e.add(row{Section: sec, Metric: "writes: consumer / baseline", Value: ratio, Unit: "ratio",
		Shown: fmt.Sprintf("%.3f", ratio), Target: "<= 0.50", OK: okp(ratio <= 0.5)})
	e.add(row{Section: sec, Metric: "reads per lease per minute (consumer; baseline)", Value: perMin(c.reads), Unit: "reads/lease/min",
		Shown: fmt.Sprintf("%.1f; %.1f", perMin(c.reads), perMin(b.reads)), Target: "-"})
}

// baseline is the separate-writes policy: it takes every lease of stream,
// renews each every renew interval with a write of its own, writes a
// checkpoint after every batch, and lists the table every take interval.
func baseline(ctx context.Context, kin shardlease.KinesisAPI, store shardlease.LeaseStore, stream string, batches *atomic.Int64) error {
	shards, err := kin.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	every(ctx, &wg, defTake, func() { _, _ = store.List(ctx, stream) })
	for _, s := range shards.Shards {
		key := shardlease.LeaseKey{Stream: stream, Shard: aws.ToString(s.ShardId)}
		if _, err := store.Create(ctx, key, nil); err != nil {
			return err
		}
		l, err := store.Acquire(ctx, key, "baseline", 0)
		if err != nil {
			return err
		}
		var mu sync.Mutex // the lease handle, shared by renewals and checkpoints
		write := func(f func(shardlease.Lease) (shardlease.Lease, error)) {
			mu.Lock()
			defer mu.Unlock()
			if next, err := f(l); err == nil {
				l = next
			}
		}
		every(ctx, &wg, defRenew, func() {
			write(func(l shardlease.Lease) (shardlease.Lease, error) {
				return store.Renew(ctx, l, time.Now().Add(defLease))
			})
		})
		wg.Go(func() {
			it, err := kin.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: s.ShardId, ShardIteratorType: ktypes.ShardIteratorTypeTrimHorizon})
			if err != nil {
				return
			}
			iter := it.ShardIterator
			var lastCall time.Time
			for ctx.Err() == nil {
				if wait := getRecordsPacing - time.Since(lastCall); wait > 0 {
					sleep(ctx, wait)
				}
				lastCall = time.Now()
				out, err := kin.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
				if err != nil {
					sleep(ctx, time.Second)
					continue
				}
				iter = out.NextShardIterator
				if len(out.Records) == 0 {
					sleep(ctx, defIdle)
					continue
				}
				batches.Add(1)
				seq := aws.ToString(out.Records[len(out.Records)-1].SequenceNumber)
				write(func(l shardlease.Lease) (shardlease.Lease, error) {
					return store.Checkpoint(ctx, l, seq, -1, time.Now().Add(defLease))
				})
			}
		})
	}
	return nil
}

// sleep waits for d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
