package shardleasetest_test

import (
	"context"
	"crypto/md5"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shardlease/shardlease/shardleasetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

func newStream(t *testing.T, f *shardleasetest.Kinesis, name string, shards int32) {
	t.Helper()
	_, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)})
	require.NoError(t, err)
}

func put(t *testing.T, f *shardleasetest.Kinesis, name, key, data string) *kinesis.PutRecordOutput {
	t.Helper()
	out, err := f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(name), PartitionKey: aws.String(key), Data: []byte(data)})
	require.NoError(t, err)
	return out
}

func putHash(t *testing.T, f *shardleasetest.Kinesis, name string, hash *big.Int, data string) *kinesis.PutRecordOutput {
	t.Helper()
	out, err := f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(name), PartitionKey: aws.String("k"),
		ExplicitHashKey: aws.String(hash.String()), Data: []byte(data)})
	require.NoError(t, err)
	return out
}

func iter(t *testing.T, f *shardleasetest.Kinesis, name, shard string, typ types.ShardIteratorType, mod ...func(*kinesis.GetShardIteratorInput)) string {
	t.Helper()
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(name), ShardId: aws.String(shard), ShardIteratorType: typ}
	for _, m := range mod {
		m(in)
	}
	out, err := f.GetShardIterator(ctx, in)
	require.NoError(t, err)
	require.NotNil(t, out.ShardIterator)
	return *out.ShardIterator
}

func getRecords(t *testing.T, f *shardleasetest.Kinesis, it string, limit int32) *kinesis.GetRecordsOutput {
	t.Helper()
	in := &kinesis.GetRecordsInput{ShardIterator: aws.String(it)}
	if limit > 0 {
		in.Limit = aws.Int32(limit)
	}
	out, err := f.GetRecords(ctx, in)
	require.NoError(t, err)
	return out
}

func listAll(t *testing.T, f *shardleasetest.Kinesis, name string) []types.Shard {
	t.Helper()
	out, err := f.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(name)})
	require.NoError(t, err)
	require.Nil(t, out.NextToken)
	return out.Shards
}

func data(rs []types.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, string(r.Data))
	}
	return out
}

func bigint(t *testing.T, s string) *big.Int {
	t.Helper()
	n, ok := new(big.Int).SetString(s, 10)
	require.True(t, ok, "not a decimal integer: %q", s)
	return n
}

var two128 = new(big.Int).Lsh(big.NewInt(1), 128)

func TestCreateStreamSplitsHashSpaceEvenly(t *testing.T) {
	f := shardleasetest.NewKinesis()
	newStream(t, f, "orders", 3)
	shards := listAll(t, f, "orders")
	require.Len(t, shards, 3)
	want := [][2]string{
		{"0", "113427455640312821154458202477256070484"},
		{"113427455640312821154458202477256070485", "226854911280625642308916404954512140969"},
		{"226854911280625642308916404954512140970", "340282366920938463463374607431768211455"},
	}
	for i, s := range shards {
		assert.Equal(t, fmt.Sprintf("shardId-%012d", i), *s.ShardId)
		assert.Equal(t, want[i][0], *s.HashKeyRange.StartingHashKey)
		assert.Equal(t, want[i][1], *s.HashKeyRange.EndingHashKey)
		assert.Nil(t, s.ParentShardId)
		assert.Nil(t, s.AdjacentParentShardId)
		require.NotNil(t, s.SequenceNumberRange)
		assert.NotEmpty(t, *s.SequenceNumberRange.StartingSequenceNumber)
		assert.Nil(t, s.SequenceNumberRange.EndingSequenceNumber, "open shard has no ending sequence number")
	}

	_, err := f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(1)})
	var inUse *types.ResourceInUseException
	assert.ErrorAs(t, err, &inUse)
	_, err = f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("zero"), ShardCount: aws.Int32(0)})
	var invalid *types.InvalidArgumentException
	assert.ErrorAs(t, err, &invalid)

	_, err = f.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("od"),
		StreamModeDetails: &types.StreamModeDetails{StreamMode: types.StreamModeOnDemand}})
	require.NoError(t, err)
	assert.Len(t, listAll(t, f, "od"), 4)
}

