package shardlease_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// lagStores runs fn against MemoryStore and against DynamoStore on the
// emulator.
func lagStores(t *testing.T, fn func(t *testing.T, s shardlease.LeaseStore)) {
	t.Run("memory", func(t *testing.T) { fn(t, shardlease.NewMemoryStore()) })
	t.Run("dynamo", func(t *testing.T) {
		if testing.Short() {
			t.Skip("needs the emulators")
		}
		client, table := dynamoTable(t)
		s, err := shardlease.NewDynamoStore(client, table)
		require.NoError(t, err)
		fn(t, s)
	})
}

// The lag a renewal or checkpoint carries is on the row it writes and in
// every read of it; a later write that carries none, an acquire and a
// release leave the row without lag, while a note (which moves no counter)
// keeps it.
func TestLagRidesOnHolderWrites(t *testing.T) {
	t.Parallel()
	lagStores(t, func(t *testing.T, s shardlease.LeaseStore) {
		ctx := context.Background()
		key := shardlease.LeaseKey{Stream: "orders", Shard: shard0}
		_, err := s.Create(ctx, key, nil)
		require.NoError(t, err)
		l, err := s.Acquire(ctx, key, "a", 0)
		require.NoError(t, err)
		assert.Nil(t, l.Lag)

		lag := shardlease.Lag{BehindLatest: 1500 * time.Millisecond, CheckpointAge: 42 * time.Second}
		l, err = s.Renew(shardlease.WithHolderLag(ctx, lag), l, time.Now().Add(time.Minute))
		require.NoError(t, err)
		require.NotNil(t, l.Lag)
		assert.Equal(t, lag, *l.Lag)
		got, err := s.Get(ctx, key)
		require.NoError(t, err)
		require.NotNil(t, got.Lag)
		assert.Equal(t, lag, *got.Lag)
		if ns, ok := s.(shardlease.NoteStore); ok {
			_, err := ns.Note(ctx, l, "wake 1")
			require.NoError(t, err)
			ls, err := s.List(ctx, "orders")
			require.NoError(t, err)
			require.Len(t, ls, 1)
			require.NotNil(t, ls[0].Lag, "a note moves no counter: the lag is still the holder's last")
			l.Note = ls[0].Note
		}

		caught := shardlease.Lag{}
		l, err = s.Checkpoint(shardlease.WithHolderLag(ctx, caught), l, "49000000000000000000000000000000000000000000000000000001", -1, time.Now().Add(time.Minute))
		require.NoError(t, err)
		require.NotNil(t, l.Lag)
		assert.Equal(t, caught, *l.Lag, "zero is a lag too: caught up")

		l, err = s.Renew(ctx, l, time.Now().Add(time.Minute))
		require.NoError(t, err)
		assert.Nil(t, l.Lag, "a write without lag leaves none on the row")

		l, err = s.Renew(shardlease.WithHolderLag(ctx, lag), l, time.Now().Add(time.Minute))
		require.NoError(t, err)
		l, err = s.Release(ctx, l)
		require.NoError(t, err)
		assert.Nil(t, l.Lag, "a free row shows no lag")
		l, err = s.Acquire(ctx, key, "b", l.Counter)
		require.NoError(t, err)
		assert.Nil(t, l.Lag, "the last holder's lag is not the new holder's")
	})
}

// A lag attribute edited by hand into something that is not a number is no
// lag, not a corrupt row: it is the holder's report, and the next renewal
// writes it again.
func TestLagEditedByHandIsIgnored(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs the emulators")
	}
	client, table := dynamoTable(t)
	s, err := shardlease.NewDynamoStore(client, table)
	require.NoError(t, err)
	ctx := context.Background()
	key := shardlease.LeaseKey{Stream: "orders", Shard: shard0}
	_, err = s.Create(ctx, key, nil)
	require.NoError(t, err)
	l, err := s.Acquire(ctx, key, "a", 0)
	require.NoError(t, err)
	l, err = s.Renew(shardlease.WithHolderLag(ctx, shardlease.Lag{BehindLatest: time.Second}), l, time.Now().Add(time.Minute))
	require.NoError(t, err)
	_, err = client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(table), Key: map[string]types.AttributeValue{"lease_key": &types.AttributeValueMemberS{Value: key.String()}},
		UpdateExpression:          aws.String("SET behind_latest = :x"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":x": &types.AttributeValueMemberS{Value: "lots"}},
	})
	require.NoError(t, err)
	got, err := s.Get(ctx, key)
	require.NoError(t, err)
	assert.Nil(t, got.Lag)
	assert.Equal(t, l.Counter, got.Counter)
}
