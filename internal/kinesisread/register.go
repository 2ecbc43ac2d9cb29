package kinesisread

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease/internal/backoff"
)

// FanOutClient is the part of the Kinesis client that enhanced fan-out
// calls. *kinesis.Client satisfies it.
type FanOutClient interface {
	DescribeStreamSummary(ctx context.Context, params *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
	RegisterStreamConsumer(ctx context.Context, params *kinesis.RegisterStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error)
	DescribeStreamConsumer(ctx context.Context, params *kinesis.DescribeStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error)
	SubscribeToShard(ctx context.Context, params *kinesis.SubscribeToShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error)
}

var _ FanOutClient = (*kinesis.Client)(nil)

// CallError reports a call that failed for good: Op names the operation,
// for the caller to say which permission to check.
type CallError struct {
	Op  string
	Err error
}

func (e *CallError) Error() string { return e.Op + ": " + e.Err.Error() }

// Unwrap returns the SDK's error.
func (e *CallError) Unwrap() error { return e.Err }

// consumerPoll is how often register asks whether a consumer being
// registered (or deregistered) is done; Kinesis allows 20
// DescribeStreamConsumer calls a second per account.
const consumerPoll = 500 * time.Millisecond

// registerAttempts bounds the retries of a transient failure while
// registering.
const registerAttempts = 8

// Register registers the stream consumer name on stream unless it is, waits
// until it is ACTIVE, and returns its ARN. Each call has a deadline of
// cfg.ReadTimeout; one that passes it is retried as a transient failure.
// Several workers may call it at once: a registration already under way
// (ResourceInUseException) is waited for, not an error. A missing stream is
// a *StreamNotFoundError; a refused permission or a limit reached is a
// *CallError; a transient failure is retried a few times.
func Register(ctx context.Context, kin FanOutClient, stream, name string, cfg Config, log *slog.Logger) (string, error) {
	fail := func(op string, err error) error {
		var rnf *types.ResourceNotFoundException
		if errors.As(err, &rnf) && op == "DescribeStreamSummary" {
			return &StreamNotFoundError{Stream: stream, Err: err}
		}
		return &CallError{Op: op, Err: err}
	}
	bo := backoff.Backoff{Min: cfg.RetryMin, Max: cfg.RetryMax}
	retry := func(op string, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Throttling (LimitExceededException: a fleet starting together
		// shares 20 DescribeStreamConsumer calls a second) is waited out;
		// other transient failures are retried a few times.
		var lim *types.LimitExceededException
		transient := Retryable(err) || CallTimedOut(ctx, err)
		if !errors.As(err, &lim) && (!transient || bo.Attempts() >= registerAttempts) {
			return fail(op, err)
		}
		log.Warn("registering the enhanced fan-out consumer failed; retrying", "consumer", name, "op", op, "err", err)
		if !bo.Sleep(ctx) {
			return ctx.Err()
		}
		return nil
	}
	var streamARN string
	for streamARN == "" {
		cctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
		out, err := kin.DescribeStreamSummary(cctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
		cancel()
		if err != nil {
			if err := retry("DescribeStreamSummary", err); err != nil {
				return "", err
			}
			continue
		}
		streamARN = aws.ToString(out.StreamDescriptionSummary.StreamARN)
	}
	registered := false
	for {
		cctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
		d, err := kin.DescribeStreamConsumer(cctx, &kinesis.DescribeStreamConsumerInput{StreamARN: aws.String(streamARN), ConsumerName: aws.String(name)})
		cancel()
		var rnf *types.ResourceNotFoundException
		switch {
		case errors.As(err, &rnf) && !registered:
			cctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
			_, err = kin.RegisterStreamConsumer(cctx, &kinesis.RegisterStreamConsumerInput{StreamARN: aws.String(streamARN), ConsumerName: aws.String(name)})
			cancel()
			var inUse *types.ResourceInUseException
			if err == nil || errors.As(err, &inUse) {
				// Registered now, by this worker or by another at the same
				// moment: wait until it is ACTIVE.
				if err == nil {
					log.Info("enhanced fan-out consumer registered", "consumer", name)
				}
				registered = true
				continue
			}
			if err := retry("RegisterStreamConsumer", err); err != nil {
				return "", err
			}
			continue
		case err != nil && !errors.As(err, &rnf):
			if err := retry("DescribeStreamConsumer", err); err != nil {
				return "", err
			}
			continue
		case err == nil && d.ConsumerDescription.ConsumerStatus == types.ConsumerStatusActive:
			arn := aws.ToString(d.ConsumerDescription.ConsumerARN)
			log.Debug("enhanced fan-out consumer active", "consumer", name, "arn", arn)
			return arn, nil
		case err == nil && d.ConsumerDescription.ConsumerStatus == types.ConsumerStatusDeleting:
			// Being deregistered: register it again once it is gone.
			registered = false
		}
		// CREATING, DELETING, or not visible yet right after registering.
		// Jittered, so that workers starting together spread their calls.
		if !backoff.Wait(ctx, consumerPoll/2+rand.N(consumerPoll)) {
			return "", ctx.Err()
		}
	}
}
