package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shardlease/shardlease/shardleasetest"
)

// The cost rows measure what a worker's lease table writes cost, in the
// write units DynamoDB bills, beside the Java KCL 3.x's model, at the
// default lease duration and at the fast-failover setting:
//
//	cost        dynalite: the consumer against a baseline of separate writes
//	cost-units  dynalite: write units per lease-minute, sessions off and on, busy and idle
//	cost-crash  in-process: records handed again after a crash, and crash failover
//	cost-scale  a lease table of 10,000 shards read by 1,000 workers
//
// "-only cost" runs them all; -charts draws their figures.

// costSteps are the steps of the cost rows.
var costSteps = []string{"cost", "cost-units", "cost-crash", "cost-scale"}

// costUnitsSection is the section of the write-unit rows.
const costUnitsSection = "write units per lease-minute (dynalite, consumed capacity; the KCL 3.x modelled)"

// The documented fast-failover setting: WithLeaseDuration(3s) and
// WithRenewInterval(1.2s), the take interval at its default (1.2 s). A
// crashed worker's leases are taken a lease duration after a taker first
// saw its session's counter stand still, so failover is about L + T; a
// renew interval of 1.2 s instead of L/3 writes a sixth fewer keeps and
// still leaves 1.8 s to retry a failed one before the holder's cut-off.
const (
	fastLease = 3 * time.Second
	fastRenew = 1200 * time.Millisecond
)

// renewFor returns the renew interval the cost rows set at lease (0: the
// default, L/3).
func renewFor(lease time.Duration) time.Duration {
	if lease == fastLease {
		return fastRenew
	}
	return 0
}

// settingName names the timings of lease in the rows.
func settingName(lease time.Duration) string {
	if r := renewFor(lease); r > 0 {
		return fmt.Sprintf("lease %v, renew %v", lease, r)
	}
	return fmt.Sprintf("lease %v", lease)
}

// costLeases are the lease durations of the cost rows: the default and the
// fast-failover setting.
var costLeases = []time.Duration{defLease, fastLease}

// costPerWorker is the number of leases each worker of the cost rows holds.
const costPerWorker = 10

// costUse is what a worker wrote over a window.
type costUse struct {
	units, leaseUnits   float64 // write units in all, and on lease rows
	writes, leaseWrites int64
	// rowBytes is the size of the worker's own row at the window's end,
	// packedBytes that of the packed checkpoints it carries.
	rowBytes, packedBytes int
}

func (u costUse) minus(v costUse) costUse {
	return costUse{units: u.units - v.units, leaseUnits: u.leaseUnits - v.leaseUnits, writes: u.writes - v.writes, leaseWrites: u.leaseWrites - v.leaseWrites}
}

