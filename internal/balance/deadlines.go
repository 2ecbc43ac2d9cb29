package balance

import (
	"slices"
	"strings"
	"time"
)

// Deadline is a lease held by another worker and the moment it expires for
// me: a lease duration after me first saw its counter.
type Deadline struct {
	Row Row
	At  time.Time
}

// DueBefore returns the leases held by others that expire for me before
// next (its next listing), so that each is taken at that moment instead.
// expiresAt holds, by shard, when a row's lease duration runs out as me
// timed it. Leases expired already are left to the round's own takes.
func DueBefore(in Listing, expiresAt map[string]time.Time, next time.Time) []Deadline {
	var out []Deadline
	for _, l := range in.Rows {
		id := l.Shard
		if l.Owner == "" || l.Owner == in.Me || in.Held[id] || in.Skip[id] || in.Expired[id] || in.Refused[id] {
			continue
		}
		if at, ok := expiresAt[id]; ok && at.Before(next) {
			out = append(out, Deadline{Row: l, At: at})
		}
	}
	return out
}

// Earliest returns the first of the deadlines, and false when there is
// none.
func Earliest(due []Deadline) (time.Time, bool) {
	if len(due) == 0 {
		return time.Time{}, false
	}
	return slices.MinFunc(due, func(a, b Deadline) int { return a.At.Compare(b.At) }).At, true
}

// DueTakes hands out the deadline takes of one expiry tick, one at a time:
// the first lease first (whoever holds it coordinates), then by shard, and
// none once me runs MaxLeases. The caller reports each take's outcome with
// Done before asking for the next.
type DueTakes struct {
	due        []Deadline
	skip       map[string]bool
	held, most int
	i          int
}

// TakeDue splits due at now into the takes of this tick and the deadlines
// still ahead. first is the first readable lease; skip are the shards not
// to take (the row moved since it was seen, or a runner of me still ends
// there); held is how many leases me runs, most its cap (0: none).
func TakeDue(due []Deadline, now time.Time, first string, skip map[string]bool, held, most int) (*DueTakes, []Deadline) {
	var passed, ahead []Deadline
	for _, d := range due {
		if d.At.After(now) {
			ahead = append(ahead, d)
		} else {
			passed = append(passed, d)
		}
	}
	slices.SortFunc(passed, func(a, b Deadline) int {
		if (a.Row.Shard == first) != (b.Row.Shard == first) {
			if a.Row.Shard == first {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Row.Shard, b.Row.Shard)
	})
	return &DueTakes{due: passed, skip: skip, held: held, most: most}, ahead
}

// Next returns the next lease to take, or false when the tick is done.
func (d *DueTakes) Next() (Row, bool) {
	for d.i < len(d.due) {
		l := d.due[d.i].Row
		d.i++
		if d.most > 0 && d.held >= d.most || d.skip[l.Shard] {
			continue
		}
		return l, true
	}
	return Row{}, false
}

// Done reports whether the take Next returned last succeeded.
func (d *DueTakes) Done(ok bool) {
	if ok {
		d.held++
	}
}
