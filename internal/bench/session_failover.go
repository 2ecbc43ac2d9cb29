package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// How a session failover trial ends its victims.
const (
	sessionZone       = iota // a third of the fleet crashes at once, the coordinator and its deputies among them
	sessionCrashPlain        // one worker that does not coordinate crashes
	sessionCrashCoord        // the coordinator crashes
	sessionLeave             // one worker that does not coordinate stops (its context cancelled)
)

// sessionFailover runs n workers with sessions over shards (the in-process
// fake, a MemoryStore, real time), ends some as how says once they are
// balanced and the table names deputies, and returns how long until the
// others hold every lease the victims held: from the crash, or from the
// cancel of a leaving worker's context.
func sessionFailover(ctx context.Context, n, shards int, lease time.Duration, how int) (time.Duration, error) {
	f, store, err := memoryFleet(ctx, shards, lease)
	if err != nil {
		return 0, err
	}
	if err := f.startSessions(store, n, nil); err != nil {
		return 0, err
	}
	defer f.stop()
	var victims []*fleetWorker
	if !waitUntil(20*lease, func() bool {
		zone, deputies, err := f.zone(ctx, store)
		victims = zone
		return err == nil && deputies > 0
	}) {
		return 0, fmt.Errorf("%d workers with sessions: the table of stream %s named no deputy within %v", n, f.stream, 20*lease)
	}
	// Let the fleet settle into steady keeps, then end the victims at a
	// random point of the keep and take cycles.
	time.Sleep(lease/2 + rand.N(lease/2))
	coord := f.coordinator()
	switch how {
	case sessionCrashCoord:
		victims = []*fleetWorker{coord}
	case sessionCrashPlain, sessionLeave:
		victims = nil
		for _, w := range f.live() {
			if w != coord {
				victims = []*fleetWorker{w}
				break
			}
		}
	}
	lost := heldOf(victims)
	if len(lost) == 0 {
		return 0, fmt.Errorf("%d workers with sessions: the victims hold no lease", n)
	}
	t0 := time.Now()
	if how == sessionLeave {
		v := victims[0]
		// Out of f.live (and of f.stop) at once, so that the leases it still
		// runs while it releases them do not count.
		f.workers = slices.DeleteFunc(f.workers, func(w *fleetWorker) bool { return w == v })
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { _ = v.run.stop() })
	} else {
		for _, w := range victims {
			w.sw.Crash()
		}
	}
	if !waitUntil(10*lease, func() bool { return f.heldAgain(lost) }) {
		return 0, fmt.Errorf("%d workers with sessions: the leases of %d lost workers were not held again within %v", n, len(victims), 10*lease)
	}
	return time.Since(t0), nil
}

// sessionTrials runs sessionFailover trials times and returns the worst and
// the median.
func sessionTrials(ctx context.Context, trials, n, shards int, lease time.Duration, how int) (worst, median time.Duration, err error) {
	var ds []time.Duration
	for range trials {
		d, err := sessionFailover(ctx, n, shards, lease, how)
		if err != nil {
			return 0, 0, err
		}
		ds = append(ds, d)
	}
	worst, median = worstOf(ds)
	return worst, median, nil
}

// measureSessionFailover adds the failover rows with sessions: a zone (a
// third of the fleet, the coordinator and its deputies among them) lost at
// 16 and 64 workers, one crash of a plain worker and of the coordinator,
// and a graceful leave.
func measureSessionFailover(ctx context.Context, e *env) error {
	zl := 2 * time.Second
	for _, n := range []int{16, 64} {
		worst, median, err := sessionTrials(ctx, e.sz.trials, n, 2*n, zl, sessionZone)
		if err != nil {
			return err
		}
		v := worst.Seconds() / zl.Seconds()
		note := ""
		if n == 16 {
			note = fmt.Sprintf("in-process fake + MemoryStore, real time; 2 shards a worker, lease %v, take %v; %d trials each; a third of the workers crash at once (5 of 16, 21 of 64): the coordinator, the workers the table names deputy, then others; from the crash until the others hold every lease the third held", zl, defaultTake(zl), e.sz.trials)
		}
		e.add(row{Section: sessionSection, Metric: fmt.Sprintf("a third of %d workers crash at once: held again, in lease durations (worst; median)", n), Value: v, Unit: "lease durations",
			Shown: fmt.Sprintf("%.2f; %.2f", v, median.Seconds()/zl.Seconds()), Target: "<= 2.5", OK: okp(v <= 2.5), Note: note})
	}
	lease := e.sz.lease
	take := defaultTake(lease)
	for _, c := range []struct {
		how    int
		metric string
		note   string
	}{
		{sessionCrashPlain, "a plain worker of 4 crashes: held again, in lease durations (worst; median)",
			fmt.Sprintf("in-process fake + MemoryStore, real time; 4 workers over 16 shards, lease %v, renew %v, take %v; %d trials; from the crash until the others hold each of its leases", lease, (lease / 3).Round(time.Millisecond), take, e.sz.trials)},
		{sessionCrashCoord, "the coordinator of 4 crashes: the same (worst; median)", "the coordinator holds the lowest shard's lease"},
		{sessionLeave, "a worker of 4 leaves gracefully: held again, in take intervals (worst; median)", "from the cancel of the leaving worker's context until the others hold every lease it held"},
	} {
		worst, median, err := sessionTrials(ctx, e.sz.trials, 4, 16, lease, c.how)
		if err != nil {
			return err
		}
		unit, d, target := "lease durations", lease, 1.4
		if c.how == sessionLeave {
			unit, d, target = "take intervals", take, 1
		}
		v := worst.Seconds() / d.Seconds()
		e.add(row{Section: sessionSection, Metric: c.metric, Value: v, Unit: unit,
			Shown: fmt.Sprintf("%.2f; %.2f", v, median.Seconds()/d.Seconds()), Target: fmt.Sprintf("<= %.1f", target), OK: okp(v <= target), Note: c.note})
	}
	return nil
}
