package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/shardlease/shardlease/internal/dyncount"
	"github.com/shardlease/shardlease/shardleasetest"
)

// sessionCostLease is the lease duration of the session cost rows: short,
// so that a short window holds many renew intervals.
const sessionCostLease = 3 * time.Second

// loneWorker is one worker alone on its own lease table on dynalite and its
// own stream, every DynamoDB call counted.
type loneWorker struct {
	leases   int
	sessions bool
	dyn      *dyncount.Client
	run      *running
}

// startLone starts a worker alone over a new stream of leases idle shards
// of fake, on a new table, with sessions on or off.
func startLone(ctx context.Context, e *env, fake *shardleasetest.Kinesis, leases int, sessions bool) (*loneWorker, error) {
	cw, err := startCostWorker(ctx, e, fake, costSpec{lease: sessionCostLease, leases: leases, sessions: sessions})
	if err != nil {
		return nil, err
	}
	return cw.loneWorker, nil
}

// loneUse is what a lone worker wrote over a window.
type loneUse struct {
	writes int64
	units  float64
}

// measureSessionCost runs, side by side, three workers with sessions
// holding 1, 10 and 100 idle leases and one without sessions holding 10,
// each alone on its own table on dynalite, and counts their writes over
// one window once each holds every lease of its stream.
func measureSessionCost(ctx context.Context, e *env) error {
	fake := shardleasetest.NewKinesis()
	var lone []*loneWorker
	defer func() {
		var wg sync.WaitGroup
		for _, lw := range lone {
			wg.Go(func() { _ = lw.run.stop() })
		}
		wg.Wait()
	}()
	for _, c := range []struct {
		leases   int
		sessions bool
	}{{1, true}, {10, true}, {100, true}, {10, false}} {
		lw, err := startLone(ctx, e, fake, c.leases, c.sessions)
		if err != nil {
			return err
		}
		lone = append(lone, lw)
	}
	for _, lw := range lone {
		if !waitUntil(30*sessionCostLease, func() bool { return len(lw.run.c.Held()) == lw.leases }) {
			return fmt.Errorf("a lone worker (sessions %v) holds %d of its %d leases after %v", lw.sessions, len(lw.run.c.Held()), lw.leases, 30*sessionCostLease)
		}
	}
	// One lease duration more, so that start-up writes (worker rows,
	// acquires, notes) are over.
	time.Sleep(sessionCostLease)
	use := func() []loneUse {
		out := make([]loneUse, len(lone))
		for i, lw := range lone {
			out[i] = loneUse{lw.dyn.Writes(), lw.dyn.WriteUnits()}
		}
		return out
	}
	u0, t0 := use(), time.Now()
	time.Sleep(e.sz.costWindow * 3 / 2)
	u1, w := use(), time.Since(t0)
	for i, lw := range lone {
		if n := len(lw.run.c.Held()); n != lw.leases {
			return fmt.Errorf("a lone worker (sessions %v) lost leases in the window: it holds %d of %d", lw.sessions, n, lw.leases)
		}
		u1[i] = loneUse{u1[i].writes - u0[i].writes, u1[i].units - u0[i].units}
	}
	addSessionCostRows(e, w, u1)
	return nil
}

// addSessionCostRows adds the cost rows: use holds the writes over w of the
// workers with sessions and 1, 10 and 100 leases, then of the worker
// without sessions and 10 leases.
func addSessionCostRows(e *env, w time.Duration, use []loneUse) {
	renew := sessionCostLease / 3
	ideal := time.Minute.Seconds() / renew.Seconds()
	perMin := func(n int64) float64 { return float64(n) / w.Minutes() }
	lo, hi := math.Inf(1), 0.0
	var shown []string
	for _, u := range use[:3] {
		v := perMin(u.writes)
		lo, hi = min(lo, v), max(hi, v)
		shown = append(shown, fmt.Sprintf("%.1f", v))
	}
	spread := hi/lo - 1
	ok := spread <= 0.10 && lo >= 0.9*ideal && hi <= 1.2*ideal
	e.add(row{Section: sessionSection, Metric: "one worker with sessions, 1 / 10 / 100 idle leases: writes per minute", Value: hi, Unit: "writes/min",
		Shown:  strings.Join(shown, " / ") + fmt.Sprintf(" (spread %.1f%%)", 100*spread),
		Target: fmt.Sprintf("spread <= 10%%; %.0f-%.0f (60/R = %.0f)", 0.9*ideal, 1.2*ideal, ideal), OK: okp(ok),
		Note: fmt.Sprintf("each worker alone on its own table on dynalite and its own stream of the in-process fake, no records; lease %v, renew %v; every PutItem, UpdateItem and DeleteItem counted through the DynamoDB client over %v once it held every lease (write units: %.1f / %.1f / %.1f a minute); the keeps are paced at the renew interval less up to a twentieth", sessionCostLease, renew, w.Round(time.Second), use[0].units/w.Minutes(), use[1].units/w.Minutes(), use[2].units/w.Minutes())})
	off := use[3]
	e.add(row{Section: sessionSection, Metric: "the same without sessions, 10 idle leases: writes per lease per minute", Value: perMin(off.writes) / 10, Unit: "writes/lease/min",
		Shown: fmt.Sprintf("%.1f", perMin(off.writes)/10), Target: "-",
		Note: fmt.Sprintf("today's per-lease renewals at the same timings (a renewal every %v per lease); at the default lease of %v they are 60/R = 18 a lease-minute", renew, defLease)})
	with100 := perMin(use[2].writes) / 100
	e.add(row{Section: sessionSection, Metric: "100 idle leases: writes per lease per minute, sessions / without", Value: with100 / (perMin(off.writes) / 10), Unit: "ratio",
		Shown: fmt.Sprintf("%.3f (%.2f vs %.1f)", with100/(perMin(off.writes)/10), with100, perMin(off.writes)/10), Target: "-"})
}
