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
// until it is ACTIVE, and returns its ARN. streamARN is the stream's ARN
// when the caller knows it already, else "" (it is then described). Each call has a deadline of
// cfg.ReadTimeout; one that passes it is retried as a transient failure.
// Several workers may call it at once: a registration already under way
// (ResourceInUseException) is waited for, not an error. A missing stream is
// a *StreamNotFoundError; a refused permission or a limit reached is a
// *CallError; a transient failure is retried a few times.
func Register(ctx context.Context, kin FanOutClient, stream, streamARN, name string, cfg Config, log *slog.Logger) (string, error) {
	g := &registration{kin: kin, stream: stream, name: name, cfg: cfg, log: log, bo: backoff.Backoff{Min: cfg.RetryMin, Max: cfg.RetryMax}}
	if streamARN == "" {
		var err error
		if streamARN, err = g.streamARN(ctx); err != nil {
			return "", err
		}
	}
	return g.awaitActive(ctx, streamARN)
}

// registration is the state of one Register call.
type registration struct {
	kin          FanOutClient
	stream, name string
	cfg          Config
	log          *slog.Logger
	bo           backoff.Backoff // of the transient failures, across calls
}

// streamARN returns the stream's ARN.
func (g *registration) streamARN(ctx context.Context) (string, error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, g.cfg.ReadTimeout)
		out, err := g.kin.DescribeStreamSummary(cctx, describeInput(g.stream))
		cancel()
		if err != nil {
			if err := g.retry(ctx, "DescribeStreamSummary", err); err != nil {
				return "", err
			}
			continue
		}
		if s := out.StreamDescriptionSummary; s != nil && aws.ToString(s.StreamARN) != "" {
			return aws.ToString(s.StreamARN), nil
		}
		return "", g.fail("DescribeStreamSummary", errors.New("the answer names no stream ARN"))
	}
}

// awaitActive registers the consumer unless it is, waits until it is
// ACTIVE, and returns its ARN.
func (g *registration) awaitActive(ctx context.Context, streamARN string) (string, error) {
	registered := false
	for {
		cctx, cancel := context.WithTimeout(ctx, g.cfg.ReadTimeout)
		d, err := g.kin.DescribeStreamConsumer(cctx, &kinesis.DescribeStreamConsumerInput{StreamARN: aws.String(streamARN), ConsumerName: aws.String(g.name)})
		cancel()
		var rnf *types.ResourceNotFoundException
		switch {
		case errors.As(err, &rnf) && !registered:
			if registered, err = g.register(ctx, streamARN); err != nil {
				return "", err
			}
			continue
		case err != nil && !errors.As(err, &rnf):
			if err := g.retry(ctx, "DescribeStreamConsumer", err); err != nil {
				return "", err
			}
			continue
		case err == nil && d.ConsumerDescription.ConsumerStatus == types.ConsumerStatusActive:
			arn := aws.ToString(d.ConsumerDescription.ConsumerARN)
			g.log.Debug("enhanced fan-out consumer active", "consumer", g.name, "arn", arn)
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

// register asks Kinesis to register the consumer. It reports whether the
// consumer is being registered now, by this worker or by another at the
// same moment (ResourceInUseException); a transient failure was waited out
// when it reports neither that nor an error.
func (g *registration) register(ctx context.Context, streamARN string) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, g.cfg.ReadTimeout)
	_, err := g.kin.RegisterStreamConsumer(cctx, &kinesis.RegisterStreamConsumerInput{StreamARN: aws.String(streamARN), ConsumerName: aws.String(g.name)})
	cancel()
	var inUse *types.ResourceInUseException
	switch {
	case err == nil:
		g.log.Info("enhanced fan-out consumer registered", "consumer", g.name)
		return true, nil
	case errors.As(err, &inUse):
		return true, nil
	}
	return false, g.retry(ctx, "RegisterStreamConsumer", err)
}

// retry waits out err, a failure of op, after a backoff, and returns nil;
// or it returns the error Register gives up with: ctx's, or err for good.
// Throttling (LimitExceededException: a fleet starting together shares 20
// DescribeStreamConsumer calls a second) is always waited out; other
// transient failures registerAttempts times.
func (g *registration) retry(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var lim *types.LimitExceededException
	transient := Retryable(err) || CallTimedOut(ctx, err)
	if !errors.As(err, &lim) && (!transient || g.bo.Attempts() >= registerAttempts) {
		return g.fail(op, err)
	}
	g.log.Warn("registering the enhanced fan-out consumer failed; retrying", "consumer", g.name, "op", op, "err", err)
	if !g.bo.Sleep(ctx) {
		return ctx.Err()
	}
	return nil
}

// fail is the error of op failing for good with err.
func (g *registration) fail(op string, err error) error {
	var rnf *types.ResourceNotFoundException
	if errors.As(err, &rnf) && op == "DescribeStreamSummary" {
		return &StreamNotFoundError{Stream: g.stream, Err: err}
	}
	return &CallError{Op: op, Err: err}
}

// describeInput names stream by name or ARN (see Ref).
func describeInput(stream string) *kinesis.DescribeStreamSummaryInput {
	name, arn := Ref(stream)
	return &kinesis.DescribeStreamSummaryInput{StreamName: name, StreamARN: arn}
}
