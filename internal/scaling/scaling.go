// Package scaling holds the rule of the workers-wanted gauge: how many
// workers a stream needs to keep up with what arrives and to drain its
// backlog within a target time, from two samples of every shard's lag.
//
// Everything is measured in stream time: a shard's lag is how far its
// reader is behind the tip (MillisBehindLatest). Each shard adds one second
// of stream per second. A reader that read Δt of wall time and saw its lag go
// from b0 to b1 read Δt + b0 − b1 of stream: its read rate is
// 1 + (b0 − b1)/Δt stream seconds per second. A worker's throughput is the
// sum of its shards' read rates; it says what the worker can do only while
// the worker is busy (a shard it holds is behind by more than Busy at both
// samples), since a worker that keeps up reads only what arrives. So:
//
//	per worker      µ = mean throughput of the busy workers
//	demand          D = N + B / Drain   (N shards, B the sum of their lags)
//	workers wanted  ⌈D / µ⌉, at least 1 and at most N
//
// With no busy worker nothing is learnt of a worker's capacity and nothing
// is behind: the rule asks for the workers there are.
package scaling

import (
	"math"
	"time"
)

// Sample is one shard's lag as one listing showed it.
type Sample struct {
	// Owner is the holder that reported the lag.
	Owner string
	// Behind is the holder's MillisBehindLatest.
	Behind time.Duration
	// At is when the listing was made, on the sampler's clock.
	At time.Time
}

// Input is what the rule decides from.
type Input struct {
	// Prev and Now are the two samples, by shard. Only shards in both, held
	// by the same owner at a later time, give a read rate.
	Prev, Now map[string]Sample
	// Shards is the number of shards to read (N); Workers the number of
	// workers now.
	Shards, Workers int
	// Busy is how far a shard must be behind, at both samples, for its
	// holder to count as busy.
	Busy time.Duration
	// Drain is the time the backlog should drain in.
	Drain time.Duration
}

// Result is the rule's answer and the figures it came from.
type Result struct {
	// Wanted is the number of workers wanted.
	Wanted int
	// Backlog is the sum of the lags of Now (B).
	Backlog time.Duration
	// PerWorker is the mean throughput of the busy workers (µ), in stream
	// seconds per second; zero when none was busy.
	PerWorker float64
	// Busy is the number of busy workers.
	Busy int
}

// Wanted applies the rule (see the package doc) to in.
func Wanted(in Input) Result {
	var res Result
	for _, s := range in.Now {
		res.Backlog += s.Behind
	}
	rate := map[string]float64{}
	busy := map[string]bool{}
	for shard, now := range in.Now {
		prev, ok := in.Prev[shard]
		dt := now.At.Sub(prev.At).Seconds()
		if !ok || prev.Owner != now.Owner || dt <= 0 {
			continue
		}
		rate[now.Owner] += math.Max(0, 1+(prev.Behind-now.Behind).Seconds()/dt)
		if prev.Behind > in.Busy && now.Behind > in.Busy {
			busy[now.Owner] = true
		}
	}
	sum := 0.0
	for owner := range busy {
		sum += rate[owner]
	}
	res.Busy = len(busy)
	n := max(in.Shards, 1)
	if res.Busy == 0 || sum <= 0 {
		res.Wanted = min(max(in.Workers, 1), n)
		return res
	}
	res.PerWorker = sum / float64(res.Busy)
	demand := float64(in.Shards)
	if in.Drain > 0 {
		demand += res.Backlog.Seconds() / in.Drain.Seconds()
	}
	res.Wanted = min(max(int(math.Ceil(demand/res.PerWorker-1e-9)), 1), n)
	return res
}
