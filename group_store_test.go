package shardlease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGroupStoreRefusesTakesOutsideTheSet: the group's store writes nothing
// to acquire a row of a stream that left the set, or whose fan-out
// consumer is not registered yet, and maps keys and parents both ways.
func TestGroupStoreRefusesTakesOutsideTheSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := NewMemoryStore()
	a := newMember("a", "a", nil, nil, config{}, nil)
	b := newMember("b", "b", nil, nil, config{}, nil)
	set := newMemberSet(true, a, b)
	g := &groupStore{inner: inner, caps: resolveCaps(inner), name: "g", set: set}
	for _, k := range []LeaseKey{{"a", "shardId-1"}, {"b", "shardId-1"}} {
		_, err := inner.Create(ctx, k, []string{"shardId-0"})
		require.NoError(t, err)
	}

	l, err := g.Acquire(ctx, LeaseKey{Stream: "g", Shard: "a/shardId-1"}, "w", 0)
	require.NoError(t, err)
	require.Equal(t, LeaseKey{Stream: "g", Shard: "a/shardId-1"}, l.Key)
	require.Equal(t, []string{"a/shardId-0"}, l.Parents)
	row, err := inner.Get(ctx, LeaseKey{Stream: "a", Shard: "shardId-1"})
	require.NoError(t, err)
	require.Equal(t, "w", row.Owner)

	require.True(t, set.remove("b", time.Now()))
	_, err = g.Acquire(ctx, LeaseKey{Stream: "g", Shard: "b/shardId-1"}, "w", 0)
	require.ErrorIs(t, err, ErrLeaseHeld)
	require.ErrorContains(t, err, "stream b is not in group g's set")
	row, err = inner.Get(ctx, LeaseKey{Stream: "b", Shard: "shardId-1"})
	require.NoError(t, err)
	require.Empty(t, row.Owner, "a row of a removed stream was taken")

	set.add(b)
	b.registered.Store(false) // a fan-out stream not registered yet
	_, err = g.Acquire(ctx, LeaseKey{Stream: "g", Shard: "b/shardId-1"}, "w", 0)
	require.True(t, errors.Is(err, ErrLeaseHeld))

	leases, _, err := g.ListWithWorkers(ctx, "g")
	require.NoError(t, err)
	require.Len(t, leases, 1, "an unregistered stream's rows were listed for a take round")
	all, err := g.List(ctx, "g")
	require.NoError(t, err)
	require.Len(t, all, 2, "the shard sync's listing left a stream of the set out")
}
