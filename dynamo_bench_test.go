package shardlease_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/shardlease/shardlease"
)

// BenchmarkStore measures acquire, renew and checkpoint on each store. For
// DynamoStore it also reports DynamoDB calls per mutation, counted through
// the narrow client interface: every mutation is one conditional write.
func BenchmarkStore(b *testing.B) {
	stores := []struct {
		name string
		make func(b *testing.B) (shardlease.LeaseStore, *countingDynamo)
	}{
		{"memory", func(b *testing.B) (shardlease.LeaseStore, *countingDynamo) { return shardlease.NewMemoryStore(), nil }},
		{"dynamo", func(b *testing.B) (shardlease.LeaseStore, *countingDynamo) {
			client, table := dynamoTable(b)
			counting := &countingDynamo{DynamoDBAPI: client}
			s, err := shardlease.NewDynamoStore(counting, table)
			if err != nil {
				b.Fatal(err)
			}
			return s, counting
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			if st.name == "dynamo" && testing.Short() {
				b.Skip("needs the DynamoDB emulator")
			}
			store, counting := st.make(b)
			ctx := context.Background()
			stream := fmt.Sprintf("bench%d", time.Now().UnixNano())
			next := 0
			newLease := func() shardlease.LeaseKey {
				next++
				k := shardlease.LeaseKey{Stream: stream, Shard: fmt.Sprintf("shardId-%012d", next)}
				if _, err := store.Create(ctx, k, nil); err != nil {
					b.Fatal(err)
				}
				return k
			}
			report := func(b *testing.B, before int64) {
				if counting != nil {
					b.ReportMetric(float64(counting.Calls()-before)/float64(b.N), "dynamodb-calls/op")
				}
			}
			calls := func() int64 {
				if counting == nil {
					return 0
				}
				return counting.Calls()
			}
			b.Run("acquire", func(b *testing.B) {
				keys := make([]shardlease.LeaseKey, b.N)
				for i := range keys {
					keys[i] = newLease()
				}
				before := calls()
				b.ResetTimer()
				for i := range b.N {
					if _, err := store.Acquire(ctx, keys[i], "bench", 0); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				report(b, before)
			})
			b.Run("renew", func(b *testing.B) {
				l, err := store.Acquire(ctx, newLease(), "bench", 0)
				if err != nil {
					b.Fatal(err)
				}
				expiry := time.Now()
				before := calls()
				b.ResetTimer()
				for range b.N {
					if l, err = store.Renew(ctx, l, expiry); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				report(b, before)
			})
			b.Run("checkpoint", func(b *testing.B) {
				l, err := store.Acquire(ctx, newLease(), "bench", 0)
				if err != nil {
					b.Fatal(err)
				}
				expiry := time.Now()
				before := calls()
				b.ResetTimer()
				for i := range b.N {
					if l, err = store.Checkpoint(ctx, l, strconv.Itoa(i+1), -1, expiry); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				report(b, before)
			})
		})
	}
}
