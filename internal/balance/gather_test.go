package balance

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// streamRows builds n leases of stream, ids "stream:s00", ... from first
// on, each owned by owner (empty: free) and renewed since taken.
func streamRows(stream string, first, n int, owner string) []Row {
	out := make([]Row, n)
	for i := range out {
		out[i] = Row{Shard: fmt.Sprintf("%s:s%02d", stream, first+i), Owner: owner, Counter: 3, Renewed: owner != ""}
	}
	return out
}

// concat joins row lists.
func concat(lists ...[]Row) []Row {
	var out []Row
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// intentsOf runs a round on in and returns its intents of kind, by row.
func intentsOf(in Listing, kind Kind) []string {
	its, _ := run(in, rand.New(rand.NewPCG(1, 2)), nil)
	var out []string
	for _, it := range its {
		if it.Kind == kind {
			out = append(out, it.Row.Shard)
		}
	}
	return out
}

// Each stream's lowest readable lease is its first; the anchor is the
// lowest first a worker holds.
func TestFirstsAndAnchor(t *testing.T) {
	rs := concat(streamRows("b", 3, 2, "x"), streamRows("a", 1, 2, "y"), streamRows("a-2", 0, 1, "x"))
	firsts := Firsts(rs)
	assert.Equal(t, set("a:s01", "a-2:s00", "b:s03"), firsts)
	first, _ := FirstReadable(rs)
	assert.Equal(t, "a-2:s00", first.Shard, "the listing's first is the lowest of the firsts")
	anchor, ok := Anchor(firsts, set("b:s03", "a-2:s00", "b:s04"))
	assert.True(t, ok)
	assert.Equal(t, "a-2:s00", anchor)
	_, ok = Anchor(firsts, set("b:s04"))
	assert.False(t, ok, "a worker that holds no first lease coordinates nothing")
	assert.Equal(t, "", StreamOf("s00"))
	assert.Equal(t, "orders-b", StreamOf("orders-b:shardId-1"))
}

// A coordinator gathers the first leases of other streams from holders
// that rank after it, and never from one that ranks before it; fair share
// never asks for a first lease.
func TestGatherFirstLeases(t *testing.T) {
	// x holds a's first (the lowest); y holds b's and c's firsts.
	rs := concat(streamRows("a", 0, 4, "x"), streamRows("b", 0, 4, "y"), streamRows("c", 0, 4, "y"))
	in := Listing{Me: "x", Rows: rs, Held: heldBy(rs, "x"), Firsts: Firsts(rs), First: "a:s00", Coordinated: true, MaxSteals: 32}
	assert.Equal(t, []string{"b:s00", "c:s00"}, intentsOf(in, Ask), "the holder of the lowest first gathers the others")

	in.Me, in.Held = "y", heldBy(rs, "y")
	assert.Empty(t, intentsOf(in, Ask), "a coordinator asks nothing of one that ranks before it")

	// z, below its share, asks y (the most loaded) for leases, never a
	// first one.
	rs2 := concat(streamRows("a", 0, 6, "y"), streamRows("b", 0, 6, "y"))
	in2 := Listing{Me: "z", Rows: rs2, Firsts: Firsts(rs2), First: "a:s00", Workers: []string{"z"}, MaxSteals: 32}
	asks := intentsOf(in2, Ask)
	assert.NotEmpty(t, asks)
	assert.NotContains(t, asks, "a:s00")
	assert.NotContains(t, asks, "b:s00")

	// A coordinator gathers one lease over its ceiling when fair share can
	// move another of its leases away (2 of a and 2 of b over x and y);
	// never when it would hold more first leases than the ceiling (one
	// lease per stream, one worker each), nor beyond LeadCeiling.
	rs3 := concat(streamRows("a", 0, 2, "x"), streamRows("b", 0, 2, "y"))
	in3 := Listing{Me: "x", Rows: rs3, Held: heldBy(rs3, "x"), Firsts: Firsts(rs3), First: "a:s00", Coordinated: true, MaxSteals: 32}
	assert.Equal(t, []string{"b:s00"}, intentsOf(in3, Ask))
	rs5 := concat(streamRows("a", 0, 1, "x"), streamRows("b", 0, 1, "y"), streamRows("c", 0, 1, "z"))
	in5 := Listing{Me: "x", Rows: rs5, Held: heldBy(rs5, "x"), Firsts: Firsts(rs5), First: "a:s00", Coordinated: true, MaxSteals: 32}
	assert.Empty(t, intentsOf(in5, Ask), "x would hold two first leases, over its ceiling of 1: each stream keeps its coordinator")
	rs6 := concat(streamRows("a", 0, 3, "x"), streamRows("b", 0, 3, "y"), streamRows("c", 0, 3, "y"))
	in6 := Listing{Me: "x", Rows: rs6, Held: heldBy(rs6, "x"), Firsts: Firsts(rs6), First: "a:s00", Coordinated: true, MaxSteals: 32}
	assert.Equal(t, []string{"b:s00", "c:s00"}, intentsOf(in6, Ask), "up to LeadCeiling: 3 + 2 of 9 leases over two workers (ceiling 5)")

	// A first lease being handed over, or expired, is not asked for.
	rs4 := concat(streamRows("a", 0, 2, "x"), streamRows("b", 0, 4, "y"))
	rs4[2].HandoffTo = "w"
	in4 := Listing{Me: "x", Rows: rs4, Held: heldBy(rs4, "x"), Firsts: Firsts(rs4), First: "a:s00", Coordinated: true, MaxSteals: 32}
	assert.NotContains(t, intentsOf(in4, Ask), "b:s00")
}

// Every free or expired first lease is taken first, one per stream.
func TestTakeEveryFirstLease(t *testing.T) {
	rs := concat(streamRows("a", 0, 2, ""), streamRows("b", 0, 2, "gone"), streamRows("c", 0, 2, "y"))
	rs[0].Counter = 4 // released, not new
	in := Listing{Me: "x", Rows: rs, Firsts: Firsts(rs), First: "a:s00", Expired: set("b:s00", "b:s01"), Workers: []string{"y"}, MaxSteals: 32}
	assert.Equal(t, []string{"a:s00", "b:s00"}, intentsOf(in, TakeFirst))
	in.MaxLeases = 1
	assert.Equal(t, []string{"a:s00"}, intentsOf(in, TakeFirst), "the cap stops the first takes too")
}

// A coordinator's deputies read every stream it coordinates: where workers
// read different streams, more than Deputies are named.
func TestNameDeputiesCoverEveryCoordinatedStream(t *testing.T) {
	// x coordinates a and c; y and z read a only, w reads c.
	rs := concat(streamRows("a", 0, 1, "x"), streamRows("a", 1, 2, "y"), streamRows("a", 3, 2, "z"),
		streamRows("c", 0, 1, "x"), streamRows("c", 1, 2, "w"))
	in := Listing{Me: "x", Rows: rs, Held: heldBy(rs, "x"), Firsts: Firsts(rs), First: "a:s00"}
	owners := map[string]bool{}
	for _, l := range NameDeputies(in) {
		owners[l.Owner] = true
	}
	assert.True(t, owners["w"], "stream c's only other reader watches too")
	assert.Len(t, owners, 3)

	// Workers that read every stream: two deputies, as before.
	rs2 := concat(streamRows("a", 0, 1, "x"), streamRows("a", 1, 2, "y"), streamRows("a", 3, 2, "z"),
		streamRows("c", 0, 1, "x"), streamRows("c", 1, 2, "y"), streamRows("c", 3, 2, "z"))
	in2 := Listing{Me: "x", Rows: rs2, Held: heldBy(rs2, "x"), Firsts: Firsts(rs2), First: "a:s00"}
	assert.Len(t, NameDeputies(in2), Deputies)
}
