package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/dyncount"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/shardleasetest"
)

// groupSection is the group rows' section.
const groupSection = "group (dynalite; in-process workers and Kinesis fake)"

// groupTable is one lease table on dynalite with streams on the in-process
// Kinesis fake, read by workers that are either Consumers of one stream or
// Groups of every stream. Every DynamoDB call of the table goes through dyn,
// and each worker's calls also through its own counter, as in a fleet.
type groupTable struct {
	fake    *shardleasetest.Kinesis
	dyn     *dyncount.Client
	table   string
	streams []string
	leases  int
	lease   time.Duration
	workers []*groupWorker
}

// groupWorker is one worker of a groupTable, running in its own goroutine.
type groupWorker struct {
	owner  string
	held   func() []string
	dyn    *dyncount.Client
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (w *groupWorker) stop() {
	w.once.Do(func() {
		w.cancel()
		<-w.done
	})
}

// newGroupTable creates n streams of shards each on a new fake, a record
// on every shard (so that every row carries a checkpoint), and a new
// table. Stream names have one length, so that rows have one size whatever
// the number of streams.
func newGroupTable(ctx context.Context, e *env, n, shards int, lease time.Duration) (*groupTable, error) {
	t := &groupTable{fake: shardleasetest.NewKinesis(), leases: n * shards, lease: lease}
	for i := range n {
		name := fmt.Sprintf("st-%02d", i)
		if _, err := t.fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(int32(shards))}); err != nil {
			return nil, err
		}
		if err := fill(ctx, t.fake, name, shards, 1, 16); err != nil {
			return nil, err
		}
		t.streams = append(t.streams, name)
	}
	dc := emulator.NewDynamoClient(e.dynamo)
	t.table = emulator.UniqueName("group")
	if err := shardlease.CreateTable(ctx, dc, t.table); err != nil {
		return nil, err
	}
	t.dyn = &dyncount.Client{DynamoDBAPI: dc, Capacity: true, ConsistentScanFix: true}
	return t, nil
}

// store returns a store of the table for one more worker, with its own
// counter.
func (t *groupTable) store() (*shardlease.DynamoStore, *dyncount.Client, error) {
	dyn := &dyncount.Client{DynamoDBAPI: t.dyn, Capacity: true, ConsistentScanFix: true}
	ds, err := shardlease.NewDynamoStore(dyn, t.table)
	return ds, dyn, err
}

// opts are a worker's options: the fleet's.
func (t *groupTable) opts(owner string) []shardlease.Option {
	return []shardlease.Option{
		shardlease.WithOwnerID(owner), shardlease.WithLeaseDuration(t.lease),
		shardlease.WithShutdownTimeout(t.lease), shardlease.WithRetryBackoff(t.lease/50, t.lease/5),
	}
}

func nothing(context.Context, *shardlease.Batch) error { return nil }

// startConsumer starts one more worker, a Consumer of the table's first
// stream.
func (t *groupTable) startConsumer() error {
	owner := fmt.Sprintf("w%03d", len(t.workers))
	ds, dyn, err := t.store()
	if err != nil {
		return err
	}
	c, err := shardlease.NewConsumer(t.fake, ds, t.streams[0], nothing, t.opts(owner)...)
	if err != nil {
		return err
	}
	t.run(&groupWorker{owner: owner, held: c.Held, dyn: dyn}, c.Run)
	return nil
}

// startGroup starts one more worker, a Group of every stream of the table.
func (t *groupTable) startGroup(name string) error {
	owner := fmt.Sprintf("w%03d", len(t.workers))
	ds, dyn, err := t.store()
	if err != nil {
		return err
	}
	specs := make([]shardlease.StreamSpec, len(t.streams))
	for i, s := range t.streams {
		specs[i] = shardlease.StreamSpec{Name: s}
	}
	g, err := shardlease.NewGroup(t.fake, ds, shardlease.GroupConfig{Name: name, Streams: specs}, nothing, t.opts(owner)...)
	if err != nil {
		return err
	}
	held := func() []string {
		ks := g.Held()
		out := make([]string, len(ks))
		for i, k := range ks {
			out[i] = k.String()
		}
		return out
	}
	t.run(&groupWorker{owner: owner, held: held, dyn: dyn}, g.Run)
	return nil
}