// measureCostUnits runs, side by side, lone workers of 10 leases each on
// their own tables on dynalite: at both lease durations, sessions off and
// on, records flowing on every shard (a checkpoint after every batch) and
// none. It counts the write units DynamoDB reports for each over one
// window and adds them beside the KCL 3.x's model.
func measureCostUnits(ctx context.Context, e *env) error {
	fake := shardleasetest.NewKinesis()
	var ws []*costWorker
	defer func() {
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Go(func() { _ = w.run.stop() })
		}
		wg.Wait()
	}()
	for _, lease := range costLeases {
		for _, busy := range []bool{true, false} {
			for _, sessions := range []bool{false, true} {
				w, err := startCostWorker(ctx, e, fake, costSpec{lease: lease, renew: renewFor(lease), leases: costPerWorker, sessions: sessions, busy: busy})
				if err != nil {
					return err
				}
				ws = append(ws, w)
			}
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// Two records on every busy shard every 100ms.
	every(runCtx, &wg, 100*time.Millisecond, func() {
		for _, w := range ws {
			if w.spec.busy {
				_ = fill(runCtx, fake, w.stream, w.leases, 2, 100)
			}
		}
	})
	for _, w := range ws {
		if !waitUntil(30*w.spec.lease, func() bool { return len(w.run.c.Held()) == w.leases }) {
			return fmt.Errorf("a worker of %s holds %d of its leases after %v", w.spec, len(w.run.c.Held()), 30*w.spec.lease)
		}
	}
	// One default lease duration more, so that start-up writes are over.
	time.Sleep(defLease)
	use := func() []costUse {
		out := make([]costUse, len(ws))
		for i, w := range ws {
			out[i] = costUse{units: w.dyn.WriteUnits(), leaseUnits: w.rows.LeaseUnits(), writes: w.dyn.Writes(), leaseWrites: w.rows.LeaseWrites()}
		}
		return out
	}
	u0, t0 := use(), time.Now()
	time.Sleep(e.sz.costWindow * 3 / 2)
	u1, win := use(), time.Since(t0)
	for i, w := range ws {
		if n := len(w.run.c.Held()); n != w.leases {
			return fmt.Errorf("a worker of %s lost leases in the window: it holds %d", w.spec, n)
		}
		u1[i] = u1[i].minus(u0[i])
		if w.spec.busy && w.spec.sessions {
			var err error
			if u1[i].rowBytes, u1[i].packedBytes, err = workerRowBytes(ctx, w.dyn, w.table); err != nil {
				return err
			}
		}
	}
	addCostUnitRows(e, ws, u1, win)
	return nil
}

// addCostUnitRows adds the write-unit rows of the workers ws, which wrote
// use over w, and keeps their models for the charts.
func addCostUnitRows(e *env, ws []*costWorker, use []costUse, w time.Duration) {
	find := func(lease time.Duration, busy, sessions bool) costUse {
		for i, cw := range ws {
			if cw.spec.lease == lease && cw.spec.busy == busy && cw.spec.sessions == sessions {
				return use[i]
			}
		}
		return costUse{}
	}
	perLeaseMin := func(u float64) float64 { return u / costPerWorker / w.Minutes() }
	for _, lease := range costLeases {
		at := settingName(lease)
		kcl := kclModel(lease, 100).at(costPerWorker)
		off, on := find(lease, true, false), find(lease, true, true)
		idleOff, idleOn := find(lease, false, false), find(lease, false, true)
		note := ""
		if lease == defLease {
			note = fmt.Sprintf("each worker alone on its own table on dynalite and its own stream of the in-process fake, %d leases; busy: two records on every shard every 100ms, a checkpoint after every batch; idle: no records; write capacity units DynamoDB reported (ReturnConsumedCapacity) for every PutItem, UpdateItem and DeleteItem over %v once it held every lease; in brackets those of lease rows (the rest are the worker's own row: its heartbeat or session)", costPerWorker, w.Round(time.Second))
		}
		e.add(row{Section: costUnitsSection, Metric: fmt.Sprintf("lease %v: the Java KCL 3.x's model, 10 leases a worker", lease), Value: kcl, Unit: "WU/lease/min",
			Shown: fmt.Sprintf("%.1f", kcl), Target: "-", Note: kclNote(lease)})
		e.add(row{Section: costUnitsSection, Metric: at + ", 10 busy leases: per-lease renewals (sessions off)", Value: perLeaseMin(off.units), Unit: "WU/lease/min",
			Shown: fmt.Sprintf("%.2f (%.2f)", perLeaseMin(off.units), perLeaseMin(off.leaseUnits)), Target: "-", Note: note})
		target := 2.0 // a tenth of the KCL's at the defaults
		if lease == fastLease {
			target = 6.0 // under a third of the KCL's at the defaults
		}
		v := perLeaseMin(on.units)
		e.add(row{Section: costUnitsSection, Metric: at + ", 10 busy leases: sessions", Value: v, Unit: "WU/lease/min",
			Shown: fmt.Sprintf("%.2f (%.2f); %.2f of the KCL's", v, perLeaseMin(on.leaseUnits), v/kcl), Target: fmt.Sprintf("<= %.1f", target), OK: okp(v <= target)})
		e.add(row{Section: costUnitsSection, Metric: at + ", 10 idle leases: per-lease renewals; sessions", Value: perLeaseMin(idleOn.units), Unit: "WU/lease/min",
			Shown: fmt.Sprintf("%.2f; %.2f", perLeaseMin(idleOff.units), perLeaseMin(idleOn.units)), Target: "-"})
		idle := perLeaseMin(idleOn.leaseUnits)
		e.add(row{Section: costUnitsSection, Metric: at + ", an idle lease with sessions: write units on its lease row a minute", Value: idle, Unit: "WU/lease/min",
			Shown: fmt.Sprintf("%.2f", idle), Target: "0", OK: okp(idle == 0)})
		addSessionRow(e, lease, off, on, w)
	}
}

// addSessionRow adds the size of the busy worker's session row at lease,
// and keeps the models of the busy workers, off without sessions and on
// with them, for the charts.
func addSessionRow(e *env, lease time.Duration, off, on costUse, w time.Duration) {
	note := ""
	if lease == defLease {
		note = "the worker's row as DynamoDB sizes it (names and values), read at the window's end; a write unit covers 1 KB; the charts' sessions lines cost each keep a unit a KB of this row, grown by the packed checkpoints' bytes a lease"
	}
	e.add(row{Section: costUnitsSection, Metric: settingName(lease) + ", 10 busy leases: the session row's bytes (packed checkpoints)", Value: float64(on.rowBytes), Unit: "bytes",
		Shown: fmt.Sprintf("%d (%d)", on.rowBytes, on.packedBytes), Target: "-",
		Note: note})
	e.costs().models[lease] = costModels{
		perLease: modelFrom(costPerWorker, off.units-off.leaseUnits, off.leaseUnits, w),
		sessions: keptModelFrom(costPerWorker, on.writes-on.leaseWrites, on.units-on.leaseUnits, on.leaseUnits, on.rowBytes, on.packedBytes, w),
	}
}

// kclNote says how the KCL's row is computed at lease.
func kclNote(lease time.Duration) string {
	m := kclModel(lease, 100)
	return fmt.Sprintf("computed (kclModel), not run: a renewal of every lease every L/3 - 25ms (%v), one application checkpoint a lease-minute, a WorkerMetricStats write a worker every 30s, the leader's lock heartbeat every 30s shared by 100 workers; %.2f a lease-minute plus %.2f a worker-minute, every write one unit",
		(lease/3 - kclEpsilon).Round(time.Millisecond), m.perLease, m.perWorker)
}
