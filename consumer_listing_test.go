package shardlease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGroupTakesNothingOutsideTheSet: the engine writes nothing to acquire
// or ask for a row of a stream that left the set, or whose fan-out
// consumer is not registered yet; a take round lists the registered
// streams of the set only, a shard sync every stream of the set; every
// row keeps its key and its parents' shard ids.
func TestGroupTakesNothingOutsideTheSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := NewMemoryStore()
	a := newMember("a", "a", nil, nil, config{}, nil)
	b := newMember("b", "b", nil, nil, config{}, nil)
	set := newMemberSet(true, a, b)
	cfg, err := buildConfig("g", nil)
	require.NoError(t, err)
	c, err := newConsumer(inner, "g", cfg, set)
	require.NoError(t, err)
	for _, k := range []LeaseKey{{"a", "shardId-1"}, {"b", "shardId-1"}, {"other", "shardId-1"}} {
		_, err := inner.Create(ctx, k, []string{"shardId-0"})
		require.NoError(t, err)
	}
	sc := &scheduler{c: c, pending: map[string]time.Time{}, refused: map[string]time.Time{}}

	require.True(t, set.readable("a:shardId-1"))
	require.True(t, set.remove("b", time.Now()))
	require.False(t, set.readable("b:shardId-1"), "a removed stream's lease is readable")
	require.False(t, set.readable("other:shardId-1"), "a lease of a stream never in the set is readable")
	row, err := inner.Get(ctx, LeaseKey{Stream: "b", Shard: "shardId-1"})
	require.NoError(t, err)
	took, err := sc.take(ctx, row, false, nil, time.Now())
	require.NoError(t, err)
	require.False(t, took)
	made, stop := sc.ask(ctx, row, time.Now())
	require.False(t, made || stop)
	row, err = inner.Get(ctx, LeaseKey{Stream: "b", Shard: "shardId-1"})
	require.NoError(t, err)
	require.Empty(t, row.Owner, "a row of a removed stream was taken")
	require.Empty(t, row.HandoffTo, "a row of a removed stream was asked for")
	require.Equal(t, int64(0), row.Counter, "a row of a removed stream was written")

	set.add(b)
	b.registered.Store(false) // a fan-out stream not registered yet
	require.False(t, set.readable("b:shardId-1"), "an unregistered stream's lease is readable")

	leases, _, err := c.reader.forRound(ctx)
	require.NoError(t, err)
	require.Len(t, leases, 1, "an unregistered stream's rows were listed for a take round")
	require.Equal(t, LeaseKey{Stream: "a", Shard: "shardId-1"}, leases[0].Key)
	require.Equal(t, []string{"a:shardId-0"}, parentIDs(leases[0]))
	all, err := c.reader.rows(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2, "the shard sync's listing left a stream of the set out, or listed one out of it")
}
