package scaling

import (
	"testing"
	"time"
)

func TestWanted(t *testing.T) {
	t0 := time.Unix(1000, 0)
	t1 := t0.Add(10 * time.Second)
	s := func(owner string, behind time.Duration, at time.Time) Sample {
		return Sample{Owner: owner, Behind: behind, At: at}
	}
	for _, tc := range []struct {
		name      string
		in        Input
		want      int
		perWorker float64
		busy      int
	}{{
		name: "caught up: the workers there are",
		in: Input{
			Prev:   map[string]Sample{"a": s("w1", 0, t0), "b": s("w2", 0, t0)},
			Now:    map[string]Sample{"a": s("w1", 0, t1), "b": s("w2", 0, t1)},
			Shards: 2, Workers: 2, Busy: time.Second, Drain: time.Minute,
		},
		want: 2,
	}, {
		// One worker holds 4 shards, each falling behind by 5 s every 10 s:
		// it reads 0.5 stream-s/s per shard, 2 in all. Demand is 4 shards
		// plus 4 × 60 s of backlog over a 60 s drain: 8. 8 / 2 = 4 workers.
		name: "one worker falling behind on four shards",
		in: Input{
			Prev: map[string]Sample{"a": s("w1", 55*time.Second, t0), "b": s("w1", 55*time.Second, t0),
				"c": s("w1", 55*time.Second, t0), "d": s("w1", 55*time.Second, t0)},
			Now: map[string]Sample{"a": s("w1", time.Minute, t1), "b": s("w1", time.Minute, t1),
				"c": s("w1", time.Minute, t1), "d": s("w1", time.Minute, t1)},
			Shards: 4, Workers: 1, Busy: time.Second, Drain: time.Minute,
		},
		want: 4, perWorker: 2, busy: 1,
	}, {
		name: "capped at the number of shards",
		in: Input{
			Prev:   map[string]Sample{"a": s("w1", time.Hour, t0), "b": s("w1", time.Hour, t0)},
			Now:    map[string]Sample{"a": s("w1", time.Hour+5*time.Second, t1), "b": s("w1", time.Hour+5*time.Second, t1)},
			Shards: 2, Workers: 1, Busy: time.Second, Drain: time.Minute,
		},
		want: 2, perWorker: 1, busy: 1,
	}, {
		// Two workers draining fast (each shard's lag falls 20 s in 10 s:
		// 3 stream-s/s per shard, 6 per worker); 4 shards, 40 s of backlog
		// over a minute: demand 4.67, over 6: one worker would do.
		name: "draining fast: fewer workers",
		in: Input{
			Prev: map[string]Sample{"a": s("w1", 30*time.Second, t0), "b": s("w1", 30*time.Second, t0),
				"c": s("w2", 30*time.Second, t0), "d": s("w2", 30*time.Second, t0)},
			Now: map[string]Sample{"a": s("w1", 10*time.Second, t1), "b": s("w1", 10*time.Second, t1),
				"c": s("w2", 10*time.Second, t1), "d": s("w2", 10*time.Second, t1)},
			Shards: 4, Workers: 2, Busy: time.Second, Drain: time.Minute,
		},
		want: 1, perWorker: 6, busy: 2,
	}, {
		name: "a shard that changed hands gives no rate",
		in: Input{
			Prev:   map[string]Sample{"a": s("w1", time.Minute, t0)},
			Now:    map[string]Sample{"a": s("w2", time.Minute, t1)},
			Shards: 1, Workers: 2, Busy: time.Second, Drain: time.Minute,
		},
		want: 1,
	}, {
		name: "the caught-up shards of a busy worker count in its throughput",
		in: Input{
			Prev:   map[string]Sample{"a": s("w1", time.Minute, t0), "b": s("w1", 0, t0)},
			Now:    map[string]Sample{"a": s("w1", time.Minute, t1), "b": s("w1", 0, t1)},
			Shards: 2, Workers: 1, Busy: time.Second, Drain: time.Minute,
		},
		// Rates 1 + 1 = 2; demand 2 + 60/60 = 3; ⌈3/2⌉ = 2.
		want: 2, perWorker: 2, busy: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Wanted(tc.in)
			if got.Wanted != tc.want || got.PerWorker != tc.perWorker || got.Busy != tc.busy {
				t.Fatalf("Wanted = %+v; want wanted %d, per worker %v, busy %d", got, tc.want, tc.perWorker, tc.busy)
			}
		})
	}
}
