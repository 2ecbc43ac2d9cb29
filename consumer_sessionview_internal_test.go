package shardlease

import (
	"context"
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

// A kept lease whose session alone moved since this worker last observed it
// is timed from the moment this worker first saw the session at its new
// counter, by any read (a look at another lease it keeps): not from the
// listing that shows the lease again. A lease whose own row moved, or a
// sighting older than the last observation, is timed from now.
func TestSessionViewTimesAKeptLeaseFromTheSessionsFirstSighting(t *testing.T) {
	const s = "orders:@h#0000000000000001"
	kept := func(shard string, counter int64) Lease {
		return Lease{Key: LeaseKey{Stream: "orders", Shard: shard}, Owner: "h#0000000000000001", Counter: counter, Session: s, SessionGen: 7}
	}
	row := func(counter int64) Worker {
		return Worker{Stream: "orders", Owner: "h#0000000000000001", Gen: 7, Counter: counter, Duration: time.Second}
	}
	l, first := kept("shardId-000000000001", 4), kept("shardId-000000000000", 2)
	key := l.Key.String()
	for _, tc := range []struct {
		name   string
		listed Lease
		// look: the session's new counter was seen by a look after the
		// last observation; early: before it.
		look, early bool
		fromNow     bool
	}{
		{"only the session moved, seen by a look since", l, true, false, false},
		{"only the session moved, seen first by this listing", l, false, false, true},
		{"only the session moved, seen before the last observation", l, false, true, true},
		{"the lease's own row moved too", kept("shardId-000000000001", 5), true, false, true},
	} {
		v := newSessionView(nil)
		obs := map[string]observation{}
		v.rows[s] = row(9)
		v.observe(obs, key, l, time.Now().Add(-10*time.Second))
		before := time.Now()
		if tc.look || tc.early {
			v.rows[s] = row(10)
			v.seen(first) // a look at the first lease, which the session keeps too
		}
		if tc.early {
			o := obs[key]
			o.changed = time.Now() // the last observation came after the look (a listing that read the session late)
			obs[key] = o
		}
		v.rows[s] = row(10)
		now := time.Now()
		if tc.look {
			now = now.Add(5 * time.Second)
		}
		o := v.observe(obs, key, tc.listed, now)
		if tc.fromNow {
			assert.Equal(t, now, o.changed, tc.name)
			continue
		}
		assert.False(t, o.changed.Before(before), "%s: changed %v, before the sighting at %v", tc.name, o.changed, before)
		assert.True(t, o.changed.Before(now), "%s: timed from the listing, not the sighting", tc.name)
		assert.Equal(t, o.changed, v.observe(obs, key, l, now.Add(time.Second)).changed, "%s: the same mark again moves nothing", tc.name)
	}
}

// A look that finds the watched lease taken from a holder whose session is
// over (fenced by the taker) names that holder: its other leases wait for
// a worker that lists them. A handoff by a live session, the same holder,
// or a row no session kept names nobody.
func TestSessionViewLeftByAHolderWhoseSessionIsOver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := NewMemoryStore()
	c, err := NewConsumer(idleKinesis{}, store, "orders", func(context.Context, *Batch) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	w, err := store.OpenSession(ctx, "orders", "h#1")
	if err != nil {
		t.Fatal(err)
	}
	key := LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
	prev := Lease{Key: key, Owner: "h#1", Counter: 3, Session: w.Key(), SessionGen: w.Gen}
	taken := Lease{Key: key, Owner: "t#2", Counter: 4, Session: "orders:@t#2", SessionGen: 5}
	v := newSessionView(store)

	_, ok := v.leftBy(ctx, c, prev, taken)
	assert.False(t, ok, "the holder's session lives: a handoff")
	_, ok = v.leftBy(ctx, c, prev, prev)
	assert.False(t, ok, "the row did not move")
	unkept := prev
	unkept.Session, unkept.SessionGen = "", 0
	_, ok = v.leftBy(ctx, c, unkept, taken)
	assert.False(t, ok, "no session kept the row")

	ended, err := store.FenceSession(ctx, w)
	if err != nil || !ended {
		t.Fatalf("fence: ended %v, %v", ended, err)
	}
	left, ok := v.leftBy(ctx, c, prev, taken)
	assert.True(t, ok, "the holder's session is over")
	assert.Equal(t, "h#1", left)
}

// A worker row whose session was opened again after a fence deleted it
// starts at a counter the older generation was seen at: it is a row that
// moved, not one that stood still, and is not removed as a gone worker's.
func TestLiveWorkersJudgeASessionOpenedAgainAsMoved(t *testing.T) {
	t.Parallel()
	c, err := NewConsumer(idleKinesis{}, NewMemoryStore(), "orders", func(context.Context, *Batch) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	sc := &scheduler{c: c, wobs: map[string]observation{}}
	w := Worker{Stream: "orders", Owner: "h#1", Gen: 7, Counter: 1}
	t0 := time.Now().Add(-time.Hour)
	assert.Equal(t, []string{"h#1"}, sc.liveWorkers(t.Context(), []Worker{w}, t0), "first seen")
	again := w
	again.Gen = 8 // fenced, deleted, and opened again: counter 1 once more
	later := t0.Add(2 * c.cfg.leaseDuration)
	assert.Equal(t, []string{"h#1"}, sc.liveWorkers(t.Context(), []Worker{again}, later), "a new generation is a row that moved")
	assert.Empty(t, sc.liveWorkers(t.Context(), []Worker{again}, later.Add(2*c.cfg.leaseDuration)), "the new generation standing still is gone")
}
