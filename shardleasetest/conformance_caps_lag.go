package shardleasetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// The lag contract (shardlease.HolderLag): a renewal or checkpoint that
// carries the holder's lag writes it on the row, every read returns it, and
// a later write that carries none, an acquire, a release or another
// holder's write leaves the row without it, since a lag belongs to one
// holder's run. Writes that leave the counter (a note, a handoff request or
// its withdrawal) leave the lag too. A store may keep no lag at all.

var (
	holderLag = shardlease.Lag{BehindLatest: 1500 * time.Millisecond, CheckpointAge: 42 * time.Second}
	laterLag  = shardlease.Lag{BehindLatest: 7 * time.Second, CheckpointAge: 3 * time.Second}
)

// keepsLag runs fn if s keeps the lag a holder's writes carry, and skips it
// when a renewal that carries one leaves none on the row.
func keepsLag(fn func(t *testing.T, s shardlease.LeaseStore)) func(t *testing.T, s shardlease.LeaseStore) {
	return func(t *testing.T, s shardlease.LeaseStore) {
		k := fresh(t, s)
		l := acquire(t, s, k, "probe")
		l, err := s.Renew(shardlease.WithHolderLag(t.Context(), holderLag), l, expiry)
		require.NoError(t, err)
		read, err := s.Get(t.Context(), k)
		require.NoError(t, err)
		if l.Lag == nil && read.Lag == nil {
			t.Skipf("%T keeps no holder lag: a renewal that carried one left none (see shardlease.HolderLag)", s)
		}
		fn(t, s)
	}
}

// lagOf returns key's lag as every read the store has shows it, asserting
// that they agree.
func lagOf(t *testing.T, s shardlease.LeaseStore, k shardlease.LeaseKey) *shardlease.Lag {
	t.Helper()
	ctx := t.Context()
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	reads := map[string]shardlease.Lease{"List": rowOf(t, listed(t, s, k.Stream), k)}
	if ws, ok := s.(shardlease.WorkerStore); ok {
		leases, _, err := ws.ListWithWorkers(ctx, k.Stream)
		require.NoError(t, err)
		reads["ListWithWorkers"] = rowOf(t, leases, k)
	}
	if gl, ok := s.(shardlease.GroupLister); ok {
		leases, _, err := gl.ListStreams(ctx, []string{k.Stream}, k.Stream, true)
		require.NoError(t, err)
		reads["ListStreams"] = rowOf(t, leases, k)
	}
	for name, r := range reads {
		assert.Equal(t, got.Lag, r.Lag, "%s shows the lag Get shows", name)
	}
	return got.Lag
}

func rowOf(t *testing.T, rows []shardlease.Lease, k shardlease.LeaseKey) shardlease.Lease {
	t.Helper()
	for _, l := range rows {
		if l.Key == k {
			return l
		}
	}
	require.Failf(t, "row missing", "no row %s in the listing", k)
	return shardlease.Lease{}
}

// testLagRides: the lag a renewal or checkpoint carries is on the row it
// writes and in every read of it; zero is a lag too; a holder's write that
// carries none leaves none.
func testLagRides(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	l := acquire(t, s, k, "a")
	assert.Nil(t, l.Lag, "an acquire carries no lag")

	l, err := s.Renew(shardlease.WithHolderLag(ctx, holderLag), l, expiry)
	require.NoError(t, err)
	assert.Equal(t, &holderLag, l.Lag, "the renewal returns the lag it wrote")
	assert.Equal(t, &holderLag, lagOf(t, s, k))

	l, err = s.Checkpoint(shardlease.WithHolderLag(ctx, shardlease.Lag{}), l, "49000000000000000000000000000000000000000000000000000001", -1, expiry)
	require.NoError(t, err)
	assert.Equal(t, &shardlease.Lag{}, l.Lag, "zero is a lag too: caught up")
	assert.Equal(t, &shardlease.Lag{}, lagOf(t, s, k))

	l, err = s.Checkpoint(shardlease.WithHolderLag(ctx, laterLag), l, "49000000000000000000000000000000000000000000000000000002", 3, expiry)
	require.NoError(t, err)
	assert.Equal(t, &laterLag, l.Lag)
	assert.Equal(t, &laterLag, lagOf(t, s, k))

	l, err = s.Renew(ctx, l, expiry)
	require.NoError(t, err)
	assert.Nil(t, l.Lag, "a write without lag leaves none on the row")
	assert.Nil(t, lagOf(t, s, k))
}

// testLagKept: a note, a handoff request and its withdrawal leave the
// counter, so the holder's last lag is still the row's.
func testLagKept(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	l := acquire(t, s, k, "a")
	l, err := s.Renew(shardlease.WithHolderLag(ctx, holderLag), l, expiry)
	require.NoError(t, err)
	if ns, ok := s.(shardlease.NoteStore); ok {
		_, err := ns.Note(ctx, l, "wake 1")
		require.NoError(t, err)
		assert.Equal(t, &holderLag, lagOf(t, s, k), "a note moves no counter: the lag is still the holder's last")
	}
	_, err = s.RequestHandoff(ctx, l, "b")
	require.NoError(t, err)
	assert.Equal(t, &holderLag, lagOf(t, s, k), "a handoff request moves no counter")
	if hw, ok := s.(shardlease.HandoffWithdrawer); ok {
		_, err := hw.WithdrawHandoff(ctx, k, "b")
		require.NoError(t, err)
		assert.Equal(t, &holderLag, lagOf(t, s, k), "withdrawing a request moves no counter")
	}
}

// testLagOneRun: a release, an acquire, a handoff's release to the taker
// and a rewind each leave the row without the lag of the write before.
func testLagOneRun(t *testing.T, s shardlease.LeaseStore) {
	ctx := t.Context()
	k := fresh(t, s)
	withLag := shardlease.WithHolderLag(ctx, holderLag)
	a, err := s.Renew(withLag, acquire(t, s, k, "a"), expiry)
	require.NoError(t, err)
	free, err := s.Release(withLag, a)
	require.NoError(t, err)
	assert.Nil(t, free.Lag, "a free row shows no lag, even after a release that carried one")
	assert.Nil(t, lagOf(t, s, k))

	b, err := s.Renew(withLag, acquire(t, s, k, "b"), expiry)
	require.NoError(t, err)
	c, err := s.Acquire(ctx, k, "c", b.Counter)
	require.NoError(t, err)
	assert.Nil(t, c.Lag, "the last holder's lag is not the new holder's")
	assert.Nil(t, lagOf(t, s, k))

	c, err = s.Renew(withLag, c, expiry)
	require.NoError(t, err)
	_, err = s.RequestHandoff(ctx, c, "d")
	require.NoError(t, err)
	c, err = s.Renew(withLag, c, expiry) // the holder sees the request
	require.NoError(t, err)
	d, err := s.Release(withLag, c)
	require.NoError(t, err)
	require.Equal(t, "d", d.Owner)
	assert.Nil(t, d.Lag, "the taker of a handoff starts without the giver's lag")
	assert.Nil(t, lagOf(t, s, k))

	rw, ok := s.(shardlease.Rewinder)
	if !ok {
		return
	}
	d, err = s.Renew(withLag, d, expiry)
	require.NoError(t, err)
	d, err = rw.RewindRow(ctx, d, "", shardlease.Start{Position: shardlease.TrimHorizon})
	require.NoError(t, err)
	assert.Nil(t, d.Lag, "a rewind that carries no lag leaves none")
	assert.Nil(t, lagOf(t, s, k))
}
