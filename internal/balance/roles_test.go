package balance

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func seeded() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// noted returns rows with the note of each shard set.
func noted(ls []Row, notes map[string]string) []Row {
	for i := range ls {
		ls[i].Note = notes[ls[i].Shard]
	}
	return ls
}

func TestNoteText(t *testing.T) {
	assert.Equal(t, "deputy s00 ff", NoteText(Deputy, "s00", 255))
	assert.Equal(t, "wake 10", NoteText(Wake, "s00", 16))
	assert.Equal(t, "lead 1", NoteText(Lead, "", 1))
	first, ok := DeputyFirst(NoteText(Deputy, "s07", 3))
	assert.True(t, ok)
	assert.Equal(t, "s07", first)
	for _, note := range []string{"", "wake 1", "deputy", "please hand this over"} {
		_, ok := DeputyFirst(note)
		assert.False(t, ok, "%q names no deputy", note)
	}
}

func TestFirstReadable(t *testing.T) {
	_, ok := FirstReadable(nil)
	assert.False(t, ok)
	first, ok := FirstReadable(append(rows(3, 2, "a"), rows(1, 1, "b")...))
	assert.True(t, ok)
	assert.Equal(t, "s01", first.Shard)
}

func TestNameDeputy(t *testing.T) {
	// a coordinates (s00, s01); b runs s02 to s04, c s05 and s06.
	fleet := func() []Row { return append(append(rows(0, 2, "a"), rows(2, 3, "b")...), rows(5, 2, "c")...) }
	for _, tc := range []struct {
		name string
		rows []Row
		in   func(*Listing)
		want string // "" for none
	}{
		{name: "none named: the lowest row of another worker", rows: fleet(), want: "s02"},
		{name: "a deputy watches the first lease: none", rows: noted(fleet(), map[string]string{"s05": "deputy s00 1"})},
		{name: "a deputy of an earlier first lease watches this one", rows: noted(fleet(), map[string]string{"s05": "deputy s09 1"}), want: "s05"},
		{
			name: "a row handed over but not adopted yet goes last",
			rows: func() []Row { r := fleet(); r[2].Renewed = false; return r }(),
			want: "s03",
		},
		{
			name: "rows being handed over or expired are passed over",
			rows: func() []Row { r := fleet(); r[2].HandoffTo = "c"; r[3].HandoffTo = "c"; return r }(),
			in:   func(in *Listing) { in.Expired = set("s04") },
			want: "s05",
		},
		{name: "nobody else runs a lease: none", rows: rows(0, 4, "a")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Listing{Me: "a", Rows: tc.rows, Held: set("s00", "s01"), First: "s00"}
			if tc.in != nil {
				tc.in(&in)
			}
			got, ok := NameDeputy(in)
			assert.Equal(t, tc.want != "", ok)
			assert.Equal(t, tc.want, got.Shard)
		})
	}
}

func TestHasDeputyFor(t *testing.T) {
	ls := noted(rows(0, 3, "b"), map[string]string{"s01": "deputy s00 1"})
	assert.True(t, HasDeputyFor(ls, "s00"))
	assert.False(t, HasDeputyFor(ls, "s02"))
	ls[1].Owner = ""
	assert.False(t, HasDeputyFor(ls, "s00"), "a free row names nobody")
}

func TestMayTakeSoon(t *testing.T) {
	base := func() Listing {
		return Listing{Me: "b", Rows: append(rows(0, 2, "a"), rows(2, 1, "b")...), Held: set("s02"), Workers: []string{"a"}}
	}
	for _, tc := range []struct {
		name string
		in   func(*Listing)
		want bool
	}{
		{name: "every lease renewed: nothing to wait for", want: false},
		{name: "a lease that stalled may expire", in: func(in *Listing) { in.Stalled = set("s00") }, want: true},
		{name: "a free lease", in: func(in *Listing) { in.Rows[0].Owner = "" }, want: true},
		{name: "at its cap it may take nothing", in: func(in *Listing) { in.Stalled, in.MaxLeases = set("s00"), 1 }, want: false},
		{name: "a refused lease does not count", in: func(in *Listing) { in.Stalled, in.Refused = set("s00"), set("s00") }, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			if tc.in != nil {
				tc.in(&in)
			}
			assert.Equal(t, tc.want, MayTakeSoon(in, PlanRound(in, seeded())))
		})
	}
}

