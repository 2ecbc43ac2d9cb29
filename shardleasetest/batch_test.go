package shardleasetest_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// NewBatch fills what a test leaves out as the consumer would: sequence
// numbers of the stream's form that increase across batches and name the
// shard, -1 for a plain record, the arrival time; it keeps what the test
// gave and copies the records.
func TestNewBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		data := []byte("10")
		given := shardlease.Record{SequenceNumber: "49000000000000000000000000000000000000000000000000000007",
			SubSequenceNumber: 2, PartitionKey: "order-0", ApproximateArrivalTimestamp: time.Unix(1, 0)}
		first := shardleasetest.NewBatch("orders", "shardId-000000000003",
			shardlease.Record{PartitionKey: "order-1", Data: data}, shardlease.Record{PartitionKey: "order-2"}, given)
		second := shardleasetest.NewBatch("orders", "shardId-000000000003", shardlease.Record{PartitionKey: "order-3"})
		data[0] = 'x'

		assert.Equal(t, "orders", first.Stream)
		assert.Equal(t, "shardId-000000000003", first.ShardID)
		require.Len(t, first.Records, 3)
		r := first.Records[0]
		assert.Equal(t, "order-1", r.PartitionKey)
		assert.Equal(t, "10", string(r.Data), "the records are copied")
		assert.Equal(t, int64(-1), r.SubSequenceNumber)
		assert.Equal(t, time.Now().UTC(), r.ApproximateArrivalTimestamp)
		assert.Regexp(t, `^49\d{40}00000000000003$`, r.SequenceNumber, "56 digits naming shard 3")
		assert.Equal(t, given, first.Records[2], "a record's own fields are kept")
		var seqs []string
		for _, r := range append(first.Records[:2:2], second.Records...) {
			seqs = append(seqs, r.SequenceNumber)
		}
		assert.IsIncreasing(t, seqs, "sequence numbers increase across batches")
		assert.Regexp(t, `^49\d{40}0{14}$`, shardleasetest.NewBatch("orders", "not-a-shard-id", shardlease.Record{}).Records[0].SequenceNumber)
	})
}

// A handler tested on a batch of its own, with no stream, store or
// consumer: it sums the amounts, and fails a batch with one that is not a
// number.
func ExampleNewBatch() {
	total := 0
	sumAmounts := func(ctx context.Context, batch *shardlease.Batch) error {
		for _, r := range batch.Records {
			n, err := strconv.Atoi(string(r.Data))
			if err != nil {
				return fmt.Errorf("order %s: %w", r.PartitionKey, err)
			}
			total += n
		}
		return nil
	}
	batch := shardleasetest.NewBatch("orders", "shardId-000000000000",
		shardlease.Record{PartitionKey: "order-1", Data: []byte("10")},
		shardlease.Record{PartitionKey: "order-2", Data: []byte("25")})
	fmt.Println(sumAmounts(context.Background(), batch), total)
	bad := shardleasetest.NewBatch("orders", "shardId-000000000000", shardlease.Record{PartitionKey: "order-3", Data: []byte("ten")})
	fmt.Println(sumAmounts(context.Background(), bad))
	// Output:
	// <nil> 35
	// order order-3: strconv.Atoi: parsing "ten": invalid syntax
}

// A batch no consumer handed out has no lease: Checkpoint and Flush return an
// error that names the shard and says so, instead of failing on a nil
// pointer, and its fence token is the zero token that Compare refuses.
func TestNewBatchCheckpointSaysThereIsNoLease(t *testing.T) {
	t.Parallel()
	b := shardleasetest.NewBatch("orders", "shardId-000000000001", shardlease.Record{PartitionKey: "k"})
	err := b.Checkpoint(b.Records[0])
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "shardId-000000000001")
	assert.Contains(t, err.Error(), "no consumer handed out")
	require.ErrorIs(t, b.Flush(t.Context()), shardlease.ErrInvalidConfig)
	_, err = b.Fence().Compare(b.Fence())
	require.ErrorIs(t, err, shardlease.ErrFenceMismatch)
}
