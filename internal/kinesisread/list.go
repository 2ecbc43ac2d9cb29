package kinesisread

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease/internal/awshint"
	"github.com/shardlease/shardlease/internal/backoff"
)

// listAttempts bounds the retries of a throttled or transient ListShards.
const listAttempts = 20

// ListShards pages through ListShards, backing off on throttling and on
// transient failures, and starting again when a page token expired. A
// missing stream is a *StreamNotFoundError; any other failure is the last
// error as the SDK returned it, for the caller to name the stream.
func ListShards(ctx context.Context, kin ShardLister, stream string, cfg Config) ([]types.Shard, error) {
	return ListShardsFiltered(ctx, kin, stream, nil, cfg)
}

// ListShardsFiltered is ListShards with a ShardFilter (nil for none), which
// the first page of every start carries.
func ListShardsFiltered(ctx context.Context, kin ShardLister, stream string, filter *types.ShardFilter, cfg Config) ([]types.Shard, error) {
	var out []types.Shard
	first := func() *kinesis.ListShardsInput {
		name, arn := Ref(stream)
		return &kinesis.ListShardsInput{StreamName: name, StreamARN: arn, ShardFilter: filter}
	}
	in := first()
	bo := backoff.Backoff{Min: cfg.RetryMin, Max: cfg.RetryMax}
	for {
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if d := cfg.ReadTimeout; d > 0 { // callers outside a consumer pass no timings
			cctx, cancel = context.WithTimeout(ctx, d)
		}
		observe(ctx, "Kinesis ListShards", nil)
		page, err := kin.ListShards(cctx, in)
		cancel()
		if err != nil {
			observe(ctx, "Kinesis ListShards", err)
			var rnf *types.ResourceNotFoundException
			var lim *types.LimitExceededException
			var expired *types.ExpiredNextTokenException
			_, unreachable := awshint.FindUnreachable(err)
			switch {
			case errors.As(err, &rnf):
				return nil, &StreamNotFoundError{Stream: stream, Err: err}
			case errors.As(err, &expired):
				out, in = nil, first()
				continue
			case unreachable:
				// Nothing listens there, or it is not Kinesis: waiting
				// does not help, and the caller says what to do.
				return nil, err
			case errors.As(err, &lim) || Retryable(err):
				// Bounded by ctx too: the start-up gives up after its limit.
				if bo.Attempts() < listAttempts && bo.Sleep(ctx) {
					continue
				}
			}
			return nil, err
		}
		bo.Reset()
		out = append(out, page.Shards...)
		if page.NextToken == nil || *page.NextToken == "" {
			observe(ctx, "", nil)
			return out, nil
		}
		in = &kinesis.ListShardsInput{NextToken: page.NextToken}
	}
}

// ShardGone reports whether the stream is there and the shard is not. A
// listing that fails reports false: the shard may still be there.
func ShardGone(ctx context.Context, kin ShardLister, stream, shard string, cfg Config) bool {
	shards, err := ListShards(ctx, kin, stream, cfg)
	if err != nil {
		return false
	}
	for _, s := range shards {
		if aws.ToString(s.ShardId) == shard {
			return false
		}
	}
	return true
}

// Retryable reports whether a Kinesis error is worth retrying after a
// backoff: throttling, server errors and network errors. Errors that name a
// missing stream or a bad argument are not.
func Retryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var rnf *types.ResourceNotFoundException
	var inv *types.InvalidArgumentException
	var ad *types.AccessDeniedException
	return !errors.As(err, &rnf) && !errors.As(err, &inv) && !errors.As(err, &ad)
}

// CallTimedOut reports whether err is a call's own deadline passing while
// ctx, the caller's context, is still live: a transient failure, retried.
func CallTimedOut(ctx context.Context, err error) bool {
	return ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded)
}
