package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/crash"
	"github.com/shardlease/shardlease/internal/dyncount"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/shardleasetest"
)

// fleet is a number of in-process workers sharing one stream of the
// in-process Kinesis fake, with their lease table on dynalite, every DynamoDB
// call going through one counting client that sums consumed capacity.
type fleet struct {
	fake    *shardleasetest.Kinesis
	dyn     *dyncount.Client
	store   *shardlease.DynamoStore
	table   string
	stream  string
	shards  int
	lease   time.Duration
	workers []*fleetWorker
	// mode is how its workers run (fleetDefault, fleetPerLease,
	// fleetBefore).
	mode fleetMode
}

// fleetMode is how a fleet's workers run.
type fleetMode int

const (
	// fleetDefault: the default options (sessions on).
	fleetDefault fleetMode = iota
	// fleetPerLease: per-lease renewals (WithSessions(false)).
	fleetPerLease
	// fleetBefore: as before coordination: the store's notes and
	// eventually consistent listing hidden, so every worker lists with
	// consistent Scans every take interval; per-lease renewals.
	fleetBefore
)

// consistentOnly is a store without EventualLister.
type consistentOnly struct {
	shardlease.LeaseStore
	shardlease.WorkerStore
}

type fleetWorker struct {
	run *running
	sw  *crash.Switch
	// dyn counts this worker's own calls (they go on through fleet.dyn).
	dyn *dyncount.Client
}

func newFleet(ctx context.Context, e *env, shards int, lease time.Duration) (*fleet, error) {
	f := &fleet{fake: shardleasetest.NewKinesis(), stream: "fleet", shards: shards, lease: lease}
	if _, err := f.fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(f.stream), ShardCount: aws.Int32(int32(shards))}); err != nil {
		return nil, err
	}
	// A record on every shard, so that every row carries a checkpoint (and
	// has the size it has in use).
	if err := fill(ctx, f.fake, f.stream, shards, 1, 16); err != nil {
		return nil, err
	}
	dc := emulator.NewDynamoClient(e.dynamo)
	table := emulator.UniqueName("fleet")
	f.table = table
	if err := shardlease.CreateTable(ctx, dc, table); err != nil {
		return nil, err
	}
	f.dyn = &dyncount.Client{DynamoDBAPI: dc, Capacity: true, ConsistentScanFix: true}
	store, err := shardlease.NewDynamoStore(f.dyn, table)
	f.store = store
	return f, err
}

// start starts one more worker; its calls fail like a dead process's once
// its switch is thrown.
func (f *fleet) start() error {
	sw := &crash.Switch{}
	id := fmt.Sprintf("w%03d", len(f.workers))
	dyn := &dyncount.Client{DynamoDBAPI: f.dyn, Capacity: true, ConsistentScanFix: true}
	ds, err := shardlease.NewDynamoStore(dyn, f.table)
	if err != nil {
		return err
	}
	var store shardlease.LeaseStore = ds
	opts := []shardlease.Option{shardlease.WithOwnerID(id), shardlease.WithLeaseDuration(f.lease),
		shardlease.WithShutdownTimeout(f.lease), shardlease.WithRetryBackoff(f.lease/50, f.lease/5)}
	switch f.mode {
	case fleetBefore:
		// No notes, no eventual listing, and so no sessions either.
		store = consistentOnly{ds, ds}
		opts = append(opts, shardlease.WithSessions(false))
	case fleetPerLease:
		opts = append(opts, shardlease.WithSessions(false))
	}
	r, err := startConsumer(crash.Kinesis(f.fake, sw), crash.Store(store, sw), f.stream,
		func(context.Context, *shardlease.Batch) error { return nil }, opts...)
	if err != nil {
		return err
	}
	f.workers = append(f.workers, &fleetWorker{run: r, sw: sw, dyn: dyn})
	return nil
}

func (f *fleet) stop() {
	var wg sync.WaitGroup
	for _, w := range f.workers {
		wg.Go(func() { _ = w.run.stop() })
	}
	wg.Wait()
}

// live returns the workers not crashed.
func (f *fleet) live() []*fleetWorker {
	var out []*fleetWorker
	for _, w := range f.workers {
		if !w.sw.Down() {
			out = append(out, w)
		}
	}
	return out
}

// balanced reports whether the live workers hold every lease between them,
// once each, with loads that differ by at most one.
func (f *fleet) balanced() bool {
	seen := map[string]bool{}
	lo, hi := f.shards, 0
	for _, w := range f.live() {
		held := w.run.c.Held()
		for _, s := range held {
			if seen[s] {
				return false
			}
			seen[s] = true
		}
		lo, hi = min(lo, len(held)), max(hi, len(held))
	}
	return len(seen) == f.shards && hi-lo <= 1
}

