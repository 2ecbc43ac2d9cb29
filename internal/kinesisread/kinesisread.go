// Package kinesisread reads Kinesis shards: shard listing, the polling
// reader (GetShardIterator and GetRecords), the enhanced fan-out reader
// (SubscribeToShard) with its stream consumer's registration, and the one
// rule for where a reader starts (Position).
//
// It knows nothing of leases. A reader is given a shard, a client, its
// timings, a logger and a Sink for what its caller must learn; it hands on
// raw Kinesis records in order, and its caller de-aggregates and
// checkpoints them.
package kinesisread

import (
	"context"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// ShardLister lists a stream's shards. *kinesis.Client satisfies it.
type ShardLister interface {
	ListShards(ctx context.Context, params *kinesis.ListShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
}

// Config is the timing of the calls to Kinesis.
type Config struct {
	// BatchSize is the most records one GetRecords call asks for.
	BatchSize int32
	// IdlePoll is the pause after a GetRecords call that returned no record.
	IdlePoll time.Duration
	// ReadTimeout is the deadline of each call; zero means none.
	ReadTimeout time.Duration
	// SilenceTimeout is how long an open subscription may deliver no event
	// at all before it is closed and made again.
	SilenceTimeout time.Duration
	// RetryMin and RetryMax bound the backoff after a failed call.
	RetryMin, RetryMax time.Duration
}

// Ref returns the StreamName and StreamARN of a call on stream. A stream
// given as an ARN ("arn:aws:kinesis:...:stream/name") is named by StreamARN
// alone, which every data-plane call accepts and which a stream of another
// account, read through its resource policy, needs; any other by
// StreamName.
func Ref(stream string) (name, arn *string) {
	if strings.HasPrefix(stream, "arn:") {
		return nil, aws.String(stream)
	}
	return aws.String(stream), nil
}

// StreamNotFoundError reports that Kinesis does not know the stream.
type StreamNotFoundError struct {
	Stream string
	Err    error // the SDK's ResourceNotFoundException
}

func (e *StreamNotFoundError) Error() string {
	return "stream " + e.Stream + " not found: " + e.Err.Error()
}

// Unwrap returns the SDK's error.
func (e *StreamNotFoundError) Unwrap() error { return e.Err }
