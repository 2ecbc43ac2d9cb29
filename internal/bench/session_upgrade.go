package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardlease/shardlease"
)

// overlapGuard counts handler calls of one shard that ran at the same time
// on two workers: a second reader.
type overlapGuard struct {
	mu       sync.Mutex
	inside   map[string]string // shard → the worker inside its handler
	overlaps atomic.Int64
}

// wrap returns h guarded for worker. Each call holds the shard for hold,
// as a handler doing work would, so that a second reader is seen.
func (g *overlapGuard) wrap(worker string, hold time.Duration, h shardlease.Handler) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		g.mu.Lock()
		if other, ok := g.inside[b.ShardID]; ok && other != worker {
			g.overlaps.Add(1)
		}
		g.inside[b.ShardID] = worker
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			if g.inside[b.ShardID] == worker {
				delete(g.inside, b.ShardID)
			}
			g.mu.Unlock()
		}()
		sleep(ctx, hold)
		return h(ctx, b)
	}
}

// upgradeResult is what a rolling upgrade and downgrade left behind.
type upgradeResult struct {
	overlaps, lost, dups, produced int
	longest                        time.Duration // a shard run by no worker
}

// rollSessions runs 4 workers with sessions off over 16 shards with records
// on every shard every 20ms, replaces them one at a time by workers with
// sessions on (a new worker starts and takes its share, then an old one's
// context is cancelled), and then back by workers with sessions off. Once
// the records stop it waits until every record was handled.
func rollSessions(ctx context.Context, lease time.Duration) (upgradeResult, error) {
	w, err := newFakeWorld(ctx, 16, lease)
	if err != nil {
		return upgradeResult{}, err
	}
	pctx, stopProducing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopProducing()
	w.produce(pctx, &wg)
	h := &handledTwice{times: map[string]int{}}
	g := &overlapGuard{inside: map[string]string{}}
	u := &unread{since: map[string]time.Time{}}
	var all []*running
	defer func() {
		for _, r := range all {
			_ = r.stop()
		}
	}()
	start := func(name string, sessions bool) (*running, error) {
		r, err := startConsumer(w.fake, w.store, w.stream, g.wrap(name, 2*time.Millisecond, h.handle), w.opts(name, shardlease.WithSessions(sessions))...)
		if err == nil {
			all = append(all, r)
		}
		return r, err
	}
	var live []*running
	for i := range 4 {
		r, err := start(fmt.Sprintf("off-%d", i), false)
		if err != nil {
			return upgradeResult{}, err
		}
		live = append(live, r)
	}
	if !waitUntil(20*lease, func() bool { return heldBetween(live) == 16 && fewest(live) == 4 }) {
		return upgradeResult{}, fmt.Errorf("the first 4 workers (sessions off) never held 4 leases each")
	}
	shards, err := shardIDs(w)
	if err != nil {
		return upgradeResult{}, err
	}
	u.set(live)
	wctx, stopWatching := context.WithCancel(ctx)
	var ww sync.WaitGroup
	defer func() { stopWatching(); ww.Wait() }()
	u.watch(wctx, &ww, shards)
	for _, step := range []struct {
		prefix   string
		sessions bool
	}{{"on", true}, {"back", false}} {
		if live, err = rollOnce(live, u, lease, func(i int) (*running, error) { return start(fmt.Sprintf("%s-%d", step.prefix, i), step.sessions) }); err != nil {
			return upgradeResult{}, fmt.Errorf("roll to sessions %v: %w", step.sessions, err)
		}
	}
	stopWatching()
	ww.Wait()
	stopProducing()
	wg.Wait()
	produced, err := countRecords(w)
	if err != nil {
		return upgradeResult{}, err
	}
	waitUntil(20*lease, func() bool { n, _ := h.result(); return n >= produced })
	distinct, dups := h.result()
	return upgradeResult{overlaps: int(g.overlaps.Load()), lost: produced - distinct, dups: dups, produced: produced, longest: u.result()}, nil
}

// rollOnce replaces the workers of live one at a time by workers that next
// starts, and returns the new ones.
func rollOnce(live []*running, u *unread, lease time.Duration, next func(i int) (*running, error)) ([]*running, error) {
	for i, old := range live[:len(live):len(live)] {
		n, err := next(i)
		if err != nil {
			return nil, err
		}
		live = append(live, n)
		u.set(live)
		if !waitUntil(20*lease, func() bool { return len(n.c.Held()) >= 3 }) {
			return nil, fmt.Errorf("new worker %d never took its share", i)
		}
		if err := old.stop(); err != nil {
			return nil, fmt.Errorf("stop worker %s: %w", old.c.OwnerID(), err)
		}
		live = live[1:]
		u.set(live)
		if !waitUntil(20*lease, func() bool { return heldBetween(live) == 16 }) {
			return nil, fmt.Errorf("the leases were not held again after worker %s stopped", old.c.OwnerID())
		}
	}
	return live, nil
}

// measureSessionUpgrade adds the mixed-fleet row: a fleet rolled from
// sessions off to on and back, with records flowing.
func measureSessionUpgrade(ctx context.Context, e *env) error {
	lease := e.sz.lease
	var sum upgradeResult
	for range max(1, e.sz.trials/3) {
		r, err := rollSessions(ctx, lease)
		if err != nil {
			return err
		}
		sum.overlaps += r.overlaps
		sum.lost += r.lost
		sum.dups += r.dups
		sum.produced += r.produced
		sum.longest = max(sum.longest, r.longest)
	}
	e.add(row{Section: sessionSection, Metric: "4 workers rolled from sessions off to on and back: overlaps; records lost", Value: float64(sum.overlaps + sum.lost), Unit: "overlaps+lost",
		Shown: fmt.Sprintf("%d; %d", sum.overlaps, sum.lost), Target: "0; 0", OK: okp(sum.overlaps == 0 && sum.lost == 0),
		Note: fmt.Sprintf("in-process fake + MemoryStore, real time; 16 shards, a record on every shard every 20ms, lease %v; 4 workers with sessions off, replaced one at a time by workers with sessions on (a new worker takes its share, then an old one stops), then the same back to sessions off; an overlap is a handler call of a shard begun while another worker's was in it (each call holds the shard 2ms); lost: records never handled once the records stopped; %d records, %d handled twice; longest a shard was run by no worker %.2f take intervals", lease, sum.produced, sum.dups, sum.longest.Seconds()/defaultTake(lease).Seconds())})
	return nil
}