// coordinator returns the worker holding the lowest shard's lease: the one
// that coordinates.
func (f *fleet) coordinator() *fleetWorker {
	var best *fleetWorker
	lowest := ""
	for _, w := range f.live() {
		for _, s := range w.run.c.Held() {
			if best == nil || s < lowest {
				best, lowest = w, s
			}
		}
	}
	return best
}

// fleetUsage is what a fleet consumed over a window.
type fleetUsage struct {
	readUnits   float64
	writes      int64
	scans, gets int64
	window      time.Duration
	// readers names each worker that read in the window, with its reads.
	readers []string
}

// perMin returns n per minute of the window.
func (u fleetUsage) perMin(n int64) float64 { return float64(n) / u.window.Minutes() }

// readsShown is the read units per minute, with the Scans and GetItems
// they were made of.
func (u fleetUsage) readsShown() string {
	return fmt.Sprintf("%.0f (%.0f Scans, %.0f GetItems)", u.readUnits/u.window.Minutes(), u.perMin(u.scans), u.perMin(u.gets))
}

// measureUsage counts the fleet's DynamoDB use over window, and each
// worker's reads.
func (f *fleet) measureUsage(window time.Duration) fleetUsage {
	readers := make([]usageReader, len(f.workers))
	for i, w := range f.workers {
		readers[i] = usageReader{owner: w.run.c.OwnerID(), dyn: w.dyn}
	}
	return measureUsage(f.dyn, readers, window)
}

// usageReader is a worker whose reads measureUsage names: its owner id and
// the counter of its own calls.
type usageReader struct {
	owner string
	dyn   *dyncount.Client
}

// measureUsage counts the DynamoDB use through all over window, and the
// reads of each worker through its own counter.
func measureUsage(all *dyncount.Client, workers []usageReader, window time.Duration) fleetUsage {
	type reads struct {
		scans, gets int64
		units       float64
	}
	snap := func() []reads {
		out := make([]reads, len(workers))
		for i, w := range workers {
			out[i] = reads{w.dyn.Count(dyncount.OpScan), w.dyn.Count(dyncount.OpGetItem), w.dyn.ReadUnits()}
		}
		return out
	}
	r0, m0 := all.ReadUnits(), all.Writes()
	s0, g0, by0 := all.Count(dyncount.OpScan), all.Count(dyncount.OpGetItem), snap()
	t0 := time.Now()
	time.Sleep(window)
	u := fleetUsage{
		readUnits: all.ReadUnits() - r0, writes: all.Writes() - m0,
		scans: all.Count(dyncount.OpScan) - s0, gets: all.Count(dyncount.OpGetItem) - g0,
		window: time.Since(t0),
	}
	for i, r := range snap() {
		d := reads{r.scans - by0[i].scans, r.gets - by0[i].gets, r.units - by0[i].units}
		if d.scans+d.gets > 0 {
			u.readers = append(u.readers, fmt.Sprintf("%s %d Scans %d GetItems %.1f RU", workers[i].owner, d.scans, d.gets, d.units))
		}
	}
	return u
}

// logReaders prints who read in a fleet's window, so that a read figure
// can be traced to the workers and calls that made it.
func logReaders(e *env, what string, u fleetUsage) {
	e.logf("  %s, read in %v by: %s", what, u.window.Round(time.Second), strings.Join(u.readers, "; "))
}

// balancedFleet starts n workers over shards and waits until they are
// balanced. The caller stops the fleet it returns.
func balancedFleet(ctx context.Context, e *env, shards, n int, lease time.Duration, mode fleetMode) (*fleet, error) {
	f, err := newFleet(ctx, e, shards, lease)
	if err != nil {
		return nil, err
	}
	f.mode = mode
	for range n {
		if err := f.start(); err != nil {
			f.stop()
			return nil, err
		}
	}
	if !waitUntil(20*lease, f.balanced) {
		f.stop()
		return nil, fmt.Errorf("%d workers over %d shards not balanced within %v", n, shards, 20*lease)
	}
	return f, nil
}

// runFleet starts n workers over shards, waits until they are balanced and
// measures their use over window.
func runFleet(ctx context.Context, e *env, shards, n int, lease, window time.Duration, mode fleetMode) (fleetUsage, error) {
	f, err := balancedFleet(ctx, e, shards, n, lease, mode)
	if err != nil {
		return fleetUsage{}, err
	}
	defer f.stop()
	// Start-up over: every worker but the coordinator rests (listing as
	// before coordination, none does; a worker
	// lists every take interval from its start until it has watched the
	// coordinator's lease for a lease duration), and one more lease
	// duration, so that start-up writes (worker rows, acquires, handoffs)
	// are over.
	if mode != fleetBefore && !waitUntil(10*lease, f.resting) {
		return fleetUsage{}, fmt.Errorf("%d workers over %d shards: not all resting within %v", n, shards, 10*lease)
	}
	time.Sleep(lease)
	return f.measureUsage(window), nil
}

