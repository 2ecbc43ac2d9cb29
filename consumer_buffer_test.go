package shardlease_test

import (
	"context"
	"crypto/md5"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/kpl"
	"github.com/shardlease/shardlease/shardleasetest"
)

// These tests hold a handler at 60 s per batch for five minutes while
// records keep arriving, and check that what the consumer holds does not
// grow with that time: the records and bytes its readers hold
// (Stats().RecordsBuffered, BytesBuffered), and, counted apart from the
// consumer, the records it read and has not handled yet. All run in fake
// time, so five minutes take a moment.

const (
	slowCall   = 60 * time.Second // a slow handler's time per batch
	slowFor    = 5 * time.Minute  // how long it stays slow
	memRecord  = 1024             // bytes per record
	memBatch   = 100              // WithBatchSize
	memArrival = 14               // records per shard every memTick
	memTick    = 700 * time.Millisecond
	memBacklog = 20 * memBatch // records on the shard before the consumer starts
)

// slowBatches takes slowCall per batch unless its context ends first.
func slowBatches(calls *atomic.Int64) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		calls.Add(1)
		select {
		case <-time.After(slowCall):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// arrive puts backlog records of memRecord bytes on stream, then n every
// memTick until the test ends (keys spread over the shards). Off the
// second, an arrival never meets the in-process service's heartbeat: every
// event it sends has records.
func arrive(t *testing.T, fake *shardleasetest.Kinesis, stream string, backlog, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	data := make([]byte, memRecord)
	put := func(tick, n int) {
		es := make([]shardleasetest.Entry, n)
		for i := range es {
			es[i] = shardleasetest.Entry{PartitionKey: fmt.Sprintf("key-%d-%d", tick, i), Data: data}
		}
		require.NoError(t, fake.PutBatch(stream, es...))
	}
	put(0, backlog)
	wg.Go(func() {
		for tick := 1; ; tick++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(memTick):
				put(tick, n)
			}
		}
	})
}

// bufferSamples are Stats().RecordsBuffered and BytesBuffered over time.
type bufferSamples struct {
	at             []time.Duration
	records, bytes []int64
}

// sample reads c's buffers every 5 s for d, plus extra (if set) each time.
func sample(c *shardlease.Consumer, d time.Duration, extra func()) bufferSamples {
	var s bufferSamples
	start := time.Now()
	for time.Since(start) < d {
		time.Sleep(5 * time.Second)
		synctest.Wait()
		st := c.Stats()
		s.at = append(s.at, time.Since(start))
		s.records, s.bytes = append(s.records, st.RecordsBuffered), append(s.bytes, st.BytesBuffered)
		if extra != nil {
			extra()
		}
	}
	return s
}

// most returns the largest of v (one value per sample, or its first
// samples) over the samples taken from from on.
func (s bufferSamples) most(v []int64, from time.Duration) int64 {
	var m int64
	for i, x := range v {
		if s.at[i] >= from {
			m = max(m, x)
		}
	}
	return m
}

// requireFlat checks that the samples stay within limit throughout, that
// the read-ahead was in use (the limit was reached in the first minute),
// and that the last three minutes held no more than the first.
func requireFlat(t *testing.T, s bufferSamples, v []int64, limit int64, what string) {
	t.Helper()
	first := s.most(v[:min(len(v), 12)], 0)
	assert.Equal(t, limit, first, "%s in the first minute: the batch in hand and one read ahead", what)
	assert.LessOrEqual(t, s.most(v, 0), limit, "%s over %v of a slow handler", what, slowFor)
	assert.LessOrEqual(t, s.most(v, 2*time.Minute), first, "%s grew with the time the handler was slow", what)
}

// recordsRead counts the records its GetRecords calls returned.
type recordsRead struct {
	shardlease.KinesisAPI
	records atomic.Int64
}

func (c *recordsRead) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	out, err := c.KinesisAPI.GetRecords(ctx, in, optFns...)
	if err == nil {
		c.records.Add(int64(len(out.Records)))
	}
	return out, err
}

