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

// What every store owes about the lag a holder's writes carry is in the
// conformance suite (shardleasetest.RunStoreConformance, the Lag subtests),
// so a custom store is held to it too; what follows is DynamoStore's own.

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
