package shardleasetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// sessionTests are the subtests of shardlease.SessionStore, skipped for a
// store that does not implement it: the session on a worker row (open,
// keep, read, fence, mail) and the session's record on the lease rows it
// keeps.
var sessionTests = []struct {
	name string
	fn   func(t *testing.T, s shardlease.LeaseStore)
}{
	{"SessionOpenKeepRead", capable(testSessionOpenKeepRead)},
	{"SessionListedWithItsGeneration", capable(testSessionListed)},
	{"SessionKeepAfterFenceFails", capable(testSessionKeepAfterFence)},
	{"SessionReopenEndsOldGeneration", capable(testSessionReopen)},
	{"SessionFenceOnMovedSessionLeavesIt", capable(testSessionFenceMoved)},
	{"SessionFenceTwiceIsEnded", capable(testSessionFenceTwice)},
	{"SessionMailComesBackOnceWithTheKeep", capable(testSessionMail)},
	{"SessionMailToEndedSessionIsDropped", capable(testSessionMailEnded)},
	{"SessionKeepSentTwiceSucceeds", capable(testSessionKeepTwice)},
	{"SessionRejectsBadInput", capable(testSessionBadInput)},
	{"AcquireInSessionRecordsTheSession", capable(testAcquireInSession)},
	{"AcquireInSessionFencedLikeAcquire", capable(testAcquireInSessionFenced)},
	{"SessionRecordSurvivesRenewCheckpointNoteHandoff", capable(testSessionRecordSurvives)},
	{"ReleaseClearsTheSessionRecord", capable(testReleaseClearsSession)},
	{"AcquireClearsTheSessionRecord", capable(testAcquireClearsSession)},
	{"SessionFenceThenClaim", capable(testSessionFenceThenClaim)},
}

// holderCtx is t's context carrying the holder's lease duration d.
func holderCtx(t *testing.T, d time.Duration) context.Context {
	return shardlease.WithHolderLeaseDuration(t.Context(), d)
}

// open opens owner's session on a fresh stream's worker row.
func open(t *testing.T, ss shardlease.SessionStore, stream, owner string, d time.Duration) shardlease.Worker {
	w, err := ss.OpenSession(holderCtx(t, d), stream, owner)
	require.NoError(t, err)
	return w
}

func testSessionOpenKeepRead(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	stream := uniqueStream(t)
	w := open(t, ss, stream, "a", 20*time.Second)
	assert.Equal(t, stream, w.Stream)
	assert.Equal(t, "a", w.Owner)
	assert.NotZero(t, w.Gen, "an open session has a generation")
	assert.Positive(t, w.Counter)
	assert.Equal(t, 20*time.Second, w.Duration)
	assert.Equal(t, stream+":@a", w.Key())

	kept, mail, err := ss.KeepSession(holderCtx(t, 30*time.Second), w)
	require.NoError(t, err)
	assert.Empty(t, mail)
	assert.Equal(t, w.Gen, kept.Gen, "a keep leaves the generation")
	assert.Equal(t, w.Counter+1, kept.Counter, "a keep bumps the counter")
	assert.Equal(t, 30*time.Second, kept.Duration, "a keep writes the holder's lease duration")

	read, err := ss.ReadSession(ctx, stream, "a")
	require.NoError(t, err)
	assert.Equal(t, kept, read)

	_, err = ss.ReadSession(ctx, stream, "nobody")
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
}

