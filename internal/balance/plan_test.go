package balance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rows builds a listing's rows: n leases of stream "s", shards s00, s01, ...
// from first on, each owned by owner (empty: free) and renewed since taken.
func rows(first, n int, owner string) []Row {
	out := make([]Row, n)
	for i := range out {
		out[i] = Row{Shard: fmt.Sprintf("s%02d", first+i), Owner: owner, Counter: 3, Renewed: owner != ""}
	}
	return out
}

func set(ids ...string) map[string]bool {
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// listing4 is a listing for me of four leases s00 to s03 owned by owner
// ("" for free), first the first lease, workers the other live workers.
func listing4(me, owner, first string, workers []string) Listing {
	return Listing{Me: me, Rows: rows(0, 4, owner), First: first, Workers: workers, MaxSteals: 32}
}

// heldBy returns the shards of ls whose owner is owner.
func heldBy(ls []Row, owner string) map[string]bool {
	out := map[string]bool{}
	for _, l := range ls {
		if l.Owner == owner {
			out[l.Shard] = true
		}
	}
	return out
}

// outcome is the intents a round gives, by kind, when every write succeeds
// except those fails names, and the plan's share.
type outcome struct {
	answer, adopt, take, steal []string
	// first is the first lease, when the round takes it before any other.
	first           string
	target, ceiling int
}

// run drives a round, reporting each intent as done unless fails holds its
// shard, and returns its intents in order.
func run(in Listing, rng *rand.Rand, fails map[string]bool) ([]Intent, *Round) {
	r := NewRound(in, rng)
	var out []Intent
	for {
		it, ok := r.Next()
		if !ok {
			return out, r
		}
		out = append(out, it)
		r.Done(!fails[it.Row.Shard])
	}
}

func carryOut(t *testing.T, in Listing, fails map[string]bool) outcome {
	t.Helper()
	its, r := run(in, rand.New(rand.NewPCG(1, 2)), fails)
	o := outcome{target: r.Plan().Target, ceiling: r.Plan().Ceiling}
	for i, it := range its {
		if i > 0 && it.Kind < its[i-1].Kind {
			t.Errorf("intent %d (%s %s) comes after %s: the round's order is answer, adopt, take first, take, ask", i, it.Kind, it.Row.Shard, its[i-1].Kind)
		}
		switch it.Kind {
		case Answer:
			o.answer = append(o.answer, it.Row.Shard)
		case Adopt:
			o.adopt = append(o.adopt, it.Row.Shard)
		case TakeFirst:
			o.first = it.Row.Shard
		case Take:
			o.take = append(o.take, it.Row.Shard)
		case Ask:
			o.steal = append(o.steal, it.Row.Shard)
		}
	}
	slices.Sort(o.take)
	return o
}

func TestPlan(t *testing.T) {
	// a holds 12 of 16 leases with a handoff of s00 asked by c.
	handing := rows(0, 12, "a")
	handing[0].HandoffTo = "c"
	handing = append(handing, rows(12, 4, "b")...)

	// a crashed: its 8 leases have not moved for a lease duration.
	crashed := append(rows(0, 8, "a"), rows(8, 8, "b")...)

	// b is handed s00 by a: the row names b, b does not run it yet.
	handedToB := append(rows(0, 8, "a"), rows(8, 7, "b")...)
	handedToB[0].Owner = "b"
	handedToB[0].Renewed = false

	// a's only load is six of b's leases being handed to it: nobody can
	// ask a for them.
	waitingA := rows(0, 12, "b")
	for i := range 6 {
		waitingA[i].HandoffTo = "a"
	}

	// a coordinates: it runs s00 and s01, b runs s02 and s03, and s04 to
	// s07 were released by a worker that left.
	coordinated := append(append(rows(0, 2, "a"), rows(2, 2, "b")...), rows(4, 4, "")...)

	for _, tc := range []struct {
		name  string
		in    Listing
		fails map[string]bool
		want  outcome
	}{
		{
			name: "three workers starting together: the first by id takes the lease over",
			in:   Listing{Me: "a", Rows: rows(0, 16, ""), Workers: []string{"b", "c"}, MaxSteals: 32},
			want: outcome{target: 6, ceiling: 6, take: []string{"", "", "", "", "", ""}},
		},
		{
			name: "three workers starting together: the others take the floor",
			in:   Listing{Me: "c", Rows: rows(0, 16, ""), Workers: []string{"a", "b"}, MaxSteals: 32},
			want: outcome{target: 5, ceiling: 6, take: []string{"", "", "", "", ""}},
		},
		{
			name: "balanced 6/5/5: nothing moves",
			in: Listing{Me: "c", Rows: append(append(rows(0, 6, "a"), rows(6, 5, "b")...), rows(11, 5, "c")...),
				Held: heldBy(rows(11, 5, "c"), "c"), MaxSteals: 32},
			want: outcome{target: 5, ceiling: 6},
		},
		{
			name: "the worker holding one more keeps it",
			in: Listing{Me: "c", Rows: append(append(rows(0, 5, "a"), rows(5, 5, "b")...), rows(10, 6, "c")...),
				Held: heldBy(rows(10, 6, "c"), "c"), MaxSteals: 32},
			want: outcome{target: 6, ceiling: 6},
		},
		{
			name: "a joiner asks the holder of everything for its share",
			in:   Listing{Me: "b", Rows: rows(0, 12, "a"), Workers: []string{"c"}, MaxSteals: 32},
			want: outcome{target: 4, ceiling: 4, steal: []string{"", "", "", ""}},
		},
		{
			name: "steals are capped per round",
			in:   Listing{Me: "b", Rows: rows(0, 12, "a"), Workers: []string{"c"}, MaxSteals: 2},
			want: outcome{target: 4, ceiling: 4, steal: []string{"", ""}},
		},
		{
			name: "a pending request counts: only the rest is asked",
			in: Listing{Me: "b", Rows: func() []Row { l := rows(0, 12, "a"); l[0].HandoffTo = "b"; return l }(),
				Workers: []string{"c"}, Pending: set("s00"), Waiting: 1, MaxSteals: 32},
			want: outcome{target: 4, ceiling: 4, steal: []string{"", "", ""}},
		},
		{
			name: "loads that differ by one are left alone",
			in:   Listing{Me: "b", Rows: append(rows(0, 5, "a"), rows(5, 4, "b")...), Held: heldBy(rows(5, 4, "b"), "b"), MaxSteals: 32},
			want: outcome{target: 4, ceiling: 5},
		},
		{
			name: "a handoff asked of this worker is answered; the lease counts for the taker",
			in:   Listing{Me: "a", Rows: handing, Held: heldBy(handing, "a"), Workers: []string{"c"}, MaxSteals: 32},
			want: outcome{answer: []string{"s00"}, target: 6, ceiling: 6},
		},
		{
			name: "the taker of a lease being handed over counts it as its own",
			in:   Listing{Me: "c", Rows: handing, Pending: set("s00"), Waiting: 1, MaxSteals: 32},
			want: outcome{target: 5, ceiling: 6, steal: []string{"", "", "", ""}},
		},
		{
			name: "a row handed over to this worker is adopted",
			in:   Listing{Me: "b", Rows: handedToB, Held: heldBy(rows(8, 7, "b"), "b"), MaxSteals: 32},
			want: outcome{adopt: []string{"s00"}, target: 8, ceiling: 8},
		},
		{
			name: "a crashed worker's leases count for nobody and are taken",
			in:   Listing{Me: "b", Rows: crashed, Held: heldBy(crashed, "b"), Expired: heldBy(crashed, "a"), MaxSteals: 32},
			want: outcome{target: 16, ceiling: 16, take: []string{"s00", "s01", "s02", "s03", "s04", "s05", "s06", "s07"}},
		},
		{
			name: "a crashed worker's leases are shared with a worker that holds nothing",
			in: Listing{Me: "b", Rows: crashed, Held: heldBy(crashed, "b"), Expired: heldBy(crashed, "a"),
				Workers: []string{"c"}, MaxSteals: 32},
			want: outcome{target: 8, ceiling: 8},
		},
		{
			name: "leases released by a worker that left are taken up to the share at once",
			in: Listing{Me: "b", Rows: append(append(rows(0, 4, ""), rows(4, 4, "b")...), rows(8, 4, "c")...),
				Held: heldBy(rows(4, 4, "b"), "b"), MaxSteals: 32},
			want: outcome{target: 6, ceiling: 6, take: []string{"", ""}},
		},
		{
			name: "a lease left over since an earlier round is taken up to the ceiling",
			in: Listing{Me: "d", Rows: append(append(append(rows(0, 1, ""), rows(1, 4, "a")...), rows(5, 2, "b")...), rows(7, 3, "d")...),
				Held: heldBy(rows(7, 3, "d"), "d"), Leftover: set("s00"), MaxSteals: 32},
			want: outcome{target: 3, ceiling: 4, take: []string{"s00"}},
		},
		{
			name: "a free lease is left to the worker whose share it is in its first round",
			in: Listing{Me: "d", Rows: append(append(append(rows(0, 1, ""), rows(1, 4, "a")...), rows(5, 2, "b")...), rows(7, 3, "d")...),
				Held: heldBy(rows(7, 3, "d"), "d"), MaxSteals: 32},
			want: outcome{target: 3, ceiling: 4},
		},
		{
			name: "the coordinator takes every free lease, beyond its share",
			in:   Listing{Me: "a", Rows: coordinated, Held: heldBy(coordinated, "a"), First: "s00", Coordinated: true, MaxSteals: 32},
			want: outcome{target: 4, ceiling: 4, take: []string{"s04", "s05", "s06", "s07"}},
		},
		{
			name: "the coordinator's WithMaxLeases still caps it",
			in:   Listing{Me: "a", Rows: coordinated, Held: heldBy(coordinated, "a"), First: "s00", Coordinated: true, MaxLeases: 3, MaxSteals: 32},
			want: outcome{target: 3, ceiling: 3, take: []string{""}},
		},
		{
			name: "a refused lease is never taken",
			in:   Listing{Me: "a", Rows: rows(0, 2, ""), Refused: set("s00"), MaxSteals: 32},
			want: outcome{target: 2, ceiling: 2, take: []string{"s01"}},
		},
		{
			name: "the most this worker holds caps its share",
			in:   Listing{Me: "a", Rows: rows(0, 8, ""), MaxLeases: 3, MaxSteals: 32},
			want: outcome{target: 3, ceiling: 3, take: []string{"", "", ""}},
		},
		{
			name: "an owner whose load is only leases being handed to it is passed over for the next",
			in:   Listing{Me: "c", Rows: waitingA, MaxSteals: 32},
			// b runs 6 of its own: c asks it for 3 (b keeps 3 while 3
			// more go to a); a is never asked.
			want: outcome{target: 4, ceiling: 4, steal: []string{"", "", ""}},
		},
		{
			name: "a lease a runner of this worker still ends is neither counted nor taken",
			in:   Listing{Me: "a", Rows: rows(0, 4, ""), Skip: set("s00"), MaxSteals: 32},
			want: outcome{target: 4, ceiling: 4, take: []string{"s01", "s02", "s03"}},
		},
		{
			name: "the first lease, released, is taken before any other: whoever takes it coordinates",
			in:   listing4("b", "", "s00", []string{"a"}),
			want: outcome{target: 2, ceiling: 2, first: "s00", take: []string{""}},
		},
		{
			name: "a new first lease (never taken) waits for the shares like any other",
			in: func() Listing {
				in := listing4("b", "", "s00", []string{"a"})
				in.Rows[0].Counter = 0
				return in
			}(),
			want: outcome{target: 2, ceiling: 2, take: []string{"", ""}},
		},
		{
			name: "the expired first lease of a crashed coordinator goes first, then its other leases",
			in: func() Listing {
				in := listing4("b", "a", "s00", nil)
				in.Expired = set("s00", "s01", "s02", "s03")
				return in
			}(),
			want: outcome{target: 4, ceiling: 4, first: "s00", take: []string{"s01", "s02", "s03"}},
		},
		{
			name: "no first lease for a worker at its cap, handoffs it waits for included",
			in: func() Listing {
				in := listing4("b", "", "s00", []string{"a"})
				in.MaxLeases, in.Waiting, in.Pending = 1, 1, set("s09")
				return in
			}(),
			want: outcome{target: 1, ceiling: 1},
		},
		{
			name:  "a first lease taken by another worker first is tried again with the others",
			in:    Listing{Me: "b", Rows: rows(0, 2, ""), First: "s00", MaxSteals: 32},
			fails: set("s00"),
			want:  outcome{target: 2, ceiling: 2, first: "s00", take: []string{"s00", "s01"}},
		},
		{
			name:  "a take that fails does not count: the next lease is tried instead",
			in:    Listing{Me: "a", Rows: rows(0, 4, ""), Workers: []string{"b"}, MaxSteals: 32},
			fails: set("s00", "s01", "s02"),
			want:  outcome{target: 2, ceiling: 2, take: []string{"s00", "s01", "s02", "s03"}},
		},
		{
			name: "a first lease won this round does not make the worker take beyond its share before its next round",
			in: func() Listing {
				in := listing4("b", "", "s00", []string{"a"})
				in.Coordinated = false
				return in
			}(),
			want: outcome{target: 2, ceiling: 2, first: "s00", take: []string{""}},
		},
		{
			name: "a coordinator that wins the first lease back takes free leases up to half again its ceiling",
			in: func() Listing {
				in := listing4("b", "", "s00", []string{"a"})
				in.Coordinated = true
				return in
			}(),
			want: outcome{target: 2, ceiling: 2, first: "s00", take: []string{"", ""}},
		},
		{
			name: "a coordinator takes every lease left over or expired",
			in: func() Listing {
				in := listing4("b", "", "s00", []string{"a"})
				in.Coordinated = true
				in.Rows[3].Owner, in.Expired = "a", set("s03")
				in.Leftover = set("s01", "s02")
				return in
			}(),
			want: outcome{target: 2, ceiling: 2, first: "s00", take: []string{"", "", ""}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := carryOut(t, tc.in, tc.fails)
			// An entry "" stands for any shard: the choice is random; the
			// count is the promise.
			check := func(what string, want, got []string) {
				t.Helper()
				if !assert.Len(t, got, len(want), what) {
					return
				}
				if len(want) > 0 && !slices.Contains(want, "") {
					assert.Equal(t, want, got, what)
				}
				assert.Len(t, set(got...), len(got), "%s: no shard twice", what)
			}
			check("answer", tc.want.answer, got.answer)
			check("adopt", tc.want.adopt, got.adopt)
			check("take", tc.want.take, got.take)
			check("steal", tc.want.steal, got.steal)
			assert.Equal(t, tc.want.first, got.first, "first lease taken first")
			assert.Equal(t, tc.want.target, got.target, "target")
			assert.Equal(t, tc.want.ceiling, got.ceiling, "ceiling")
		})
	}
}

// A request the store refuses (another joiner asked for the same lease
// first) is replaced in the same round by one for another lease, so the
// worker still asks for its whole share.
func TestPlanStealerReplacesRefusedRequest(t *testing.T) {
	in := Listing{Me: "b", Rows: rows(0, 12, "a"), Workers: []string{"c"}, MaxSteals: 32}
	r := NewRound(in, rand.New(rand.NewPCG(1, 2)))
	first, ok := r.Next()
	require.True(t, ok)
	require.Equal(t, Ask, first.Kind)
	r.Done(false)
	var granted []string
	for {
		it, ok := r.Next()
		if !ok {
			break
		}
		assert.NotEqual(t, first.Row.Shard, it.Row.Shard, "the refused lease is not asked for again")
		granted = append(granted, it.Row.Shard)
		r.Done(true)
	}
	assert.Len(t, granted, 4, "the share is asked for in full")
	assert.Len(t, set(granted...), 4)
	assert.True(t, r.Busy())
}

// TestPlanNeverAsksForTheFirstLease: the first lease's holder coordinates,
// so balancing never moves it, whatever order the requests come in.
func TestPlanNeverAsksForTheFirstLease(t *testing.T) {
	for seed := range uint64(50) {
		in := Listing{Me: "b", Rows: rows(0, 4, "a"), First: "s00", MaxSteals: 32}
		its, _ := run(in, rand.New(rand.NewPCG(seed, 1)), nil)
		steals := shards(its)
		assert.Len(t, steals, 2, "b asks for its share of 2")
		assert.NotContains(t, steals, "s00")
	}
	// Without coordination any lease may be asked for.
	asked := map[string]bool{}
	for seed := range uint64(50) {
		in := Listing{Me: "b", Rows: rows(0, 4, "a"), MaxSteals: 32}
		its, _ := run(in, rand.New(rand.NewPCG(seed, 1)), nil)
		for _, s := range shards(its) {
			asked[s] = true
		}
	}
	assert.True(t, asked["s00"])
}

// shards returns the shards of intents.
func shards(its []Intent) []string {
	out := make([]string, 0, len(its))
	for _, it := range its {
		out = append(out, it.Row.Shard)
	}
	return out
}

// A capped worker takes the first readable lease before the others, new
// rows included, whatever its shuffle: a cap never leaves a stream without
// its coordinator while the worker holds another lease.
func TestPlanCappedWorkerTakesTheFirstLeaseFirst(t *testing.T) {
	in := Listing{Me: "a", Rows: rows(0, 16, ""), First: "s09", MaxLeases: 1, MaxSteals: 32}
	for i := range in.Rows {
		in.Rows[i].Counter = 0 // new rows: not taken as a released first lease
	}
	for seed := range uint64(32) {
		its, _ := run(in, rand.New(rand.NewPCG(seed, 1)), nil)
		require.Len(t, its, 1, "seed %d", seed)
		assert.Equal(t, Intent{Kind: Take, Row: in.Rows[9]}, its[0], "seed %d", seed)
	}
}
