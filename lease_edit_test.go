package shardlease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// The fenced edit of lease_edit.go, through ResetCheckpoint, on both
// stores: a free row is released at once; a row taken from a holder is left
// held by the tool with the holder's lease duration, whether the holder is
// alive or dead; a held row is refused without handover; a failed write
// leaves the row by the same rule; a row a worker takes between the read
// and the acquire is refused, or with handover taken from it.

const (
	seqOld = "49590338271490256608559692538361571095921575989136588898"
	seqNew = "49590338271490256608559692538361571095921575989136588800"
)

// editStores runs fn on a MemoryStore and, unless -short, on a DynamoStore
// on the emulator.
func editStores(t *testing.T, fn func(t *testing.T, store shardlease.LeaseStore)) {
	t.Run("memory", func(t *testing.T) { fn(t, shardlease.NewMemoryStore()) })
	t.Run("dynamo", func(t *testing.T) {
		if testing.Short() {
			t.Skip("emulator tests need Node.js")
		}
		client, table := dynamoTable(t)
		store, err := shardlease.NewDynamoStore(client, table)
		require.NoError(t, err)
		fn(t, store)
	})
}

// editRow makes key's row with checkpoint seqOld, held by owner with lease
// duration d (0: none written), or free when owner is empty.
func editRow(t *testing.T, store shardlease.LeaseStore, key shardlease.LeaseKey, owner string, d time.Duration) shardlease.Lease {
	t.Helper()
	ctx := t.Context()
	_, err := store.Create(ctx, key, nil)
	require.NoError(t, err)
	name := owner
	if name == "" {
		name = "worker-gone#0123456789abcdef"
	}
	wctx := ctx
	if d > 0 {
		wctx = shardlease.WithHolderLeaseDuration(ctx, d)
	}
	l, err := store.Acquire(wctx, key, name, 0)
	require.NoError(t, err)
	l, err = store.Checkpoint(wctx, l, seqOld, -1, time.Now())
	require.NoError(t, err)
	if owner == "" {
		l, err = store.Release(ctx, l)
		require.NoError(t, err)
	}
	return l
}

func TestLeaseEditFreeRowReleasedAtOnce(t *testing.T) {
	t.Parallel()
	editStores(t, func(t *testing.T, store shardlease.LeaseStore) {
		key := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
		editRow(t, store, key, "", 0)
		rep, err := shardlease.ResetCheckpoint(t.Context(), store, key, seqNew)
		require.NoError(t, err)
		assert.Empty(t, rep.TakenFrom)
		assert.Zero(t, rep.ResumeAfter)
		assert.Equal(t, seqOld, rep.Previous.Checkpoint)
		row, err := store.Get(t.Context(), key)
		require.NoError(t, err)
		assert.False(t, row.Held(), "a free row is free again at once")
		assert.Equal(t, seqNew, row.Checkpoint)
		assert.Equal(t, row, rep.Lease)
	})
}

func TestLeaseEditHeldRowRefusedWithoutHandover(t *testing.T) {
	t.Parallel()
	editStores(t, func(t *testing.T, store shardlease.LeaseStore) {
		key := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
		held := editRow(t, store, key, "worker-a#0123456789abcdef", 7*time.Second)
		_, err := shardlease.ResetCheckpoint(t.Context(), store, key, seqNew)
		require.ErrorIs(t, err, shardlease.ErrLeaseHeld)
		for _, want := range []string{"stream orders, shard shardId-000000000000", "nothing was changed", "held by worker-a#0123456789abcdef", "stop that worker", "WithResetHandover"} {
			assert.Contains(t, err.Error(), want)
		}
		row, err := store.Get(t.Context(), key)
		require.NoError(t, err)
		assert.Equal(t, held.Counter, row.Counter, "nothing written")
		assert.Equal(t, seqOld, row.Checkpoint)
	})
}

// A live holder and a dead one get the same rule: the row stays with the
// tool, with the holder's lease duration when its row carried one.
func TestLeaseEditTakenRowLeftHeldForTheHoldersLeaseDuration(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{7 * time.Second, 0} {
		t.Run(d.String(), func(t *testing.T) {
			editStores(t, func(t *testing.T, store shardlease.LeaseStore) {
				ctx := t.Context()
				key := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
				held := editRow(t, store, key, "worker-a#0123456789abcdef", d)
				before := time.Now()
				rep, err := shardlease.ResetCheckpoint(ctx, store, key, seqNew, shardlease.WithResetHandover(), shardlease.WithResetOwner("ops#0123456789abcdef"))
				require.NoError(t, err)
				assert.Equal(t, held.Owner, rep.TakenFrom)
				assert.Equal(t, d, rep.ResumeAfter)
				row, err := store.Get(ctx, key)
				require.NoError(t, err)
				assert.Equal(t, "ops#0123456789abcdef", row.Owner, "left held by the tool")
				assert.Equal(t, seqNew, row.Checkpoint)
				assert.Equal(t, d, row.Duration, "the holder's lease duration, which takers wait out")
				if d > 0 {
					assert.False(t, row.Expiry.Before(before.Add(d).Truncate(time.Millisecond)), "an expiry for operators, a lease duration on")
				}
				assert.Equal(t, row, rep.Lease)
				_, err = store.Renew(ctx, held, time.Now())
				require.ErrorIs(t, err, shardlease.ErrLeaseLost, "the holder is fenced out")
				// A consumer takes it as any expired lease, on the counter it saw.
				took, err := store.Acquire(ctx, key, "worker-b#0123456789abcdef", row.Counter)
				require.NoError(t, err)
				assert.Greater(t, took.Counter, row.Counter)
			})
		})
	}
}

