package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// The memory section holds every handler of one worker at a slow pace (a
// minute per batch in the full run) while its 64 shards keep receiving
// records, and reads the heap as time passes. What the consumer holds must
// not grow with that time: the heap after one, three and five minutes stays
// within the per-shard bound of docs/handlers.md#memory plus a constant.
//
// The in-process stream keeps every record it was given (it trims none), so
// a true 1 MB/s on 64 shards would be 19 GB after five minutes. The feeder
// puts 1 MiB a second on each shard while the shard is less than memAhead
// unhandled, and pauses once it is that far ahead: a shard behind a slow
// handler always has a full read waiting, as a 1 MB/s one does. What the
// stream holds (every record put, at its measured cost) is subtracted from
// the heap.

const (
	memRecordSize = 16 << 10         // bytes per record
	memBatchSize  = 64               // WithBatchSize: 1 MiB batches
	memAhead      = 6 << 20          // how far ahead of its handler a shard is fed
	memConstant   = 64 << 20         // the constant of the heap target
	defShutdown   = 10 * time.Second // the consumer's default shutdown timeout
)

// memRun is one run of the section: one read mode.
type memRun struct {
	fanOut bool
	shards int
	call   time.Duration   // the handler's time per batch
	at     []time.Duration // when the heap is read, from the first batch
}

// measureMemory runs the section's two runs, polling and fan-out.
func measureMemory(ctx context.Context, e *env) error {
	call := time.Minute
	if e.sz.quick {
		call = 4 * time.Second
	}
	at := []time.Duration{call, 3 * call, 5 * call}
	perRecord, err := streamCost(ctx)
	if err != nil {
		return err
	}
	for _, fan := range []bool{false, true} {
		if err := memoryRun(ctx, e, memRun{fanOut: fan, shards: 64, call: call, at: at}, perRecord); err != nil {
			return err
		}
	}
	return nil
}

// streamCost measures what the in-process stream holds per record it is
// given: heap after putting records of memRecordSize, per record.
func streamCost(ctx context.Context) (float64, error) {
	const n = 4096
	runtime.GC()
	before := heapInuse()
	f := shardleasetest.NewKinesis()
	if _, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("cost"), ShardCount: aws.Int32(4)}); err != nil {
		return 0, err
	}
	data := make([]byte, memRecordSize)
	keys := hashKeys(4)
	var batch []ktypes.PutRecordsRequestEntry
	for i := range n {
		batch = append(batch, ktypes.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(keys[i%4])})
	}
	if err := putAll(ctx, f, "cost", batch); err != nil {
		return 0, err
	}
	runtime.GC()
	cost := float64(heapInuse()-before) / n
	runtime.KeepAlive(f)
	return cost, nil
}

func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// feeder puts records on each shard of a stream as docs the section's top.
type feeder struct {
	fake    *shardleasetest.Kinesis
	stream  string
	keys    []string       // a hash key inside each shard
	shard   map[string]int // shard id → index
	put     []atomic.Int64 // records put, per shard
	handled []atomic.Int64 // records the handler returned from, per shard
	biggest atomic.Int64   // the largest batch handed, in bytes
}

func newFeeder(fake *shardleasetest.Kinesis, stream string, shards int) *feeder {
	f := &feeder{fake: fake, stream: stream, keys: hashKeys(shards), shard: map[string]int{},
		put: make([]atomic.Int64, shards), handled: make([]atomic.Int64, shards)}
	for i := range shards {
		f.shard[fmt.Sprintf("shardId-%012d", i)] = i
	}
	return f
}

// run feeds every shard once a second until ctx is done.
func (f *feeder) run(ctx context.Context) error {
	data := make([]byte, memRecordSize)
	perTick := (1 << 20) / memRecordSize
	ahead := int64(memAhead / memRecordSize)
	for {
		var batch []ktypes.PutRecordsRequestEntry
		for i := range f.keys {
			if f.put[i].Load()-f.handled[i].Load() >= ahead {
				continue
			}
			for range perTick {
				batch = append(batch, ktypes.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(f.keys[i])})
			}
			f.put[i].Add(int64(perTick))
		}
		if err := putAll(ctx, f.fake, f.stream, batch); err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// putAll puts batch on stream, 4 MiB to a call (PutRecords takes 5 MiB).
func putAll(ctx context.Context, kin putter, stream string, batch []ktypes.PutRecordsRequestEntry) error {
	for len(batch) > 0 {
		n := min(len(batch), (4<<20)/memRecordSize)
		if _, err := kin.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: batch[:n]}); err != nil {
			return err
		}
		batch = batch[n:]
	}
	return nil
}

