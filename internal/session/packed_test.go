package session

import (
	"slices"
	"testing"
	"time"
)

func TestPackedValid(t *testing.T) {
	const s = "orders:@a"
	for _, tc := range []struct {
		name       string
		rowSession string
		rowCounter int64
		counter    int64
		want       bool
	}{
		{"the holding that wrote it", s, 7, 7, true},
		{"the row written since (a flush, a handoff request answered)", s, 8, 7, false},
		{"the lease taken by another session", "orders:@b", 7, 7, false},
		{"the lease released (no session)", "", 7, 7, false},
	} {
		if got := Valid(tc.rowSession, tc.rowCounter, s, tc.counter); got != tc.want {
			t.Errorf("%s: Valid = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPackedIdle(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name    string
		landed  bool
		changed time.Time
		want    bool
	}{
		{"landed and still for the whole wait", true, now.Add(-10 * time.Second), true},
		{"landed, moved within the wait", true, now.Add(-9 * time.Second), false},
		{"not landed yet: never flushed from the pack alone", false, now.Add(-time.Hour), false},
	} {
		if got := Idle(tc.landed, tc.changed, now, 10*time.Second); got != tc.want {
			t.Errorf("%s: Idle = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPackedDiff(t *testing.T) {
	for _, tc := range []struct {
		name      string
		want      map[string]Want
		sent      map[string]Sent
		put, drop []string
	}{
		{
			name: "a new checkpoint is put",
			want: map[string]Want{"a": {Counter: 3, At: "10/-1"}},
			put:  []string{"a"},
		},
		{
			name: "one that landed is not put again",
			want: map[string]Want{"a": {Counter: 3, At: "10/-1"}},
			sent: map[string]Sent{"a": {Counter: 3, At: "10/-1"}},
		},
		{
			name: "a moved checkpoint or a new holding is put",
			want: map[string]Want{"a": {Counter: 3, At: "11/-1"}, "b": {Counter: 5, At: "20/-1"}},
			sent: map[string]Sent{"a": {Counter: 3, At: "10/-1"}, "b": {Counter: 4, At: "20/-1"}},
			put:  []string{"a", "b"},
		},
		{
			name: "the row holds it (a flush, a final write): the entry goes",
			want: map[string]Want{"a": {Counter: 4, At: "10/-1", RowHolds: true}},
			sent: map[string]Sent{"a": {Counter: 3, At: "10/-1"}},
			drop: []string{"a"},
		},
		{
			name: "the row holds it and nothing landed: nothing to write",
			want: map[string]Want{"a": {Counter: 3, At: "10/-1", RowHolds: true}},
		},
		{
			name: "a lease no longer held: its entry goes",
			sent: map[string]Sent{"gone": {Counter: 3, At: "10/-1"}},
			drop: []string{"gone"},
		},
	} {
		put, drop := Diff(tc.want, tc.sent)
		slices.Sort(put)
		slices.Sort(drop)
		if !slices.Equal(put, tc.put) || !slices.Equal(drop, tc.drop) {
			t.Errorf("%s: Diff = put %v drop %v, want put %v drop %v", tc.name, put, drop, tc.put, tc.drop)
		}
	}
}
