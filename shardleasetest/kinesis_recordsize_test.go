package shardleasetest_test

import (
	"bytes"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease/shardleasetest"
)

// payload returns n bytes that differ from one position to the next, so
// that a record cut short or shifted does not compare equal.
func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ byte(i>>10) ^ seed
	}
	return b
}

// TestLargeRecordsTakeTheStreamsRaisedLimit: a stream takes records of up to
// 1 MiB until its maximum record size is raised, then up to 10 MiB (data
// and partition key), and says so in DescribeStreamSummary; limits outside
// 1 to 10 MiB are a ValidationException.
func TestLargeRecordsTakeTheStreamsRaisedLimit(t *testing.T) {
	f := shardleasetest.NewKinesis()
	newStream(t, f, "big", 1)
	var inv *types.InvalidArgumentException
	_, _, err := f.Put("big", "k", payload(shardleasetest.MaxRecordSize, 1))
	require.ErrorAs(t, err, &inv, "1 MiB of data and a partition key exceed the default limit")
	_, _, err = f.Put("big", "k", payload(shardleasetest.MaxRecordSize-1, 1))
	require.NoError(t, err)

	require.NoError(t, f.AllowLargeRecords("big"))
	d, err := f.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("big")})
	require.NoError(t, err)
	assert.Equal(t, int32(10240), aws.ToInt32(d.StreamDescriptionSummary.MaxRecordSizeInKiB))
	_, _, err = f.Put("big", "k", payload(shardleasetest.MaxLargeRecordSize-1, 2))
	require.NoError(t, err, "10 MiB, data and partition key")
	_, _, err = f.Put("big", "k", payload(shardleasetest.MaxLargeRecordSize, 2))
	require.ErrorAs(t, err, &inv, "one byte over 10 MiB")

	var val *types.ValidationException
	arn := aws.String("arn:aws:kinesis:us-east-1:000000000000:stream/big")
	for _, kib := range []int32{1023, 10241} {
		_, err = f.UpdateMaxRecordSize(ctx, &kinesis.UpdateMaxRecordSizeInput{StreamARN: arn, MaxRecordSizeInKiB: aws.Int32(kib)})
		require.ErrorAs(t, err, &val, "%d KiB", kib)
	}
	_, err = f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("large"), ShardCount: aws.Int32(1), MaxRecordSizeInKiB: aws.Int32(4096)})
	require.NoError(t, err)
	_, _, err = f.Put("large", "k", payload(4<<20-1, 3))
	require.NoError(t, err)
	_, _, err = f.Put("large", "k", payload(4<<20, 3))
	require.ErrorAs(t, err, &inv)
	assert.Equal(t, 3, f.Calls(shardleasetest.OpUpdateMaxRecordSize), "AllowLargeRecords' call and the two refused")
}

// TestLargeRecordsReadWholeOnePerCall: records of 10 MiB are put (PutRecords
// carries at most 10 MiB in all) and read back whole, byte for byte, one a
// GetRecords call, since a call returns at most 10 MiB but at least one
// record; small records after them come together again.
func TestLargeRecordsReadWholeOnePerCall(t *testing.T) {
	f := shardleasetest.NewKinesis(shardleasetest.WithReadLimit(0))
	newStream(t, f, "big", 1)
	require.NoError(t, f.AllowLargeRecords("big"))
	big := [][]byte{payload(10<<20-1, 1), payload(10<<20-1, 2), payload(6<<20, 3)}
	for _, b := range big {
		_, _, err := f.Put("big", "k", b)
		require.NoError(t, err)
	}
	var inv *types.InvalidArgumentException
	err := f.PutBatch("big", shardleasetest.Entry{PartitionKey: "k", Data: payload(5<<20, 4)}, shardleasetest.Entry{PartitionKey: "k", Data: payload(5<<20, 5)})
	require.ErrorAs(t, err, &inv, "PutRecords of 10 MiB and two partition keys")
	require.NoError(t, f.PutBatch("big", shardleasetest.Entry{PartitionKey: "k", Data: payload(5<<20-1, 4)}, shardleasetest.Entry{PartitionKey: "k", Data: payload(5<<20-1, 5)}))
	for i := range 3 {
		require.NoError(t, f.PutBatch("big", shardleasetest.Entry{PartitionKey: "k", Data: []byte{byte(i)}}))
	}

	it := iter(t, f, "big", "shardId-000000000000", types.ShardIteratorTypeTrimHorizon)
	var calls [][]int
	var got [][]byte
	for len(got) < 8 {
		out, err := f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(it)})
		require.NoError(t, err)
		var sizes []int
		for _, r := range out.Records {
			sizes = append(sizes, len(r.Data))
			got = append(got, r.Data)
		}
		calls = append(calls, sizes)
		it = aws.ToString(out.NextShardIterator)
	}
	// The 6 MiB record and a 5 MiB one would exceed 10 MiB; the two 5 MiB
	// records fill a call; the small ones come in the next.
	assert.Equal(t, [][]int{{10<<20 - 1}, {10<<20 - 1}, {6 << 20}, {5<<20 - 1, 5<<20 - 1}, {1, 1, 1}}, calls, "records per call")
	for i, b := range big {
		assert.True(t, bytes.Equal(b, got[i]), "record %d read back whole", i)
	}
}