func (t *groupTable) run(w *groupWorker, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan error, 1)
	go func() { w.done <- run(ctx) }()
	t.workers = append(t.workers, w)
}

func (t *groupTable) stop() {
	var wg sync.WaitGroup
	for _, w := range t.workers {
		wg.Go(w.stop)
	}
	wg.Wait()
}

// holders returns who holds each lease now, and the number of leases held
// more than once.
func (t *groupTable) holders() (map[string]string, int) {
	by := map[string]string{}
	twice := 0
	for _, w := range t.workers {
		for _, id := range w.held() {
			if _, dup := by[id]; dup {
				twice++
			}
			by[id] = w.owner
		}
	}
	return by, twice
}

// loads returns the number of leases each worker holds now.
func (t *groupTable) loads() []int {
	out := make([]int, len(t.workers))
	for i, w := range t.workers {
		out[i] = len(w.held())
	}
	return out
}

// balanced reports whether the workers hold every lease between them, once
// each, with loads that differ by at most one (as fleet.balanced).
func (t *groupTable) balanced() bool {
	by, twice := t.holders()
	if twice > 0 || len(by) != t.leases {
		return false
	}
	ls := t.loads()
	return slices.Max(ls)-slices.Min(ls) <= 1
}

// measureUsage counts the table's DynamoDB use over window, and each
// worker's reads.
func (t *groupTable) measureUsage(window time.Duration) fleetUsage {
	readers := make([]usageReader, len(t.workers))
	for i, w := range t.workers {
		readers[i] = usageReader{owner: w.owner, dyn: w.dyn}
	}
	return measureUsage(t.dyn, readers, window)
}

// groupReads starts workers over a table of n streams of shards each
// (Groups of every stream when group is set, else Consumers of the one
// stream, n being 1), waits until they are balanced, lets one more lease
// duration pass and measures their use over window.
func groupReads(ctx context.Context, e *env, n, shards, workers int, group bool, lease, window time.Duration) (fleetUsage, error) {
	t, err := newGroupTable(ctx, e, n, shards, lease)
	if err != nil {
		return fleetUsage{}, err
	}
	defer t.stop()
	for range workers {
		if group {
			err = t.startGroup("readers")
		} else {
			err = t.startConsumer()
		}
		if err != nil {
			return fleetUsage{}, err
		}
	}
	if !waitUntil(20*lease, t.balanced) {
		return fleetUsage{}, fmt.Errorf("%d workers over %d streams of %d shards not balanced within %v (loads %v)", workers, n, shards, 20*lease, t.loads())
	}
	// One more lease duration, so that start-up writes are over.
	time.Sleep(lease)
	return t.measureUsage(window), nil
}

