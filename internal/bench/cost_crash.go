package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/crash"
)

// crashMember is one worker of a crash trial.
type crashMember struct {
	r    *running
	sw   *crash.Switch
	seen *firstSeen
}

// handler counts the records the member handles in h until it crashes;
// a crashed worker hands nothing over.
func (m *crashMember) handler(h *handledTwice) shardlease.Handler {
	return func(ctx context.Context, b *shardlease.Batch) error {
		if m.sw.Down() {
			return errors.New("crashed")
		}
		m.seen.watching(b)
		return h.handle(ctx, b)
	}
}

// crashResult is what one crash trial measured.
type crashResult struct {
	failover time.Duration // from the crash until every lost shard was read again
	again    int           // records handed again after the crash
	bound    float64       // what a renew interval of traffic on the lost shards holds
}

// crashTrial runs two workers with sessions over 8 shards of the in-process
// fake and a MemoryStore, in real time, a record on every shard every 20ms;
// once each holds 4, and after a random part of a lease duration more, it
// crashes the one that does not coordinate. It returns how long until the
// other handled a record of each lost shard, and how many records were
// handed again once every record put was handled.
func crashTrial(ctx context.Context, lease time.Duration) (crashResult, error) {
	w, err := newFakeWorld(ctx, 8, lease)
	if err != nil {
		return crashResult{}, err
	}
	pctx, stopPuts := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopPuts()
	w.produce(pctx, &wg)
	h := &handledTwice{times: map[string]int{}}
	ms, err := startCrashPair(w, h)
	defer func() {
		for _, m := range ms {
			_ = m.r.stop()
		}
	}()
	if err != nil {
		return crashResult{}, err
	}
	// The records put a second on a shard, over the settling time.
	n0, err := countRecords(w)
	if err != nil {
		return crashResult{}, err
	}
	settled := time.Now()
	time.Sleep(lease + rand.N(lease))
	victim, other := ms[0], ms[1]
	if slices.Contains(victim.r.c.Held(), "shardId-000000000000") {
		victim, other = other, victim
	}
	lost := victim.r.c.Held()
	n1, err := countRecords(w)
	if err != nil {
		return crashResult{}, err
	}
	perShard := float64(n1-n0) / float64(w.shards) / time.Since(settled).Seconds()
	_, before := h.result()
	other.seen.arm()
	crashed := time.Now()
	victim.sw.Crash()
	var at time.Time
	if !waitUntil(10*lease, func() bool {
		var ok bool
		at, ok = other.seen.all(lost)
		return ok
	}) {
		return crashResult{}, fmt.Errorf("crash trial, stream %s: the surviving worker did not read all of %v within %v", w.stream, lost, 10*lease)
	}
	stopPuts()
	wg.Wait()
	total, err := countRecords(w)
	if err != nil {
		return crashResult{}, err
	}
	if !waitUntil(10*lease, func() bool { n, _ := h.result(); return n == total }) {
		n, _ := h.result()
		return crashResult{}, fmt.Errorf("crash trial, stream %s: %d of the %d records put handled %v after the crash", w.stream, n, total, 10*lease)
	}
	_, dups := h.result()
	renew := lease / 3
	if r := renewFor(lease); r > 0 {
		renew = r
	}
	return crashResult{failover: at.Sub(crashed), again: dups - before, bound: perShard * float64(len(lost)) * renew.Seconds()}, nil
}

// startCrashPair starts the two workers of a crash trial on w, with
// sessions and the cost rows' renew interval, one after the other, and
// waits until each holds half of the leases. The workers started are
// returned with any error, to be stopped.
func startCrashPair(w *fakeWorld, h *handledTwice) ([]*crashMember, error) {
	var ms []*crashMember
	for i, name := range []string{"a", "b"} {
		m := &crashMember{sw: &crash.Switch{}, seen: &firstSeen{}}
		opts := w.opts(name, shardlease.WithSessions(true), shardlease.WithLogger(slog.New(quietWhenDown{slog.Default().Handler(), m.sw})))
		if r := renewFor(w.lease); r > 0 {
			opts = append(opts, shardlease.WithRenewInterval(r))
		}
		var err error
		if m.r, err = startConsumer(crash.Kinesis(w.fake, m.sw), crash.Store(w.store, m.sw), w.stream, m.handler(h), opts...); err != nil {
			return ms, err
		}
		ms = append(ms, m)
		share := w.shards / (i + 1)
		if !waitUntil(20*w.lease, func() bool { return len(ms[0].r.c.Held()) == share && len(m.r.c.Held()) == share }) {
			return ms, fmt.Errorf("crash trial, stream %s: %d workers hold %d and %d leases, not %d each, after %v", w.stream, i+1, len(ms[0].r.c.Held()), len(m.r.c.Held()), share, 20*w.lease)
		}
	}
	return ms, nil
}

// measureCostCrash adds, at both lease durations, the records handed again
// after a crash against what a renew interval of traffic holds, and the
// crash failover times (the fast setting's worst held to 5 s).
func measureCostCrash(ctx context.Context, e *env) error {
	for _, lease := range costLeases {
		trials := e.sz.trials
		if lease == defLease {
			trials = max(1, trials/3)
		}
		var ds []time.Duration
		var worst crashResult
		for i := range trials {
			r, err := crashTrial(ctx, lease)
			if err != nil {
				return err
			}
			e.logf("  lease %v, trial %d: failover %v, %d records handed again (a renew interval holds %.0f)", lease, i+1, r.failover.Round(time.Millisecond), r.again, r.bound)
			ds = append(ds, r.failover)
			if i == 0 || float64(r.again)-r.bound > float64(worst.again)-worst.bound {
				worst = r
			}
		}
		e.costs().failover[lease] = ds
		at := settingName(lease)
		note := ""
		if lease == defLease {
			note = fmt.Sprintf("in-process fake + MemoryStore, real time, sessions on; 2 workers over 8 shards, 4 each, a record on every shard every 20ms, the take interval at its default (2L/5), idle poll 20ms; the worker that does not coordinate crashes at a random point; handed again: records the survivor handled that the crashed worker had handled, counted once every record put was handled; the bound is a renew interval of the traffic measured on the crashed worker's shards; the trial with the most over its bound is shown; %d trial(s) at %v, %d at %v", trials, lease, e.sz.trials, fastLease)
		}
		e.add(row{Section: costUnitsSection, Metric: at + ": records handed again after a crash (R of traffic)", Value: float64(worst.again), Unit: "records",
			Shown: fmt.Sprintf("%d (%.0f)", worst.again, worst.bound), Target: "<= R of traffic", OK: okp(float64(worst.again) <= worst.bound), Note: note})
		w, m := worstOf(ds)
		target, ok := "-", (*bool)(nil)
		if lease == fastLease {
			target, ok = "<= 5s", okp(w <= 5*time.Second)
		}
		e.add(row{Section: costUnitsSection, Metric: at + ": crash failover with sessions, until every shard is read again (worst; median)", Value: w.Seconds(), Unit: "s",
			Shown: fmt.Sprintf("%.2fs; %.2fs", w.Seconds(), m.Seconds()), Target: target, OK: ok})
	}
	return nil
}