// puts is every record put so far.
func (f *feeder) puts() int64 {
	var n int64
	for i := range f.put {
		n += f.put[i].Load()
	}
	return n
}

// handler takes call per batch, unless its context ends first.
func (f *feeder) handler(call time.Duration, calls *atomic.Int64) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		calls.Add(1)
		size := int64(0)
		for _, r := range b.Records {
			size += int64(len(r.Data))
		}
		for old := f.biggest.Load(); size > old && !f.biggest.CompareAndSwap(old, size); old = f.biggest.Load() {
		}
		select {
		case <-time.After(call):
		case <-ctx.Done():
			return ctx.Err()
		}
		f.handled[f.shard[b.ShardID]].Add(int64(len(b.Records)))
		return nil
	}
}

// renewals records when each lease was last written by its holder, and the
// longest gap between two writes of one lease.
type renewals struct {
	shardlease.LeaseStore
	mu    sync.Mutex
	last  map[string]time.Time
	worst time.Duration
}

func (s *renewals) wrote(k shardlease.LeaseKey) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.last[k.Shard]; ok {
		s.worst = max(s.worst, now.Sub(t))
	}
	s.last[k.Shard] = now
}

func (s *renewals) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	out, err := s.LeaseStore.Renew(ctx, l, e)
	if err == nil {
		s.wrote(l.Key)
	}
	return out, err
}

func (s *renewals) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	out, err := s.LeaseStore.Checkpoint(ctx, l, cp, sub, e)
	if err == nil {
		s.wrote(l.Key)
	}
	return out, err
}

// memReading is the heap at one time of a run.
type memReading struct {
	at         time.Duration
	heap, held float64 // the consumer's heap (the stream's records subtracted); what its readers hold
}

// memoryRun runs one worker over m.shards shards with a slow handler, reads
// the heap at m.at, then shuts the worker down during its batches.
func memoryRun(ctx context.Context, e *env, m memRun, perRecord float64) error {
	const stream = "memory"
	fake := shardleasetest.NewKinesis()
	if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(int32(m.shards))}); err != nil {
		return err
	}
	runtime.GC()
	base := heapInuse()
	f := newFeeder(fake, stream, m.shards)
	store := &renewals{LeaseStore: shardlease.NewMemoryStore(), last: map[string]time.Time{}}
	// Per-lease renewals: the run times the gaps between a lease's writes
	// (renewals), which a session's keeps do not make.
	opts := []shardlease.Option{shardlease.WithOwnerID("memory"), shardlease.WithBatchSize(memBatchSize), shardlease.WithSessions(false)}
	if m.fanOut {
		opts = append(opts, shardlease.WithEnhancedFanOut("memory-app"))
	}
	var calls atomic.Int64
	r, err := startConsumer(fake, store, stream, f.handler(m.call, &calls), opts...)
	if err != nil {
		return err
	}
	defer func() { _ = r.stop() }()
	// Fed once every lease is held, so that the first read of a shard finds
	// a second's records, as later ones do, not what piled up meanwhile.
	if !waitUntil(2*time.Minute, func() bool { return len(r.c.Held()) == m.shards }) {
		return fmt.Errorf("holds %d of %d leases after 2 minutes", len(r.c.Held()), m.shards)
	}
	fctx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	fed := make(chan error, 1)
	go func() { fed <- f.run(fctx) }()
	if !waitUntil(2*time.Minute, func() bool { return calls.Load() >= int64(m.shards) }) {
		return fmt.Errorf("%d handler calls of %d shards within 2 minutes", calls.Load(), m.shards)
	}
	t0 := time.Now()
	var reads []memReading
	for _, at := range m.at {
		time.Sleep(time.Until(t0.Add(at)))
		runtime.GC()
		heap := float64(int64(heapInuse())-int64(base)) - float64(f.puts())*perRecord
		reads = append(reads, memReading{at: at, heap: heap, held: float64(r.c.Stats().BytesBuffered)})
	}
	stats := r.c.Stats()
	stopAt := time.Now()
	if err := r.stop(); err != nil {
		return err
	}
	took := time.Since(stopAt)
	stopFeed()
	if err := <-fed; err != nil {
		return err
	}
	store.mu.Lock()
	worst := store.worst
	store.mu.Unlock()
	memRows(e, m, reads, perRecord, f.biggest.Load(), memCheck{stats: stats, after: r.c.Stats(), worst: worst, took: took})
	return nil
}