func TestPutRoutesByMD5AndReadsInOrder(t *testing.T) {
	f := shardleasetest.NewKinesis(shardleasetest.WithReadLimit(0))
	newStream(t, f, "orders", 4)
	shards := listAll(t, f, "orders")

	want := map[string][]string{}
	for i := range 200 {
		key := fmt.Sprintf("customer-%d", i%37)
		sum := md5.Sum([]byte(key))
		h := new(big.Int).SetBytes(sum[:])
		var owner string
		for _, s := range shards {
			if bigint(t, *s.HashKeyRange.StartingHashKey).Cmp(h) <= 0 && h.Cmp(bigint(t, *s.HashKeyRange.EndingHashKey)) <= 0 {
				owner = *s.ShardId
			}
		}
		out := put(t, f, "orders", key, fmt.Sprintf("r%03d", i))
		require.Equal(t, owner, *out.ShardId, "key %s", key)
		want[owner] = append(want[owner], fmt.Sprintf("r%03d", i))
	}
	require.Len(t, want, 4, "37 keys should reach all 4 shards")

	for _, s := range shards {
		out := getRecords(t, f, iter(t, f, "orders", *s.ShardId, types.ShardIteratorTypeTrimHorizon), 0)
		assert.Equal(t, want[*s.ShardId], data(out.Records), *s.ShardId)
		assert.Equal(t, int64(0), *out.MillisBehindLatest)
		assert.NotNil(t, out.NextShardIterator)
		for _, r := range out.Records {
			assert.NotNil(t, r.ApproximateArrivalTimestamp)
			assert.Contains(t, *r.PartitionKey, "customer-")
		}
	}
}

func TestSequenceNumbersCompareAsIntegersAndStrings(t *testing.T) {
	f := shardleasetest.NewKinesis()
	newStream(t, f, "orders", 3)
	var seqs []string
	for i := range 50 {
		out := put(t, f, "orders", fmt.Sprint(i), "x")
		seqs = append(seqs, *out.SequenceNumber)
	}
	entries := make([]types.PutRecordsRequestEntry, 20)
	for i := range entries {
		entries[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String(fmt.Sprint("batch", i)), Data: []byte("y")}
	}
	out, err := f.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("orders"), Records: entries})
	require.NoError(t, err)
	assert.Equal(t, int32(0), *out.FailedRecordCount)
	for _, r := range out.Records {
		seqs = append(seqs, *r.SequenceNumber)
	}
	for i, s := range seqs {
		require.Len(t, s, 56, s)
		bigint(t, s)
		if i > 0 {
			assert.Equal(t, 1, bigint(t, s).Cmp(bigint(t, seqs[i-1])), "numerically increasing over the stream")
			assert.Greater(t, s, seqs[i-1], "string order agrees")
		}
	}
	// A shard's starting sequence number sorts before its records.
	for _, s := range listAll(t, f, "orders") {
		recs := getRecords(t, f, iter(t, f, "orders", *s.ShardId, types.ShardIteratorTypeTrimHorizon), 0).Records
		require.NotEmpty(t, recs)
		assert.Less(t, *s.SequenceNumberRange.StartingSequenceNumber, *recs[0].SequenceNumber)
	}
}

