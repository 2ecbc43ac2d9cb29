package shardlease_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/shardleasetest"
)

// kinesisAdmin is what the tests call on a stream besides the consumer's
// own calls: the in-process fake and *kinesis.Client both have it.
type kinesisAdmin interface {
	shardlease.KinesisAPI
	PutRecord(ctx context.Context, params *kinesis.PutRecordInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error)
	SplitShard(ctx context.Context, params *kinesis.SplitShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SplitShardOutput, error)
	MergeShards(ctx context.Context, params *kinesis.MergeShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.MergeShardsOutput, error)
}

// world is one place a behaviour is proven: the in-process fake and
// MemoryStore under synctest, or kinesalite and DynamoStore on dynalite.
type world struct {
	name   string
	kin    kinesisAdmin
	store  shardlease.LeaseStore
	dynamo *countingDynamo // nil in the fake world
	stream string
	// timings for the consumers
	lease, renew, take, idle time.Duration
	// extra options every worker of the world runs with (opts)
	extra []shardlease.Option
}

// newFakeWorld makes the "fake" world on fake (call it in a synctest
// bubble): a stream "orders" of shards shards, a MemoryStore, and lease
// timings long enough for fake time.
func newFakeWorld(t *testing.T, fake *shardleasetest.Kinesis, shards int32) *world {
	t.Helper()
	w := &world{name: "fake", kin: fake, store: shardlease.NewMemoryStore(), stream: "orders",
		lease: 10 * time.Second, renew: 10 * time.Second / 3, take: 2 * time.Second, idle: time.Second}
	_, err := fake.CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String(w.stream), ShardCount: aws.Int32(shards)})
	require.NoError(t, err)
	return w
}

// worlds runs fn in each world: "fake" (fake time, deterministic) and
// "emulator" (real servers, real time).
func worlds(t *testing.T, shards int32, fn func(t *testing.T, w *world)) {
	t.Run("fake", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake := shardleasetest.NewKinesis()
			w := newFakeWorld(t, fake, shards)
			fn(t, w)
		})
	})
	t.Run("emulator", func(t *testing.T) {
		w := newDynamoWorld(t, "emulator", emulator.UniqueName("orders"))
		kc := emulator.Kinesis(t)
		w.kin = kc
		require.NoError(t, emulator.CreateStream(t.Context(), kc, w.stream, shards))
		fn(t, w)
	})
}

// timedSlots bounds how many timed tests (see timed) run on the emulators
// at once.
var timedSlots = make(chan struct{}, 2)

// timed marks a test held to tight real-time bounds (a fleet's failover and
// pickup times and listings per take interval, a reader's calls per
// second): on the emulators it waits until fewer than cap(timedSlots) such
// tests run, and holds its slot until the test ends; in the fake world it
// does nothing. The package's tests run in parallel (see TestMain): eight
// such fleets at once slowed each other past their bounds on a machine of
// two cores, while two at a time keep the times of a sequential run.
func (w *world) timed(t *testing.T) {
	t.Helper()
	if w.name == "fake" {
		return
	}
	timedSlots <- struct{}{}
	t.Cleanup(func() { <-timedSlots })
}

// newDynamoWorld makes a world in real time named name, on stream, with a
// DynamoStore on a fresh table of the emulator whose calls it counts. The
// caller sets its kin and creates the stream. Under -short it skips the
// test.
func newDynamoWorld(t *testing.T, name, stream string) *world {
	t.Helper()
	if testing.Short() {
		t.Skip("emulator tests need Node.js; -short runs the in-process world only")
	}
	client, table := dynamoTable(t)
	counting := &countingDynamo{DynamoDBAPI: client}
	store, err := shardlease.NewDynamoStore(counting, table)
	require.NoError(t, err)
	return &world{name: name, store: store, dynamo: counting, stream: stream,
		lease: 2 * time.Second, renew: 2 * time.Second / 3, take: 300 * time.Millisecond, idle: 50 * time.Millisecond}
}

