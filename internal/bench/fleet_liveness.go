package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/shardlease/shardlease/internal/balance"
)

// deputiesOf returns the workers whose rows name them deputy of the first
// lease, as the table shows it.
func (f *fleet) deputiesOf(ctx context.Context) []*fleetWorker {
	ls, err := f.store.List(ctx, f.stream)
	if err != nil {
		return nil
	}
	owners := map[string]bool{}
	for _, l := range ls {
		if _, ok := balance.DeputyFirst(l.Note); ok {
			owners[l.Owner] = true
		}
	}
	var out []*fleetWorker
	for _, w := range f.live() {
		if owners[w.run.c.OwnerID()] {
			out = append(out, w)
		}
	}
	return out
}

// heldAgain reports whether the live workers run every one of shards.
func (f *fleet) heldAgain(shards []string) bool {
	have := map[string]bool{}
	for _, w := range f.live() {
		for _, s := range w.run.c.Held() {
			have[s] = true
		}
	}
	for _, s := range shards {
		if !have[s] {
			return false
		}
	}
	return true
}

// fleetJoint runs n workers over 2n shards on dynalite, makes the
// coordinator and a deputy fail together (a crash, or a graceful leave)
// and returns how long until the others hold every lease the two held,
// from the crash or from the end of both shutdowns.
func fleetJoint(ctx context.Context, e *env, n int, lease time.Duration, crashed bool) (time.Duration, error) {
	f, err := balancedFleet(ctx, e, 2*n, n, lease, fleetDefault)
	if err != nil {
		return 0, err
	}
	defer f.stop()
	coord := f.coordinator()
	var dep *fleetWorker
	if !waitUntil(10*lease, func() bool {
		for _, d := range f.deputiesOf(ctx) {
			if d != coord {
				dep = d
				return true
			}
		}
		return false
	}) {
		return 0, fmt.Errorf("%d workers: no deputy named within %v", n, 10*lease)
	}
	time.Sleep(lease/2 + time.Duration(n)*time.Millisecond)
	pair := []*fleetWorker{coord, dep}
	var lost []string
	for _, w := range pair {
		lost = append(lost, w.run.c.Held()...)
	}
	t0 := time.Now()
	if crashed {
		for _, w := range pair {
			w.sw.Crash()
		}
	} else {
		var wg sync.WaitGroup
		for _, w := range pair {
			wg.Go(func() { _ = w.run.stop() })
		}
		wg.Wait()
		// Out of f.live, and of f.stop: each stops once.
		for _, w := range pair {
			w.sw.Crash()
		}
		f.workers = slices.DeleteFunc(f.workers, func(w *fleetWorker) bool { return w == coord || w == dep })
		t0 = time.Now()
	}
	if !waitUntil(10*lease, func() bool { return f.heldAgain(lost) }) {
		return 0, fmt.Errorf("%d workers: the leases of the coordinator and its deputy were not held again within %v", n, 10*lease)
	}
	return time.Since(t0), nil
}

// idleListings runs n workers over 16 shards on dynalite and returns the
// fleet's listings (Scans) per take interval once they are balanced.
func idleListings(ctx context.Context, e *env, n int, lease, window time.Duration) (float64, error) {
	f, err := balancedFleet(ctx, e, 16, n, lease, fleetDefault)
	if err != nil {
		return 0, err
	}
	defer f.stop()
	time.Sleep(2 * lease)
	count := func() int64 {
		var s int64
		for _, w := range f.workers {
			s += w.run.c.Stats().TableListings
		}
		return s
	}
	l0, t0 := count(), time.Now()
	time.Sleep(window)
	return float64(count()-l0) / (float64(time.Since(t0)) / float64(defaultTake(lease))), nil
}

// measureFleetLiveness adds the liveness rows to the fleet section: a joint
// crash and a joint leave of the coordinator and a deputy at 4, 16 and 64
// workers, and the listings of a fleet with idle workers.
func measureFleetLiveness(ctx context.Context, e *env, sec string) error {
	fl := 2 * time.Second
	take := defaultTake(fl)
	for _, n := range []int{4, 16, 64} {
		d, err := fleetJoint(ctx, e, n, fl, true)
		if err != nil {
			return err
		}
		v := d.Seconds() / fl.Seconds()
		note := ""
		if n == 4 {
			note = fmt.Sprintf("2 shards a worker on dynalite, lease %v, take %v; one trial each; the coordinator (holder of the lowest shard's lease) and a worker its notes name deputy fail at once", fl, take)
		}
		e.add(row{Section: sec, Metric: fmt.Sprintf("coordinator and deputy crash together, %d workers: held again, in lease durations", n), Value: v, Unit: "lease durations",
			Shown: fmt.Sprintf("%.2f", v), Target: "<= 2.5", OK: okp(v <= 2.5), Note: note})
		d, err = fleetJoint(ctx, e, n, fl, false)
		if err != nil {
			return err
		}
		v = d.Seconds() / take.Seconds()
		e.add(row{Section: sec, Metric: fmt.Sprintf("coordinator and deputy leave together, %d workers: held again, in take intervals", n), Value: v, Unit: "take intervals",
			Shown: fmt.Sprintf("%.2f", v), Target: "<= 2", OK: okp(v <= 2)})
	}
	window := e.sz.fleetWindow / 2
	per := map[int]float64{}
	for _, n := range []int{2, 64} {
		v, err := idleListings(ctx, e, n, fl, window)
		if err != nil {
			return err
		}
		per[n] = v
		e.add(row{Section: sec, Metric: fmt.Sprintf("16 shards, %d workers: listings per take interval", n), Value: v, Unit: "listings/T",
			Shown: fmt.Sprintf("%.2f", v), Target: "-", Note: map[int]string{2: fmt.Sprintf("every Scan of the fleet over %v once balanced, lease %v; with 64 workers 48 hold nothing", window, fl)}[n]})
	}
	ratio := per[64] / per[2]
	e.add(row{Section: sec, Metric: "16 shards: listings per take interval, 64 workers / 2 workers", Value: ratio, Unit: "ratio",
		Shown: fmt.Sprintf("%.2f", ratio), Target: "<= 1.5", OK: okp(ratio <= 1.5)})
	return nil
}