func TestIteratorTypes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := shardleasetest.NewKinesis(shardleasetest.WithReadLimit(0))
		newStream(t, f, "orders", 1)
		const sh = "shardId-000000000000"
		var seqs []string
		var times []time.Time
		for i := range 4 {
			times = append(times, time.Now())
			seqs = append(seqs, *put(t, f, "orders", "k", fmt.Sprint("r", i)).SequenceNumber)
			time.Sleep(time.Second)
		}
		latest := iter(t, f, "orders", sh, types.ShardIteratorTypeLatest)

		read := func(it string) []string { return data(getRecords(t, f, it, 0).Records) }
		atSeq := func(s string) func(*kinesis.GetShardIteratorInput) {
			return func(in *kinesis.GetShardIteratorInput) { in.StartingSequenceNumber = aws.String(s) }
		}
		at := func(ts time.Time) func(*kinesis.GetShardIteratorInput) {
			return func(in *kinesis.GetShardIteratorInput) { in.Timestamp = aws.Time(ts) }
		}

		assert.Equal(t, []string{"r0", "r1", "r2", "r3"}, read(iter(t, f, "orders", sh, types.ShardIteratorTypeTrimHorizon)))
		assert.Equal(t, []string{"r1", "r2", "r3"}, read(iter(t, f, "orders", sh, types.ShardIteratorTypeAtSequenceNumber, atSeq(seqs[1]))))
		assert.Equal(t, []string{"r2", "r3"}, read(iter(t, f, "orders", sh, types.ShardIteratorTypeAfterSequenceNumber, atSeq(seqs[1]))))
		assert.Empty(t, read(iter(t, f, "orders", sh, types.ShardIteratorTypeAfterSequenceNumber, atSeq(seqs[3]))))
		assert.Equal(t, []string{"r2", "r3"}, read(iter(t, f, "orders", sh, types.ShardIteratorTypeAtTimestamp, at(times[2]))))
		assert.Equal(t, []string{"r2", "r3"}, read(iter(t, f, "orders", sh, types.ShardIteratorTypeAtTimestamp, at(times[1].Add(500*time.Millisecond)))))
		assert.Equal(t, []string{"r0", "r1", "r2", "r3"}, read(iter(t, f, "orders", sh, types.ShardIteratorTypeAtTimestamp, at(times[0].Add(-time.Hour)))))
		assert.Empty(t, read(iter(t, f, "orders", sh, types.ShardIteratorTypeAtTimestamp, at(time.Now()))))

		// LATEST sees only what is put after it was issued.
		assert.Empty(t, read(latest))
		put(t, f, "orders", "k", "r4")
		assert.Equal(t, []string{"r4"}, read(latest))

		var invalid *types.InvalidArgumentException
		var notFound *types.ResourceNotFoundException
		_, err := f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("orders"), ShardId: aws.String(sh),
			ShardIteratorType: types.ShardIteratorTypeAtSequenceNumber, StartingSequenceNumber: aws.String("12345")})
		assert.ErrorAs(t, err, &invalid, "malformed sequence number")
		_, err = f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("orders"), ShardId: aws.String(sh),
			ShardIteratorType: types.ShardIteratorTypeAtSequenceNumber})
		assert.ErrorAs(t, err, &invalid, "missing sequence number")
		_, err = f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("orders"), ShardId: aws.String(sh),
			ShardIteratorType: "SOMEWHERE"})
		assert.ErrorAs(t, err, &invalid, "unknown type")
		_, err = f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("orders"), ShardId: aws.String("shardId-000000000009"),
			ShardIteratorType: types.ShardIteratorTypeLatest})
		assert.ErrorAs(t, err, &notFound, "unknown shard")
		_, err = f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("payments"), ShardId: aws.String(sh),
			ShardIteratorType: types.ShardIteratorTypeLatest})
		require.ErrorAs(t, err, &notFound, "unknown stream")
		assert.Contains(t, err.Error(), "payments")
		_, err = f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String("garbage")})
		assert.ErrorAs(t, err, &invalid, "iterator not from this fake")
		_, err = f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(latest), Limit: aws.Int32(10001)})
		assert.ErrorAs(t, err, &invalid, "limit above 10000")
	})
}

func TestSequenceNumberOfAnotherShardIsRejected(t *testing.T) {
	f := shardleasetest.NewKinesis()
	newStream(t, f, "orders", 2)
	out := putHash(t, f, "orders", big.NewInt(0), "x") // lands on shard 0
	require.Equal(t, "shardId-000000000000", *out.ShardId)
	_, err := f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("orders"), ShardId: aws.String("shardId-000000000001"),
		ShardIteratorType: types.ShardIteratorTypeAfterSequenceNumber, StartingSequenceNumber: out.SequenceNumber})
	var invalid *types.InvalidArgumentException
	assert.ErrorAs(t, err, &invalid)
}