func testSessionListed(t *testing.T, s shardlease.LeaseStore, ws shardlease.WorkerStore) {
	ss, ok := s.(shardlease.SessionStore)
	if !ok {
		t.Skipf("%T does not implement shardlease.SessionStore", s)
	}
	ctx := t.Context()
	stream := uniqueStream(t)
	w := open(t, ss, stream, "a", 20*time.Second)
	plain, err := ws.Heartbeat(ctx, stream, "b")
	require.NoError(t, err)
	_, workers, err := ws.ListWithWorkers(ctx, stream)
	require.NoError(t, err)
	require.Equal(t, []shardlease.Worker{w, plain}, workers, "a listing returns the session's generation and duration, and none on a plain worker row")
	if el, ok := s.(shardlease.EventualLister); ok {
		require.Eventually(t, func() bool {
			_, got, err := el.ListWithWorkersEventually(ctx, stream)
			return err == nil && assert.ObjectsAreEqual([]shardlease.Worker{w, plain}, got)
		}, 5*time.Second, 20*time.Millisecond, "an eventual listing returns the session too")
	}
	if gl, ok := s.(shardlease.GroupLister); ok {
		_, got, err := gl.ListStreams(ctx, []string{stream}, stream, true)
		require.NoError(t, err)
		require.Equal(t, []shardlease.Worker{w, plain}, got)
	}
	// A heartbeat of the old kind bumps the counter and leaves the session.
	beat, err := ws.Heartbeat(ctx, stream, "a")
	require.NoError(t, err)
	assert.Equal(t, w.Counter+1, beat.Counter)
	assert.Equal(t, w.Gen, beat.Gen, "a heartbeat leaves the session's generation")
	assert.Equal(t, w.Duration, beat.Duration, "a heartbeat leaves the session's duration")
	_, _, err = ss.KeepSession(t.Context(), w)
	require.NoError(t, err, "the session lives on after a heartbeat")
}

func testSessionKeepAfterFence(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	stream := uniqueStream(t)
	w := open(t, ss, stream, "a", 20*time.Second)
	seen, err := ss.ReadSession(ctx, stream, "a")
	require.NoError(t, err)
	ended, err := ss.FenceSession(ctx, seen)
	require.NoError(t, err)
	require.True(t, ended, "the session stood at the counter seen")
	_, _, err = ss.KeepSession(ctx, w)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost, "no keep after a fence")
	assert.Contains(t, err.Error(), w.Key(), "the error names the worker row")
	_, err = ss.ReadSession(ctx, stream, "a")
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound, "a fenced session's row is gone")
}

func testSessionReopen(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	stream := uniqueStream(t)
	first := open(t, ss, stream, "a", 20*time.Second)
	second := open(t, ss, stream, "a", 20*time.Second)
	require.NotEqual(t, first.Gen, second.Gen, "every open is a new generation")
	assert.Greater(t, second.Counter, first.Counter, "an open bumps the counter")
	_, _, err := ss.KeepSession(ctx, first)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost, "the earlier generation ended")
	assert.Contains(t, err.Error(), first.Key())
	ended, err := ss.FenceSession(ctx, first)
	require.NoError(t, err)
	assert.True(t, ended, "a generation reopened is over")
	kept, _, err := ss.KeepSession(ctx, second)
	require.NoError(t, err, "fencing an ended generation leaves the row's new one")
	assert.Equal(t, second.Gen, kept.Gen)
}

func testSessionFenceMoved(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	stream := uniqueStream(t)
	seen := open(t, ss, stream, "a", 20*time.Second)
	kept, _, err := ss.KeepSession(ctx, seen)
	require.NoError(t, err)
	ended, err := ss.FenceSession(ctx, seen)
	require.NoError(t, err)
	assert.False(t, ended, "a session kept since it was seen lives")
	again, _, err := ss.KeepSession(ctx, kept)
	require.NoError(t, err, "a refused fence leaves the session")
	assert.Equal(t, kept.Counter+1, again.Counter)
}

func testSessionFenceTwice(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	seen := open(t, ss, uniqueStream(t), "a", 20*time.Second)
	for i := range 2 {
		ended, err := ss.FenceSession(ctx, seen)
		require.NoError(t, err)
		assert.True(t, ended, "fence %d: a session fenced once is over", i+1)
	}
}

