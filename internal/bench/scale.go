package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/dyncount"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/shardleasetest"
)

// measureScale runs one worker with the default timings that holds
// scaleLeases leases of a stream with scaleRows rows in a table on
// dynalite (the shards are on the in-process fake, so Kinesis is not what
// is measured): the time of its take rounds, the longest gap between two
// renewals of one lease, and the memory per held lease.
func measureScale(ctx context.Context, e *env) error {
	nLeases, nRows := e.sz.scaleLeases, e.sz.scaleRows
	const stream = "scale"
	fake := shardleasetest.NewKinesis()
	if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(int32(nRows))}); err != nil {
		return err
	}
	dc := emulator.NewDynamoClient(e.dynamo)
	table := emulator.UniqueName("leases")
	if err := shardlease.CreateTable(ctx, dc, table); err != nil {
		return err
	}
	counting := &countingDynamo{Client: dyncount.Client{DynamoDBAPI: dc}, track: true, updated: map[string][]time.Time{}}
	store, err := shardlease.NewDynamoStore(counting, table)
	if err != nil {
		return err
	}
	// The rows, as the consumer's shard sync would create them.
	t0 := time.Now()
	if err := createRows(ctx, store, stream, nRows); err != nil {
		return err
	}
	e.logf("  created %d rows in %s", nRows, time.Since(t0).Round(time.Millisecond))
	mem0 := readings(idleReadings, 0)
	t1 := time.Now()
	// Per-lease renewals, the heavier way to keep 1000 leases: a session
	// keeps them all with one write a renew interval.
	r, err := startConsumer(fake, store, stream, func(context.Context, *shardlease.Batch) error { return nil },
		shardlease.WithOwnerID("scale"), shardlease.WithMaxLeases(nLeases), shardlease.WithSessions(false))
	if err != nil {
		return err
	}
	if !waitUntil(2*time.Minute, func() bool { return len(r.c.Held()) == nLeases }) {
		_ = r.stop()
		return fmt.Errorf("holds %d of %d leases after 2 minutes", len(r.c.Held()), nLeases)
	}
	acquired := time.Since(t1)
	// Steady state: every lease renewed at least twice in the window.
	time.Sleep(defRenew)
	winStart := time.Now()
	// The worker coordinates only if its leases include the stream's
	// first; otherwise it lists no more once it holds its cap. Listings
	// made here, while it renews, time the Scan a coordinator's take round
	// makes.
	direct, err := listBeside(ctx, dc, table, stream, defRenew*5/2+defRenew/4)
	if err != nil {
		return err
	}
	winEnd := time.Now()
	mem1 := readings(idleReadings, defRenew/idleReadings)
	if err := r.stop(); err != nil {
		return err
	}

	worstGap, renewed := renewalGaps(counting, winStart, winEnd)
	rounds, pages, listings := scanRounds(counting, winStart)
	e.logf("  %d listings of %d Scan pages in the window", listings, pages)
	how := "the consumer's take rounds"
	if len(rounds) == 0 {
		rounds, how = direct, "listings made beside the worker (it does not coordinate: the stream's first lease is not among its 1000)"
	}
	if len(rounds) == 0 {
		return fmt.Errorf("no listing in the window")
	}
	slices.Sort(rounds)
	perLease := (mem1.heap + mem1.stacks - mem0.heap - mem0.stacks) / float64(nLeases)

	const sec = "scale (one worker, DynamoStore on dynalite, shards on the in-process fake)"
	renewTarget := defRenew * 6 / 5
	e.add(row{Section: sec, Metric: fmt.Sprintf("%d leases: longest gap between two renewals of a lease", nLeases), Value: worstGap.Seconds(), Unit: "s",
		Shown: fmt.Sprintf("%.2fs (%d of %d leases written in the window)", worstGap.Seconds(), renewed, nLeases), Target: fmt.Sprintf("<= %.2fs (1.2 renew intervals)", renewTarget.Seconds()),
		OK:   okp(worstGap <= renewTarget && renewed == nLeases),
		Note: fmt.Sprintf("default timings (lease %v, renew %v, take %v), per-lease renewals (WithSessions(false)); %d rows of one stream, the worker capped at %d leases with WithMaxLeases; the first take round acquired them in %s; gaps measured over %s of steady state", defLease, defRenew.Round(10*time.Millisecond), defTake, nRows, nLeases, acquired.Round(10*time.Millisecond), winEnd.Sub(winStart).Round(100*time.Millisecond))})
	med, worst := rounds[len(rounds)/2], rounds[len(rounds)-1]
	e.add(row{Section: sec, Metric: fmt.Sprintf("take round over %d rows: listing time (median; worst)", nRows), Value: worst.Seconds(), Unit: "s",
		Shown: fmt.Sprintf("%.2fs; %.2fs", med.Seconds(), worst.Seconds()), Target: fmt.Sprintf("<= %v (the take interval)", defTake), OK: okp(worst <= defTake),
		Note: "a take round is one paginated eventually consistent Scan of the stream's rows plus in-memory work; timed from the first page's request to the last page's reply; timed here: " + how})
	e.add(row{Section: sec, Metric: "memory per held lease (heap + stacks)", Value: perLease, Unit: "bytes",
		Shown: fmt.Sprintf("%.1f KiB", perLease/1024), Target: "none set",
		Note: fmt.Sprintf("the live heap (HeapAlloc) and StackInuse after one collection, the median of %d readings over a renew interval with %d leases held, less the median before Run (see the idle-lease rows); includes the goroutine of each held lease (the runner, which keeps the lease; a polling reader of an idle shard holds none between its polls, a processor only while there is work), the take round's view of all %d rows and the HTTP connections", idleReadings, nLeases, nRows)})
	return measureLeaseMemory(ctx, e, sec)
}

