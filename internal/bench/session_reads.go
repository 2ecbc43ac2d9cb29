package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/dyncount"
)

// sessionReadsShards is the stream of the session read rows: 64 shards,
// one a worker at 64 workers, as in the fleet section's read rows.
const sessionReadsShards = 64

// sessionReads is what a settled fleet with sessions read over a window.
type sessionReads struct {
	fleetUsage
	// getUnits is the part of the read units GetItems consumed.
	getUnits float64
	// gets counts GetItems by role: the coordinator, the workers the
	// table names deputy, and the others.
	coordGets, deputyGets, otherGets int64
}

// startReadFleet starts n workers with sessions over shards on dynalite,
// the first alone until it holds every lease (so that the others do not
// all create the lease rows at once), and waits until they are balanced.
// The caller stops the fleet it returns.
func startReadFleet(ctx context.Context, e *env, shards, n int, lease time.Duration) (*fleet, error) {
	f, err := newFleet(ctx, e, shards, lease)
	if err != nil {
		return nil, err
	}
	for i := range n {
		if i == 1 && !waitUntil(30*lease, func() bool { return len(f.workers[0].run.c.Held()) == shards }) {
			f.stop()
			return nil, fmt.Errorf("the first worker with sessions holds %d of the %d leases of table %s after %v", len(f.workers[0].run.c.Held()), shards, f.table, 30*lease)
		}
		// Each worker's calls counted on their own, then through f.dyn.
		dyn := &dyncount.Client{DynamoDBAPI: f.dyn, Capacity: true, ConsistentScanFix: true}
		ds, err := shardlease.NewDynamoStore(dyn, f.table)
		if err == nil {
			err = f.startSession(ds, dyn)
		}
		if err != nil {
			f.stop()
			return nil, err
		}
	}
	if !waitUntil(30*lease, f.balanced) {
		f.stop()
		return nil, fmt.Errorf("%d workers with sessions over the %d shards of table %s not balanced within %v", n, shards, f.table, 30*lease)
	}
	return f, nil
}

// sessionFleetReads starts n workers with sessions over shards, waits one
// lease duration once they are balanced, and counts their reads over
// window.
func sessionFleetReads(ctx context.Context, e *env, shards, n int, lease, window time.Duration) (sessionReads, error) {
	f, err := startReadFleet(ctx, e, shards, n, lease)
	if err != nil {
		return sessionReads{}, err
	}
	defer f.stop()
	time.Sleep(lease)
	gets := func() []int64 {
		out := make([]int64, len(f.workers))
		for i, w := range f.workers {
			out[i] = w.dyn.Count(dyncount.OpGetItem)
		}
		return out
	}
	u0, g0 := f.dyn.Units(dyncount.OpGetItem), gets()
	r := sessionReads{fleetUsage: f.measureUsage(window)}
	r.getUnits = f.dyn.Units(dyncount.OpGetItem) - u0
	coord, deputies := f.coordinator(), f.deputiesOf(ctx)
	for i, g := range gets() {
		switch w := f.workers[i]; {
		case w == coord:
			r.coordGets += g - g0[i]
		case slices.Contains(deputies, w):
			r.deputyGets += g - g0[i]
		default:
			r.otherGets += g - g0[i]
		}
	}
	return r, nil
}

// measureSessionReads adds the read rows with sessions: read units a minute
// of a settled fleet of 2 and of 64 workers over 64 shards, and their
// ratio.
func measureSessionReads(ctx context.Context, e *env) error {
	lease := sessionCostLease
	window := e.sz.fleetWindow
	perMin := map[int]float64{}
	var split []string
	for _, n := range []int{2, 64} {
		r, err := sessionFleetReads(ctx, e, sessionReadsShards, n, lease, window)
		if err != nil {
			return err
		}
		perMin[n] = r.readUnits / r.window.Minutes()
		logReaders(e, fmt.Sprintf("sessions, %d shards, %d workers", sessionReadsShards, n), r.fleetUsage)
		split = append(split, fmt.Sprintf("at %d workers GetItems made %.0f of the %.0f read units a minute, and a minute the coordinator made %.0f GetItems, the deputies %.0f, the other workers %.0f",
			n, r.getUnits/r.window.Minutes(), perMin[n], r.perMin(r.coordGets), r.perMin(r.deputyGets), r.perMin(r.otherGets)))
		note := ""
		if n == 2 {
			note = fmt.Sprintf("dynalite, %d shards, lease %v, take %v; read capacity units DynamoDB reported (ReturnConsumedCapacity), every GetItem and Scan page of the fleet over %v once balanced (a consistent Scan page counted twice, as DynamoDB charges it); in brackets Scan pages and GetItems a minute; the progress lines name the workers that read", sessionReadsShards, lease, defaultTake(lease), window)
		}
		e.add(row{Section: sessionSection, Metric: fmt.Sprintf("%d shards, %d workers with sessions: read units per minute", sessionReadsShards, n), Value: perMin[n], Unit: "RCU/min",
			Shown: r.readsShown() + fmt.Sprintf("; %.0f writes/min", r.perMin(r.writes)), Target: "-", Note: note})
	}
	ratio := perMin[64] / perMin[2]
	e.add(row{Section: sessionSection, Metric: fmt.Sprintf("%d shards with sessions: read units, 64 workers / 2 workers", sessionReadsShards), Value: ratio, Unit: "ratio",
		Shown: fmt.Sprintf("%.2f", ratio), Target: "<= 1.5", OK: okp(ratio <= 1.5), Note: split[0] + "; " + split[1]})
	return nil
}
