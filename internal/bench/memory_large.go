package main

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// The memory-large section is the memory section with records of 10 MiB,
// the largest Kinesis takes: one worker over a few shards of the
// in-process stream, whose maximum record size is raised, with a slow
// handler. A read returns at most 10 MiB, so a batch is one such record.
// Polling's heap peak must stay within the bound of docs/handlers.md#memory
// in batches of the largest handed, plus a constant; under fan-out, what
// the readers hold within two events a shard (see largeRow).
//
// Each shard is fed one record whenever it is less than six records ahead
// of its handler, more than the bound lets the consumer hold, so that a
// reader always finds records waiting; the stream, which trims nothing,
// holds six records a shard beyond those handled. What it holds (every record put, at its measured cost) is
// subtracted from the heap.

const (
	largeRecord   = shardleasetest.MaxLargeRecordSize - 1 // data; with its one-byte key, 10 MiB
	largeShards   = 4
	largeAhead    = 6        // records a shard is fed ahead of its handler
	largeConstant = 32 << 20 // the constant of the heap target
)

// measureMemoryLarge runs the section: polling, then fan-out.
func measureMemoryLarge(ctx context.Context, e *env) error {
	call := 20 * time.Second
	if e.sz.quick {
		call = 4 * time.Second
	}
	perRecord, err := largeStreamCost(ctx)
	if err != nil {
		return err
	}
	g0 := runtime.NumGoroutine()
	for _, fan := range []bool{false, true} {
		// The run before's last goroutines (a handler abandoned at its
		// shutdown, say) may still hold its records.
		if !waitUntil(time.Minute, func() bool { return runtime.NumGoroutine() <= g0 }) {
			return fmt.Errorf("%d goroutines a minute after the run before, %d before it", runtime.NumGoroutine(), g0)
		}
		if err := largeRun(ctx, e, fan, call, perRecord); err != nil {
			return err
		}
	}
	return nil
}

// largeStreamCost measures what the in-process stream holds per 10 MiB
// record it is given.
func largeStreamCost(ctx context.Context) (float64, error) {
	const n = 4
	runtime.GC()
	before := heapInuse()
	f := shardleasetest.NewKinesis()
	if _, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("cost"), ShardCount: aws.Int32(1)}); err != nil {
		return 0, err
	}
	if err := f.AllowLargeRecords("cost"); err != nil {
		return 0, err
	}
	data := make([]byte, largeRecord)
	for range n {
		if _, _, err := f.Put("cost", "k", data); err != nil {
			return 0, err
		}
	}
	runtime.GC()
	cost := float64(heapInuse()-before) / n
	runtime.KeepAlive(f)
	return cost, nil
}

