package shardleasetest_test

import (
	"errors"
	"fmt"
	"math/big"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease/shardleasetest"
)

// AddStream, Put and PutBatch make the calls they stand for; Records and
// Shards read back what the stream holds without making a call.
func TestShortcutsPutAndReadBack(t *testing.T) {
	k := shardleasetest.NewKinesis()
	require.NoError(t, k.AddStream("orders", 2))
	shards, err := k.Shards("orders")
	require.NoError(t, err)
	require.Len(t, shards, 2)
	assert.Equal(t, "shardId-000000000000", *shards[0].ShardId)
	assert.Equal(t, "shardId-000000000001", *shards[1].ShardId)

	shard, seq, err := k.Put("orders", "order-1", []byte("one"))
	require.NoError(t, err)
	got, err := k.Records("orders", shard)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "one", string(got[0].Data))
	assert.Equal(t, seq, *got[0].SequenceNumber)

	var batch []shardleasetest.Entry
	for i := range 1200 {
		batch = append(batch, shardleasetest.Entry{PartitionKey: "order-1", Data: fmt.Appendf(nil, "%d", i)})
	}
	require.NoError(t, k.PutBatch("orders", batch...))
	got, err = k.Records("orders", shard)
	require.NoError(t, err)
	require.Len(t, got, 1201, "one partition key, one shard")
	for i, r := range got[1:] {
		require.Equal(t, fmt.Sprint(i), string(r.Data), "in the order given")
	}
	assert.Equal(t, 3, k.Calls(shardleasetest.OpPutRecords), "at most 500 entries a call")
	assert.Equal(t, 1, k.Calls(shardleasetest.OpPutRecord))
	assert.Equal(t, 1, k.Calls(shardleasetest.OpCreateStream))
	assert.Len(t, k.CallCounts(), 3, "Records and Shards are not calls")

	got[0].Data[0] = 'X'
	again, err := k.Records("orders", shard)
	require.NoError(t, err)
	assert.Equal(t, "one", string(again[0].Data), "Records hands out copies")

	other := shardleasetest.Entry{PartitionKey: "k", ExplicitHashKey: "0", Data: []byte("low")}
	require.NoError(t, k.PutBatch("orders", other))
	low, err := k.Records("orders", "shardId-000000000000")
	require.NoError(t, err)
	assert.Equal(t, "low", string(low[len(low)-1].Data), "an explicit hash key picks the shard")
}

// Split halves a shard's hash key range; Merge joins two adjacent shards;
// both return the new shards' ids.
func TestShortcutsReshard(t *testing.T) {
	k := shardleasetest.NewKinesis()
	require.NoError(t, k.AddStream("orders", 1))
	low, high, err := k.Split("orders", "shardId-000000000000")
	require.NoError(t, err)
	assert.Equal(t, "shardId-000000000001", low)
	assert.Equal(t, "shardId-000000000002", high)
	shards, err := k.Shards("orders")
	require.NoError(t, err)
	require.Len(t, shards, 3)
	half := new(big.Int).Lsh(big.NewInt(1), 127)
	assert.Equal(t, new(big.Int).Sub(half, big.NewInt(1)).String(), *shards[1].HashKeyRange.EndingHashKey)
	assert.Equal(t, half.String(), *shards[2].HashKeyRange.StartingHashKey)
	assert.NotNil(t, shards[0].SequenceNumberRange.EndingSequenceNumber, "the parent is closed")

	child, err := k.Merge("orders", high, low)
	require.NoError(t, err)
	assert.Equal(t, "shardId-000000000003", child)
	shards, err = k.Shards("orders")
	require.NoError(t, err)
	assert.Equal(t, high, *shards[3].ParentShardId)
	assert.Equal(t, low, *shards[3].AdjacentParentShardId)
	assert.Equal(t, 1, k.Calls(shardleasetest.OpSplitShard))
	assert.Equal(t, 1, k.Calls(shardleasetest.OpMergeShards))
}

// The shortcuts fail as the calls they make do, with the SDK's typed
// exceptions reachable, and a FaultFunc sees them.
func TestShortcutsErrors(t *testing.T) {
	k := shardleasetest.NewKinesis()
	var notFound *types.ResourceNotFoundException
	var invalid *types.InvalidArgumentException
	var inUse *types.ResourceInUseException

	_, _, err := k.Put("orders", "k", nil)
	require.ErrorAs(t, err, &notFound)
	assert.ErrorContains(t, err, "stream orders")
	require.ErrorAs(t, k.AddStream("orders", 0), &invalid)
	require.NoError(t, k.AddStream("orders", 1))
	require.ErrorAs(t, k.AddStream("orders", 1), &inUse)

	_, err = k.Records("orders", "shardId-000000000007")
	require.ErrorAs(t, err, &notFound)
	_, err = k.Shards("payments")
	require.ErrorAs(t, err, &notFound)
	_, _, err = k.Split("orders", "shardId-000000000007")
	require.ErrorAs(t, err, &notFound)

	_, _, err = k.Split("orders", "shardId-000000000000")
	require.NoError(t, err)
	_, _, err = k.Split("orders", "shardId-000000000000")
	require.ErrorAs(t, err, &invalid, "a closed shard cannot be split")
	_, err = k.Merge("orders", "shardId-000000000000", "shardId-000000000001")
	require.ErrorAs(t, err, &invalid, "a closed shard cannot be merged")

	boom := errors.New("boom")
	k.SetFaults(func(op, shardID string) error {
		if op == shardleasetest.OpPutRecords {
			return boom
		}
		return nil
	})
	require.ErrorIs(t, k.PutBatch("orders", shardleasetest.Entry{PartitionKey: "k"}), boom)
	k.SetFaults(nil)
	require.ErrorAs(t, k.PutBatch("orders", shardleasetest.Entry{}), &invalid, "a partition key is required")
}
