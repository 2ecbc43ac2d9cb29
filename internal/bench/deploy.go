package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/shardlease/shardlease"
)

// handledTwice counts how often each record was handled.
type handledTwice struct {
	mu    sync.Mutex
	times map[string]int // shard/sequence → times handled
}

func (h *handledTwice) handle(_ context.Context, b *shardlease.Batch) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range b.Records {
		h.times[b.ShardID+"/"+r.SequenceNumber]++
	}
	return nil
}

// result returns how many distinct records were handled, and how many
// handlings were of a record handled before.
func (h *handledTwice) result() (distinct, dups int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.times {
		dups += n - 1
	}
	return len(h.times), dups
}

// unread samples which shards no worker runs, every 2ms, and keeps the
// longest time one went without a runner.
type unread struct {
	mu      sync.Mutex
	workers []*running
	since   map[string]time.Time // shard → when it was last seen run
	longest time.Duration
}

// watch samples until ctx is done, in a goroutine of wg.
func (u *unread) watch(ctx context.Context, wg *sync.WaitGroup, shards []string) {
	every(ctx, wg, 2*time.Millisecond, func() {
		now := time.Now()
		u.mu.Lock()
		defer u.mu.Unlock()
		run := map[string]bool{}
		for _, r := range u.workers {
			for _, s := range r.c.Held() {
				run[s] = true
			}
		}
		for _, s := range shards {
			if run[s] || u.since[s].IsZero() {
				u.since[s] = now
				continue
			}
			u.longest = max(u.longest, now.Sub(u.since[s]))
		}
	})
}

// set replaces the workers sampled.
func (u *unread) set(workers []*running) {
	u.mu.Lock()
	u.workers = append([]*running(nil), workers...)
	u.mu.Unlock()
}

func (u *unread) result() time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.longest
}

// rollingRestart runs 4 workers over 16 shards with records on every shard
// every 20ms, then replaces them one at a time, as a rolling deploy does: a
// new worker starts, takes its share, and the old one stops, draining first
// when drain is set. It returns the longest time a shard was run by no
// worker, and the records handled twice.
func rollingRestart(ctx context.Context, lease time.Duration, drain bool) (time.Duration, int, error) {
	w, err := newFakeWorld(ctx, 16, lease)
	if err != nil {
		return 0, 0, err
	}
	pctx, stopProducing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopProducing()
	w.produce(pctx, &wg)
	g := &handledTwice{times: map[string]int{}}
	u := &unread{since: map[string]time.Time{}}
	var old []*running
	for i := range 4 {
		r, err := startConsumer(w.fake, w.store, w.stream, g.handle, w.opts(fmt.Sprintf("old-%d", i))...)
		if err != nil {
			return 0, 0, err
		}
		defer r.stop()
		old = append(old, r)
	}
	if !waitUntil(20*lease, func() bool { return heldBetween(old) == 16 && fewest(old) == 4 }) {
		return 0, 0, fmt.Errorf("the first 4 workers never held 4 leases each")
	}
	shards, err := shardIDs(w)
	if err != nil {
		return 0, 0, err
	}
	live := old
	u.set(live)
	wctx, stopWatching := context.WithCancel(ctx)
	var ww sync.WaitGroup
	defer func() { stopWatching(); ww.Wait() }()
	u.watch(wctx, &ww, shards)
	for i, r := range old {
		n, err := startConsumer(w.fake, w.store, w.stream, g.handle, w.opts(fmt.Sprintf("new-%d", i))...)
		if err != nil {
			return 0, 0, err
		}
		defer n.stop()
		live = append(live, n)
		u.set(live)
		if !waitUntil(20*lease, func() bool { return len(n.c.Held()) >= 3 }) {
			return 0, 0, fmt.Errorf("new worker %d never took its share", i)
		}
		if drain {
			if err := r.c.Drain(ctx); err != nil {
				return 0, 0, err
			}
		}
		if err := r.stop(); err != nil {
			return 0, 0, err
		}
		live = live[1:]
		u.set(live)
		if !waitUntil(20*lease, func() bool { return heldBetween(live) == 16 }) {
			return 0, 0, fmt.Errorf("the leases were not held again after worker %d stopped", i)
		}
	}
	stopWatching()
	ww.Wait()
	stopProducing()
	wg.Wait()
	produced, err := countRecords(w)
	if err != nil {
		return 0, 0, err
	}
	if !waitUntil(20*lease, func() bool { n, _ := g.result(); return n >= produced }) {
		return 0, 0, fmt.Errorf("not every record was handled")
	}
	_, dups := g.result()
	return u.result(), dups, nil
}

// heldBetween counts the leases the workers run.
func heldBetween(rs []*running) int {
	n := 0
	for _, r := range rs {
		n += len(r.c.Held())
	}
	return n
}

// fewest is the fewest leases one of the workers runs.
func fewest(rs []*running) int {
	least := -1
	for _, r := range rs {
		if h := len(r.c.Held()); least < 0 || h < least {
			least = h
		}
	}
	return least
}

// shardIDs lists the world's shards.
func shardIDs(w *fakeWorld) ([]string, error) {
	shards, err := w.fake.Shards(w.stream)
	var ids []string
	for _, s := range shards {
		ids = append(ids, aws.ToString(s.ShardId))
	}
	return ids, err
}

// countRecords counts the records in the world's stream.
func countRecords(w *fakeWorld) (int, error) {
	shards, err := w.fake.Shards(w.stream)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range shards {
		recs, err := w.fake.Records(w.stream, aws.ToString(s.ShardId))
		if err != nil {
			return 0, err
		}
		n += len(recs)
	}
	return n, nil
}

func measureDeploy(ctx context.Context, e *env) error {
	lease := e.sz.lease
	take := defaultTake(lease)
	const sec = "rolling deploy (in-process fake + MemoryStore, real time)"
	for _, drain := range []bool{false, true} {
		longest, dups, err := rollingRestart(ctx, lease, drain)
		if err != nil {
			return err
		}
		v := longest.Seconds() / take.Seconds()
		metric, target, ok := "without drain: longest a shard was run by no worker, in take intervals; duplicates", "-", (*bool)(nil)
		note := fmt.Sprintf("4 workers over 16 shards replaced one at a time (a new worker starts and takes its share, then the old one's context is cancelled); records on every shard every 20ms; lease %v, take %v", lease, take)
		if drain {
			metric, target, ok, note = "with drain: the same", "<= 1; 0", okp(v <= 1 && dups == 0), "the old worker calls Drain before its context is cancelled; a shard counts as run from the take that starts its runner until its runner has exited (sampled every 2ms)"
		}
		e.add(row{Section: sec, Metric: metric, Value: v, Unit: "take intervals", Shown: fmt.Sprintf("%.2f; %d", v, dups), Target: target, OK: ok, Note: note})
	}
	return nil
}