func TestListShardsPagination(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := shardleasetest.NewKinesis()
		newStream(t, f, "orders", 7)

		var ids []string
		var sizes []int
		in := &kinesis.ListShardsInput{StreamName: aws.String("orders"), MaxResults: aws.Int32(3)}
		for {
			out, err := f.ListShards(ctx, in)
			require.NoError(t, err)
			sizes = append(sizes, len(out.Shards))
			for _, s := range out.Shards {
				ids = append(ids, *s.ShardId)
			}
			if out.NextToken == nil {
				break
			}
			in = &kinesis.ListShardsInput{NextToken: out.NextToken, MaxResults: aws.Int32(3)}
		}
		assert.Equal(t, []int{3, 3, 1}, sizes)
		require.Len(t, ids, 7)
		assert.True(t, sort.StringsAreSorted(ids))

		first, err := f.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("orders"), MaxResults: aws.Int32(2)})
		require.NoError(t, err)
		require.NotNil(t, first.NextToken)

		var invalid *types.InvalidArgumentException
		_, err = f.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("orders"), NextToken: first.NextToken})
		assert.ErrorAs(t, err, &invalid, "StreamName with NextToken")
		_, err = f.ListShards(ctx, &kinesis.ListShardsInput{})
		assert.ErrorAs(t, err, &invalid, "neither StreamName nor NextToken")
		_, err = f.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("orders"), MaxResults: aws.Int32(0)})
		assert.ErrorAs(t, err, &invalid, "MaxResults 0")

		out, err := f.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("orders"), ExclusiveStartShardId: aws.String("shardId-000000000004")})
		require.NoError(t, err)
		require.Len(t, out.Shards, 2)
		assert.Equal(t, "shardId-000000000005", *out.Shards[0].ShardId)

		var notFound *types.ResourceNotFoundException
		_, err = f.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("payments")})
		require.ErrorAs(t, err, &notFound)
		assert.Contains(t, err.Error(), "payments")

		time.Sleep(shardleasetest.NextTokenTTL)
		_, err = f.ListShards(ctx, &kinesis.ListShardsInput{NextToken: first.NextToken})
		var expired *types.ExpiredNextTokenException
		assert.ErrorAs(t, err, &expired)
	})
}

func TestSplitAndMergeLineage(t *testing.T) {
	f := shardleasetest.NewKinesis(shardleasetest.WithReadLimit(0))
	newStream(t, f, "orders", 2)
	half := new(big.Int).Rsh(two128, 1)
	quarter := new(big.Int).Rsh(two128, 2)

	putHash(t, f, "orders", big.NewInt(5), "before-split")
	_, err := f.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String("orders"),
		ShardToSplit: aws.String("shardId-000000000000"), NewStartingHashKey: aws.String(quarter.String())})
	require.NoError(t, err)

	shards := listAll(t, f, "orders")
	require.Len(t, shards, 4)
	parent, low, high := shards[0], shards[2], shards[3]
	require.NotNil(t, parent.SequenceNumberRange.EndingSequenceNumber, "split parent is closed")
	assert.Nil(t, shards[1].SequenceNumberRange.EndingSequenceNumber)
	assert.Equal(t, "shardId-000000000000", *low.ParentShardId)
	assert.Equal(t, "shardId-000000000000", *high.ParentShardId)
	assert.Nil(t, low.AdjacentParentShardId)
	assert.Equal(t, "0", *low.HashKeyRange.StartingHashKey)
	assert.Equal(t, new(big.Int).Sub(quarter, big.NewInt(1)).String(), *low.HashKeyRange.EndingHashKey)
	assert.Equal(t, quarter.String(), *high.HashKeyRange.StartingHashKey)
	assert.Equal(t, new(big.Int).Sub(half, big.NewInt(1)).String(), *high.HashKeyRange.EndingHashKey)
	assert.Greater(t, *low.SequenceNumberRange.StartingSequenceNumber, *parent.SequenceNumberRange.EndingSequenceNumber)

	// New puts go to the children, never to the closed parent.
	assert.Equal(t, "shardId-000000000002", *putHash(t, f, "orders", big.NewInt(5), "low").ShardId)
	assert.Equal(t, "shardId-000000000003", *putHash(t, f, "orders", quarter, "high").ShardId)
	assert.Equal(t, "shardId-000000000001", *putHash(t, f, "orders", half, "other").ShardId)

	var invalid *types.InvalidArgumentException
	_, err = f.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String("orders"),
		ShardToSplit: aws.String("shardId-000000000000"), NewStartingHashKey: aws.String("7")})
	assert.ErrorAs(t, err, &invalid, "closed shard cannot be split")
	_, err = f.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String("orders"),
		ShardToSplit: aws.String("shardId-000000000001"), NewStartingHashKey: aws.String(half.String())})
	assert.ErrorAs(t, err, &invalid, "key at the start of the range leaves an empty child")
	_, err = f.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: aws.String("orders"),
		ShardToMerge: aws.String("shardId-000000000002"), AdjacentShardToMerge: aws.String("shardId-000000000001")})
	assert.ErrorAs(t, err, &invalid, "not adjacent")

	_, err = f.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: aws.String("orders"),
		ShardToMerge: aws.String("shardId-000000000003"), AdjacentShardToMerge: aws.String("shardId-000000000002")})
	require.NoError(t, err)
	shards = listAll(t, f, "orders")
	require.Len(t, shards, 5)
	merged := shards[4]
	assert.Equal(t, "shardId-000000000003", *merged.ParentShardId)
	assert.Equal(t, "shardId-000000000002", *merged.AdjacentParentShardId)
	assert.Equal(t, "0", *merged.HashKeyRange.StartingHashKey)
	assert.Equal(t, new(big.Int).Sub(half, big.NewInt(1)).String(), *merged.HashKeyRange.EndingHashKey)
	assert.NotNil(t, shards[2].SequenceNumberRange.EndingSequenceNumber)
	assert.NotNil(t, shards[3].SequenceNumberRange.EndingSequenceNumber)
	assert.Equal(t, "shardId-000000000004", *putHash(t, f, "orders", quarter, "merged").ShardId)

	// Each closed shard reports its children at its end.
	end := getRecords(t, f, iter(t, f, "orders", "shardId-000000000000", types.ShardIteratorTypeTrimHorizon), 0)
	assert.Equal(t, []string{"before-split"}, data(end.Records))
	assert.Nil(t, end.NextShardIterator)
	require.Len(t, end.ChildShards, 2)
	assert.Equal(t, "shardId-000000000002", *end.ChildShards[0].ShardId)
	assert.Equal(t, []string{"shardId-000000000000"}, end.ChildShards[0].ParentShards)
	assert.Equal(t, *low.HashKeyRange, *end.ChildShards[0].HashKeyRange)
	assert.Equal(t, "shardId-000000000003", *end.ChildShards[1].ShardId)
	for _, id := range []string{"shardId-000000000002", "shardId-000000000003"} {
		end := getRecords(t, f, iter(t, f, "orders", id, types.ShardIteratorTypeTrimHorizon), 0)
		assert.Nil(t, end.NextShardIterator)
		require.Len(t, end.ChildShards, 1)
		assert.Equal(t, "shardId-000000000004", *end.ChildShards[0].ShardId)
		assert.Equal(t, []string{"shardId-000000000003", "shardId-000000000002"}, end.ChildShards[0].ParentShards)
	}

	// ShardFilter AT_LATEST lists only the open shards.
	open, err := f.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("orders"),
		ShardFilter: &types.ShardFilter{Type: types.ShardFilterTypeAtLatest}})
	require.NoError(t, err)
	var openIDs []string
	for _, s := range open.Shards {
		openIDs = append(openIDs, *s.ShardId)
	}
	assert.Equal(t, []string{"shardId-000000000001", "shardId-000000000004"}, openIDs)
}

