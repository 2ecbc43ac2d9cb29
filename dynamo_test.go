package shardlease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// lostReply performs the next UpdateItem on the server and then reports a
// network error, as when a reply is lost after the write landed.
type lostReply struct {
	shardlease.DynamoDBAPI
	armed atomic.Bool
}

var errConnReset = errors.New("read tcp 127.0.0.1: connection reset by peer")

func (l *lostReply) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := l.DynamoDBAPI.UpdateItem(ctx, in, o...)
	if err == nil && l.armed.CompareAndSwap(true, false) {
		return nil, errConnReset
	}
	return out, err
}

func TestDynamoLostReplyIsRecognisedAsOwnWrite(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator")
	}
	client, table := dynamoTable(t)
	wrapped := &lostReply{DynamoDBAPI: client}
	store, err := shardlease.NewDynamoStore(wrapped, table)
	require.NoError(t, err)
	ctx := t.Context()
	key := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
	_, err = store.Create(ctx, key, nil)
	require.NoError(t, err)
	held, err := store.Acquire(ctx, key, "a", 0)
	require.NoError(t, err)
	expiry := time.UnixMilli(1_800_000_000_000)

	for _, op := range []struct {
		name  string
		write func(shardlease.Lease) (shardlease.Lease, error)
	}{
		{"renew", func(l shardlease.Lease) (shardlease.Lease, error) { return store.Renew(ctx, l, expiry) }},
		{"checkpoint", func(l shardlease.Lease) (shardlease.Lease, error) {
			return store.Checkpoint(ctx, l, "123", -1, expiry)
		}},
	} {
		wrapped.armed.Store(true)
		_, err := op.write(held)
		require.ErrorIs(t, err, errConnReset, "%s: the first attempt's reply is lost", op.name)
		// The retry's condition fails (the counter moved), yet it is our write.
		next, err := op.write(held)
		require.NoError(t, err, "%s: the retry is recognised as the worker's own write", op.name)
		assert.Equal(t, held.Counter+1, next.Counter)
		held = next
	}
	assert.Equal(t, "123", held.Checkpoint)

	// A write that differs from what landed is not mistaken for our own.
	wrapped.armed.Store(true)
	_, err = store.Checkpoint(ctx, held, "200", -1, expiry)
	require.ErrorIs(t, err, errConnReset)
	_, err = store.Checkpoint(ctx, held, "300", -1, expiry)
	require.ErrorIs(t, err, shardlease.ErrLeaseLost)

	// Acquire whose reply was lost.
	key2 := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000001"}
	_, err = store.Create(ctx, key2, nil)
	require.NoError(t, err)
	wrapped.armed.Store(true)
	_, err = store.Acquire(ctx, key2, "a", 0)
	require.ErrorIs(t, err, errConnReset)
	got, err := store.Acquire(ctx, key2, "a", 0)
	require.NoError(t, err)
	assert.Equal(t, "a", got.Owner)
}

func TestDynamoMisconfiguration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator")
	}
	client, _ := dynamoTable(t)
	ctx := t.Context()

	missing, err := shardlease.NewDynamoStore(client, "no-such-table")
	require.NoError(t, err)
	err = missing.CheckTable(ctx)
	require.ErrorIs(t, err, shardlease.ErrTableNotFound)
	assert.Contains(t, err.Error(), "table no-such-table")
	assert.Contains(t, err.Error(), `shardlease.CreateTable(ctx, client, "no-such-table")`)
	_, err = missing.Get(ctx, shardlease.LeaseKey{Stream: "s", Shard: "shardId-0"})
	require.ErrorIs(t, err, shardlease.ErrTableNotFound, "every operation names the missing table")

	wrong := "wrong-schema-" + time.Now().Format("150405.000000")
	_, err = client.(*dynamodb.Client).CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(wrong),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeN}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	require.NoError(t, err)
	bad, err := shardlease.NewDynamoStore(client, wrong)
	require.NoError(t, err)
	err = bad.CheckTable(ctx)
	require.ErrorIs(t, err, shardlease.ErrBadTableSchema)
	assert.Contains(t, err.Error(), "table "+wrong)
	assert.Contains(t, err.Error(), `HASH id (N)`)
	assert.Contains(t, err.Error(), `the string partition key "lease_key"`)
	err = shardlease.CreateTable(ctx, client.(*dynamodb.Client), wrong)
	require.ErrorIs(t, err, shardlease.ErrBadTableSchema, "CreateTable refuses an existing table with another schema")

	_, err = shardlease.NewDynamoStore(client, "")
	require.ErrorIs(t, err, shardlease.ErrInvalidName)
	_, err = shardlease.NewDynamoStore(nil, "t-leases")
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
}

func TestDynamoCorruptRowIsNamed(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator")
	}
	client, table := dynamoTable(t)
	ctx := t.Context()
	_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"lease_key":     &types.AttributeValueMemberS{Value: "orders:shardId-000000000007"},
		"lease_counter": &types.AttributeValueMemberS{Value: "seven"},
	}})
	require.NoError(t, err)
	store, err := shardlease.NewDynamoStore(client, table)
	require.NoError(t, err)
	_, err = store.List(ctx, "orders")
	require.ErrorIs(t, err, shardlease.ErrCorruptLease)
	assert.Contains(t, err.Error(), `row "orders:shardId-000000000007": attribute lease_counter is a string, want a number`)
	assert.Contains(t, err.Error(), "table "+table)
}

// An operator's tool that takes a row from a holder (AcquireAt, as the
// CLI's reset -force does) writes the holder's lease duration with that
// very acquire: a row it leaves held after a failed later write still makes
// consumers wait the holder's lease out.
func TestDynamoAcquireAtWritesTheHoldersLeaseDuration(t *testing.T) {
	t.Parallel()
	client, table := dynamoTable(t)
	s, err := shardlease.NewDynamoStore(client, table)
	require.NoError(t, err)
	ctx := t.Context()
	k := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
	_, err = s.Create(ctx, k, nil)
	require.NoError(t, err)

	held, err := s.AcquireAt(shardlease.WithHolderLeaseDuration(ctx, 7*time.Second), k, "tool", 0)
	require.NoError(t, err)
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, 7*time.Second, got.Duration, "the acquire wrote the holder's lease duration")
	assert.Equal(t, held.Counter, got.Counter)

	_, err = s.Release(ctx, held)
	require.NoError(t, err)
	free, err := s.Get(ctx, k)
	require.NoError(t, err)
	again, err := s.AcquireAt(ctx, k, "tool", free.Counter)
	require.NoError(t, err)
	assert.Zero(t, again.Duration, "without one in the context, the acquire removes the row's duration, as before")
}