// opts returns the world's timings plus extra options. With
// SHARDLEASE_TEST_LOG=1 in the environment the consumers log at debug level
// to stderr (take rounds, handoffs, every lease change).
func (w *world) opts(owner string, extra ...shardlease.Option) []shardlease.Option {
	extra = append(slices.Clip(w.extra), extra...)
	if os.Getenv("SHARDLEASE_TEST_LOG") != "" {
		extra = append(extra, shardlease.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	return append([]shardlease.Option{
		shardlease.WithOwnerID(owner),
		shardlease.WithLeaseDuration(w.lease),
		shardlease.WithRenewInterval(w.renew),
		shardlease.WithTakeInterval(w.take),
		shardlease.WithIdlePollInterval(w.idle),
		shardlease.WithShardSyncInterval(5 * w.take),
		shardlease.WithRetryBackoff(w.take/10, w.take),
		shardlease.WithShutdownTimeout(w.lease),
	}, extra...)
}

// produced is what the producer wrote, in order.
type produced struct {
	mu      sync.Mutex
	ids     []string
	byShard map[string][]string // shard → ids in sequence order
	byKey   map[string][]string // partition key → ids in write order
	seq     map[string]string   // id → sequence number
	n       int
}

// put writes n records with unique ids, spread over keys partition keys.
func (w *world) put(t *testing.T, p *produced, n, keys int) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byShard == nil {
		p.byShard, p.byKey, p.seq = map[string][]string{}, map[string][]string{}, map[string]string{}
	}
	for range n {
		id := fmt.Sprintf("rec-%06d", p.n)
		key := fmt.Sprintf("key-%03d", p.n%keys)
		p.n++
		out, err := w.kin.PutRecord(context.Background(), &kinesis.PutRecordInput{
			StreamName: aws.String(w.stream), PartitionKey: aws.String(key), Data: []byte(id),
		})
		require.NoError(t, err)
		p.ids = append(p.ids, id)
		p.byShard[aws.ToString(out.ShardId)] = append(p.byShard[aws.ToString(out.ShardId)], id)
		p.byKey[key] = append(p.byKey[key], id)
		p.seq[id] = aws.ToString(out.SequenceNumber)
	}
}

func (p *produced) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids)
}

// handled records what handlers saw.
type handled struct {
	mu      sync.Mutex
	times   map[string]int      // id → times handled
	byKey   map[string][]string // partition key → ids in handling order
	byShard map[string][]string // shard → ids in handling order
	worker  map[string][]string // id → workers that handled it
	batches atomic.Int64
}

func newHandled() *handled {
	return &handled{times: map[string]int{}, byKey: map[string][]string{}, byShard: map[string][]string{}, worker: map[string][]string{}}
}

// handler returns a handler that records every record for worker.
func (h *handled) handler(worker string) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		h.add(worker, b)
		return nil
	}
}

func (h *handled) add(worker string, b *shardlease.Batch) {
	h.batches.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range b.Records {
		id := string(r.Data)
		h.times[id]++
		h.byKey[r.PartitionKey] = append(h.byKey[r.PartitionKey], id)
		h.byShard[b.ShardID] = append(h.byShard[b.ShardID], id)
		h.worker[id] = append(h.worker[id], worker)
	}
}

func (h *handled) distinct() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.times)
}

func (h *handled) duplicates() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := 0
	for _, n := range h.times {
		d += n - 1
	}
	return d
}

// lost returns the produced ids never handled.
func (h *handled) lost(p *produced) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, id := range p.ids {
		if h.times[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// requireKeyOrder checks that, per partition key, the first handling of each
// record follows write order.
func requireKeyOrder(t *testing.T, p *produced, h *handled) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, want := range p.byKey {
		seen := map[string]bool{}
		var first []string
		for _, id := range h.byKey[key] {
			if !seen[id] {
				seen[id] = true
				first = append(first, id)
			}
		}
		require.Equal(t, want, first, "partition key %s handled out of order", key)
	}
}

// ordersStream returns an in-process stream "orders" of shards shards
// holding records records, record i put with partition key i and data byte
// i.
func ordersStream(t *testing.T, shards, records int) *shardleasetest.Kinesis {
	t.Helper()
	ctx := t.Context()
	kin := shardleasetest.NewKinesis()
	_, err := kin.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(int32(shards))})
	require.NoError(t, err)
	for i := range records {
		_, err := kin.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String(fmt.Sprint(i)), Data: []byte{byte(i)}})
		require.NoError(t, err)
	}
	return kin
}