func TestMemoryPollingHoldsTwoBatches(t *testing.T) {
	t.Parallel()
	// Polling reads one batch ahead of a slow handler, and no further, for
	// as long as the handler is slow: two batches of WithBatchSize records.
	synctest.Test(t, func(t *testing.T) {
		fake := shardleasetest.NewKinesis()
		w := newFakeWorld(t, fake, 1)
		arrive(t, fake, w.stream, memBacklog, memArrival)
		kin := &recordsRead{KinesisAPI: fake}
		var calls atomic.Int64
		wk := startWorker(t, w, kin, w.store, slowBatches(&calls), w.opts("a", shardlease.WithBatchSize(memBatch))...)
		var unhandled []int64
		s := sample(wk.c, slowFor, func() {
			unhandled = append(unhandled, kin.records.Load()-wk.c.Stats().RecordsHandled)
		})
		requireFlat(t, s, s.records, 2*memBatch, "records the reader holds")
		requireFlat(t, s, s.bytes, 2*memBatch*memRecord, "bytes the reader holds")
		// Counted apart from the consumer: read from Kinesis, not handled.
		assert.LessOrEqual(t, slices.Max(unhandled), int64(2*memBatch), "records read and not handled")
		assert.GreaterOrEqual(t, calls.Load(), int64(slowFor/slowCall), "the handler kept being called")
		require.NoError(t, wk.stop(t))
		assert.Zero(t, wk.c.Stats().RecordsBuffered, "records held once Run returned")
		assert.Zero(t, wk.c.Stats().BytesBuffered, "bytes held once Run returned")
	})
}

func TestMemoryFanOutBackPressure(t *testing.T) {
	t.Parallel()
	// Under enhanced fan-out the reader holds two events' records, and the
	// subscription's stream waits for it: the events the service has begun
	// to send stay a few ahead of the handler however long it is slow (the
	// SDK's two goroutines hold one each, the server blocks on the next).
	synctest.Test(t, func(t *testing.T) {
		fake := shardleasetest.NewKinesis()
		var mu sync.Mutex
		events := 0
		fake.SetFaults(func(op, _ string) error {
			if op == shardleasetest.OpSubscriptionEvent {
				mu.Lock()
				events++
				mu.Unlock()
			}
			return nil
		})
		w := newFakeWorld(t, fake, 1)
		arrive(t, fake, w.stream, memArrival, memArrival)
		// One subscription throughout: a new one sends again what the
		// last left unread, which is not the stream running ahead.
		fake.SetSubscriptionLifetime(2 * slowFor)
		var calls atomic.Int64
		wk := startWorker(t, w, fake, w.store, slowBatches(&calls), w.opts("a", shardlease.WithEnhancedFanOut(consumerName))...)
		var ahead []int64
		s := sample(wk.c, slowFor, func() {
			mu.Lock()
			ahead = append(ahead, int64(events)-calls.Load())
			mu.Unlock()
		})
		// Every event has records (see arrive). Beyond the one in hand the
		// reader holds one, the SDK's two goroutines one each, and the
		// server blocks writing the next.
		assert.LessOrEqual(t, slices.Max(ahead), int64(4), "events the stream began to send, beyond those handed to the handler")
		// An event holds what arrived while the one before waited: one
		// handler call's worth. Were the stream not waiting for the reader,
		// the reader would hold what arrived in five minutes (6,000).
		perCall := int64((slowCall+10*time.Second)/memTick) * memArrival
		assert.Positive(t, s.most(s.records, 0))
		assert.LessOrEqual(t, s.most(s.records, 0), 2*perCall, "records the reader holds: two events")
		assert.Equal(t, s.most(s.records, 0)*memRecord, s.most(s.bytes, 0), "bytes are the records' payloads")
		assert.GreaterOrEqual(t, calls.Load(), int64(slowFor/slowCall), "the handler kept being called")
		require.NoError(t, wk.stop(t))
		assert.Zero(t, wk.c.Stats().BytesBuffered, "bytes held once Run returned")
	})
}

func TestMemoryLanesBoundedByMaxInFlight(t *testing.T) {
	t.Parallel()
	// With per-key lanes, a lane stuck on a slow key holds the shard's
	// reading once WithMaxInFlight records wait beyond the watermark: the
	// records read and not handled stay within two batches plus that.
	synctest.Test(t, func(t *testing.T) {
		fake := shardleasetest.NewKinesis()
		w := newFakeWorld(t, fake, 1)
		arrive(t, fake, w.stream, memBacklog, memArrival)
		kin := &recordsRead{KinesisAPI: fake}
		const inFlight = 50
		var slow atomic.Int64
		h := func(ctx context.Context, b *shardlease.Batch) error {
			for _, r := range b.Records {
				if r.PartitionKey == "key-0-0" || len(r.PartitionKey)%3 == 0 {
					return slowBatches(&slow)(ctx, b)
				}
			}
			return nil
		}
		wk := startWorker(t, w, kin, w.store, h, w.opts("a", shardlease.WithBatchSize(memBatch),
			shardlease.WithKeyConcurrency(4), shardlease.WithMaxInFlight(inFlight))...)
		var unhandled []int64
		s := sample(wk.c, slowFor, func() {
			unhandled = append(unhandled, kin.records.Load()-wk.c.Stats().RecordsHandled)
		})
		assert.LessOrEqual(t, s.most(s.records, 0), int64(2*memBatch), "records the reader holds")
		limit := int64(2*memBatch + inFlight)
		assert.LessOrEqual(t, slices.Max(unhandled), limit, "records read and not handled: two batches and those in flight")
		// Five minutes bring 6,000 records beyond the backlog: were
		// the lanes not holding the reading, they would be read.
		assert.Greater(t, s.most(unhandled, 0), int64(2*memBatch), "the lanes held records in flight")
		assert.Positive(t, slow.Load())
		require.NoError(t, wk.stop(t))
	})
}

