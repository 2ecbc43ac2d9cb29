package shardlease_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/seqnum"
	"github.com/shardlease/shardlease/shardleasetest"
)

// ShardEnd is spelled out in lease.go so that go doc shows its value; it is
// the value the checkpoint comparisons order last.
func TestShardEndIsTheOrderedSentinel(t *testing.T) {
	t.Parallel()
	require.Equal(t, "SHARD_END", shardlease.ShardEnd)
	require.Equal(t, seqnum.ShardEnd, shardlease.ShardEnd)
}

// An empty owner id is a mistake, not a request for the default.
func TestEmptyOwnerIDIsAnError(t *testing.T) {
	t.Parallel()
	_, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), "orders", nopHandler, shardlease.WithOwnerID(""))
	requirePrefixOnce(t, err, shardlease.ErrInvalidConfig)
	require.ErrorContains(t, err, `WithOwnerID(""): the owner id is empty`)

	c, err := shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), "orders", nopHandler)
	require.NoError(t, err)
	require.NotEmpty(t, c.OwnerID(), "without the option, the default owner id")
}
