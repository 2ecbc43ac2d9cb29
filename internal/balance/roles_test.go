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
	assert.Equal(t, "deputy s00 ff", NoteText(Intent{Kind: Deputy}, "s00", 255))
	assert.Equal(t, "deputy s00 ff wake", NoteText(Intent{Kind: WakeDeputy}, "s00", 255))
	assert.Equal(t, "deputy s00 ff wake watch", NoteText(Intent{Kind: WakeDeputy, Watch: true}, "s00", 255))
	assert.Equal(t, "wake 10", NoteText(Intent{Kind: Wake}, "s00", 16))
	assert.Equal(t, "wake 10 watch", NoteText(Intent{Kind: Wake, Watch: true}, "s00", 16))
	assert.Equal(t, "lead 1", NoteText(Intent{Kind: Lead}, "", 1))
	first, ok := DeputyFirst(NoteText(Intent{Kind: Deputy}, "s07", 3))
	assert.True(t, ok)
	assert.Equal(t, "s07", first)
	for _, note := range []string{"", "wake 1", "deputy", "please hand this over"} {
		_, ok := DeputyFirst(note)
		assert.False(t, ok, "%q names no deputy", note)
	}
}

func TestParseNote(t *testing.T) {
	for _, tc := range []struct {
		note string
		want Note
	}{
		{"wake 1f", Note{Kind: NoteWake, Wake: true}},
		{"wake 1f watch", Note{Kind: NoteWake, Wake: true, Watch: true}},
		{"wake", Note{Kind: NoteWake, Wake: true}},
		{"lead 1f", Note{Kind: NoteLead, Wake: true, Watch: true}},
		{"deputy s00 1f", Note{Kind: NoteDeputy, First: "s00", Firsts: []string{"s00"}}},
		{"deputy s00 1f wake", Note{Kind: NoteDeputy, First: "s00", Firsts: []string{"s00"}, Wake: true}},
		{"deputy s00 1f wake watch", Note{Kind: NoteDeputy, First: "s00", Firsts: []string{"s00"}, Wake: true, Watch: true}},
		{"deputy s00 1f watch", Note{Kind: NoteDeputy, First: "s00", Firsts: []string{"s00"}}},
		{"deputy", Note{}},
		{"drain cli-1", Note{Kind: NoteDrain}},
		{"  wake   2  ", Note{Kind: NoteWake, Wake: true}},
		{"", Note{}},
		{"please hand this over", Note{}},
	} {
		assert.Equal(t, tc.want, ParseNote(tc.note), "%q", tc.note)
	}
	// Every note NoteText writes reads back as its intent.
	for _, tc := range []struct {
		it   Intent
		want Note
	}{
		{Intent{Kind: Deputy}, Note{Kind: NoteDeputy, First: "s07", Firsts: []string{"s07"}}},
		{Intent{Kind: WakeDeputy, Watch: true}, Note{Kind: NoteDeputy, First: "s07", Firsts: []string{"s07"}, Wake: true, Watch: true}},
		{Intent{Kind: Wake}, Note{Kind: NoteWake, Wake: true}},
		{Intent{Kind: Lead}, Note{Kind: NoteLead, Wake: true, Watch: true}},
	} {
		assert.Equal(t, tc.want, ParseNote(NoteText(tc.it, "s07", 9)), "%+v", tc.it)
	}
	assert.Equal(t, Note{Kind: NoteDrain}, ParseNote(DrainNoteText("x")))
}

// A deputy note names the first lease by its row key; notes of earlier
// releases named it by shard id, or "stream/shard", and read the same.
func TestNoteFirstOn(t *testing.T) {
	for written, want := range map[string]string{
		"deputy orders:shardId-1 1f":   "orders:shardId-1",
		"deputy orders-b:shardId-1 1f": "orders-b:shardId-1",
		"deputy shardId-1 1f":          "orders:shardId-1",
		"deputy orders-b/shardId-1 1f": "orders-b:shardId-1",
		"wake 1f":                      "",
	} {
		assert.Equal(t, want, ParseNote(written).FirstOn("orders"), "%q", written)
	}
}

// The drain note is read by the worker and the CLI through one codec.
func TestDrainNote(t *testing.T) {
	assert.True(t, IsDrainNote(DrainNoteText("cli-1")))
	assert.Equal(t, "drain cli-1", DrainNoteText("cli-1"))
	for _, note := range []string{"", "wake 1f", "deputy s00 1f", "lead 1f", "drained", " drainage"} {
		assert.False(t, IsDrainNote(note), "%q", note)
	}
	assert.False(t, ParseNote(DrainNoteText("x")).Wake, "a drain note wakes nobody to list")
}

