package shardlease_test

import (
	"context"
	"fmt"
	"math/big"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// benchRecordsPerShard is one full GetRecords batch, so that every shard is
// read in one call and the 200ms pacing between calls is not in the figure.
const benchRecordsPerShard = 10000

// benchStream returns a fake with a stream of enough shards of 10,000
// records of 100 bytes each to hold n records.
func benchStream(b *testing.B, n int) (*shardleasetest.Kinesis, int) {
	b.Helper()
	shards := (n + benchRecordsPerShard - 1) / benchRecordsPerShard
	total := shards * benchRecordsPerShard
	ctx := context.Background()
	f := shardleasetest.NewKinesis()
	if _, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("bench"), ShardCount: aws.Int32(int32(shards))}); err != nil {
		b.Fatal(err)
	}
	space := new(big.Int).Lsh(big.NewInt(1), 128)
	data := make([]byte, 100)
	var entries []types.PutRecordsRequestEntry
	for s := range shards {
		h := new(big.Int).Mul(space, big.NewInt(int64(2*s+1)))
		h.Div(h, big.NewInt(int64(2*shards)))
		key := h.String()
		for i := range benchRecordsPerShard {
			entries = append(entries, types.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String(fmt.Sprint(i)), ExplicitHashKey: aws.String(key)})
			if len(entries) == 500 {
				if _, err := f.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("bench"), Records: entries}); err != nil {
					b.Fatal(err)
				}
				entries = entries[:0]
			}
		}
	}
	return f, total
}

// benchRecords is how many records one benchmark operation reads: ten
// shards of one full batch each.
const benchRecords = 10 * benchRecordsPerShard

// perRecord reports ns and allocations per record over b.N operations of
// benchRecords records each; timed is the operations' allocations.
func perRecord(b *testing.B, mallocs uint64) {
	n := float64(b.N) * benchRecords
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/record")
	b.ReportMetric(float64(mallocs)/n, "allocs/record")
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// BenchmarkConsumerPerRecord is the cost per record of the consumer loop
// (fetch, convert, hand to a no-op handler, checkpoint) on the in-process
// fake with a MemoryStore, startup and shutdown included: one operation is
// a consumer reading 100,000 records. Compare with BenchmarkBareGetRecords,
// which reads the same records without a consumer; the fake's own copying
// of every record is in both.
func BenchmarkConsumerPerRecord(b *testing.B) {
	b.ReportAllocs()
	var timed uint64
	for range b.N {
		b.StopTimer()
		f, total := benchStream(b, benchRecords)
		var got atomic.Int64
		done := make(chan struct{})
		c, err := shardlease.NewConsumer(f, shardlease.NewMemoryStore(), "bench", func(_ context.Context, batch *shardlease.Batch) error {
			if got.Add(int64(len(batch.Records))) == int64(total) {
				close(done)
			}
			return nil
		}, shardlease.WithOwnerID("bench"))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		runErr := make(chan error, 1)
		m0 := mallocs()
		b.StartTimer()
		go func() { runErr <- c.Run(ctx) }()
		<-done
		b.StopTimer()
		timed += mallocs() - m0
		cancel()
		if err := <-runErr; err != nil {
			b.Fatal(err)
		}
	}
	perRecord(b, timed)
}

// BenchmarkBareGetRecords reads the records BenchmarkConsumerPerRecord
// reads with one GetShardIterator and one GetRecords per shard.
func BenchmarkBareGetRecords(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	var timed uint64
	for range b.N {
		b.StopTimer()
		f, total := benchStream(b, benchRecords)
		m0 := mallocs()
		b.StartTimer()
		read := 0
		for s := range total / benchRecordsPerShard {
			it, err := f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
				StreamName: aws.String("bench"), ShardId: aws.String(fmt.Sprintf("shardId-%012d", s)), ShardIteratorType: types.ShardIteratorTypeTrimHorizon,
			})
			if err != nil {
				b.Fatal(err)
			}
			out, err := f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator, Limit: aws.Int32(benchRecordsPerShard)})
			if err != nil {
				b.Fatal(err)
			}
			read += len(out.Records)
		}
		b.StopTimer()
		timed += mallocs() - m0
		if read != total {
			b.Fatalf("read %d of %d records", read, total)
		}
	}
	perRecord(b, timed)
}