// memCheck is what a run saw of its leases and its shutdown.
type memCheck struct {
	stats, after shardlease.Stats // before and after the shutdown
	worst        time.Duration    // the longest gap between two writes of one lease
	took         time.Duration    // the shutdown
}

// memRows adds the rows of one run.
func memRows(e *env, m memRun, reads []memReading, perRecord float64, biggest int64, c memCheck) {
	const sec = "memory (one worker, 64 shards of the in-process stream, a slow handler)"
	mode, events := "polling", 2.0
	bound := "two batches a shard (in hand, read ahead)"
	if m.fanOut {
		mode, events = "fan-out", 8
		bound = "eight events a shard: four of the consumer's (in hand, read ahead, two in the SDK), the SDK decoder's buffer of one encoded (1.4), and the in-process service's event being written, decoded and encoded (2.4), where the service's transport would buffer instead"
	}
	target := float64(m.shards)*events*float64(biggest) + memConstant
	mib := func(v float64) string { return fmt.Sprintf("%.0f MiB", v/(1<<20)) }
	for i, rd := range reads {
		note := ""
		if i == 0 {
			note = fmt.Sprintf("HeapInuse after GC, minus before the run, minus what the in-process stream holds (every record put, at the %d B a %d KiB record was measured to cost it); records of %d KiB, WithBatchSize(%d); each shard fed 1 MiB a second while less than %d MiB ahead of its handler (the section's design note); the target is %s of the largest batch handed (%s), plus %s; readers hold: Stats().BytesBuffered",
				int(perRecord), memRecordSize>>10, memRecordSize>>10, memBatchSize, memAhead>>20, bound, mib(float64(biggest)), mib(memConstant))
			if e.sz.quick {
				note += fmt.Sprintf("; -quick: the handler takes %v per batch and the heap is read after %v, %v and %v (the full run: a minute, and 1, 3, 5 minutes)", m.call, m.at[0], m.at[1], m.at[2])
			}
		}
		e.add(row{Section: sec, Metric: fmt.Sprintf("%s: heap after %v of a %v handler", mode, rd.at, m.call), Value: rd.heap, Unit: "bytes",
			Shown: fmt.Sprintf("%s (readers hold %s)", mib(rd.heap), mib(rd.held)), Target: "<= " + mib(target), OK: okp(rd.heap <= target), Note: note})
	}
	renew := defRenew * 6 / 5
	leasesOK := c.worst <= renew && c.stats.LeasesLost == 0 && c.stats.LeasesTaken == int64(m.shards)
	e.add(row{Section: sec, Metric: mode + ": leases kept (longest gap between writes; lost; taken)", Value: c.worst.Seconds(), Unit: "s",
		Shown:  fmt.Sprintf("%.2fs; %d lost; %d taken", c.worst.Seconds(), c.stats.LeasesLost, c.stats.LeasesTaken),
		Target: fmt.Sprintf("<= %.2fs; 0; %d (each once)", renew.Seconds(), m.shards), OK: okp(leasesOK)})
	grace := defShutdown
	stopOK := c.took <= grace && c.after.BytesBuffered == 0
	e.add(row{Section: sec, Metric: mode + ": shutdown during the slow batches (Run returned; readers then hold)", Value: c.took.Seconds(), Unit: "s",
		Shown:  fmt.Sprintf("%.2fs; %d B", c.took.Seconds(), c.after.BytesBuffered),
		Target: fmt.Sprintf("<= %v (the shutdown timeout); 0", grace), OK: okp(stopOK)})
}