// createRows makes n rows of stream with 16 writers at once, as the
// consumer's shard sync would.
func createRows(ctx context.Context, store *shardlease.DynamoStore, stream string, n int) error {
	keys := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fillErr error
	for range 16 {
		wg.Go(func() {
			for i := range keys {
				if _, err := store.Create(ctx, shardlease.LeaseKey{Stream: stream, Shard: fmt.Sprintf("shardId-%012d", i)}, nil); err != nil {
					mu.Lock()
					fillErr = err
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		keys <- i
	}
	close(keys)
	wg.Wait()
	return fillErr
}

// renewalGaps returns the longest gap between two writes of one lease row
// within [from, to], and how many rows were written then.
func renewalGaps(counting *countingDynamo, from, to time.Time) (worst time.Duration, renewed int) {
	counting.mu.Lock()
	defer counting.mu.Unlock()
	for _, ts := range counting.updated {
		var in []time.Time
		for _, t := range ts {
			if !t.Before(from) && !t.After(to) {
				in = append(in, t)
			}
		}
		if len(in) > 0 {
			renewed++
		}
		for i := 1; i < len(in); i++ {
			worst = max(worst, in[i].Sub(in[i-1]))
		}
	}
	return worst, renewed
}

// scanRounds returns how long each listing begun after from took (first
// page's request to last page's reply), and the Scan pages and listings
// begun after from.
func scanRounds(counting *countingDynamo, from time.Time) (rounds []time.Duration, pages, listings int) {
	counting.mu.Lock()
	defer counting.mu.Unlock()
	for _, s := range counting.scanLog {
		if s.start.After(from) {
			pages++
			if s.first {
				listings++
			}
		}
	}
	var cur *scanCall
	for i := range counting.scanLog {
		s := counting.scanLog[i]
		if s.first {
			if cur != nil && cur.start.After(from) {
				rounds = append(rounds, cur.end.Sub(cur.start))
			}
			c := s
			cur = &c
		} else if cur != nil {
			cur.end = s.end
		}
	}
	return rounds, pages, listings
}

// listBeside times three listings of stream, half a renew interval apart,
// made beside the worker through a store of its own (not counted as the
// worker's), while during passes.
func listBeside(ctx context.Context, dc shardlease.DynamoDBAPI, table, stream string, during time.Duration) ([]time.Duration, error) {
	var direct []time.Duration
	plain, err := shardlease.NewDynamoStore(dc, table)
	if err != nil {
		return nil, err
	}
	listed := make(chan struct{})
	go func() {
		defer close(listed)
		for range 3 {
			t := time.Now()
			if _, _, err := plain.ListWithWorkersEventually(ctx, stream); err == nil {
				direct = append(direct, time.Since(t))
			}
			time.Sleep(defRenew / 2)
		}
	}()
	time.Sleep(during)
	<-listed
	return direct, nil
}