func TestMemoryAggregatesCountedOnce(t *testing.T) {
	t.Parallel()
	// A KPL aggregate is counted as its user records, and its bytes once:
	// its user records share the aggregate's data.
	synctest.Test(t, func(t *testing.T) {
		fake := shardleasetest.NewKinesis()
		w := newFakeWorld(t, fake, 1)
		var users []kpl.UserRecord
		for i := range 10 {
			users = append(users, kpl.UserRecord{PartitionKey: fmt.Sprintf("k%d", i), Data: make([]byte, 100)})
		}
		agg := kpl.Aggregate(users)
		for range 3 {
			_, _, err := fake.Put(w.stream, "agg", agg)
			require.NoError(t, err)
		}
		var calls atomic.Int64
		wk := startWorker(t, w, fake, w.store, slowBatches(&calls), w.opts("a", shardlease.WithBatchSize(1))...)
		full := func() bool { return wk.c.Stats().RecordsBuffered == int64(2*len(users)) }
		waitFor(t, time.Minute, "an aggregate in hand and one read ahead", full)
		for range 3 {
			time.Sleep(slowCall / 2)
			synctest.Wait()
			st := wk.c.Stats()
			assert.Equal(t, int64(2*len(users)), st.RecordsBuffered, "user records of the aggregate in hand and the one read ahead")
			assert.Equal(t, int64(2*len(agg)), st.BytesBuffered, "the two aggregates' data")
		}
		require.NoError(t, wk.stop(t))
	})
}

func TestMemorySlowHandlerKeepsLeasesAndStopsInGrace(t *testing.T) {
	t.Parallel()
	// Two workers with a slow handler over four shards, for five minutes:
	// no lease is lost, no shard is read by both at once, the held buffers
	// stay at two batches a shard, and a shutdown during a 60 s batch
	// finishes within the grace period, its shards then taken by the other.
	synctest.Test(t, func(t *testing.T) {
		fake := shardleasetest.NewKinesis()
		w := newFakeWorld(t, fake, 4)
		arrive(t, fake, w.stream, 4*memBacklog, 4*memArrival)
		var calls atomic.Int64
		opts := func(id string) []shardlease.Option {
			return w.opts(id, shardlease.WithBatchSize(memBatch))
		}
		a := startWorker(t, w, fake, w.store, slowBatches(&calls), opts("a")...)
		b := startWorker(t, w, fake, w.store, slowBatches(&calls), opts("b")...)
		var both []string
		s := sample(a.c, slowFor, func() {
			ha, hb := a.c.Held(), b.c.Held()
			for _, sh := range ha {
				if slices.Contains(hb, sh) {
					both = append(both, sh)
				}
			}
			assert.LessOrEqual(t, a.c.Stats().RecordsBuffered+b.c.Stats().RecordsBuffered, int64(4*2*memBatch))
		})
		assert.Empty(t, both, "shards both workers held at once")
		assert.Zero(t, a.c.Stats().LeasesLost+b.c.Stats().LeasesLost, "leases lost while the handler was slow")
		assert.LessOrEqual(t, s.most(s.records, 0), int64(4*2*memBatch))
		require.NotEmpty(t, a.c.Held(), "worker a holds shards")
		t0 := time.Now()
		require.NoError(t, a.stop(t))
		took := time.Since(t0)
		assert.LessOrEqual(t, took, w.lease, "shutdown during a slow batch, within WithShutdownTimeout")
		assert.Zero(t, a.c.Stats().BytesBuffered, "bytes held once Run returned")
		waitFor(t, 3*w.lease, "b to hold every shard", func() bool { return len(b.c.Held()) == 4 })
		assert.Zero(t, b.c.Stats().LeasesLost)
	})
}

