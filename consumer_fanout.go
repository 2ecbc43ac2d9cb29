package shardlease

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/shardlease/shardlease/internal/kinesisread"
)

var _ FanOutAPI = (*kinesis.Client)(nil)

// fanOut is a consumer's enhanced fan-out state: its client and the
// registered stream consumer's ARN, set once by register before any lease
// is taken.
type fanOut struct {
	kin  FanOutAPI
	name string
	arn  string
}

// newFanOut checks the fan-out configuration; it returns nil when the option
// is not set.
func newFanOut(client KinesisAPI, stream string, cfg config) (*fanOut, error) {
	if !cfg.fanOutSet {
		return nil, nil
	}
	if !consumerNamePattern.MatchString(cfg.fanOutName) {
		return nil, fmt.Errorf("%w: stream %s: WithEnhancedFanOut(%q): a stream consumer name is 1 to 128 letters, digits, '_', '.' or '-'", ErrInvalidConfig, stream, cfg.fanOutName)
	}
	fo, ok := client.(FanOutAPI)
	if !ok {
		return nil, fmt.Errorf("%w: stream %s: WithEnhancedFanOut needs a Kinesis client with DescribeStreamSummary, RegisterStreamConsumer, DescribeStreamConsumer and SubscribeToShard (shardlease.FanOutAPI); %T has not; pass a *kinesis.Client or add them to the wrapper", ErrInvalidConfig, stream, client)
	}
	return &fanOut{kin: fo, name: cfg.fanOutName}, nil
}

// register registers the stream consumer unless it is, and waits until it is
// ACTIVE (see kinesisread.Register), before any lease is taken. Its errors
// name the stream, the consumer and the call whose permission to check.
func (f *fanOut) register(ctx context.Context, c *Consumer, m *member) error {
	arn, err := kinesisread.Register(ctx, f.kin, m.ref, m.knownARN(), f.name, c.cfg.readConfig(), c.log)
	var nf *kinesisread.StreamNotFoundError
	var failed *kinesisread.CallError
	switch {
	case errors.As(err, &nf):
		return &StreamNotFoundError{Stream: m.name, Err: nf.Err}
	case errors.As(err, &failed):
		return fmt.Errorf("shardlease: stream %s: enhanced fan-out consumer %s: %s: %w; check that the role may call %s on the stream (see docs/table.md, IAM permissions)", m.name, f.name, failed.Op, failed.Err, failed.Op)
	case err != nil:
		return err
	}
	f.arn = arn
	return nil
}