func TestClosedShardEnd(t *testing.T) {
	f := shardleasetest.NewKinesis(shardleasetest.WithReadLimit(0))
	newStream(t, f, "orders", 1)
	const sh = "shardId-000000000000"

	// An open shard always hands out a next iterator, even with nothing to read.
	empty := getRecords(t, f, iter(t, f, "orders", sh, types.ShardIteratorTypeTrimHorizon), 0)
	assert.Empty(t, empty.Records)
	require.NotNil(t, empty.NextShardIterator)
	assert.Empty(t, empty.ChildShards)
	again := getRecords(t, f, *empty.NextShardIterator, 0)
	assert.NotNil(t, again.NextShardIterator)

	var seqs []string
	for i := range 3 {
		seqs = append(seqs, *put(t, f, "orders", "k", fmt.Sprint("r", i)).SequenceNumber)
	}
	_, err := f.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String("orders"), ShardToSplit: aws.String(sh),
		NewStartingHashKey: aws.String(new(big.Int).Rsh(two128, 1).String())})
	require.NoError(t, err)

	// Read one at a time: the last record comes with the children and no next iterator.
	it := iter(t, f, "orders", sh, types.ShardIteratorTypeTrimHorizon)
	var got []string
	for i := 0; ; i++ {
		require.Less(t, i, 10, "a closed shard must end")
		out := getRecords(t, f, it, 1)
		got = append(got, data(out.Records)...)
		if out.NextShardIterator == nil {
			assert.Equal(t, []string{"r2"}, data(out.Records), "the final call carries the last record")
			assert.Len(t, out.ChildShards, 2)
			assert.Equal(t, int64(0), *out.MillisBehindLatest)
			break
		}
		assert.Empty(t, out.ChildShards, "children only at the end")
		it = *out.NextShardIterator
	}
	assert.Equal(t, []string{"r0", "r1", "r2"}, got)

	// Resuming after the last checkpoint, or at LATEST, reaches the end at once.
	for _, in := range []string{
		iter(t, f, "orders", sh, types.ShardIteratorTypeAfterSequenceNumber, func(in *kinesis.GetShardIteratorInput) { in.StartingSequenceNumber = aws.String(seqs[2]) }),
		iter(t, f, "orders", sh, types.ShardIteratorTypeLatest),
	} {
		out := getRecords(t, f, in, 0)
		assert.Empty(t, out.Records)
		assert.Nil(t, out.NextShardIterator)
		assert.Len(t, out.ChildShards, 2)
	}
}

func TestIteratorExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := shardleasetest.NewKinesis()
		newStream(t, f, "orders", 1)
		it := iter(t, f, "orders", "shardId-000000000000", types.ShardIteratorTypeTrimHorizon)

		time.Sleep(shardleasetest.IteratorTTL - time.Millisecond)
		out := getRecords(t, f, it, 0)
		require.NotNil(t, out.NextShardIterator)

		// The next iterator is fresh; the old one has now expired.
		time.Sleep(time.Millisecond)
		_, err := f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(it)})
		var expired *types.ExpiredIteratorException
		require.ErrorAs(t, err, &expired)

		time.Sleep(shardleasetest.IteratorTTL - 2*time.Millisecond) // the next one is TTL-1ms old
		getRecords(t, f, *out.NextShardIterator, 0)
		time.Sleep(time.Millisecond)
		_, err = f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: out.NextShardIterator})
		assert.ErrorAs(t, err, &expired)
	})
}

func TestReadRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := shardleasetest.NewKinesis()
		newStream(t, f, "orders", 2)
		it0 := iter(t, f, "orders", "shardId-000000000000", types.ShardIteratorTypeLatest)
		it1 := iter(t, f, "orders", "shardId-000000000001", types.ShardIteratorTypeLatest)
		read := func(it string) error {
			_, err := f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(it)})
			return err
		}
		var throttled *types.ProvisionedThroughputExceededException

		for range 3 {
			require.NoError(t, read(it0))
		}
		time.Sleep(600 * time.Millisecond)
		for range 2 {
			require.NoError(t, read(it0))
		}
		err := read(it0)
		require.ErrorAs(t, err, &throttled, "sixth call within a second")
		assert.Contains(t, err.Error(), "shardId-000000000000")
		require.NoError(t, read(it1), "other shards have their own budget")

		// At t=1s the first three calls leave the window; the two at 0.6s remain.
		time.Sleep(400 * time.Millisecond)
		for range 3 {
			require.NoError(t, read(it0))
		}
		require.ErrorAs(t, read(it0), &throttled)
		time.Sleep(600 * time.Millisecond)
		require.NoError(t, read(it0))

		unlimited := shardleasetest.NewKinesis(shardleasetest.WithReadLimit(0))
		newStream(t, unlimited, "orders", 1)
		it := iter(t, unlimited, "orders", "shardId-000000000000", types.ShardIteratorTypeLatest)
		for range 100 {
			_, err := unlimited.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(it)})
			require.NoError(t, err)
		}
	})
}