func TestFirstReadable(t *testing.T) {
	_, ok := FirstReadable(nil)
	assert.False(t, ok)
	first, ok := FirstReadable(append(rows(3, 2, "a"), rows(1, 1, "b")...))
	assert.True(t, ok)
	assert.Equal(t, "s01", first.Shard)
}

func TestNameDeputies(t *testing.T) {
	// a coordinates (s00, s01); b runs s02 to s04, c s05 and s06, d s07.
	fleet := func() []Row {
		return append(append(append(rows(0, 2, "a"), rows(2, 3, "b")...), rows(5, 2, "c")...), rows(7, 1, "d")...)
	}
	for _, tc := range []struct {
		name string
		rows []Row
		in   func(*Listing)
		want []string
	}{
		{name: "none named: the lowest row of two other workers", rows: fleet(), want: []string{"s02", "s05"}},
		{name: "one deputy watches the first lease: one more, of another owner", rows: noted(fleet(), map[string]string{"s05": "deputy s00 1"}), want: []string{"s02"}},
		{name: "two watch it: none", rows: noted(fleet(), map[string]string{"s05": "deputy s00 1", "s07": "deputy s00 2"})},
		{name: "deputies of an earlier first lease come first", rows: noted(fleet(), map[string]string{"s06": "deputy s09 1"}), want: []string{"s06", "s02"}},
		{
			name: "a row handed over but not adopted yet goes last",
			rows: func() []Row { r := fleet(); r[2].Renewed = false; return r }(),
			want: []string{"s03", "s05"},
		},
		{
			name: "rows being handed over or expired are passed over",
			rows: func() []Row { r := fleet(); r[2].HandoffTo = "c"; r[3].HandoffTo = "c"; return r }(),
			in:   func(in *Listing) { in.Expired = set("s04") },
			want: []string{"s05", "s07"},
		},
		{name: "one other worker: one deputy", rows: append(rows(0, 2, "a"), rows(2, 2, "b")...), want: []string{"s02"}},
		{name: "nobody else runs a lease: none", rows: rows(0, 4, "a")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Listing{Me: "a", Rows: tc.rows, Held: set("s00", "s01"), First: "s00"}
			if tc.in != nil {
				tc.in(&in)
			}
			var got []string
			for _, l := range NameDeputies(in) {
				got = append(got, l.Shard)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestDeputiesFor(t *testing.T) {
	ls := noted(append(rows(0, 3, "b"), rows(3, 1, "c")...), map[string]string{"s01": "deputy s00 1", "s02": "deputy s00 2", "s03": "deputy s00 3 wake"})
	assert.Equal(t, map[string]bool{"b": true, "c": true}, DeputiesFor(ls, "s00"), "owners, each once")
	assert.Empty(t, DeputiesFor(ls, "s02"))
	ls[3].Owner = ""
	assert.Equal(t, map[string]bool{"b": true}, DeputiesFor(ls, "s00"), "a free row names nobody")
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
	wakes, woken := Wakes(in, p, in.Held, nil, nil, t0, L)
	assert.Equal(t, []string{"s06", "s08"}, shards(wakes), "b and c are woken, by owner")
	assert.False(t, wakes[0].Watch || wakes[1].Watch, "for loads alone: one listing is enough")
	assert.Equal(t, Woken{At: t0, Load: 2, Wait: L}, woken["b"])

	again, _ := Wakes(in, p, in.Held, nil, woken, t0.Add(L/2), L)
	assert.Empty(t, again, "not again within the wait")

	again, woken = Wakes(in, p, in.Held, nil, woken, t0.Add(L), L)
	assert.Len(t, again, 2)
	assert.Equal(t, 2*L, woken["b"].Wait, "its load did not move: the wait doubles")

	for range 10 {
		_, woken = Wakes(in, p, in.Held, nil, woken, woken["b"].At.Add(woken["b"].Wait), L)
	}
	assert.Equal(t, 32*L, woken["b"].Wait, "at most 32 lease durations")

	noDeputy, _ := Wakes(in, p, in.Held, set("s06"), nil, t0, L)
	assert.Equal(t, []string{"s07", "s08"}, shards(noDeputy), "no wake on the row just named deputy")
	onDeputy, _ := Wakes(in, p, in.Held, set("s06", "s07"), nil, t0, L)
	assert.Equal(t, []Intent{{Kind: WakeDeputy, Row: in.Rows[6]}, {Kind: Wake, Row: in.Rows[8]}}, onDeputy,
		"an owner whose rows all name it deputy is woken with the naming")
	deputyNoted := in
	deputyNoted.Rows = noted(append([]Row(nil), in.Rows...), map[string]string{"s08": "deputy s00 1"})
	viaNote, _ := Wakes(deputyNoted, p, in.Held, nil, nil, t0, L)
	assert.Equal(t, []Intent{{Kind: Wake, Row: in.Rows[6]}, {Kind: WakeDeputy, Row: deputyNoted.Rows[8]}}, viaNote,
		"a deputy is woken like anyone")

	capped := Listing{Me: "a", Rows: append(rows(0, 5, "a"), rows(5, 4, "b")...), Held: heldBy(rows(0, 5, "a"), "a"), MaxLeases: 5, Stalled: set("s08")}
	stalled, _ := Wakes(capped, PlanRound(capped, seeded()), capped.Held, nil, nil, t0, L)
	assert.Empty(t, stalled, "b at its share: a stalled lease wakes nobody above their share")
	capped.Rows = append(append(rows(0, 5, "a"), rows(5, 2, "b")...), rows(7, 2, "c")...)
	capped.Stalled = set("s07", "s08")
	stalled, _ = Wakes(capped, PlanRound(capped, seeded()), capped.Held, nil, nil, t0, L)
	assert.Equal(t, []string{"s05"}, shards(stalled), "at its cap, me wakes the owners below their share for the leases it could not take when they expire")
	assert.True(t, stalled[0].Watch, "those leases must expire for the woken: they list on")

	free := Listing{Me: "a", Rows: append(append(rows(0, 3, "a"), rows(3, 1, "b")...), rows(4, 2, "")...), Held: heldBy(rows(0, 3, "a"), "a")}
	freeWakes, _ := Wakes(free, PlanRound(free, seeded()), free.Held, nil, nil, t0, L)
	assert.Equal(t, []Intent{{Kind: Wake, Row: free.Rows[3]}}, freeWakes, "for free leases: one listing takes them, no watch")
	free.Rows[4].Owner, free.Expired = "c", set("s04")
	expiredWakes, _ := Wakes(free, PlanRound(free, seeded()), free.Held, nil, nil, t0, L)
	assert.True(t, len(expiredWakes) == 1 && expiredWakes[0].Watch, "an expired lease left open: the woken time it themselves")

	gone := Listing{Me: "a", Rows: rows(0, 9, "a"), Held: heldBy(rows(0, 9, "a"), "a")}
	_, woken = Wakes(gone, PlanRound(gone, seeded()), gone.Held, nil, woken, t0, L)
	assert.Empty(t, woken, "owners no longer live are forgotten")

	balanced := Listing{Me: "a", Rows: append(rows(0, 5, "a"), rows(5, 4, "b")...), Held: heldBy(rows(0, 5, "a"), "a")}
	none, _ := Wakes(balanced, PlanRound(balanced, seeded()), balanced.Held, nil, nil, t0, L)
	assert.Empty(t, none, "loads that differ by one: nobody is woken")
}

func TestCoordinatorNotes(t *testing.T) {
	in := Listing{Me: "a", Rows: append(rows(0, 6, "a"), rows(6, 2, "b")...), Held: heldBy(rows(0, 6, "a"), "a"), First: "s00"}
	notes, _ := CoordinatorNotes(in, PlanRound(in, seeded()), in.Held, nil, time.Unix(1000, 0), time.Second)
	assert.Equal(t, []Intent{{Kind: Deputy, Row: in.Rows[6], Names: "s00"}, {Kind: Wake, Row: in.Rows[7]}}, notes, "the deputy first, then a wake on another row")
	three := Listing{Me: "a", Rows: append(append(rows(0, 6, "a"), rows(6, 1, "b")...), rows(7, 1, "c")...), Held: heldBy(rows(0, 6, "a"), "a"), First: "s00"}
	notes, _ = CoordinatorNotes(three, PlanRound(three, seeded()), three.Held, nil, time.Unix(1000, 0), time.Second)
	assert.Equal(t, []Intent{{Kind: Deputy, Row: three.Rows[6], Names: "s00"}, {Kind: Deputy, Row: three.Rows[7], Names: "s00"},
		{Kind: WakeDeputy, Row: three.Rows[6], Names: "s00"}, {Kind: WakeDeputy, Row: three.Rows[7], Names: "s00"}}, notes,
		"two deputies, each woken with its naming: they have no other row")
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
	ls := append(append(rows(0, 2, "a"), rows(2, 3, "b")...), rows(5, 2, "c")...)
	assert.Equal(t, []string{"s02", "s05"}, shards(PassLead(ls, "a", "s00")), "no deputy: the first row of two other workers")

	assert.Equal(t, []string{"s06", "s02"}, shards(PassLead(noted(ls, map[string]string{"s06": "deputy s00 1"}), "a", "s00")), "the deputy's row first")

	ls[2].Finished, ls[3].HandoffTo = true, "a"
	assert.Equal(t, []string{"s04", "s05"}, shards(PassLead(noted(ls, nil), "a", "s00")), "finished rows and rows being handed over are passed over")

	assert.Empty(t, PassLead(rows(0, 2, "a"), "a", "s00"), "nobody else")
}
