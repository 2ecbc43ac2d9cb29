package shardlease_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/dyncount"
	"github.com/shardlease/shardlease/internal/emulator"
	"github.com/shardlease/shardlease/shardleasetest"
)

// TestMain runs eight tests at once (go test -parallel overrides it). Every
// test calls t.Parallel but the few that set process-wide state (t.Setenv,
// slog.SetDefault), and each owns its tables and streams (UniqueName), so
// the real-time waits of the emulator tests overlap: the package takes about
// three minutes under -race on two cores, where one test at a time took
// eleven. Tests held to tight real-time bounds run two at a time among
// themselves (world.timed).
func TestMain(m *testing.M) { emulator.MainParallel(m, 8) }

// dynamoTable creates a fresh lease table on the emulator, once per call.
func dynamoTable(t testing.TB) (shardlease.DynamoDBAPI, string) {
	t.Helper()
	client := emulator.Dynamo(t)
	name := emulator.UniqueName("leases")
	require.NoError(t, shardlease.CreateTable(context.Background(), client, name))
	return client, name
}

// keepsWorkers wraps a built-in store's factory: both built-in stores keep
// worker rows, so the suite's worker subtests, which skip a store without
// them, must run against them. A built-in store that lost WorkerStore fails
// every subtest instead of skipping some.
func keepsWorkers(newStore func(t *testing.T) shardlease.LeaseStore) func(t *testing.T) shardlease.LeaseStore {
	return func(t *testing.T) shardlease.LeaseStore {
		s := newStore(t)
		require.Implements(t, (*shardlease.WorkerStore)(nil), s, "the built-in stores keep worker rows")
		return s
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		shardleasetest.RunStoreConformance(t, keepsWorkers(func(t *testing.T) shardlease.LeaseStore { return shardlease.NewMemoryStore() }))
	})
	t.Run("dynamo", func(t *testing.T) {
		client, table := dynamoTable(t)
		var once sync.Once
		var store *shardlease.DynamoStore
		shardleasetest.RunStoreConformance(t, keepsWorkers(func(t *testing.T) shardlease.LeaseStore {
			once.Do(func() {
				var err error
				store, err = shardlease.NewDynamoStore(client, table)
				require.NoError(t, err)
			})
			return store
		}))
	})
}

// countingDynamo counts the calls made through the narrow interface.
type countingDynamo = dyncount.Client

// TestMemoryListWithWorkersIsOneRead: a worker that keeps taking a lease,
// removing its worker row, writing the row again and releasing the lease is
// at every moment a holder or a worker row (or both), so ListWithWorkers,
// which reads leases and worker rows at one moment, always sees it.
func TestMemoryListWithWorkersIsOneRead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := shardlease.NewMemoryStore()
	k := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
	_, err := s.Create(ctx, k, nil)
	require.NoError(t, err)
	w, err := s.Heartbeat(ctx, "orders", "w1")
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			held, err := s.Acquire(ctx, k, "w1", 0) // holder and row
			if !assert.NoError(t, err) {
				return
			}
			removed, err := s.RemoveWorker(ctx, w) // holder only
			if !assert.NoError(t, err) || !assert.True(t, removed) {
				return
			}
			if w, err = s.Heartbeat(ctx, "orders", "w1"); !assert.NoError(t, err) { // holder and row
				return
			}
			if _, err = s.Release(ctx, held); !assert.NoError(t, err) { // row only
				return
			}
		}
	})
	defer wg.Wait()
	defer close(stop)
	for range 20000 {
		leases, workers, err := s.ListWithWorkers(ctx, "orders")
		require.NoError(t, err)
		require.Len(t, leases, 1)
		require.True(t, leases[0].Owner == "w1" || len(workers) == 1,
			"w1 is a holder or has a row at every moment; the listing shows neither (lease %+v, workers %v)", leases[0], workers)
	}
}