func testSessionMail(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	stream := uniqueStream(t)
	w := open(t, ss, stream, "a", 20*time.Second)
	k1 := shardlease.LeaseKey{Stream: stream, Shard: "shardId-000000000001"}
	k0 := shardlease.LeaseKey{Stream: stream, Shard: firstShard}
	for _, k := range []shardlease.LeaseKey{k1, k0, k1} {
		left, err := ss.MailSession(ctx, w, k)
		require.NoError(t, err)
		require.True(t, left)
	}
	kept, mail, err := ss.KeepSession(ctx, w)
	require.NoError(t, err)
	assert.Equal(t, []string{k0.String(), k1.String()}, mail, "the keep returns each lease mailed once, sorted")
	assert.Equal(t, w.Counter+1, kept.Counter)
	_, mail, err = ss.KeepSession(ctx, kept)
	require.NoError(t, err)
	assert.Empty(t, mail, "the keep that returned the mail cleared it")
}

func testSessionMailEnded(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	stream := uniqueStream(t)
	k := shardlease.LeaseKey{Stream: stream, Shard: firstShard}
	old := open(t, ss, stream, "a", 20*time.Second)
	cur := open(t, ss, stream, "a", 20*time.Second)
	left, err := ss.MailSession(ctx, old, k)
	require.NoError(t, err)
	assert.False(t, left, "mail to a reopened generation is dropped")
	_, mail, err := ss.KeepSession(ctx, cur)
	require.NoError(t, err)
	assert.Empty(t, mail, "the new generation gets none of the old one's mail")

	seen, err := ss.ReadSession(ctx, stream, "a")
	require.NoError(t, err)
	ended, err := ss.FenceSession(ctx, seen)
	require.NoError(t, err)
	require.True(t, ended)
	left, err = ss.MailSession(ctx, seen, k)
	require.NoError(t, err)
	assert.False(t, left, "mail to a fenced session is dropped")
	_, err = ss.ReadSession(ctx, stream, "a")
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound, "mail does not make a fenced row again")
}

func testSessionKeepTwice(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	w := open(t, ss, uniqueStream(t), "a", 20*time.Second)
	first, _, err := ss.KeepSession(ctx, w)
	require.NoError(t, err)
	// The same keep sent again, as after a lost reply.
	second, _, err := ss.KeepSession(ctx, w)
	require.NoError(t, err, "a keep needs no counter: sent again, it succeeds again")
	assert.Equal(t, first.Counter+1, second.Counter)
	assert.Equal(t, w.Gen, second.Gen)
}

func testSessionBadInput(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	stream := uniqueStream(t)
	_, err := ss.OpenSession(ctx, stream, "")
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig, "an empty owner id")
	_, err = ss.OpenSession(ctx, "bad stream", "a")
	require.ErrorIs(t, err, shardlease.ErrInvalidName)
	plain := shardlease.Worker{Stream: stream, Owner: "a", Counter: 1}
	_, _, err = ss.KeepSession(ctx, plain)
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig, "generation 0 is no session")
	_, err = ss.FenceSession(ctx, plain)
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig, "generation 0 is no session")
	w := open(t, ss, stream, "a", time.Second)
	_, err = ss.MailSession(ctx, w, shardlease.LeaseKey{Stream: stream})
	require.ErrorIs(t, err, shardlease.ErrInvalidName, "a lease key without a shard")
	k := fresh(t, s)
	_, err = ss.AcquireInSession(ctx, k, plain, 0)
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig, "generation 0 is no session")
}

// keptLease opens owner's session and acquires a fresh row in it.
func keptLease(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore, owner string) (shardlease.Worker, shardlease.Lease) {
	k := fresh(t, s)
	w := open(t, ss, k.Stream, owner, 20*time.Second)
	l, err := ss.AcquireInSession(holderCtx(t, 20*time.Second), k, w, 0)
	require.NoError(t, err)
	return w, l
}

