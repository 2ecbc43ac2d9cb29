package balance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestDueBefore(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// a holds s00 to s03 (s00 expired already), b s04, me (c) s05.
	in := Listing{Me: "c", Rows: append(append(rows(0, 4, "a"), rows(4, 1, "b")...), rows(5, 1, "c")...),
		Held: set("s05"), Expired: set("s00"), Refused: set("s03")}
	at := map[string]time.Time{
		"s00": t0, "s01": t0.Add(time.Second), "s02": t0.Add(5 * time.Second), "s03": t0.Add(time.Second),
		"s04": t0.Add(3 * time.Second), "s05": t0,
	}
	due := DueBefore(in, at, t0.Add(4*time.Second))
	assert.Equal(t, []Deadline{{Row: in.Rows[1], At: at["s01"]}, {Row: in.Rows[4], At: at["s04"]}}, due,
		"before the next listing, held by others, neither expired already nor refused")
	first, ok := Earliest(due)
	assert.True(t, ok)
	assert.Equal(t, at["s01"], first)
	_, ok = Earliest(nil)
	assert.False(t, ok)
}

// takeAll drives the takes of one tick, each failing when fails holds its
// shard, and returns the shards tried in order.
func takeAll(d *DueTakes, fails map[string]bool) []string {
	var out []string
	for {
		l, ok := d.Next()
		if !ok {
			return out
		}
		out = append(out, l.Shard)
		d.Done(!fails[l.Shard])
	}
}

func TestTakeDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	due := func(shards ...string) []Deadline {
		var out []Deadline
		for i, s := range shards {
			out = append(out, Deadline{Row: Row{Shard: s, Owner: "a"}, At: t0.Add(time.Duration(i) * time.Millisecond)})
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		due         []Deadline
		skip, fails map[string]bool
		held, most  int
		want        []string
		ahead       int
	}{
		{name: "the first lease first, then by shard", due: due("s03", "s01", "s00"), want: []string{"s00", "s01", "s03"}},
		{name: "deadlines still ahead wait", due: append(due("s02"), Deadline{Row: Row{Shard: "s00"}, At: t0.Add(time.Hour)}), want: []string{"s02"}, ahead: 1},
		{name: "never beyond the cap", due: due("s03", "s01", "s00"), held: 3, most: 5, want: []string{"s00", "s01"}},
		{name: "a take that failed does not count", due: due("s03", "s01", "s00"), held: 3, most: 5, fails: set("s00"), want: []string{"s00", "s01", "s03"}},
		{name: "rows that moved since are skipped", due: due("s03", "s01", "s00"), skip: set("s00"), want: []string{"s01", "s03"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ahead := TakeDue(tc.due, t0.Add(time.Second), "s00", tc.skip, tc.held, tc.most)
			assert.Equal(t, tc.want, takeAll(d, tc.fails))
			assert.Len(t, ahead, tc.ahead)
		})
	}
}

func TestRoundIntentKinds(t *testing.T) {
	assert.Equal(t, "take first", TakeFirst.String())
	assert.Equal(t, "unknown", Kind(0).String())
}
