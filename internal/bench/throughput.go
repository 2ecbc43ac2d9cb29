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
	"github.com/shardlease/shardlease/internal/emulator"
)

// getRecordsPacing is the least time between the starts of two GetRecords
// calls on one shard: Kinesis allows 5 per second per shard, and the
// consumer keeps to it, so the bare loop does too.
const getRecordsPacing = 200 * time.Millisecond

// measureThroughput reads the same pre-filled shards of a kinesalite stream
// with a bare GetRecords loop and with a consumer (no-op handler, lease
// table on dynalite), with the same batch size and pacing, one after the
// other.
func measureThroughput(ctx context.Context, e *env) error {
	kc := emulator.NewKinesisClient(e.kinesis)
	dc := emulator.NewDynamoClient(e.dynamo)
	for _, shards := range []int{1, 8} {
		stream := emulator.UniqueName("throughput")
		if err := emulator.CreateStream(ctx, kc, stream, int32(shards)); err != nil {
			return err
		}
		per := e.sz.recordsPerShard
		t0 := time.Now()
		if err := fill(ctx, kc, stream, shards, per, 100); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
		e.logf("  %d shard(s): put %d records in %s", shards, shards*per, time.Since(t0).Round(time.Millisecond))
		total := shards * per

		bare, err := bareLoop(ctx, kc, stream, shards, e.sz.batch, total)
		if err != nil {
			return fmt.Errorf("bare loop: %w", err)
		}
		table := emulator.UniqueName("leases")
		if err := shardlease.CreateTable(ctx, dc, table); err != nil {
			return err
		}
		store, err := shardlease.NewDynamoStore(dc, table)
		if err != nil {
			return err
		}
		cons, startup, err := consumerRead(ctx, kc, store, stream, e.sz.batch, total)
		if err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
		note, startNote := "", ""
		if shards == 1 {
			note = fmt.Sprintf("kinesalite, %d records of 100 bytes per shard, batch %d; both readers wait %v between the starts of two GetRecords calls on a shard (the 5 calls/s/shard limit the consumer keeps to); each timed from its first GetRecords call to its last record", per, e.sz.batch, getRecordsPacing)
			startNote = "from Run to the consumer's first GetRecords call: the table check, its worker row, the shard sync (creating the rows), the wait of a quarter take interval (here 50ms) for peers' rows, the first take round and the acquires"
		}
		e.add(row{Section: "read throughput", Metric: fmt.Sprintf("%d shard(s): bare GetRecords loop", shards),
			Value: bare, Unit: "records/s", Shown: fmt.Sprintf("%.0f rec/s", bare), Target: "-"})
		e.add(row{Section: "read throughput", Metric: fmt.Sprintf("%d shard(s): consumer", shards),
			Value: cons, Unit: "records/s", Shown: fmt.Sprintf("%.0f rec/s", cons), Target: "-"})
		e.add(row{Section: "read throughput", Metric: fmt.Sprintf("%d shard(s): consumer start-up", shards),
			Value: startup.Seconds(), Unit: "s", Shown: fmt.Sprintf("%.0f ms", startup.Seconds()*1000), Target: "-", Note: startNote})
		ratio := cons / bare
		e.add(row{Section: "read throughput", Metric: fmt.Sprintf("%d shard(s): consumer / bare loop", shards),
			Value: ratio, Unit: "ratio", Shown: fmt.Sprintf("%.2f", ratio), Target: ">= 0.90", OK: okp(ratio >= 0.9), Note: note})
	}
	return nil
}

// bareLoop reads every shard from TRIM_HORIZON until total records were
// read, one goroutine per shard, and returns records per second.
func bareLoop(ctx context.Context, kc shardlease.KinesisAPI, stream string, shards, batch, total int) (float64, error) {
	list, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		return 0, err
	}
	var got atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(list.Shards))
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	first := &firstRead{KinesisAPI: kc}
	kc = first
	var lastAt atomic.Pointer[time.Time]
	for _, s := range list.Shards {
		wg.Go(func() {
			it, err := kc.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
				StreamName: aws.String(stream), ShardId: s.ShardId, ShardIteratorType: ktypes.ShardIteratorTypeTrimHorizon,
			})
			if err != nil {
				errs <- err
				return
			}
			iter := it.ShardIterator
			var lastCall time.Time
			for got.Load() < int64(total) && ctx.Err() == nil {
				if wait := getRecordsPacing - time.Since(lastCall); wait > 0 {
					time.Sleep(wait)
				}
				lastCall = time.Now()
				out, err := kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(int32(batch))})
				if err != nil {
					errs <- err
					return
				}
				if n := len(out.Records); n > 0 {
					got.Add(int64(n))
					now := time.Now()
					lastAt.Store(&now)
				}
				if len(out.Records) == 0 {
					// The shard is read to its tip: stop.
					return
				}
				iter = out.NextShardIterator
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	if got.Load() < int64(total) {
		return 0, fmt.Errorf("read %d of %d records", got.Load(), total)
	}
	return float64(total) / lastAt.Load().Sub(first.at()).Seconds(), nil
}

// firstRead notes when the first GetRecords call was made through it.
type firstRead struct {
	shardlease.KinesisAPI
	once  sync.Once
	first time.Time
}

func (f *firstRead) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	f.once.Do(func() { f.first = time.Now() })
	return f.KinesisAPI.GetRecords(ctx, in, o...)
}

// at returns when the first call was made; call it after the calls.
func (f *firstRead) at() time.Time {
	f.once.Do(func() {})
	return f.first
}

// consumerRead runs one consumer with a no-op handler until it has handled
// total records, and returns records per second from its first GetRecords
// call to the last record, and the time from Run to that first call.
func consumerRead(ctx context.Context, kc shardlease.KinesisAPI, store shardlease.LeaseStore, stream string, batch, total int) (float64, time.Duration, error) {
	var got atomic.Int64
	done := make(chan struct{})
	var lastAt time.Time
	first := &firstRead{KinesisAPI: kc}
	c, err := shardlease.NewConsumer(first, store, stream, func(_ context.Context, b *shardlease.Batch) error {
		if got.Add(int64(len(b.Records))) == int64(total) {
			lastAt = time.Now()
			close(done)
		}
		return nil
	}, shardlease.WithBatchSize(batch), shardlease.WithIdlePollInterval(50*time.Millisecond),
		shardlease.WithTakeInterval(200*time.Millisecond))
	if err != nil {
		return 0, 0, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- c.Run(runCtx) }()
	select {
	case <-done:
	case err := <-runErr:
		return 0, 0, fmt.Errorf("run returned early: %v", err)
	case <-time.After(2 * time.Minute):
		cancel()
		<-runErr
		return 0, 0, fmt.Errorf("handled %d of %d records in 2 minutes", got.Load(), total)
	}
	cancel()
	if err := <-runErr; err != nil {
		return 0, 0, err
	}
	firstAt := first.at()
	return float64(total) / lastAt.Sub(firstAt).Seconds(), firstAt.Sub(start), nil
}
