package shardleasetest

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// OpDescribeStreamSummary is the operation name of DescribeStreamSummary.
const OpDescribeStreamSummary = "DescribeStreamSummary"

// RetentionPeriodHours is the retention DescribeStreamSummary reports for
// every stream: the service's default. The fake itself keeps records for the
// stream's life.
const RetentionPeriodHours = 24

// DescribeStreamSummary describes a stream: its name, ARN, status (always
// ACTIVE), creation time, retention period ([RetentionPeriodHours]),
// number of open shards and maximum record size. A missing stream is a
// ResourceNotFoundException.
func (f *Kinesis) DescribeStreamSummary(ctx context.Context, params *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	if params == nil {
		params = &kinesis.DescribeStreamSummaryInput{}
	}
	name, err := f.beginStream(ctx, OpDescribeStreamSummary, "", params.StreamName, params.StreamARN)
	if err != nil {
		return nil, err
	}
	st, unlock, err := f.lockStream(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	open := 0
	for _, s := range st.shards {
		if s.open() {
			open++
		}
	}
	return &kinesis.DescribeStreamSummaryOutput{StreamDescriptionSummary: &types.StreamDescriptionSummary{
		StreamName:              ptr(st.name),
		StreamARN:               ptr(st.arn()),
		StreamStatus:            types.StreamStatusActive,
		StreamCreationTimestamp: ptr(st.created),
		RetentionPeriodHours:    ptr(int32(RetentionPeriodHours)),
		OpenShardCount:          ptr(int32(open)),
		EnhancedMonitoring:      []types.EnhancedMetrics{},
		MaxRecordSizeInKiB:      ptr(int32(st.maxRecord >> 10)),
	}}, nil
}
