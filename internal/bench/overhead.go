package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// cost is what a piece of work cost this process: CPU time (user and
// system, all threads) and heap allocations.
type cost struct {
	cpu    time.Duration
	allocs uint64
}

func snapshot() cost {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return cost{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), allocs: ms.Mallocs}
}

func (c cost) since(before cost) cost {
	return cost{cpu: c.cpu - before.cpu, allocs: c.allocs - before.allocs}
}

// measureOverhead reads the same records from the in-process fake with a
// bare GetRecords loop and with a consumer (MemoryStore, no-op handler) and
// reports CPU time and allocations per record of each; the difference is
// the consumer loop's own cost. Records are spread over shards of 10,000 so
// that each shard is read in one call and no pacing wait is in the figures.
func measureOverhead(ctx context.Context, e *env) error {
	const perShard = 10000
	shards := max(1, e.sz.overheadRecords/perShard)
	total := shards * perShard
	newFake := func() (*shardleasetest.Kinesis, error) {
		f := shardleasetest.NewKinesis()
		if _, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("overhead"), ShardCount: aws.Int32(int32(shards))}); err != nil {
			return nil, err
		}
		return f, fill(ctx, f, "overhead", shards, perShard, 100)
	}

	f, err := newFake()
	if err != nil {
		return err
	}
	runtime.GC()
	before := snapshot()
	if err := fakeBare(ctx, f, "overhead", total); err != nil {
		return err
	}
	bare := snapshot().since(before)

	f, err = newFake()
	if err != nil {
		return err
	}
	runtime.GC()
	before = snapshot()
	if _, _, err := consumerRead(ctx, f, shardlease.NewMemoryStore(), "overhead", perShard, total); err != nil {
		return err
	}
	cons := snapshot().since(before)

	per := func(c cost) (float64, float64) {
		return float64(c.cpu.Nanoseconds()) / float64(total), float64(c.allocs) / float64(total)
	}
	bns, ba := per(bare)
	cns, ca := per(cons)
	ons, oa := cns-bns, ca-ba
	const sec = "consumer loop overhead (in-process fake)"
	e.add(row{Section: sec, Metric: "bare GetRecords loop: CPU and allocations per record", Value: bns, Unit: "ns/record",
		Shown: fmt.Sprintf("%.0f ns, %.2f allocs", bns, ba), Target: "-",
		Note: fmt.Sprintf("%d records of 100 bytes over %d shards of the in-process fake, one GetRecords of %d per shard; CPU time of the whole process (getrusage) and runtime.MemStats.Mallocs; the fake copies every record it returns", total, shards, perShard)})
	e.add(row{Section: sec, Metric: "consumer: CPU and allocations per record", Value: cns, Unit: "ns/record",
		Shown: fmt.Sprintf("%.0f ns, %.2f allocs", cns, ca), Target: "-"})
	e.add(row{Section: sec, Metric: "consumer minus bare loop: ns per record", Value: ons, Unit: "ns/record",
		Shown: fmt.Sprintf("%.0f ns", ons), Target: "none set"})
	e.add(row{Section: sec, Metric: "consumer minus bare loop: allocations per record", Value: oa, Unit: "allocs/record",
		Shown: fmt.Sprintf("%.3f", oa), Target: "none set"})
	return nil
}

// fakeBare reads every shard of stream once through, from TRIM_HORIZON,
// with the largest batch, concurrently.
func fakeBare(ctx context.Context, kc shardlease.KinesisAPI, stream string, total int) error {
	list, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		return err
	}
	var got atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	for _, s := range list.Shards {
		wg.Go(func() {
			it, err := kc.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
				StreamName: aws.String(stream), ShardId: s.ShardId, ShardIteratorType: ktypes.ShardIteratorTypeTrimHorizon,
			})
			if err == nil {
				var out *kinesis.GetRecordsOutput
				out, err = kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator, Limit: aws.Int32(10000)})
				if err == nil {
					got.Add(int64(len(out.Records)))
				}
			}
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if got.Load() != int64(total) {
		return fmt.Errorf("bare loop read %d of %d records", got.Load(), total)
	}
	return nil
}
