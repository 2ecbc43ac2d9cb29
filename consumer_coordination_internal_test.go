package shardlease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/shardlease/shardlease/internal/balance"
)

// A leaving coordinator passes the lead to live holders, never to the
// owner left on a finished row (its release failed, or it crashed at the
// shard's end): the last listing's rows reach balance marked finished.
func TestPassLeadSkipsFinishedRows(t *testing.T) {
	t.Parallel()
	row := func(shard, owner, checkpoint string) Lease {
		return Lease{Key: LeaseKey{Stream: "s", Shard: shard}, Owner: owner, Counter: 3, Checkpoint: checkpoint}
	}
	var rows []balance.Row
	for _, l := range []Lease{
		row("a-parent", "gone", ShardEnd),
		row("b-child", "me", "49"),
		row("c-child", "w1", "49"),
		row("d-child", "w2", "49"),
	} {
		rows = append(rows, rowOf(l))
	}
	var owners []string
	for _, it := range balance.PassLead(rows, "me", "b-child") {
		owners = append(owners, it.Row.Owner)
	}
	if len(owners) != 2 || owners[0] != "w1" || owners[1] != "w2" {
		t.Fatalf("lead passed to %v; want [w1 w2], not the finished row's owner", owners)
	}
}

// idleKinesis is a Kinesis client no test here calls.
type idleKinesis struct{ KinesisAPI }

