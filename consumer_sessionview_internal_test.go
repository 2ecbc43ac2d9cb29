package shardlease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A session's lease duration, once seen, is waited out even after its row
// is gone (an operator's tool ended the session): its holder runs its other
// leases until its cut-off, timed on that duration.
func TestSessionViewWaitsTheLongestDurationSeen(t *testing.T) {
	v := newSessionView(nil)
	l := Lease{Key: LeaseKey{Stream: "orders", Shard: "shardId-000000000001"}, Owner: "h#0000000000000001", Counter: 4,
		Session: "orders:@h#0000000000000001", SessionGen: 7}
	own := 300 * time.Millisecond
	assert.Equal(t, own, v.wait(l, own), "a session never seen: the taker's own duration")

	v.rows[l.Session] = Worker{Stream: "orders", Owner: "h#0000000000000001", Gen: 7, Counter: 9, Duration: 3 * time.Second}
	v.seen(l)
	assert.Equal(t, 3*time.Second, v.wait(l, own), "the holder's, from its session row")

	v.rows[l.Session] = Worker{} // gone
	v.seen(l)
	assert.Equal(t, 3*time.Second, v.wait(l, own), "still the holder's once the row is gone")

	v.rows[l.Session] = Worker{Stream: "orders", Owner: "h#0000000000000001", Gen: 8, Counter: 1, Duration: time.Second}
	assert.Equal(t, 3*time.Second, v.wait(l, own), "a new generation's row says nothing of the lease's")
}

// A holder judges its own row moved from a listing only when the listing is
// not older than its take: gone, at a higher counter, or at its counter
// with another owner or session. A listing from before the take (a lower
// counter, another owner) is no news.
func TestRowMovedJudgesOnlyListingsAfterTheTake(t *testing.T) {
	held := Lease{Key: LeaseKey{Stream: "orders", Shard: "shardId-000000000001"}, Owner: "h#1", Counter: 4, Session: "orders:@h#1", SessionGen: 7}
	for _, tc := range []struct {
		name   string
		listed func(l Lease) Lease
		ok     bool
		moved  bool
	}{
		{"as held", func(l Lease) Lease { return l }, true, false},
		{"gone or corrupt", func(l Lease) Lease { return Lease{} }, false, true},
		{"taken by another", func(l Lease) Lease { l.Owner, l.Counter, l.Session = "thief", 5, ""; return l }, true, true},
		{"freed at its counter", func(l Lease) Lease { l.Owner, l.Session = "", ""; return l }, true, true},
		{"kept by another session at its counter", func(l Lease) Lease { l.Session = "orders:@x#2"; return l }, true, true},
		{"a listing from before the take", func(l Lease) Lease { l.Owner, l.Counter, l.Session = "old", 3, ""; return l }, true, false},
		{"a checkpoint or handoff request since", func(l Lease) Lease { l.Checkpoint, l.HandoffTo = "49", "b#3"; return l }, true, false},
	} {
		assert.Equal(t, tc.moved, rowMoved(held, tc.listed(held), tc.ok), tc.name)
	}
}