// measureGroupReads compares the lease table's reads of 10 streams of 100
// shards read by Group workers with those of one stream of 1,000 shards
// read by as many Consumers, measured one after the other in this run.
func measureGroupReads(ctx context.Context, e *env) error {
	const streams, shards, workers = 10, 100, 4
	lease, window := defLease, e.sz.fleetWindow
	timing := fmt.Sprintf("default timings (lease %v, renew %v, take %v)", lease, defRenew.Round(10*time.Millisecond), defTake)

	uc, err := groupReads(ctx, e, 1, streams*shards, workers, false, lease, window)
	if err != nil {
		return err
	}
	logReaders(e, fmt.Sprintf("1 stream of %d shards, %d consumers", streams*shards, workers), uc)
	ug, err := groupReads(ctx, e, streams, shards, workers, true, lease, window)
	if err != nil {
		return err
	}
	logReaders(e, fmt.Sprintf("%d streams of %d shards, %d groups", streams, shards, workers), ug)

	cons := uc.readUnits / uc.window.Minutes()
	grp := ug.readUnits / ug.window.Minutes()
	e.add(row{Section: groupSection, Metric: fmt.Sprintf("1 stream of %d shards, %d Consumer workers: read units per minute", streams*shards, workers), Value: cons, Unit: "RCU/min",
		Shown: uc.readsShown(), Target: "-",
		Note: fmt.Sprintf("%s; read capacity units DynamoDB reported, summed over every GetItem and Scan page of the workers for %v after they were balanced (a consistent Scan page counted twice, as in the fleet rows)", timing, window)})
	e.add(row{Section: groupSection, Metric: fmt.Sprintf("%d streams of %d shards in one table, %d Group workers: read units per minute", streams, shards, workers), Value: grp, Unit: "RCU/min",
		Shown: ug.readsShown(), Target: "-",
		Note: "each worker a NewGroup of the 10 streams; the same timings, window and row sizes (stream names of one length, a checkpoint on every row)"})
	ratio := grp / cons
	e.add(row{Section: groupSection, Metric: "group reads: 10 streams x 100 shards (Groups) / 1 stream x 1000 shards (Consumers)", Value: ratio, Unit: "ratio",
		Shown: fmt.Sprintf("%.2f", ratio), Target: "<= 1.2", OK: okp(ratio <= 1.2)})
	return nil
}

// measureGroupShare runs 4 Group workers over 3 streams of 5 shards each
// and, once every lease is held and none has moved for a while, adds the
// most and fewest leases a worker holds over the three streams.
func measureGroupShare(ctx context.Context, e *env) error {
	const streams, shards, workers = 3, 5, 4
	lease := 2 * time.Second
	take := defaultTake(lease)
	quiet := 5 * take
	t, err := newGroupTable(ctx, e, streams, shards, lease)
	if err != nil {
		return err
	}
	defer t.stop()
	for range workers {
		if err := t.startGroup("share"); err != nil {
			return err
		}
	}
	t0 := time.Now()
	var last map[string]string
	changed := time.Now()
	settled := func() bool {
		by, twice := t.holders()
		if twice > 0 || len(by) != t.leases {
			last = nil
			return false
		}
		if !maps.Equal(by, last) {
			last, changed = by, time.Now()
			return false
		}
		return time.Since(changed) >= quiet
	}
	if !waitUntil(30*lease, settled) {
		return fmt.Errorf("%d group workers over %d streams of %d shards: leases not all held and still for %v within %v (loads %v)", workers, streams, shards, quiet, 30*lease, t.loads())
	}
	ls := t.loads()
	hi, lo := slices.Max(ls), slices.Min(ls)
	share := (t.leases + workers - 1) / workers
	parts := make([]string, len(t.workers))
	for i, w := range t.workers {
		perStream := map[string]int{}
		for _, id := range w.held() {
			s, _, _ := strings.Cut(id, ":")
			perStream[s]++
		}
		var ps []string
		for _, s := range t.streams {
			ps = append(ps, fmt.Sprintf("%d", perStream[s]))
		}
		parts[i] = fmt.Sprintf("%s %d (%s)", w.owner, ls[i], strings.Join(ps, "+"))
	}
	e.logf("  settled after %v (every lease held, none moved for %v): %s", (time.Since(t0) - quiet).Round(100*time.Millisecond), quiet, strings.Join(parts, "; "))
	e.add(row{Section: groupSection, Metric: fmt.Sprintf("group fair share: %d streams of %d shards, %d Group workers: most leases a worker holds; fewest", streams, shards, workers), Value: float64(hi), Unit: "leases",
		Shown: fmt.Sprintf("%d; %d", hi, lo), Target: fmt.Sprintf("<= %d", share), OK: okp(hi <= share),
		Note: fmt.Sprintf("lease %v, take %v; Group.Held() summed over the streams once every lease was held and none had moved for %v; the target is ceil(%d/%d); per worker, over the streams: %s", lease, take, quiet, t.leases, workers, strings.Join(parts, "; "))})
	return nil
}
