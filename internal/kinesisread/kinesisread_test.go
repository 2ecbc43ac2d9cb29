package kinesisread_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease/internal/kinesisread"
)

// TestRefNamesAStreamByNameOrARN: an ARN goes in StreamARN alone, a name in
// StreamName alone, and every call built from a Position or a listing
// carries the same.
func TestRefNamesAStreamByNameOrARN(t *testing.T) {
	arn := "arn:aws:kinesis:eu-west-1:444455556666:stream/orders"
	name, byARN := kinesisread.Ref(arn)
	require.Nil(t, name)
	require.Equal(t, arn, aws.ToString(byARN))
	name, byARN = kinesisread.Ref("orders")
	require.Equal(t, "orders", aws.ToString(name))
	require.Nil(t, byARN)

	in := kinesisread.Position{}.Iterator(arn, "shardId-000000000000")
	require.Nil(t, in.StreamName)
	require.Equal(t, arn, aws.ToString(in.StreamARN))
	in = kinesisread.Position{}.Iterator("orders", "shardId-000000000000")
	require.Equal(t, "orders", aws.ToString(in.StreamName))
	require.Nil(t, in.StreamARN)
}
