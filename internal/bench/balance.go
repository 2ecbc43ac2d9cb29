package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shardlease/shardlease"
)

// balanceTrial starts three workers over n shards (together, or the first
// alone until it holds every lease and then the other two) and returns the
// take rounds until every worker holds its fair share, and the leases that
// moved in the 20 take intervals after that.
func balanceTrial(ctx context.Context, n int, lease time.Duration, join bool) (rounds int, moved int64, err error) {
	w, err := newFakeWorld(ctx, n, lease)
	if err != nil {
		return 0, 0, err
	}
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	w.produce(pctx, &wg)
	noop := func(context.Context, *shardlease.Batch) error { return nil }
	var workers []*running
	defer func() {
		for _, r := range workers {
			_ = r.stop()
		}
	}()
	start := func(name string) error {
		r, err := startConsumer(w.fake, w.store, w.stream, noop, w.opts(name)...)
		if err == nil {
			workers = append(workers, r)
		}
		return err
	}
	if join {
		if err := start("a"); err != nil {
			return 0, 0, err
		}
		if !waitUntil(20*lease, func() bool { return len(workers[0].c.Held()) == n }) {
			return 0, 0, fmt.Errorf("the first worker holds %d of %d leases", len(workers[0].c.Held()), n)
		}
	}
	t0 := time.Now()
	for _, name := range []string{"a", "b", "c"}[len(workers):] {
		if err := start(name); err != nil {
			return 0, 0, err
		}
	}
	lo, hi := n/3, (n+2)/3
	balanced := func() bool {
		seen := map[string]bool{}
		for _, r := range workers {
			h := r.c.Held()
			if len(h) < lo || len(h) > hi {
				return false
			}
			for _, s := range h {
				if seen[s] {
					return false
				}
				seen[s] = true
			}
		}
		return len(seen) == n
	}
	if !waitUntil(100*w.take(), balanced) {
		return 0, 0, fmt.Errorf("not balanced within 100 take intervals")
	}
	took := time.Since(t0)
	rounds = int(took/w.take()) + 1
	movesNow := func() int64 {
		var m int64
		for _, r := range workers {
			s := r.c.Stats()
			m += s.LeasesTaken + s.LeasesHandedIn
		}
		return m
	}
	before := movesNow()
	time.Sleep(20 * w.take())
	return rounds, movesNow() - before, nil
}

func measureBalance(ctx context.Context, e *env) error {
	const sec = "balance (in-process fake + MemoryStore, real time)"
	lease := e.sz.lease
	n := e.sz.balanceN
	for _, join := range []bool{false, true} {
		worstRounds, totalMoved := 0, int64(0)
		for range e.sz.trials {
			r, m, err := balanceTrial(ctx, n, lease, join)
			if err != nil {
				return err
			}
			worstRounds = max(worstRounds, r)
			totalMoved += m
		}
		what := "3 workers started together"
		note := fmt.Sprintf("%d shards, lease %v, take %v, at most 32 handoffs asked per round (the default); rounds counted as take intervals since the workers started (the first round runs at once); %d trials, the worst shown; moves counted over the 20 take intervals after balance, all trials",
			n, lease, defaultTake(lease), e.sz.trials)
		if join {
			what = "2 workers join 1 that holds every lease"
			note = ""
		}
		e.add(row{Section: sec, Metric: what + ": take rounds until balanced", Value: float64(worstRounds), Unit: "take rounds",
			Shown: fmt.Sprint(worstRounds), Target: "<= 3", OK: okp(worstRounds <= 3), Note: note})
		e.add(row{Section: sec, Metric: what + ": leases moved after balance", Value: float64(totalMoved), Unit: "leases",
			Shown: fmt.Sprint(totalMoved), Target: "0", OK: okp(totalMoved == 0)})
	}
	return nil
}
