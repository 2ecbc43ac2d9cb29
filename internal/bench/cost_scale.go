package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardlease/shardlease"
)

// The scale rows: a lease table of 10,000 shards read by 1,000 workers,
// which must stay under one DynamoDB partition's 1,000 write units a
// second. One row scales the rates measured on dynalite (cost-units) up;
// the other runs 10,000 leases on a MemoryStore and counts every write.
const (
	scaleTableShards  = 10_000
	scaleTableWorkers = 1_000
	partitionWCU      = 1000.0 // write units a second one partition takes
)

// writeCounts counts the writes a MemoryStore reports to its OnWrite hook,
// by operation.
type writeCounts struct {
	mu  sync.Mutex
	ops map[string]int64
}

func (c *writeCounts) wrote(op string, _, _ shardlease.Lease) {
	c.mu.Lock()
	c.ops[op]++
	c.mu.Unlock()
}

func (c *writeCounts) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.ops)
}

// measureCostScale adds the scale rows: the write units a second of 10,000
// busy shards read by 1,000 workers, from the rates cost-units measured,
// and a run of 10,000 leases with sessions on a MemoryStore, every write
// counted over a minute.
func measureCostScale(ctx context.Context, e *env) error {
	m, ok := e.costs().models[defLease]
	if !ok {
		return errors.New("the scale rows scale the rates cost-units measures: run it first (-only cost, or -only cost-units,cost-scale)")
	}
	const perWorker = scaleTableShards / scaleTableWorkers
	wcu := m.sessions.at(perWorker) * perWorker * scaleTableWorkers / 60
	e.add(row{Section: costUnitsSection, Metric: "10,000 busy shards read by 1,000 workers, sessions: write units a second on the lease table", Value: wcu, Unit: "WU/s",
		Shown: fmt.Sprintf("%.0f", wcu), Target: fmt.Sprintf("< %.0f (one partition)", partitionWCU), OK: okp(wcu < partitionWCU),
		Note: fmt.Sprintf("from the rates measured at lease %v (the busy worker with sessions and %d leases: %.1f write units a worker-minute, %.1f of them keeps of its session row), times 1,000 workers of 10 leases", defLease, costPerWorker, m.sessions.at(perWorker)*perWorker, m.sessions.at(perWorker)*perWorker-m.sessions.perLease*perWorker)})
	// In-process, 10 workers of 1,000 leases: a fleet of 1,000 in one
	// process would measure the machine, not the writes.
	const workers = 10
	ops, w, err := memoryScaleRun(ctx, workers, time.Minute)
	if err != nil {
		return err
	}
	var total int64
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(ops)) {
		if total += ops[op]; ops[op] == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f", op, float64(ops[op])/w.Seconds()))
	}
	perSec := float64(total) / w.Seconds()
	// 1,000 workers of 10 leases: the run's writes, its keeps (of 1,000
	// leases each) replaced by a keep a worker as often as measured, each
	// within one write unit (the session row's size row).
	keeps := float64(ops["keep session"]) / w.Seconds()
	at1000 := perSec - keeps + keeps/workers*scaleTableWorkers
	e.add(row{Section: costUnitsSection, Metric: fmt.Sprintf("10,000 leases, %d workers with sessions, MemoryStore: writes a second (as 1,000 workers of 10 leases)", workers), Value: at1000, Unit: "writes/s",
		Shown: fmt.Sprintf("%.0f (%.0f)", perSec, at1000), Target: fmt.Sprintf("< %.0f", partitionWCU), OK: okp(at1000 < partitionWCU),
		Note: fmt.Sprintf("in-process fake + MemoryStore, real time, default timings (lease %v), 1,000 leases a worker; a record on every shard every 5s; every write the store reports to its OnWrite hook over %v once balanced (Heartbeat and RemoveWorker are not reported; with sessions the keep is the heartbeat): %s a second; in brackets, the keeps replaced by a keep a worker every %.2fs (as measured) for 1,000 workers, each a write unit while its 10 leases' packed checkpoints fit 1 KB (the session row's size row)", defLease, w.Round(time.Second), strings.Join(parts, ", "), workers/keeps)})
	return nil
}

// memoryScaleRun runs workers workers with sessions over 10,000 shards of
// the in-process fake and a MemoryStore, a record on every shard every 5s,
// and returns the writes the store reported over window once they were
// balanced, by operation.
func memoryScaleRun(ctx context.Context, workers int, window time.Duration) (map[string]int64, time.Duration, error) {
	f, store, err := memoryFleet(ctx, scaleTableShards, defLease)
	if err != nil {
		return nil, 0, err
	}
	counts := &writeCounts{ops: map[string]int64{}}
	store.OnWrite(counts.wrote)
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	every(pctx, &wg, 5*time.Second, func() { _ = fill(pctx, f.fake, f.stream, f.shards, 1, 16) })
	if err := f.startSessions(store, workers, nil); err != nil {
		return nil, 0, err
	}
	defer f.stop()
	// One lease duration more, so that the moves of the start are over.
	time.Sleep(defLease)
	c0, t0 := counts.snapshot(), time.Now()
	time.Sleep(window)
	c1, w := counts.snapshot(), time.Since(t0)
	for op := range c1 {
		c1[op] -= c0[op]
	}
	return c1, w, nil
}
