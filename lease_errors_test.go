package shardlease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// noTables is a DynamoDB client in whose account no table exists.
type noTables struct{ shardlease.DynamoDBAPI }

func (noTables) DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return nil, &types.ResourceNotFoundException{Message: aws.String("Requested resource not found")}
}

// requirePrefixOnce checks that err's message starts with "shardlease: " and
// holds it nowhere else.
func requirePrefixOnce(t *testing.T, err error, target error) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, target)
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, "shardlease: "), "message does not start with the prefix: %q", msg)
	require.Equal(t, 1, strings.Count(msg, "shardlease: "), "message repeats the prefix: %q", msg)
}

// Every error carries the package prefix once, at its start, however many
// layers (consumer, table, lease, sentinel) wrap it; errors.Is still finds
// the sentinel.
func TestErrorPrefixOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	kin := shardleasetest.NewKinesis()

	t.Run("missing table through Run", func(t *testing.T) {
		store, err := shardlease.NewDynamoStore(noTables{}, "orders-leases")
		require.NoError(t, err)
		c, err := shardlease.NewConsumer(kin, store, "orders", nopHandler)
		require.NoError(t, err)
		err = c.Run(ctx)
		requirePrefixOnce(t, err, shardlease.ErrTableNotFound)
		require.True(t, strings.HasPrefix(err.Error(), "shardlease: stream orders: table orders-leases: lease table not found: create it"), "%q", err)
		var te *shardlease.TableError
		require.ErrorAs(t, err, &te)
		require.Equal(t, "orders-leases", te.Table)
	})
	t.Run("invalid stream name", func(t *testing.T) {
		_, err := shardlease.NewConsumer(kin, shardlease.NewMemoryStore(), "my orders", nopHandler)
		requirePrefixOnce(t, err, shardlease.ErrInvalidName)
		require.True(t, strings.HasPrefix(err.Error(), "shardlease: NewConsumer: invalid name: stream"), "%q", err)
	})
	t.Run("invalid option", func(t *testing.T) {
		_, err := shardlease.NewConsumer(kin, shardlease.NewMemoryStore(), "orders", nopHandler, shardlease.WithLeaseDuration(-time.Second))
		requirePrefixOnce(t, err, shardlease.ErrInvalidConfig)
	})
	t.Run("lease key", func(t *testing.T) {
		_, err := shardlease.ParseLeaseKey("orders:shard 1")
		requirePrefixOnce(t, err, shardlease.ErrInvalidName)
	})
	t.Run("legacy stream name", func(t *testing.T) {
		_, err := shardlease.NewDynamoStore(noTables{}, "orders-leases", shardlease.WithLegacyStream("a b"))
		requirePrefixOnce(t, err, shardlease.ErrInvalidName)
	})
	t.Run("lease held and lost", func(t *testing.T) {
		s := shardlease.NewMemoryStore()
		k := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
		_, err := s.Create(ctx, k, nil)
		require.NoError(t, err)
		held, err := s.Acquire(ctx, k, "a", 0)
		require.NoError(t, err)
		_, err = s.Acquire(ctx, k, "b", held.Counter-1)
		requirePrefixOnce(t, err, shardlease.ErrLeaseHeld)
		_, err = s.Acquire(ctx, k, "b", held.Counter)
		require.NoError(t, err)
		_, err = s.Renew(ctx, held, time.Now())
		requirePrefixOnce(t, err, shardlease.ErrLeaseLost)
	})
	t.Run("missing table through CheckTable", func(t *testing.T) {
		store, err := shardlease.NewDynamoStore(noTables{}, "orders-leases")
		require.NoError(t, err)
		requirePrefixOnce(t, store.CheckTable(ctx), shardlease.ErrTableNotFound)
	})
	t.Run("import", func(t *testing.T) {
		store, err := shardlease.NewDynamoStore(noTables{}, "orders-leases")
		require.NoError(t, err)
		_, err = shardlease.Import(ctx, noTables{}, kin, shardlease.ImportKCL, "my-app", store, "a b")
		requirePrefixOnce(t, err, shardlease.ErrInvalidName)
		_, err = shardlease.Import(ctx, noTables{}, kin, shardlease.ImportKCL, "my-app", store, "orders")
		requirePrefixOnce(t, err, shardlease.ErrTableNotFound)
	})
}