func TestFaultsAndCounters(t *testing.T) {
	f := shardleasetest.NewKinesis(shardleasetest.WithReadLimit(0))
	newStream(t, f, "orders", 2)
	boom := &types.ProvisionedThroughputExceededException{Message: aws.String("injected")}
	var seen []string
	f.SetFaults(func(op, shardID string) error {
		seen = append(seen, op+"/"+shardID)
		if op == shardleasetest.OpGetRecords && shardID == "shardId-000000000001" {
			return boom
		}
		if op == shardleasetest.OpListShards {
			// The hook may call the fake: it runs without the lock.
			_, err := f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String("p"), Data: []byte("x")})
			return err
		}
		return nil
	})

	it0 := iter(t, f, "orders", "shardId-000000000000", types.ShardIteratorTypeTrimHorizon)
	it1 := iter(t, f, "orders", "shardId-000000000001", types.ShardIteratorTypeTrimHorizon)
	getRecords(t, f, it0, 0)
	_, err := f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(it1)})
	assert.ErrorIs(t, err, boom)
	listAll(t, f, "orders")

	assert.Equal(t, 2, f.Calls(shardleasetest.OpGetShardIterator))
	assert.Equal(t, 2, f.Calls(shardleasetest.OpGetRecords), "failed calls count too")
	assert.Equal(t, 1, f.Calls(shardleasetest.OpListShards))
	assert.Equal(t, 1, f.Calls(shardleasetest.OpPutRecord))
	assert.Equal(t, map[string]int{"CreateStream": 1, "GetShardIterator": 2, "GetRecords": 2, "ListShards": 1, "PutRecord": 1}, f.CallCounts())
	assert.Contains(t, seen, "GetRecords/shardId-000000000000")
	assert.Contains(t, seen, "ListShards/")

	f.SetFaults(nil)
	getRecords(t, f, it1, 0)
	f.ResetCalls()
	assert.Zero(t, f.Calls(shardleasetest.OpGetRecords))

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = f.GetRecords(cctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(it0)})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestDeletedStream(t *testing.T) {
	f := shardleasetest.NewKinesis()
	newStream(t, f, "orders", 1)
	it := iter(t, f, "orders", "shardId-000000000000", types.ShardIteratorTypeTrimHorizon)
	_, err := f.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String("orders")})
	require.NoError(t, err)
	var notFound *types.ResourceNotFoundException
	_, err = f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String("k"), Data: []byte("x")})
	assert.ErrorAs(t, err, &notFound)

	newStream(t, f, "orders", 1)
	_, err = f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(it)})
	assert.ErrorAs(t, err, &notFound, "an iterator of the deleted stream does not read the new one")

	// StreamARN names a stream as StreamName does.
	arn := "arn:aws:kinesis:" + shardleasetest.Region + ":" + shardleasetest.Account + ":stream/orders"
	out, err := f.ListShards(ctx, &kinesis.ListShardsInput{StreamARN: aws.String(arn)})
	require.NoError(t, err)
	assert.Len(t, out.Shards, 1)
}

// Producers, readers following lineage and a resharder all at once; run with
// -race. Every record is read exactly once across the shard tree.
func TestConcurrentUse(t *testing.T) {
	f := shardleasetest.NewKinesis(shardleasetest.WithReadLimit(0))
	newStream(t, f, "orders", 2)
	const producers, perProducer = 4, 200

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				_, err := f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"),
					PartitionKey: aws.String(fmt.Sprint(p, "-", i)), Data: []byte(fmt.Sprint(p, "-", i))})
				assert.NoError(t, err)
			}
		})
	}
	wg.Go(func() {
		for _, id := range []string{"shardId-000000000000", "shardId-000000000001", "shardId-000000000002"} {
			out, err := f.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("orders")})
			if !assert.NoError(t, err) {
				return
			}
			for _, s := range out.Shards {
				if *s.ShardId == id {
					lo, hi := bigint(t, *s.HashKeyRange.StartingHashKey), bigint(t, *s.HashKeyRange.EndingHashKey)
					mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
					_, err := f.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String("orders"),
						ShardToSplit: aws.String(id), NewStartingHashKey: aws.String(mid.String())})
					assert.NoError(t, err)
				}
			}
		}
	})
	wg.Wait()

	// Read the whole tree concurrently, one goroutine per shard.
	var mu sync.Mutex
	seen := map[string]int{}
	var readers sync.WaitGroup
	for _, s := range listAll(t, f, "orders") {
		readers.Go(func() {
			it := iter(t, f, "orders", *s.ShardId, types.ShardIteratorTypeTrimHorizon)
			for {
				out, err := f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(it), Limit: aws.Int32(50)})
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				for _, r := range out.Records {
					seen[string(r.Data)]++
				}
				mu.Unlock()
				if out.NextShardIterator == nil || (len(out.Records) == 0 && s.SequenceNumberRange.EndingSequenceNumber == nil) {
					return
				}
				it = *out.NextShardIterator
			}
		})
	}
	readers.Wait()
	require.Len(t, seen, producers*perProducer)
	for k, n := range seen {
		require.Equal(t, 1, n, k)
	}
	assert.True(t, strings.HasPrefix(*listAll(t, f, "orders")[0].ShardId, "shardId-"))
}
