package kpl_test

import (
	"fmt"
	"testing"

	"github.com/shardlease/shardlease/internal/kpl"
)

// benchAggregate returns an aggregate of n records of size bytes, each with
// its own partition key, as the KPL writes for random keys.
func benchAggregate(n, size int) []byte {
	records := make([]kpl.UserRecord, n)
	for i := range records {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(i + j)
		}
		records[i] = kpl.UserRecord{PartitionKey: fmt.Sprintf("partition-key-%06d", i), Data: data}
	}
	return kpl.Aggregate(records)
}

// BenchmarkDeaggregate reports time and allocations per user record, for a
// fresh result slice each time and for a reused one.
func BenchmarkDeaggregate(b *testing.B) {
	for _, n := range []int{10, 100} {
		agg := benchAggregate(n, 100)
		b.Run(fmt.Sprintf("records=%d/Deaggregate", n), func(b *testing.B) {
			run := func() {
				if _, err := kpl.Deaggregate(agg); err != nil {
					b.Fatal(err)
				}
			}
			benchPerRecord(b, n, len(agg), run)
		})
		b.Run(fmt.Sprintf("records=%d/DeaggregateInto", n), func(b *testing.B) {
			dst := make([]kpl.UserRecord, 0, n)
			run := func() {
				var err error
				if dst, err = kpl.DeaggregateInto(dst[:0], agg); err != nil {
					b.Fatal(err)
				}
			}
			benchPerRecord(b, n, len(agg), run)
		})
	}
}

func benchPerRecord(b *testing.B, n, bytes int, run func()) {
	b.ReportAllocs()
	b.SetBytes(int64(bytes))
	for b.Loop() {
		run()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
	b.ReportMetric(testing.AllocsPerRun(100, run)/float64(n), "allocs/record")
}
