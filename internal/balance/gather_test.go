package balance

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// A new first lease is left to fair share in the round that first sees it
// free, and taken first, beyond the share, once it is left over: the
// workers that read its stream may all be at their share of a table they
// share with workers of other streams.
func TestTakeANewFirstLeaseLeftOver(t *testing.T) {
	// x reads a and b and holds two of a; y, z and w (which holds nothing
	// yet) read a only; b:s00 is new.
	rs := concat(streamRows("a", 0, 2, "y"), streamRows("a", 2, 2, "x"), streamRows("a", 4, 2, "z"), streamRows("b", 0, 1, ""))
	rs[6].Counter = 0 // new
	in := Listing{Me: "x", Rows: rs, Held: heldBy(rs, "x"), Firsts: Firsts(rs), First: "a:s00", Workers: []string{"w"}, MaxSteals: 32}
	assert.Empty(t, intentsOf(in, TakeFirst), "a new row in its first round")
	assert.Empty(t, intentsOf(in, Take), "x is at its share")
	in.Leftover = set("b:s00")
	assert.Equal(t, []string{"b:s00"}, intentsOf(in, TakeFirst), "left over: taken beyond the share")
	in.MaxLeases = 2
	assert.Empty(t, intentsOf(in, TakeFirst), "never beyond the cap")
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

// A coordinator's deputy naming keeps the namings of other coordinators
// a row carries (of a first lease of the listing, or of a stream it does
// not read), so that one row carries them all; a naming of a lease that is
// no longer a first one goes. The deputy reads every lease a note names.
func TestNamingsOfOtherCoordinatorsStay(t *testing.T) {
	// x coordinates c; y's rows: b:s01 named by b's coordinator (z), a:s01
	// named for "d:s00" (a stream x does not read).
	rs := concat(streamRows("b", 0, 1, "z"), streamRows("b", 1, 1, "y"), streamRows("a", 0, 1, "z"), streamRows("a", 1, 1, "y"),
		streamRows("c", 0, 1, "x"))
	rs[1].Note = "deputy b:s00 1"
	rs[3].Note = "deputy d:s00 1"
	in := Listing{Me: "x", Rows: rs, Held: heldBy(rs, "x"), Firsts: Firsts(rs), First: "c:s00"}
	assert.Equal(t, "b:s00,c:s00", Names(in, rs[1]))
	assert.Equal(t, "c:s00,d:s00", Names(in, rs[3]))
	assert.Equal(t, "c:s00", Names(in, Row{Shard: "b:s01", Note: "deputy b:s05 1"}), "a naming of a lease no longer first goes")
	assert.Equal(t, "c:s00", Names(in, Row{Shard: "b:s01", Note: "wake 1"}))
	// Written compact: a lease of the row's stream by shard id, as earlier
	// releases read it; read back as row keys.
	assert.Equal(t, "s00,c:s00", Compact("b:s00,c:s00", "b"))
	assert.Equal(t, "b:s00,c:s00", Names(in, Row{Shard: "b:s01", Note: "deputy s00,c:s00 1"}))
	assert.True(t, namesFirst(Row{Shard: "b:s01", Note: "deputy s00 1"}, "b:s00"))
	notes, _ := CoordinatorNotes(in, PlanRound(in, rand.New(rand.NewPCG(1, 2))), in.Held, nil, time.Time{}, time.Second)
	var deputies []Intent
	for _, it := range notes {
		if it.Kind == Deputy {
			deputies = append(deputies, it)
		}
	}
	require.NotEmpty(t, deputies)
	for _, it := range deputies {
		assert.Contains(t, it.Names, "c:s00")
		if it.Row.Shard == "b:s01" {
			assert.Equal(t, "b:s00,c:s00", it.Names)
		}
	}
	n := ParseNote(NoteText(Intent{Kind: Deputy}, "b:s00,c:s00", 7))
	assert.Equal(t, []string{"b:s00", "c:s00"}, n.Firsts)
	assert.True(t, namesFirst(Row{Shard: "x:s01", Note: "deputy b:s00,c:s00 7"}, "c:s00"))
	assert.Equal(t, []string{"orders:shardId-1", "b:s0"}, ParseNote("deputy shardId-1,b:s0 7").FirstsOn("orders"))
}

// A worker that holds no lease of a stream it reads asks for one of the
// owner that holds the most of it (never its first lease, never its last
// of the stream), while that owner holds more leases in all: a stream's
// coordinator then sees it among the stream's readers, and names it
// deputy. Not of an owner that holds no more in all (the lease would come
// back), and not on a listing of one stream (fair share sees to it).
func TestPresenceInEveryStream(t *testing.T) {
	// n1 runs both of c; n2 runs b:s01 only.
	rs := concat(streamRows("b", 0, 1, "o1"), streamRows("b", 1, 1, "n2"), streamRows("c", 0, 2, "n1"))
	in := Listing{Me: "n2", Rows: rs, Held: heldBy(rs, "n2"), Firsts: Firsts(rs), First: "b:s00", MaxSteals: 32}
	assert.Equal(t, []string{"c:s01"}, intentsOf(in, Ask))

	// n2 as loaded as n1: nothing.
	rs2 := concat(rs, streamRows("b", 2, 1, "n2"))
	in2 := Listing{Me: "n2", Rows: rs2, Held: heldBy(rs2, "n2"), Firsts: Firsts(rs2), First: "b:s00", MaxSteals: 32}
	assert.Empty(t, intentsOf(in2, Ask))

	// One stream: fair share's stealer alone asks, once.
	rs3 := streamRows("c", 0, 2, "n1")
	in3 := Listing{Me: "n2", Rows: rs3, Firsts: Firsts(rs3), First: "c:s00", Workers: []string{"n2"}, MaxSteals: 32}
	assert.Equal(t, []string{"c:s01"}, intentsOf(in3, Ask))
}

// A stream whose first lease is free (released), expired or standing still
// has no live coordinator: a worker that reads it lists on until it takes
// that lease, whatever its share.
func TestUncoordinated(t *testing.T) {
	rs := concat(streamRows("a", 0, 2, "x"), streamRows("b", 0, 2, "gone"))
	in := Listing{Me: "x", Rows: rs, Held: heldBy(rs, "x"), Firsts: Firsts(rs), First: "a:s00"}
	assert.False(t, Uncoordinated(in))
	in.Stalled = set("b:s00")
	assert.True(t, Uncoordinated(in))
	in.Stalled, in.Expired = nil, set("b:s00")
	assert.True(t, Uncoordinated(in))
	in.Stalled = set("b:s01")
	in.Expired = nil
	assert.False(t, Uncoordinated(in), "a lease that is not first standing still is the coordinator's to take")
	in.Stalled, in.Held = set("a:s00"), heldBy(rs, "x")
	assert.False(t, Uncoordinated(in), "its own first lease")
	in.Stalled, in.MaxLeases = set("b:s00"), 2
	assert.False(t, Uncoordinated(in), "at its cap it could not take the lease")
}

// A worker that reads a stream but holds none of its leases watches its
// coordinator, unnamed, when none of that coordinator's named deputies
// holds a lease of the stream.
func TestUnwatched(t *testing.T) {
	// x coordinates a and b (anchor a:s00); y, a deputy of x, holds a
	// lease of a only; me (z) reads both and holds a lease of a only.
	rs := concat(streamRows("a", 0, 1, "x"), streamRows("a", 1, 1, "y"), streamRows("a", 2, 1, "z"), streamRows("b", 0, 2, "x"))
	rs[1].Note = "deputy a:s00 1"
	in := Listing{Me: "z", Rows: rs, Held: heldBy(rs, "z"), Firsts: Firsts(rs), First: "a:s00"}
	assert.Equal(t, []string{"a:s00"}, Unwatched(in), "nobody that holds a lease of b watches x")
	rs[4].Owner = "y" // y holds b:s01 too: x's deputy covers b
	assert.Empty(t, Unwatched(Listing{Me: "z", Rows: rs, Held: heldBy(rs, "z"), Firsts: Firsts(rs), First: "a:s00"}))
	rs[4].Owner = "z" // z holds a lease of b, but no deputy of x does: z watches until one is named
	assert.Equal(t, []string{"a:s00"}, Unwatched(Listing{Me: "z", Rows: rs, Held: heldBy(rs, "z"), Firsts: Firsts(rs), First: "a:s00"}))
	rs[4].Note = "deputy a:s00 2" // z is named: it watches through the naming
	assert.Empty(t, Unwatched(Listing{Me: "z", Rows: rs, Held: heldBy(rs, "z"), Firsts: Firsts(rs), First: "a:s00"}))
}

// Two coordinators that read different streams never ask one first lease
// of each other in turn: gathering goes by owner id, which both see alike
// (by the first leases each saw, each ranked first: P read b and c, Q a
// and c, and c's first lease went back and forth).
func TestGatherNeverBackAndForth(t *testing.T) {
	fromP := concat(streamRows("b", 0, 2, "P"), streamRows("c", 0, 2, "Q"))
	inP := Listing{Me: "P", Rows: fromP, Held: heldBy(fromP, "P"), Firsts: Firsts(fromP), First: "b:s00", Coordinated: true, MaxSteals: 32}
	assert.Equal(t, []string{"c:s00"}, intentsOf(inP, Ask), "P gathers c's first lease of Q")
	fromQ := concat(streamRows("a", 0, 2, "Q"), streamRows("c", 0, 1, "P"), streamRows("c", 1, 1, "Q"))
	inQ := Listing{Me: "Q", Rows: fromQ, Held: heldBy(fromQ, "Q"), Firsts: Firsts(fromQ), First: "a:s00", Coordinated: true, MaxSteals: 32}
	assert.Empty(t, intentsOf(inQ, Ask), "Q does not ask it back")
}

// First leases that piled up on one worker (ten streams of one shard, all
// held by y) move by fair share, all but y's anchor: z asks for its share.
func TestFairShareMovesFirstLeasesLast(t *testing.T) {
	var rs []Row
	for i := range 10 {
		rs = append(rs, streamRows(fmt.Sprintf("s%d", i), 0, 1, "y")...)
	}
	in := Listing{Me: "z", Rows: rs, Firsts: Firsts(rs), First: "s0:s00", Workers: []string{"z", "w", "v"}, MaxSteals: 32}
	asks := intentsOf(in, Ask)
	assert.Len(t, asks, 2, "z asks for its share (target 2 of 10 over 4)")
	assert.NotContains(t, asks, "s0:s00", "never y's anchor")
	// With other leases to ask for, a first lease is asked for last.
	rs2 := concat(streamRows("a", 0, 4, "y"), streamRows("b", 0, 1, "y"))
	in2 := Listing{Me: "z", Rows: rs2, Firsts: Firsts(rs2), First: "a:s00", Workers: []string{"z"}, MaxSteals: 32}
	for _, id := range intentsOf(in2, Ask) {
		assert.NotEqual(t, "b:s00", id, "y runs leases that are no first ones: those go first")
	}
}