func TestMemorySlowHandlerHandsOffInGrace(t *testing.T) {
	t.Parallel()
	// A worker joins one that holds four shards under a slow handler: the
	// handoffs that give it its share finish within the grace period (the
	// holder cancels a handler that has not returned by then), no shard is
	// read by both at once, no lease is lost, and for two more minutes of
	// the slow handler the buffers stay at two batches a shard.
	synctest.Test(t, func(t *testing.T) {
		fake := shardleasetest.NewKinesis()
		w := newFakeWorld(t, fake, 4)
		arrive(t, fake, w.stream, 4*memBacklog, 4*memArrival)
		var calls atomic.Int64
		opts := func(id string) []shardlease.Option {
			return w.opts(id, shardlease.WithBatchSize(memBatch))
		}
		a := startWorker(t, w, fake, w.store, slowBatches(&calls), opts("a")...)
		waitFor(t, 3*w.lease, "a to be in a slow batch on every shard", func() bool {
			return len(a.c.Held()) == 4 && calls.Load() >= 4
		})
		b := startWorker(t, w, fake, w.store, slowBatches(&calls), opts("b")...)
		var both []string
		overlap := func() {
			hb := b.c.Held()
			for _, sh := range a.c.Held() {
				if slices.Contains(hb, sh) {
					both = append(both, sh)
				}
			}
		}
		asked := func() int64 { return a.c.Stats().HandoffsRequested + b.c.Stats().HandoffsRequested }
		waitFor(t, 3*w.lease, "handoffs asked for", func() bool { overlap(); return asked() > 0 })
		t0 := time.Now()
		waitFor(t, 3*w.lease, "b to be handed its share", func() bool {
			overlap()
			return len(b.c.Held()) == 2 && b.c.Stats().LeasesHandedIn == 2
		})
		took := time.Since(t0)
		// The holder sees a request at its next renewal (within R), then
		// waits the handler's grace period (within WithShutdownTimeout, L here).
		assert.LessOrEqual(t, took, w.renew+w.lease, "handoffs during a slow batch, within the grace period")
		assert.Len(t, a.c.Held(), 2, "a keeps its share")
		s := sample(b.c, 2*time.Minute, func() {
			overlap()
			assert.LessOrEqual(t, a.c.Stats().RecordsBuffered+b.c.Stats().RecordsBuffered, int64(4*2*memBatch))
		})
		assert.Empty(t, both, "shards both workers held at once")
		assert.Zero(t, a.c.Stats().LeasesLost+b.c.Stats().LeasesLost, "leases lost while the handler was slow")
		assert.LessOrEqual(t, s.most(s.records, 0), int64(2*2*memBatch), "records b's readers hold")
		require.NoError(t, a.stop(t))
		require.NoError(t, b.stop(t))
		assert.Zero(t, a.c.Stats().BytesBuffered+b.c.Stats().BytesBuffered, "bytes held once Run returned")
	})
}

func TestMemoryLargeRecordsHandedWholeTwoAhead(t *testing.T) {
	t.Parallel()
	// Records of 10 MiB, the largest Kinesis takes, reach a slow handler
	// whole, byte for byte, and the reader still holds at most two batches
	// (a read returns at most 10 MiB, so a batch is one such record), in
	// both reading modes.
	modes := map[string][]shardlease.Option{"polling": nil, "fan-out": {shardlease.WithEnhancedFanOut(consumerName)}}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := shardleasetest.NewKinesis()
				w := newFakeWorld(t, fake, 1)
				require.NoError(t, fake.AllowLargeRecords(w.stream))
				const key, n = "big", 4
				size := shardleasetest.MaxLargeRecordSize - len(key)
				var sums [][md5.Size]byte
				for i := range n {
					data := make([]byte, size)
					for j := range data {
						data[j] = byte(j*31 + i)
					}
					sums = append(sums, md5.Sum(data))
					_, _, err := fake.Put(w.stream, key, data)
					require.NoError(t, err)
				}
				var mu sync.Mutex
				var got [][md5.Size]byte
				var calls atomic.Int64
				slow := slowBatches(&calls)
				h := func(ctx context.Context, b *shardlease.Batch) error {
					mu.Lock()
					for _, r := range b.Records {
						got = append(got, md5.Sum(r.Data))
					}
					mu.Unlock()
					return slow(ctx, b)
				}
				wk := startWorker(t, w, fake, w.store, h, w.opts("a", mode...)...)
				waitFor(t, time.Minute, "the first record handed", func() bool { return calls.Load() > 0 })
				var most int64
				for calls.Load() < n {
					time.Sleep(5 * time.Second)
					synctest.Wait()
					most = max(most, wk.c.Stats().BytesBuffered)
				}
				assert.Equal(t, int64(2*size), most, "bytes the reader holds: the record in hand and one read ahead")
				mu.Lock()
				assert.Equal(t, sums, got, "every record handed whole, in order")
				mu.Unlock()
				require.NoError(t, wk.stop(t))
				assert.Zero(t, wk.c.Stats().BytesBuffered, "bytes held once Run returned")
			})
		})
	}
}