// resting reports whether every worker but one (the coordinator) is in a
// resting role: none lists every take interval.
func (f *fleet) resting() bool {
	busy := 0
	for _, w := range f.workers {
		switch w.run.c.Status().Role {
		case "quiet", "watching", "deputy":
		default:
			busy++
		}
	}
	return busy <= 1
}

// fleetFailover runs n workers over shards on dynalite, crashes one and
// returns how long until the others hold every lease it held. The victim is
// the coordinator (the holder of the lowest shard's lease) when coordinator
// is set, and another worker otherwise.
func fleetFailover(ctx context.Context, e *env, shards, n int, lease time.Duration, coordinator bool) (time.Duration, error) {
	f, err := balancedFleet(ctx, e, shards, n, lease, fleetDefault)
	if err != nil {
		return 0, err
	}
	defer f.stop()
	time.Sleep(lease/2 + rand.N(lease/2))
	v := f.coordinator()
	if !coordinator {
		for _, w := range f.workers {
			if w != v {
				v = w
				break
			}
		}
	}
	lost := v.run.c.Held()
	t0 := time.Now()
	v.sw.Crash()
	if !waitUntil(10*lease, func() bool { return f.heldAgain(lost) }) {
		return 0, fmt.Errorf("the leases of the crashed worker were not held again within %v", 10*lease)
	}
	return time.Since(t0), nil
}

// fleetReadRow runs n workers over 64 shards in mode for the fleet
// window, logs which workers read (as readers), and adds the row metric of
// its read units a minute with note. It returns the fleet's usage.
func fleetReadRow(ctx context.Context, e *env, sec string, n int, mode fleetMode, readers, metric, note string) (fleetUsage, error) {
	u, err := runFleet(ctx, e, 64, n, defLease, e.sz.fleetWindow, mode)
	if err != nil {
		return fleetUsage{}, err
	}
	logReaders(e, readers, u)
	e.add(row{Section: sec, Metric: metric, Value: u.readUnits / u.window.Minutes(), Unit: "RCU/min", Shown: u.readsShown(), Target: "-", Note: note})
	return u, nil
}

// measureFleetReads adds the read rows of 64 shards with 2, 8 and 32
// workers, and of 2 workers listing as before coordination; it returns the
// writes per lease a minute of the 8-worker fleet.
func measureFleetReads(ctx context.Context, e *env, sec, timing string) (float64, error) {
	window := e.sz.fleetWindow
	perMin := map[int]float64{}
	var writesPerLease float64
	for _, n := range []int{2, 8, 32} {
		note := ""
		if n == 2 {
			note = fmt.Sprintf("64 shards; %s; read capacity units DynamoDB reported (ReturnConsumedCapacity), summed over every GetItem and Scan page of the fleet for %v after the workers were balanced (in brackets: Scan pages and GetItems a minute; the progress lines name the workers that made them); dynalite prices every Scan page as eventually consistent, so a consistent page is counted twice, as DynamoDB charges it", timing, window)
		}
		u, err := fleetReadRow(ctx, e, sec, n, fleetDefault, fmt.Sprintf("64 shards, %d workers", n), fmt.Sprintf("64 shards, %d workers: read units per minute", n), note)
		if err != nil {
			return 0, err
		}
		perMin[n] = u.readUnits / u.window.Minutes()
		if n == 8 {
			writesPerLease = float64(u.writes) / 64 / u.window.Minutes()
		}
	}
	// The same 2-worker fleet listing with consistent Scans, as take rounds
	// did before they listed eventually consistent.
	uc, err := fleetReadRow(ctx, e, sec, 2, fleetBefore, "64 shards, 2 workers, every worker listing",
		"64 shards, 2 workers, before coordination (every worker lists, consistently): read units per minute",
		"the store's notes and eventually consistent listing hidden, so every worker lists with consistent Scans every take interval, as before coordination")
	if err != nil {
		return 0, err
	}
	cons := uc.readUnits / uc.window.Minutes()
	// Like for like: coordination's listings against every worker's, both
	// with per-lease renewals. With sessions (the default, the rows above)
	// the watch rota adds its looks at the coordinator's session (the
	// sessions section's rows).
	up, err := fleetReadRow(ctx, e, sec, 2, fleetPerLease, "64 shards, 2 workers, per-lease renewals",
		"64 shards, 2 workers, per-lease renewals (sessions off): read units per minute",
		"WithSessions(false): a deputy reads the first lease once a take interval, where with sessions the watch rota's looks read the coordinator's session row three times a take interval, whatever the fleet's size")
	if err != nil {
		return 0, err
	}
	perLease := up.readUnits / up.window.Minutes()
	ec := perLease / cons
	e.add(row{Section: sec, Metric: "64 shards, 2 workers, per-lease renewals: read units, coordination / before", Value: ec, Unit: "ratio",
		Shown: fmt.Sprintf("%.2f (with sessions %.2f)", ec, perMin[2]/cons), Target: "<= 0.55", OK: okp(ec <= 0.55)})
	ratio := perMin[32] / perMin[2]
	e.add(row{Section: sec, Metric: "64 shards: read units, 32 workers / 2 workers", Value: ratio, Unit: "ratio",
		Shown: fmt.Sprintf("%.2f", ratio), Target: "<= 1.5", OK: okp(ratio <= 1.5),
		Note: "both list every take interval from one coordinator; 2 workers have one deputy, 32 have two, each reading the first lease with a GetItem about once a take interval"})
	return writesPerLease, nil
}

