package shardlease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease/internal/backoff"
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

// consumerPoll is how often register asks whether a consumer being
// registered (or deregistered) is done; Kinesis allows 20
// DescribeStreamConsumer calls a second per account.
const consumerPoll = 500 * time.Millisecond

// registerAttempts bounds the retries of a transient failure while
// registering.
const registerAttempts = 8

// register registers the stream consumer unless it is, and waits until it is
// ACTIVE. Each call has a deadline of a lease duration; one that passes it
// is retried as a transient failure. Several workers may call it at once: a registration already under
// way (ResourceInUseException) is waited for, not an error. A missing stream,
// a refused permission or a limit reached is returned; a transient failure is
// retried a few times.
func (f *fanOut) register(ctx context.Context, c *Consumer) error {
	fail := func(op string, err error) error {
		var rnf *types.ResourceNotFoundException
		if errors.As(err, &rnf) && op == "DescribeStreamSummary" {
			return &StreamNotFoundError{Stream: c.stream, Err: err}
		}
		return fmt.Errorf("shardlease: stream %s: enhanced fan-out consumer %s: %s: %w; check that the role may call %s on the stream (see the README's IAM permissions)", c.stream, f.name, op, err, op)
	}
	bo := backoff.Backoff{Min: c.cfg.retryMin, Max: c.cfg.retryMax}
	retry := func(op string, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Throttling (LimitExceededException: a fleet starting together
		// shares 20 DescribeStreamConsumer calls a second) is waited out;
		// other transient failures are retried a few times.
		var lim *types.LimitExceededException
		transient := retryable(err) || callTimedOut(ctx, err)
		if !errors.As(err, &lim) && (!transient || bo.Attempts() >= registerAttempts) {
			return fail(op, err)
		}
		c.log.Warn("registering the enhanced fan-out consumer failed; retrying", "consumer", f.name, "op", op, "err", err)
		if !bo.Sleep(ctx) {
			return ctx.Err()
		}
		return nil
	}
	var streamARN string
	for streamARN == "" {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.readTimeout())
		out, err := f.kin.DescribeStreamSummary(cctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(c.stream)})
		cancel()
		if err != nil {
			if err := retry("DescribeStreamSummary", err); err != nil {
				return err
			}
			continue
		}
		streamARN = aws.ToString(out.StreamDescriptionSummary.StreamARN)
	}
	registered := false
	for {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.readTimeout())
		d, err := f.kin.DescribeStreamConsumer(cctx, &kinesis.DescribeStreamConsumerInput{StreamARN: aws.String(streamARN), ConsumerName: aws.String(f.name)})
		cancel()
		var rnf *types.ResourceNotFoundException
		switch {
		case errors.As(err, &rnf) && !registered:
			cctx, cancel := context.WithTimeout(ctx, c.cfg.readTimeout())
			_, err = f.kin.RegisterStreamConsumer(cctx, &kinesis.RegisterStreamConsumerInput{StreamARN: aws.String(streamARN), ConsumerName: aws.String(f.name)})
			cancel()
			var inUse *types.ResourceInUseException
			if err == nil || errors.As(err, &inUse) {
				// Registered now, by this worker or by another at the same
				// moment: wait until it is ACTIVE.
				if err == nil {
					c.log.Info("enhanced fan-out consumer registered", "consumer", f.name)
				}
				registered = true
				continue
			}
			if err := retry("RegisterStreamConsumer", err); err != nil {
				return err
			}
			continue
		case err != nil && !errors.As(err, &rnf):
			if err := retry("DescribeStreamConsumer", err); err != nil {
				return err
			}
			continue
		case err == nil && d.ConsumerDescription.ConsumerStatus == types.ConsumerStatusActive:
			f.arn = aws.ToString(d.ConsumerDescription.ConsumerARN)
			c.log.Debug("enhanced fan-out consumer active", "consumer", f.name, "arn", f.arn)
			return nil
		case err == nil && d.ConsumerDescription.ConsumerStatus == types.ConsumerStatusDeleting:
			// Being deregistered: register it again once it is gone.
			registered = false
		}
		// CREATING, DELETING, or not visible yet right after registering.
		// Jittered, so that workers starting together spread their calls.
		if !backoff.Wait(ctx, consumerPoll/2+rand.N(consumerPoll)) {
			return ctx.Err()
		}
	}
}
