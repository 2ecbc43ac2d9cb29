package kinesisread_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease/internal/kinesisread"
)

// pagedLister lists two pages; the first use of the second page's token
// fails as expired. It records the filter of every first page.
type pagedLister struct {
	expired bool
	filters []*types.ShardFilter
}

func (l *pagedLister) ListShards(_ context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if in.NextToken == nil {
		l.filters = append(l.filters, in.ShardFilter)
		return &kinesis.ListShardsOutput{Shards: []types.Shard{{ShardId: aws.String("a")}}, NextToken: aws.String("t")}, nil
	}
	if !l.expired {
		l.expired = true
		return nil, &types.ExpiredNextTokenException{Message: aws.String("expired")}
	}
	return &kinesis.ListShardsOutput{Shards: []types.Shard{{ShardId: aws.String("b")}}}, nil
}

// A page token that expired starts the listing again from its first page,
// with the filter it was asked with, and nothing is listed twice.
func TestListShardsFilteredStartsAgainWithItsFilter(t *testing.T) {
	l := &pagedLister{}
	filter := &types.ShardFilter{Type: types.ShardFilterTypeAtTimestamp, Timestamp: aws.Time(time.Unix(1, 0))}
	shards, err := kinesisread.ListShardsFiltered(t.Context(), l, "s", filter, kinesisread.Config{RetryMin: time.Millisecond, RetryMax: time.Millisecond})
	require.NoError(t, err)
	var ids []string
	for _, s := range shards {
		ids = append(ids, aws.ToString(s.ShardId))
	}
	assert.Equal(t, []string{"a", "b"}, ids)
	assert.Equal(t, []*types.ShardFilter{filter, filter}, l.filters)
}