// waitFor polls cond until it holds or within passes. Under synctest the
// polling advances fake time.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// worker is a running consumer.
type worker struct {
	c      *shardlease.Consumer
	cancel context.CancelFunc
	done   chan error
}

func startWorker(t *testing.T, w *world, kin shardlease.KinesisAPI, store shardlease.LeaseStore, h shardlease.Handler, opts ...shardlease.Option) *worker {
	t.Helper()
	c, err := shardlease.NewConsumer(kin, store, w.stream, h, opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	wk := &worker{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { wk.done <- c.Run(ctx) }()
	t.Cleanup(func() { wk.stop(t) })
	return wk
}

// stop cancels the worker and waits for Run to return; it returns Run's
// error. Stopping twice is harmless.
func (wk *worker) stop(t *testing.T) error {
	t.Helper()
	wk.cancel()
	select {
	case err, ok := <-wk.done:
		if ok {
			close(wk.done)
			return err
		}
		return nil
	case <-time.After(time.Minute):
		t.Fatalf("worker %s did not stop within a minute", wk.c.OwnerID())
		return nil
	}
}

// leases returns the stream's rows.
func (w *world) leases(t *testing.T) []shardlease.Lease {
	t.Helper()
	ls, err := w.store.List(context.Background(), w.stream)
	require.NoError(t, err)
	return ls
}

// countingStore counts successful writes by kind.
type countingStore struct {
	shardlease.LeaseStore
	mu     sync.Mutex
	writes map[string]int
}

func newCountingStore(s shardlease.LeaseStore) *countingStore {
	return &countingStore{LeaseStore: s, writes: map[string]int{}}
}

func (s *countingStore) count(op string) {
	s.mu.Lock()
	s.writes[op]++
	s.mu.Unlock()
}

func (s *countingStore) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.writes {
		n += v
	}
	return n
}

func (s *countingStore) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.writes))
	for k, v := range s.writes {
		out[k] = v
	}
	return out
}

func (s *countingStore) Create(ctx context.Context, k shardlease.LeaseKey, p []string) (bool, error) {
	s.count("create")
	return s.LeaseStore.Create(ctx, k, p)
}

func (s *countingStore) Acquire(ctx context.Context, k shardlease.LeaseKey, owner string, observed int64) (shardlease.Lease, error) {
	s.count("acquire")
	return s.LeaseStore.Acquire(ctx, k, owner, observed)
}

func (s *countingStore) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	s.count("renew")
	return s.LeaseStore.Renew(ctx, l, e)
}

func (s *countingStore) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	s.count("checkpoint")
	return s.LeaseStore.Checkpoint(ctx, l, cp, sub, e)
}

func (s *countingStore) Release(ctx context.Context, l shardlease.Lease) (shardlease.Lease, error) {
	s.count("release")
	return s.LeaseStore.Release(ctx, l)
}

func (s *countingStore) RequestHandoff(ctx context.Context, l shardlease.Lease, taker string) (shardlease.Lease, error) {
	s.count("handoff")
	return s.LeaseStore.RequestHandoff(ctx, l, taker)
}

// heldBy maps each owner id (as configured, without its incarnation) to
// the shards it holds.
func heldBy(ls []shardlease.Lease) map[string][]string {
	out := map[string][]string{}
	for _, l := range ls {
		out[shardlease.OwnerName(l.Owner)] = append(out[shardlease.OwnerName(l.Owner)], l.Key.Shard)
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}
