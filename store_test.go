package shardlease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/internal/storetest"
)

func TestMain(m *testing.M) { emulator.Main(m) }

// dynamoTable creates a fresh lease table on the emulator, once per call.
func dynamoTable(t testing.TB) (shardlease.DynamoDBAPI, string) {
	t.Helper()
	client := emulator.Dynamo(t)
	name := emulator.UniqueName("leases")
	require.NoError(t, shardlease.CreateTable(context.Background(), client, name))
	return client, name
}

func TestConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) shardlease.LeaseStore { return shardlease.NewMemoryStore() })
	})
	t.Run("dynamo", func(t *testing.T) {
		client, table := dynamoTable(t)
		var once sync.Once
		var store *shardlease.DynamoStore
		storetest.Run(t, func(t *testing.T) shardlease.LeaseStore {
			once.Do(func() {
				var err error
				store, err = shardlease.NewDynamoStore(client, table)
				require.NoError(t, err)
			})
			return store
		})
	})
}

// countingDynamo counts the calls made through the narrow interface.
type countingDynamo struct {
	shardlease.DynamoDBAPI
	gets, puts, updates, scans atomic.Int64
}

func (c *countingDynamo) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.gets.Add(1)
	return c.DynamoDBAPI.GetItem(ctx, in, o...)
}

func (c *countingDynamo) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.puts.Add(1)
	return c.DynamoDBAPI.PutItem(ctx, in, o...)
}

func (c *countingDynamo) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.updates.Add(1)
	return c.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

func (c *countingDynamo) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c.scans.Add(1)
	return c.DynamoDBAPI.Scan(ctx, in, o...)
}

func (c *countingDynamo) writes() int64 { return c.puts.Load() + c.updates.Load() }
func (c *countingDynamo) calls() int64 {
	return c.gets.Load() + c.puts.Load() + c.updates.Load() + c.scans.Load()
}
