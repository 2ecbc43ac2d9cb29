package shardlease_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/dyncount"
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
type countingDynamo = dyncount.Client