// feedLarge puts a record on every shard less than largeAhead records
// ahead of its handler, ten times a second, until ctx is done.
func feedLarge(ctx context.Context, f *feeder) error {
	data := make([]byte, largeRecord)
	for i := range data {
		data[i] = byte(i)
	}
	for {
		for i := range f.keys {
			if f.put[i].Load()-f.handled[i].Load() >= largeAhead {
				continue
			}
			in := &kinesis.PutRecordsInput{StreamName: aws.String(f.stream), Records: []ktypes.PutRecordsRequestEntry{
				{Data: data, PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(f.keys[i])}}}
			if _, err := f.fake.PutRecords(ctx, in); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			f.put[i].Add(1)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// largeRun runs one worker over largeShards shards of 10 MiB records with
// a handler taking call a batch, reads the heap every second for five
// calls, and adds the row of its peak.
func largeRun(ctx context.Context, e *env, fanOut bool, call time.Duration, perRecord float64) error {
	const stream = "large"
	fake := shardleasetest.NewKinesis()
	if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(largeShards)}); err != nil {
		return err
	}
	if err := fake.AllowLargeRecords(stream); err != nil {
		return err
	}
	runtime.GC()
	runtime.GC()
	base := heapInuse()
	f := newFeeder(fake, stream, largeShards)
	opts := []shardlease.Option{shardlease.WithOwnerID("large")}
	if fanOut {
		opts = append(opts, shardlease.WithEnhancedFanOut("large-app"))
	}
	var calls atomic.Int64
	r, err := startConsumer(fake, shardlease.NewMemoryStore(), stream, f.handler(call, &calls), opts...)
	if err != nil {
		return err
	}
	defer func() { _ = r.stop() }()
	if !waitUntil(2*time.Minute, func() bool { return len(r.c.Held()) == largeShards }) {
		return fmt.Errorf("holds %d of %d leases after 2 minutes", len(r.c.Held()), largeShards)
	}
	fctx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	fed := make(chan error, 1)
	go func() { fed <- feedLarge(fctx, f) }()
	var lg largeReadings
	for t0 := time.Now(); time.Since(t0) < 5*call; {
		time.Sleep(time.Second)
		runtime.GC()
		heap := float64(int64(heapInuse())-int64(base)) - float64(f.puts())*perRecord
		half := 0
		if time.Since(t0) > 5*call/2 {
			half = 1
		}
		lg.peak[half] = max(lg.peak[half], heap)
		lg.held = max(lg.held, float64(r.c.Stats().BytesBuffered))
	}
	handled := r.c.Stats().RecordsHandled
	if err := r.stop(); err != nil {
		return err
	}
	stopFeed()
	if err := <-fed; err != nil {
		return err
	}
	lg.biggest, lg.handled = f.biggest.Load(), handled
	largeRow(e, fanOut, call, lg)
	return nil
}

// largeReadings is what one run saw.
type largeReadings struct {
	peak    [2]float64 // the heap's peak in the run's first and second half
	held    float64    // the most the readers held (Stats().BytesBuffered)
	biggest int64      // the largest batch handed, in bytes
	handled int64      // records handled
}

// largeRow adds the row of one run. Polling is held to the bound on the
// heap. Under fan-out the in-process service's side of the wire (the
// event being encoded, in base64 JSON, then framed) and the SDK's decoding
// of it hold several copies of every 10 MiB event, where the service's
// transport would hold 4 MiB: its row holds what the consumer counts to
// two events a shard, and shows the heap.
func largeRow(e *env, fanOut bool, call time.Duration, lg largeReadings) {
	const sec = "memory with 10 MiB records (one worker, 4 shards of the in-process stream, a slow handler)"
	mib := func(v float64) string { return fmt.Sprintf("%.0f MiB", v/(1<<20)) }
	peak := max(lg.peak[0], lg.peak[1])
	shown := fmt.Sprintf("%s (readers hold at most %s; %d records handled)", mib(peak), mib(lg.held), lg.handled)
	note := fmt.Sprintf("records of 10 MiB (data and key) on a stream whose maximum record size was raised; HeapInuse after a GC every second, minus before the run, minus what the in-process stream holds (every record put, at its measured cost); each shard fed a record whenever less than %d ahead of its handler; readers hold: Stats().BytesBuffered; the largest batch handed: %s (a read returns at most 10 MiB)", largeAhead, mib(float64(lg.biggest)))
	metric := fmt.Sprintf("%s: heap peak over %v of a %v handler", map[bool]string{false: "polling", true: "fan-out"}[fanOut], 5*call, call)
	if !fanOut {
		target := largeShards*2*float64(lg.biggest) + largeConstant
		e.add(row{Section: sec, Metric: metric, Value: peak, Unit: "bytes", Shown: shown,
			Target: "<= " + mib(target), OK: okp(peak <= target && lg.handled > 0),
			Note: note + fmt.Sprintf("; the target is two batches a shard (in hand, read ahead) of the largest handed, plus %s", mib(largeConstant))})
		return
	}
	held := largeShards * 2 * float64(lg.biggest)
	e.add(row{Section: sec, Metric: fmt.Sprintf("fan-out: what the readers hold over %v of a %v handler", 5*call, call), Value: lg.held, Unit: "bytes",
		Shown:  fmt.Sprintf("at most %s (%d records handled; heap peak %s in the first half, %s in the second)", mib(lg.held), lg.handled, mib(lg.peak[0]), mib(lg.peak[1])),
		Target: fmt.Sprintf("<= %s (two events a shard)", mib(held)), OK: okp(lg.held <= held && lg.handled > 0),
		Note: note + "; under fan-out the in-process service's side of the wire and the SDK's decoding of it hold several copies of each 10 MiB event being sent (base64 JSON, then framed), where the service's transport would buffer 4 MiB, and how many are in flight at a reading depends on the machine's load (264 MiB alone, up to 940 MiB after the scale section): the row holds what the consumer counts to its bound, and shows the heap"})
}
