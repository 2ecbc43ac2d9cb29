package session

import "testing"

// Two marks of one lease row share a holder when they differ at most in the
// session's counter; a mark of a row no session keeps never does.
func TestSameHolder(t *testing.T) {
	kept := Seen{Owner: "h#1", Counter: 4, Session: "orders:@h#1", Gen: 7, Found: true, RowGen: 7, RowCounter: 9}
	later := kept
	later.RowCounter = 10
	taken := later
	taken.Owner, taken.Counter = "t#2", 5
	regen := later
	regen.Gen, regen.RowGen = 8, 8
	plain := Seen{Owner: "h#1", Counter: 4}
	for _, tc := range []struct {
		name string
		a, b Seen
		want bool
	}{
		{"the session kept since", kept, later, true},
		{"the same mark", kept, kept, true},
		{"the row taken", kept, taken, false},
		{"another generation", kept, regen, false},
		{"no session keeps the row", plain, plain, false},
	} {
		if got := SameHolder(Mark(tc.a), Mark(tc.b)); got != tc.want {
			t.Errorf("%s: SameHolder(%q, %q) = %v; want %v", tc.name, Mark(tc.a), Mark(tc.b), got, tc.want)
		}
	}
}
