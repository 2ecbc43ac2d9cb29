package main

import (
	"context"
	"fmt"
	"time"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/dyncount"
)

// sessionReadsShards is the stream of the session read rows: 64 shards,
// one a worker at 64 workers, as in the fleet section's read rows.
const sessionReadsShards = 64

// sessionFleetUsage starts n workers with sessions over shards on dynalite
// (the first alone until it holds every lease, so that the others do not
// all create the lease rows at once), waits until they are balanced and one lease duration more, and counts
// their DynamoDB use over window; getUnits is the part of the read units
// that GetItems consumed.
func sessionFleetUsage(ctx context.Context, e *env, shards, n int, lease, window time.Duration) (u fleetUsage, getUnits float64, err error) {
	f, err := newFleet(ctx, e, shards, lease)
	if err != nil {
		return fleetUsage{}, 0, err
	}
	// Each worker's calls counted on their own, then through f.dyn.
	perWorker := func() *dyncount.Client {
		return &dyncount.Client{DynamoDBAPI: f.dyn, Capacity: true, ConsistentScanFix: true}
	}
	for i := range n {
		if i == 1 && !waitUntil(30*lease, func() bool { return len(f.workers[0].run.c.Held()) == shards }) {
			f.stop()
			return fleetUsage{}, 0, fmt.Errorf("the first worker with sessions holds %d of the %d leases of table %s after %v", len(f.workers[0].run.c.Held()), shards, f.table, 30*lease)
		}
		dyn := perWorker()
		ds, err := shardlease.NewDynamoStore(dyn, f.table)
		if err != nil {
			f.stop()
			return fleetUsage{}, 0, err
		}
		if err := f.startSession(ds, dyn); err != nil {
			f.stop()
			return fleetUsage{}, 0, err
		}
	}
	defer f.stop()
	if !waitUntil(30*lease, f.balanced) {
		return fleetUsage{}, 0, fmt.Errorf("%d workers with sessions over the %d shards of table %s not balanced within %v", n, shards, f.table, 30*lease)
	}
	time.Sleep(lease)
	g0 := f.dyn.Units(dyncount.OpGetItem)
	u = f.measureUsage(window)
	return u, f.dyn.Units(dyncount.OpGetItem) - g0, nil
}

// measureSessionReads adds the read rows with sessions: read units a minute
// of a settled fleet of 2 and of 64 workers over 64 shards, and their
// ratio.
func measureSessionReads(ctx context.Context, e *env) error {
	lease := sessionCostLease
	window := e.sz.fleetWindow
	perMin, gets := map[int]float64{}, map[int]float64{}
	for _, n := range []int{2, 64} {
		u, getUnits, err := sessionFleetUsage(ctx, e, sessionReadsShards, n, lease, window)
		if err != nil {
			return err
		}
		gets[n] = getUnits / u.window.Minutes()
		perMin[n] = u.readUnits / u.window.Minutes()
		logReaders(e, fmt.Sprintf("sessions, %d shards, %d workers", sessionReadsShards, n), u)
		note := ""
		if n == 2 {
			note = fmt.Sprintf("dynalite, %d shards, lease %v, take %v; read capacity units DynamoDB reported (ReturnConsumedCapacity), every GetItem and Scan page of the fleet over %v once balanced (a consistent Scan page counted twice, as DynamoDB charges it); in brackets Scan pages and GetItems a minute; the progress lines name the workers that read", sessionReadsShards, lease, defaultTake(lease), window)
		}
		e.add(row{Section: sessionSection, Metric: fmt.Sprintf("%d shards, %d workers with sessions: read units per minute", sessionReadsShards, n), Value: perMin[n], Unit: "RCU/min",
			Shown: u.readsShown() + fmt.Sprintf("; %.0f writes/min", u.perMin(u.writes)), Target: "-", Note: note})
	}
	ratio := perMin[64] / perMin[2]
	e.add(row{Section: sessionSection, Metric: fmt.Sprintf("%d shards with sessions: read units, 64 workers / 2 workers", sessionReadsShards), Value: ratio, Unit: "ratio",
		Shown: fmt.Sprintf("%.2f", ratio), Target: "<= 1.5", OK: okp(ratio <= 1.5),
		Note: fmt.Sprintf("GetItems made %.0f of the %.0f read units a minute at 2 workers and %.0f of %.0f at 64, Scan pages the rest; the progress lines show which workers made them", gets[2], perMin[2], gets[64], perMin[64])})
	return nil
}