// fleetSection is the fleet rows' section.
const fleetSection = "fleet (dynalite, consumed capacity; in-process workers and Kinesis fake)"

// measureFleet measures what coordination costs as the fleet grows: the
// lease table's consumed read capacity with 64 shards and 2, 8 and 32
// workers, and with many shards and workers; writes per lease; crash
// failover of a plain and of the coordinating worker.
func measureFleet(ctx context.Context, e *env) error {
	const sec = fleetSection
	lease := defLease
	timing := fmt.Sprintf("default timings (lease %v, renew %v, take %v)", lease, defRenew.Round(10*time.Millisecond), defTake)

	writesPerLease, err := measureFleetReads(ctx, e, sec, timing)
	if err != nil {
		return err
	}

	if err := measureFleetLarge(ctx, e); err != nil {
		return err
	}

	e.add(row{Section: sec, Metric: "64 shards, 8 workers: writes per lease per minute", Value: writesPerLease, Unit: "writes/lease/min",
		Shown: fmt.Sprintf("%.1f", writesPerLease), Target: "<= 18", OK: okp(writesPerLease <= 18.05),
		Note: "every PutItem, UpdateItem and DeleteItem of the fleet (renewals, worker rows, coordination), per lease; one record per shard at the start, so each row carries a checkpoint, and none after (checkpoints ride on renewals anyway)"})

	// Crash failover on dynalite with the emulator timings.
	fl := 2 * time.Second
	for _, which := range []struct {
		metric      string
		coordinator bool
		target      float64
	}{
		{"crash of a plain worker: leases held again, in lease durations (worst)", false, 1.5},
		{"crash of the coordinating worker: the same (worst)", true, 2.5},
	} {
		var ds []time.Duration
		for range e.sz.trials {
			d, err := fleetFailover(ctx, e, 16, 4, fl, which.coordinator)
			if err != nil {
				return err
			}
			ds = append(ds, d)
		}
		slices.Sort(ds)
		worst := ds[len(ds)-1].Seconds() / fl.Seconds()
		note := "the coordinator is the holder of the lowest shard's lease; its deputy notices and takes over"
		if !which.coordinator {
			note = fmt.Sprintf("4 workers over 16 shards on dynalite, lease %v, renew %v, take %v; %d trials; from the moment every call of one worker fails until the others hold each of its leases", fl, (fl / 3).Round(time.Millisecond), defaultTake(fl), e.sz.trials)
		}
		e.add(row{Section: sec, Metric: which.metric, Value: worst, Unit: "lease durations",
			Shown: fmt.Sprintf("%.2f", worst), Target: fmt.Sprintf("<= %.1f", which.target), OK: okp(worst <= which.target), Note: note})
	}
	return measureFleetLiveness(ctx, e, sec)
}

// measureFleetLarge measures the read units per shard of the large fleet:
// 1,000 shards and 100 workers (25 with -quick).
func measureFleetLarge(ctx context.Context, e *env) error {
	lease := defLease
	timing := fmt.Sprintf("default timings (lease %v, renew %v, take %v)", lease, defRenew.Round(10*time.Millisecond), defTake)
	shards, workers := e.sz.fleetShards, e.sz.fleetWorkers
	u, err := runFleet(ctx, e, shards, workers, lease, e.sz.fleetWindow, fleetDefault)
	if err != nil {
		return err
	}
	v := u.readUnits / float64(shards) / u.window.Minutes()
	logReaders(e, fmt.Sprintf("%d shards, %d workers", shards, workers), u)
	e.add(row{Section: fleetSection, Metric: fmt.Sprintf("%d shards, %d workers: read units per shard per minute", shards, workers), Value: v, Unit: "RCU/shard/min",
		Shown: fmt.Sprintf("%.2f", v), Target: "<= 0.4", OK: okp(v <= 0.4),
		Note: fmt.Sprintf("%s; the full run's size is 1000 shards and 100 workers; -quick runs 25 workers", timing)})
	return nil
}
