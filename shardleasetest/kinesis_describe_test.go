package shardleasetest_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease/shardleasetest"
)

func TestDescribeStreamSummary(t *testing.T) {
	f := shardleasetest.NewKinesis()
	newStream(t, f, "orders", 2)
	_, err := f.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String("orders"), ShardToSplit: aws.String("shardId-000000000000"),
		NewStartingHashKey: aws.String("1000")})
	require.NoError(t, err)
	out, err := f.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("orders")})
	require.NoError(t, err)
	s := out.StreamDescriptionSummary
	assert.Equal(t, "orders", aws.ToString(s.StreamName))
	assert.Equal(t, types.StreamStatusActive, s.StreamStatus)
	assert.Equal(t, int32(shardleasetest.RetentionPeriodHours), aws.ToInt32(s.RetentionPeriodHours))
	assert.Equal(t, int32(3), aws.ToInt32(s.OpenShardCount), "the split closed one shard and opened two")
	assert.Equal(t, 1, f.Calls(shardleasetest.OpDescribeStreamSummary))

	var notFound *types.ResourceNotFoundException
	_, err = f.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("missing")})
	assert.ErrorAs(t, err, &notFound)
}