// newTestCoordination returns the coordination of a worker that has not
// run, in role r, and its scheduler's wake channel.
func newTestCoordination(t *testing.T, r role) (*coordination, chan struct{}) {
	t.Helper()
	c, err := NewConsumer(idleKinesis{}, NewMemoryStore(), "orders", func(context.Context, *Batch) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	sc := &scheduler{c: c, obs: map[string]observation{}, pending: map[string]time.Time{}, wake: make(chan struct{}, 1)}
	sc.cd = newCoordination(sc)
	t.Cleanup(func() { sc.cd.lookTimer.Stop(); sc.cd.expiry.Stop() })
	if sc.cd.role != catchingUp {
		t.Fatalf("a worker with notes starts %v; want catching up", sc.cd.role)
	}
	sc.cd.become(r, balance.RoundEnded)
	return &sc.cd, sc.wake
}

// Entering the coordinator's role rebuilds its state: a fresh wake backoff,
// no watch, no ask to lead, Stats().Coordinating; its next rounds keep the
// backoff; leaving it drops the backoff.
func TestBecomeCoordinatorRebuildsItsState(t *testing.T) {
	t.Parallel()
	cd, _ := newTestCoordination(t, catchingUp)
	cd.watch = watch{row: "s:shardId-1", until: time.Now().Add(time.Hour), stallAt: time.Now()}
	cd.led = true
	cd.on(balance.RoundEnded, balance.RoleFacts{Leading: true})
	assert.Equal(t, coordinator, cd.role)
	assert.Equal(t, watch{}, cd.watch, "the coordinator starts without a watch")
	assert.False(t, cd.led, "a round's end ends the ask to lead")
	assert.NotNil(t, cd.lead)
	assert.Empty(t, cd.lead.woken)
	assert.True(t, cd.c.Stats().Coordinating)

	cd.lead.woken["w1"] = balance.Woken{Load: 1}
	cd.on(balance.RoundEnded, balance.RoleFacts{Leading: true})
	assert.Equal(t, 1, len(cd.lead.woken), "a coordinator's next round keeps its wake backoff")

	cd.on(balance.RoundEnded, balance.RoleFacts{MoreToDo: true})
	assert.Equal(t, catchingUp, cd.role)
	assert.Nil(t, cd.lead)
	assert.False(t, cd.c.Stats().Coordinating)
	cd.on(balance.RoundEnded, balance.RoleFacts{Leading: true})
	assert.Empty(t, cd.lead.woken, "a coordinator anew starts with no backoff")
}

// A lead note makes a resting worker list and take as the coordinator
// does, until its next round ends; a wake note meanwhile keeps the ask, a
// wake note alone never makes it.
func TestLeadNoteAsksUntilTheRoundEnds(t *testing.T) {
	t.Parallel()
	cd, wake := newTestCoordination(t, quiet)
	cd.onNote(noteSeen{shard: "s:shardId-2", text: "wake 1"})
	assert.Equal(t, catchingUp, cd.role)
	assert.False(t, cd.leads(), "a wake asks nobody to lead")
	assert.Len(t, wake, 1, "a wake asks for a round")
	<-wake

	cd.on(balance.RoundEnded, balance.RoleFacts{})
	assert.Equal(t, quiet, cd.role)
	cd.onNote(noteSeen{shard: "s:shardId-2", text: balance.NoteText(balance.Intent{Kind: balance.Lead}, "", 7)})
	assert.Equal(t, catchingUp, cd.role)
	assert.True(t, cd.leads())
	assert.True(t, cd.live.listUntil.After(time.Now()), "a lead lists on until it can judge what stands still")
	cd.onNote(noteSeen{shard: "s:shardId-2", text: "wake 2"})
	assert.True(t, cd.leads(), "a wake keeps the ask to lead")
	cd.on(balance.RoundEnded, balance.RoleFacts{MoreToDo: true})
	assert.Equal(t, catchingUp, cd.role)
	assert.False(t, cd.leads(), "the ask ends with the round")
}

// A deputy note makes a resting worker the deputy of the first lease it
// names; a note that replaces it on that row ends the naming, and the
// worker watches on for a while; a deputy note with a wake makes it list.
func TestDeputyNoteNamesAndUnnames(t *testing.T) {
	t.Parallel()
	cd, wake := newTestCoordination(t, quiet)
	cd.onNote(noteSeen{shard: "s:shardId-5", text: balance.NoteText(balance.Intent{Kind: balance.Deputy}, "s:shardId-0", 3)})
	assert.Equal(t, deputy, cd.role)
	assert.Equal(t, "s:shardId-5", cd.watch.row)
	assert.Equal(t, "s:shardId-0", cd.first)
	assert.Empty(t, wake)

	cd.onNote(noteSeen{shard: "s:shardId-5", text: "please hand this over"})
	assert.Equal(t, watching, cd.role, "the naming ended: it watches on")
	assert.Empty(t, cd.watch.row)
	assert.True(t, cd.watch.until.After(time.Now()))

	cd.onNote(noteSeen{shard: "s:shardId-6", text: balance.NoteText(balance.Intent{Kind: balance.WakeDeputy}, "s:shardId-0", 4)})
	assert.Equal(t, catchingUp, cd.role, "named with a wake: it lists")
	assert.Equal(t, "s:shardId-6", cd.watch.row)
	assert.Len(t, wake, 1)
	cd.on(balance.RoundEnded, balance.RoleFacts{})
	assert.Equal(t, deputy, cd.role, "its round rests it as the deputy")

	// Notes of an earlier release named the first lease by its shard id
	// (a Consumer's) or as "stream/shard" (a Group's): both name its row.
	for _, first := range []string{"shardId-0", "s/shardId-0"} {
		cd.first = ""
		cd.onNote(noteSeen{shard: "s:shardId-6", text: "deputy " + first + " 5"})
		assert.Equal(t, "s:shardId-0", cd.first, first)
	}
}

// A worker whose store carries no notes never changes role.
func TestUncoordinatedNeverChanges(t *testing.T) {
	t.Parallel()
	cd, _ := newTestCoordination(t, uncoordinated)
	cd.onNote(noteSeen{shard: "s:shardId-1", text: "lead 1"})
	cd.on(balance.RoundEnded, balance.RoleFacts{Leading: true})
	cd.on(balance.Alarm, balance.RoleFacts{})
	assert.Equal(t, uncoordinated, cd.role)
	assert.False(t, cd.leads(), "nobody can ask it to lead")
}

// A deputy looks at the first lease it watches itself, every take interval,
// beside the rota, when its listing showed several streams' first leases (a
// Group's table, where the rota's turns fall mostly to workers watching
// another stream's first lease); with one stream's it leaves the looks to
// the rota.
func TestDeputyOfSeveralStreamsLooksItselfBesideTheRota(t *testing.T) {
	t.Parallel()
	cd, _ := newTestCoordination(t, deputy)
	cd.sessions = newSessionView(cd.c.caps.sessions)
	first, mine := "orders:shardId-000000000000", "orders:shardId-000000000001"
	cd.first, cd.watch.row = first, mine
	cd.recent = []Lease{
		{Key: keyOf(first), Owner: "coord#1", Counter: 3},
		{Key: keyOf(mine), Owner: cd.c.cfg.identity, Counter: 2},
	}
	cd.c.mu.Lock()
	cd.c.held[mine] = nil // runs it (holds reads the key alone)
	cd.c.mu.Unlock()
	_, rota := cd.rotaLooks()
	if !rota {
		t.Fatal("the rota has no candidate; want this worker's lease")
	}

	cd.firsts = 1
	cd.onLook(t.Context())
	_, looked := cd.obs[first]
	assert.False(t, looked, "one stream's first lease: the rota's turns are the looks")

	cd.firsts = 2
	cd.onLook(t.Context())
	_, looked = cd.obs[first]
	assert.True(t, looked, "several streams' first leases: the deputy reads the first lease itself")
}

// A look that finds the first lease taken from a holder whose session is
// over (fenced by the taker) raises the alarm with that holder as the
// suspect, so that this worker lists for its other leases (of streams the
// taker may not read); a handoff by a live session raises nothing.
func TestLookAtAFirstLeaseTakenFromASessionThatIsOver(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{false, true} {
		cd, wake := newTestCoordination(t, deputy)
		store := cd.c.store.(*MemoryStore)
		cd.sessions = newSessionView(store)
		ctx := WithHolderLeaseDuration(t.Context(), 20*time.Second)
		first := "orders:shardId-000000000000"
		cd.first = first
		if _, err := store.Create(ctx, keyOf(first), nil); err != nil {
			t.Fatal(err)
		}
		hs, err := store.OpenSession(ctx, "orders", "h#1")
		if err != nil {
			t.Fatal(err)
		}
		held, err := store.AcquireInSession(ctx, keyOf(first), hs, 0)
		if err != nil {
			t.Fatal(err)
		}
		cd.firstRow = held // as the last listing showed it
		if fenced {
			if ended, err := store.FenceSession(ctx, hs); err != nil || !ended {
				t.Fatalf("fence: %v, %v", ended, err)
			}
		}
		ts, err := store.OpenSession(ctx, "orders", "t#2")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.AcquireInSession(ctx, keyOf(first), ts, held.Counter); err != nil {
			t.Fatal(err)
		}
		cd.lookAtFirst(ctx)
		if !fenced {
			assert.Equal(t, deputy, cd.role, "taken from a live session (a handoff): no alarm")
			assert.Empty(t, cd.suspect)
			continue
		}
		assert.Equal(t, alarmed, cd.role, "taken from a session that is over: this worker lists")
		assert.Equal(t, "h#1", cd.suspect, "the holder whose other leases it lists for")
		select {
		case <-wake:
		default:
			t.Error("the alarm asks for a take round at once")
		}
	}
}