// assertKept asserts that l's row is kept by session w: it names it, and
// carries the lease duration its holder's acquire carried (keptLease's 20
// s), which no later write of the holder changes.
func assertKept(t *testing.T, w shardlease.Worker, l shardlease.Lease, what string) {
	t.Helper()
	assert.Equal(t, w.Key(), l.Session, "%s: the row names the session", what)
	assert.Equal(t, w.Gen, l.SessionGen, "%s: the row names the session's generation", what)
	assert.Equal(t, 20*time.Second, l.Duration, "%s: a kept row carries its holder's lease duration, as its acquire wrote it", what)
}

func testAcquireInSession(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	w, l := keptLease(t, s, ss, "a")
	assert.Equal(t, "a", l.Owner)
	assert.Positive(t, l.Counter)
	assertKept(t, w, l, "acquire in session")
	got, err := s.Get(ctx, l.Key)
	require.NoError(t, err)
	assertKept(t, w, got, "get")
	assert.Equal(t, l.Counter, got.Counter)
	ls, err := s.List(ctx, l.Key.Stream)
	require.NoError(t, err)
	ls = leaseRows(ls)
	require.Len(t, ls, 1)
	assertKept(t, w, ls[0], "list")
	if ns, ok := s.(shardlease.NoteStore); ok {
		require.Eventually(t, func() bool {
			got, err := ns.GetEventually(ctx, l.Key)
			return err == nil && got.Counter == l.Counter && got.Session == w.Key() && got.SessionGen == w.Gen
		}, 5*time.Second, 20*time.Millisecond, "an eventual read shows the record")
	}
}

func testAcquireInSessionFenced(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	_, l := keptLease(t, s, ss, "a")
	b := open(t, ss, l.Key.Stream, "b", 20*time.Second)
	_, err := ss.AcquireInSession(ctx, l.Key, b, l.Counter-1)
	require.ErrorIs(t, err, shardlease.ErrLeaseHeld, "a held row at another counter")
	_, err = ss.AcquireInSession(ctx, shardlease.LeaseKey{Stream: l.Key.Stream, Shard: "shardId-missing"}, b, 0)
	require.ErrorIs(t, err, shardlease.ErrLeaseNotFound)
	taken, err := ss.AcquireInSession(holderCtx(t, 20*time.Second), l.Key, b, l.Counter)
	require.NoError(t, err, "the counter observed")
	assert.Equal(t, "b", taken.Owner)
	assert.Greater(t, taken.Counter, l.Counter, "a claim in session moves the counter up, as Acquire does")
	assertKept(t, b, taken, "taken in session")
	_, err = s.Renew(ctx, l, expiry)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost)
}

func testSessionRecordSurvives(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := shardlease.WithHolderLeaseDuration(t.Context(), time.Minute)
	w, l := keptLease(t, s, ss, "a")
	l, err := s.Renew(ctx, l, expiry)
	require.NoError(t, err)
	assertKept(t, w, l, "renew")
	l, err = s.Checkpoint(ctx, l, "100", -1, expiry)
	require.NoError(t, err)
	assertKept(t, w, l, "checkpoint")
	if ns, ok := s.(shardlease.NoteStore); ok {
		noted, err := ns.Note(ctx, l, "wake 1")
		require.NoError(t, err)
		assertKept(t, w, noted, "note")
	}
	asked, err := s.RequestHandoff(ctx, l, "b")
	require.NoError(t, err)
	assertKept(t, w, asked, "request handoff")
	if hw, ok := s.(shardlease.HandoffWithdrawer); ok {
		withdrawn, err := hw.WithdrawHandoff(ctx, l.Key, "b")
		require.NoError(t, err)
		require.True(t, withdrawn)
	}
	got, err := s.Get(ctx, l.Key)
	require.NoError(t, err)
	assertKept(t, w, got, "after the handoff request")
	assert.Equal(t, l.Counter, got.Counter, "a note and a handoff request leave the counter")
	assert.Equal(t, "100", got.Checkpoint)
}

