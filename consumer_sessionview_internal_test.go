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