func TestWakes(t *testing.T) {
	L := 10 * time.Second
	t0 := time.Unix(1000, 0)
	// a coordinates with 6 of 9 leases, b runs 2 and c 1: b and c are
	// below their share of 3.
	in := Listing{Me: "a", Rows: append(append(rows(0, 6, "a"), rows(6, 2, "b")...), rows(8, 1, "c")...), Held: heldBy(rows(0, 6, "a"), "a")}
	p := PlanRound(in, seeded())
	wakes, woken := Wakes(in, p, in.Held, "", nil, t0, L)
	assert.Equal(t, []string{"s06", "s08"}, shards(wakes), "b and c are woken, by owner")
	assert.Equal(t, Woken{At: t0, Load: 2, Wait: L}, woken["b"])

	again, _ := Wakes(in, p, in.Held, "", woken, t0.Add(L/2), L)
	assert.Empty(t, again, "not again within the wait")

	again, woken = Wakes(in, p, in.Held, "", woken, t0.Add(L), L)
	assert.Len(t, again, 2)
	assert.Equal(t, 2*L, woken["b"].Wait, "its load did not move: the wait doubles")

	for range 10 {
		_, woken = Wakes(in, p, in.Held, "", woken, woken["b"].At.Add(woken["b"].Wait), L)
	}
	assert.Equal(t, 32*L, woken["b"].Wait, "at most 32 lease durations")

	noDeputy, _ := Wakes(in, p, in.Held, "s06", nil, t0, L)
	assert.Equal(t, []string{"s07", "s08"}, shards(noDeputy), "no wake on the row just named deputy")

	gone := Listing{Me: "a", Rows: rows(0, 9, "a"), Held: heldBy(rows(0, 9, "a"), "a")}
	_, woken = Wakes(gone, PlanRound(gone, seeded()), gone.Held, "", woken, t0, L)
	assert.Empty(t, woken, "owners no longer live are forgotten")

	balanced := Listing{Me: "a", Rows: append(rows(0, 5, "a"), rows(5, 4, "b")...), Held: heldBy(rows(0, 5, "a"), "a")}
	none, _ := Wakes(balanced, PlanRound(balanced, seeded()), balanced.Held, "", nil, t0, L)
	assert.Empty(t, none, "loads that differ by one: nobody is woken")
}

func TestCoordinatorNotes(t *testing.T) {
	in := Listing{Me: "a", Rows: append(rows(0, 6, "a"), rows(6, 2, "b")...), Held: heldBy(rows(0, 6, "a"), "a"), First: "s00"}
	notes, _ := CoordinatorNotes(in, PlanRound(in, seeded()), in.Held, nil, time.Unix(1000, 0), time.Second)
	assert.Equal(t, []Intent{{Kind: Deputy, Row: in.Rows[6]}, {Kind: Wake, Row: in.Rows[7]}}, notes, "the deputy first, then a wake on another row")
}

func TestHandOverLead(t *testing.T) {
	in := Listing{Me: "a", Expired: set("s01")}
	for _, tc := range []struct {
		row  Row
		want bool
	}{
		{Row{Shard: "s00", Owner: "b"}, true},
		{Row{Shard: "s00"}, false},
		{Row{Shard: "s00", Owner: "a"}, false},
		{Row{Shard: "s00", Owner: "b", HandoffTo: "c"}, false},
		{Row{Shard: "s01", Owner: "b"}, false},
	} {
		it, ok := HandOverLead(in, tc.row)
		assert.Equal(t, tc.want, ok, "%+v", tc.row)
		if ok {
			assert.Equal(t, Intent{Kind: Lead, Row: tc.row}, it)
		}
	}
}

func TestPassLead(t *testing.T) {
	ls := append(rows(0, 2, "a"), rows(2, 3, "b")...)
	it, ok := PassLead(ls, "a", "s00")
	assert.True(t, ok)
	assert.Equal(t, "s02", it.Row.Shard, "no deputy: the first row of another worker")

	it, _ = PassLead(noted(ls, map[string]string{"s04": "deputy s00 1"}), "a", "s00")
	assert.Equal(t, "s04", it.Row.Shard, "the deputy's row")

	ls[2].Finished, ls[3].HandoffTo = true, "a"
	it, _ = PassLead(noted(ls, nil), "a", "s00")
	assert.Equal(t, "s04", it.Row.Shard, "finished rows and rows being handed over are passed over")

	_, ok = PassLead(rows(0, 2, "a"), "a", "s00")
	assert.False(t, ok, "nobody else")
}