func testReleaseClearsSession(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	for _, handoff := range []bool{false, true} {
		_, l := keptLease(t, s, ss, "a")
		want := ""
		if handoff {
			asked, err := s.RequestHandoff(ctx, l, "b")
			require.NoError(t, err)
			l.HandoffTo, want = asked.HandoffTo, "b"
		}
		released, err := s.Release(ctx, l)
		require.NoError(t, err)
		assert.Equal(t, want, released.Owner, "handoff %v", handoff)
		got, err := s.Get(ctx, l.Key)
		require.NoError(t, err)
		for _, row := range []shardlease.Lease{released, got} {
			assert.Empty(t, row.Session, "handoff %v: a release clears the session record", handoff)
			assert.Zero(t, row.SessionGen, "handoff %v", handoff)
			assert.Zero(t, row.Duration, "handoff %v", handoff)
		}
		again, err := s.Acquire(ctx, l.Key, "c", got.Counter)
		require.NoError(t, err, "handoff %v: the released row is taken the ordinary way", handoff)
		assert.Empty(t, again.Session)
	}
}

func testAcquireClearsSession(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	_, l := keptLease(t, s, ss, "a")
	ctx := shardlease.WithHolderLeaseDuration(t.Context(), 40*time.Second)
	taken, err := s.Acquire(ctx, l.Key, "b", l.Counter)
	require.NoError(t, err)
	assert.Empty(t, taken.Session, "a plain acquire clears the session record")
	assert.Zero(t, taken.SessionGen)
	assert.Equal(t, 40*time.Second, taken.Duration, "and writes its holder's lease duration")
	got, err := s.Get(ctx, l.Key)
	require.NoError(t, err)
	assert.Empty(t, got.Session)
	assert.Equal(t, 40*time.Second, got.Duration)
	renewed, err := s.Renew(ctx, taken, expiry)
	require.NoError(t, err)
	assert.Empty(t, renewed.Session)
}

func testSessionFenceThenClaim(t *testing.T, s shardlease.LeaseStore, ss shardlease.SessionStore) {
	ctx := t.Context()
	a, held := keptLease(t, s, ss, "a")
	held, err := s.Checkpoint(ctx, held, "200", -1, expiry)
	require.NoError(t, err)
	// b saw a's session stand still: it fences it, then claims the lease
	// on the counter it saw.
	seen, err := ss.ReadSession(ctx, held.Key.Stream, "a")
	require.NoError(t, err)
	ended, err := ss.FenceSession(ctx, seen)
	require.NoError(t, err)
	require.True(t, ended)
	row, err := s.Get(ctx, held.Key)
	require.NoError(t, err)
	b := open(t, ss, held.Key.Stream, "b", 20*time.Second)
	claimed, err := ss.AcquireInSession(holderCtx(t, 20*time.Second), held.Key, b, row.Counter)
	require.NoError(t, err)
	assertKept(t, b, claimed, "claim")
	assert.Equal(t, "200", claimed.Checkpoint, "the claim keeps the checkpoint")
	_, err = ss.AcquireInSession(ctx, held.Key, b, row.Counter)
	require.ErrorIs(t, err, shardlease.ErrLeaseHeld, "the claim succeeds once")
	c := open(t, ss, held.Key.Stream, "c", 20*time.Second)
	_, err = s.Acquire(ctx, held.Key, c.Owner, row.Counter)
	require.ErrorIs(t, err, shardlease.ErrLeaseHeld, "no other claim on the counter seen")

	// The fenced holder is refused everywhere, and its progress does not
	// move the row's back.
	_, _, err = ss.KeepSession(ctx, a)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost)
	_, err = s.Checkpoint(ctx, held, "100", -1, expiry)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost, "the fenced holder's checkpoint")
	_, err = s.Renew(ctx, held, expiry)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost)
	_, err = s.Release(ctx, held)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost)
	got, err := s.Get(ctx, held.Key)
	require.NoError(t, err)
	assert.Equal(t, "200", got.Checkpoint, "the checkpoint does not move backwards")
	assert.Equal(t, "b", got.Owner)
	assert.Equal(t, claimed.Counter, got.Counter)
	assertKept(t, b, got, "after the fenced holder's writes")
}