// An empty checkpoint keeps the row's progress and only takes the lease.
func TestLeaseEditKeepsTheCheckpoint(t *testing.T) {
	t.Parallel()
	editStores(t, func(t *testing.T, store shardlease.LeaseStore) {
		key := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
		editRow(t, store, key, "worker-a#0123456789abcdef", 7*time.Second)
		rep, err := shardlease.ResetCheckpoint(t.Context(), store, key, "", shardlease.WithResetHandover())
		require.NoError(t, err)
		assert.Equal(t, seqOld, rep.Lease.Checkpoint)
		assert.Equal(t, "shardlease-reset", shardlease.OwnerName(rep.Lease.Owner))
	})
}

// failingCheckpoint refuses every checkpoint.
type failingCheckpoint struct{ shardlease.LeaseStore }

var errCheckpointDown = errors.New("checkpoint refused by the test")

func (failingCheckpoint) Checkpoint(context.Context, shardlease.Lease, string, int64, time.Time) (shardlease.Lease, error) {
	return shardlease.Lease{}, errCheckpointDown
}

// A failed write frees a row that was free, and leaves a row taken from a
// holder held: releasing it would start a consumer beside the holder.
func TestLeaseEditFailedWriteLeavesTheRowByTheRule(t *testing.T) {
	t.Parallel()
	editStores(t, func(t *testing.T, store shardlease.LeaseStore) {
		ctx := t.Context()
		free := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
		taken := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000001"}
		editRow(t, store, free, "", 0)
		editRow(t, store, taken, "worker-a#0123456789abcdef", 7*time.Second)

		_, err := shardlease.ResetCheckpoint(ctx, failingCheckpoint{store}, free, seqNew)
		require.ErrorIs(t, err, errCheckpointDown)
		assert.Contains(t, err.Error(), "released unchanged")
		row, err := store.Get(ctx, free)
		require.NoError(t, err)
		assert.False(t, row.Held())
		assert.Equal(t, seqOld, row.Checkpoint)

		_, err = shardlease.ResetCheckpoint(ctx, failingCheckpoint{store}, taken, seqNew, shardlease.WithResetHandover())
		require.ErrorIs(t, err, errCheckpointDown)
		assert.Contains(t, err.Error(), "the row is unchanged, and the lease stays with shardlease-reset#")
		row, err = store.Get(ctx, taken)
		require.NoError(t, err)
		assert.Equal(t, "shardlease-reset", shardlease.OwnerName(row.Owner))
		assert.Equal(t, seqOld, row.Checkpoint)
		assert.Equal(t, 7*time.Second, row.Duration)
	})
}

// racingStore lets a worker take the row between the edit's read and its
// acquire, once.
type racingStore struct {
	shardlease.LeaseStore
	raced bool
}

func (s *racingStore) race(ctx context.Context, key shardlease.LeaseKey) error {
	if s.raced {
		return nil
	}
	s.raced = true
	l, err := s.LeaseStore.Get(ctx, key)
	if err != nil {
		return err
	}
	_, err = s.LeaseStore.Acquire(shardlease.WithHolderLeaseDuration(ctx, 5*time.Second), key, "worker-b#0123456789abcdef", l.Counter)
	return err
}

func (s *racingStore) Acquire(ctx context.Context, key shardlease.LeaseKey, owner string, observed int64) (shardlease.Lease, error) {
	if err := s.race(ctx, key); err != nil {
		return shardlease.Lease{}, err
	}
	return s.LeaseStore.Acquire(ctx, key, owner, observed)
}

func (s *racingStore) AcquireAt(ctx context.Context, key shardlease.LeaseKey, owner string, counter int64) (shardlease.Lease, error) {
	if err := s.race(ctx, key); err != nil {
		return shardlease.Lease{}, err
	}
	return s.LeaseStore.(*shardlease.DynamoStore).AcquireAt(ctx, key, owner, counter)
}

// raceOnce wraps store in a racingStore, with AcquireAt only where store
// has it.
func raceOnce(store shardlease.LeaseStore) shardlease.LeaseStore {
	r := &racingStore{LeaseStore: store}
	if _, ok := store.(*shardlease.DynamoStore); ok {
		return r
	}
	return &struct{ shardlease.LeaseStore }{r} // hides AcquireAt
}

// A worker that takes a free row between the read and the acquire keeps
// it; with handover the edit reads the row again and takes it from that
// worker, with its lease duration.
func TestLeaseEditRowTakenMeanwhile(t *testing.T) {
	t.Parallel()
	editStores(t, func(t *testing.T, store shardlease.LeaseStore) {
		ctx := t.Context()
		key := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
		editRow(t, store, key, "", 0)
		_, err := shardlease.ResetCheckpoint(ctx, raceOnce(store), key, seqNew)
		require.ErrorIs(t, err, shardlease.ErrLeaseHeld)
		assert.Contains(t, err.Error(), "nothing was changed: taken by a worker while the reset ran")
		row, err := store.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, "worker-b#0123456789abcdef", row.Owner, "the worker keeps it")

		_, err = store.Release(ctx, row)
		require.NoError(t, err)
		rep, err := shardlease.ResetCheckpoint(ctx, raceOnce(store), key, seqNew, shardlease.WithResetHandover())
		require.NoError(t, err)
		assert.Equal(t, "worker-b#0123456789abcdef", rep.TakenFrom)
		assert.Equal(t, 5*time.Second, rep.ResumeAfter)
		assert.Equal(t, 5*time.Second, rep.Lease.Duration)
	})
}
